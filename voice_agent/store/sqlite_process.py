"""The SQLite call store run in a process of its own, so a fault in SQLite's shared memory cannot kill a worker.

In WAL mode the processes sharing a SQLite file share its ``-shm`` file as memory (``mmap``). A fault there is
no error SQLite could return but a signal: the ``-shm`` cut short under a live connection (a cleanup script, a
copy over it, a SQLite that cannot see the others' locks and rebuilds it) or made immutable (``chattr +i``)
kills the process that touches it next with SIGBUS, and every worker sharing the file touches it at its next
save. So each worker keeps its store in a child process (:class:`IsolatedSQLiteStore`) and talks to it over a
socket: when that process dies, the worker logs it once with what it finds wrong with the ``-shm``, the calls
go on in memory, and the store is opened again in a new process (at the next operation, at most once per
second, backing off to 30 s while it keeps failing). A file that the new process cannot open (``-shm``
immutable, read-only filesystem) is checked before SQLite maps it and reported the same way.

Rollback journals (``journal_mode=DELETE``) would map nothing, but each commit then waits for two or three
``fsync`` with the whole file locked; WAL with ``locking_mode=EXCLUSIVE`` or the ``unix-excl`` VFS keeps the
shared memory on the heap but lets one process alone use the file. See docs/operations.md (store faults).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from loguru import logger

from voice_agent.store.base import CallStore, StoredCall, StoreError

_CALLS = frozenset({"save", "save_changes", "load", "find", "end", "open_leg", "renew", "close_leg", "begin_effect",
                    "finish_effect", "drop_effect"})
"""The store methods the child process runs for the worker."""

_FS_IOC_GETFLAGS = 0x80086601
_FS_IMMUTABLE_FL = 0x10
_SHM_REGION = 32768  # SQLite maps the -shm in 32 KiB regions: a file shorter than one was cut under its users


_CHILD = ("import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
          "from voice_agent.store.sqlite_process import serve; serve(int(sys.argv[2]))")
"""The store's process: the worker's import path first, so it runs this very code (installed or a checkout)."""


def shm_problem(path: Path) -> str:
    """What is wrong with the ``-shm`` file of the SQLite file at ``path`` that would fault a process mapping it
    ("" when nothing is found, or there is no ``-shm``)."""
    shm = Path(f"{path}-shm")
    try:
        size = shm.stat().st_size
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"its -shm file cannot be checked ({exc.strerror})"
    found = []
    if size < _SHM_REGION:
        found.append(f"its -shm file was cut to {size} bytes under its users")
    with contextlib.suppress(OSError):
        fd = os.open(shm, os.O_RDONLY | os.O_NONBLOCK)
        try:
            flags = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, b"\0" * 8)[:4], sys.byteorder)
            if flags & _FS_IMMUTABLE_FL:
                found.append("its -shm file is immutable (chattr +i)")
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        if os.statvfs(shm.parent).f_flag & os.ST_RDONLY:
            found.append("its filesystem is read-only")
    if not found and not os.access(shm, os.W_OK):
        found.append("its -shm file is not writable")
    return "; ".join(found)


class IsolatedSQLiteStore(CallStore):
    """The SQLite call store (:class:`~voice_agent.store.sqlite.SQLiteCallStore`) in a child process.

    Args:
        path: The database file.
        retention_secs: Rows not written for this long are deleted when the store opens.
        reply_secs: An operation not answered this long stops the child process (SQLite waits 5 s for a lock).

    Raises:
        StoreError: The file cannot be opened (checked, then opened by the child process), in one line.
    """

    backend = "sqlite"

    def __init__(self, path: Path, *, retention_secs: float = 86400.0, reply_secs: float = 6.0) -> None:
        self.path = path
        self._retention_secs = retention_secs
        self._reply_secs = reply_secs
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._down = ""  # why the store is down ("": it runs)
        self._retry_at = 0.0
        self._failures = 0
        self._closed = False
        with self._lock:
            self._start(retention_secs)

    def _start(self, retention_secs: float) -> None:
        problem = shm_problem(self.path)
        if problem and "cut to" not in problem:  # SQLite rebuilds a cut -shm when it opens first
            raise StoreError(f"sqlite store {self.path}: {problem}")
        ours, theirs = socket.socketpair()
        try:
            # Its own session: the terminal's Ctrl-C is the worker's to handle; the child ignores SIGTERM too, so a
            # draining worker still saves the calls it hands over. It ends when the worker's end of the socket closes.
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, json.dumps([p for p in sys.path if p]), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            ours.close()
            raise StoreError(f"sqlite store {self.path}: cannot start its process: {exc}") from None
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        try:
            self._ask("open", (str(self.path), retention_secs), {})
        except StoreError:
            self._stop()
            raise

    def _ask(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One request to the child process and its answer (under the lock); its death raises :class:`StoreError`."""
        assert self._conn is not None
        try:
            self._conn.send((name, args, kwargs))
            if not self._conn.poll(self._reply_secs):
                raise TimeoutError
            status, value, logs = self._conn.recv()
        except (EOFError, OSError, TimeoutError) as exc:
            raise StoreError(self._died(exc)) from None
        for level, message in logs:  # the child's own log lines (a file replaced under it), in the worker's log
            logger.log(level, "{}", message)
        if status == "error":
            raise value
        return value

    def _died(self, exc: BaseException) -> str:
        timed_out = isinstance(exc, TimeoutError)
        if timed_out and self._proc is not None:
            self._proc.kill()
        code = self._proc.wait() if self._proc is not None else None
        self._stop()
        if timed_out:
            how = f"did not answer in {self._reply_secs:g} s and was stopped"
        elif code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited ({code})"
        found = shm_problem(self.path) or ("a fault in its shared memory (-shm)" if code == -signal.SIGBUS else "")
        return f"sqlite store {self.path}: the store's process {how}" + (f" ({found})" if found else "")

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._closed:
                raise StoreError(f"sqlite store {self.path}: closed")
            if self._conn is None:
                self._revive()
            try:
                value = self._ask(name, args, kwargs)
            except StoreError as exc:
                if self._conn is None:  # the process died: once per outage, not at every save of every call
                    self._went_down(str(exc))
                raise
            if self._down:
                logger.info("sqlite store {}: works again (in a new process)", self.path)
                self._down, self._failures = "", 0
            return value

    def _went_down(self, why: str) -> None:
        if why != self._down:
            logger.error("{}; the calls go on in memory, the store is opened again in a new process", why)
        self._down = why
        self._failures += 1
        self._retry_at = time.monotonic() + min(30.0, float(2 ** (self._failures - 1)))

    def _revive(self) -> None:
        if time.monotonic() < self._retry_at:
            raise StoreError(f"{self._down} (reopening it shortly)")
        try:
            self._start(retention_secs=float("inf"))
        except StoreError as exc:
            self._went_down(str(exc))
            raise

    def save(self, call_id: str, data: bytes, *, turn: int, leg: int, provider_call_id: str | None) -> bool:
        """See :meth:`CallStore.save`."""
        return bool(self._call("save", call_id, data, turn=turn, leg=leg, provider_call_id=provider_call_id))

    def save_changes(self, call_id: str, head: bytes, items: list[tuple[str, bytes]], *, base: int, turn: int,
                     leg: int, provider_call_id: str | None) -> bool:
        """See :meth:`CallStore.save_changes`."""
        return bool(self._call("save_changes", call_id, head, items, base=base, turn=turn, leg=leg,
                               provider_call_id=provider_call_id))

    def load(self, call_id: str) -> StoredCall | None:
        """See :meth:`CallStore.load`."""
        found: StoredCall | None = self._call("load", call_id)
        return found

    def find(self, provider_call_id: str) -> StoredCall | None:
        """See :meth:`CallStore.find`."""
        found: StoredCall | None = self._call("find", provider_call_id)
        return found

    def end(self, call_id: str, how: str, *, leg: int | None = None) -> None:
        """See :meth:`CallStore.end`."""
        self._call("end", call_id, how, leg=leg)

    def open_leg(self, call_id: str, leg: int, *, provider_call_id: str | None, lease_secs: float,
                 resume_key: str = "", returning_key: str = "") -> bool:
        """See :meth:`CallStore.open_leg`."""
        return bool(self._call("open_leg", call_id, leg, provider_call_id=provider_call_id, lease_secs=lease_secs,
                               resume_key=resume_key, returning_key=returning_key))

    def renew(self, legs: list[tuple[str, int]], lease_secs: float) -> list[str]:
        """See :meth:`CallStore.renew`."""
        return list(self._call("renew", legs, lease_secs))

    def close_leg(self, call_id: str, leg: int) -> None:
        """See :meth:`CallStore.close_leg`."""
        self._call("close_leg", call_id, leg)

    def begin_effect(self, call_id: str, key: str, record: str) -> str | None:
        """See :meth:`CallStore.begin_effect`."""
        found: str | None = self._call("begin_effect", call_id, key, record)
        return found

    def finish_effect(self, call_id: str, key: str, record: str) -> None:
        """See :meth:`CallStore.finish_effect`."""
        self._call("finish_effect", call_id, key, record)

    def drop_effect(self, call_id: str, key: str) -> None:
        """See :meth:`CallStore.drop_effect`."""
        self._call("drop_effect", call_id, key)

    def close(self) -> None:
        """See :meth:`CallStore.close`: the child process closes the file and exits."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                with contextlib.suppress(StoreError):
                    self._ask("close", (), {})
            self._stop()


def serve(fd: int) -> None:
    """The child process: runs the worker's store requests from the socket ``fd`` until it closes."""
    from voice_agent.store.sqlite import SQLiteCallStore

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGBUS here leaves no core file behind
    conn = Connection(fd)
    logs: list[tuple[str, str]] = []
    logger.remove()
    logger.add(lambda message: logs.append((message.record["level"].name, message.record["message"])),
               level="DEBUG", format="{message}")
    store: SQLiteCallStore | None = None
    while True:
        try:
            name, args, kwargs = conn.recv()
        except (EOFError, OSError):
            break
        reply: tuple[str, Any]
        try:
            if name == "open":
                store = SQLiteCallStore(Path(args[0]), retention_secs=args[1])
                reply = ("ok", None)
            elif name == "close":
                if store is not None:
                    store.close()
                conn.send(("ok", None, logs))
                break
            elif name in _CALLS and store is not None:
                reply = ("ok", getattr(store, name)(*args, **kwargs))
            else:
                reply = ("error", StoreError(f"sqlite store: no such request {name!r}"))
        except StoreError as exc:
            reply = ("error", exc)
        except Exception as exc:  # whatever SQLite does, the worker gets one line
            reply = ("error", StoreError(f"sqlite store: {name} failed: {type(exc).__name__}: {exc}"))
        conn.send((*reply, list(logs)))
        logs.clear()
