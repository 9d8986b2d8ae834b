"""The fleet of the workers of one ``serve --workers N``, in a SQLite file they share (no Redis needed).

Workers on one port (one listening socket they inherit) each get the connections they accept, so a call's
webhook and its media stream usually reach different workers. The stream token must therefore be
known to every worker: :class:`LocalFleet` keeps the same contract as the Redis
:class:`~voice_agent.telephony.fleet.Fleet` (one-time tokens claimed by exactly one worker, a
fleet-wide call cap with leased slots, the shared call registry) in a SQLite file that the supervisor
creates for its workers. The file keeps a rollback journal, not WAL: WAL would share its ``-shm`` file between
the workers as memory, and a ``-shm`` cut short or made immutable under them (a temporary-file cleaner) kills
each worker that touches it with SIGBUS; a rollback journal maps nothing, so such a fault is an error here
like any other, and without ``fsync`` its commits cost about 0.1 ms more. Each operation is one short
transaction, once per call, run in a thread (a worker waiting for another's write lock holds up none of its
calls' audio); a file that cannot be read or written raises :class:`FleetUnavailable`, as Redis being down does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from loguru import logger

from voice_agent.telephony.fleet import Fleet, FleetReservation, FleetUnavailable

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (token TEXT PRIMARY KEY, data TEXT NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS slots (call_id TEXT PRIMARY KEY, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS calls (call_id TEXT PRIMARY KEY, entry TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workers (worker TEXT PRIMARY KEY, pid INTEGER NOT NULL, live INTEGER NOT NULL,
                                    accepting INTEGER NOT NULL, beat REAL NOT NULL);
"""


@dataclass(frozen=True)
class WorkerLoad:
    """What one worker of the group last said of itself (:meth:`LocalFleet.beat`).

    Attributes:
        worker: Its name.
        live: Calls streaming on it.
        accepting: Whether it takes new connections on the shared socket.
        age_secs: How long ago it said so (a worker that stopped saying it is dead or stalled; a worker
            whose process is gone is not listed at all).
    """

    worker: str
    live: int
    accepting: bool
    age_secs: float
    pid: int = 0

    def gone(self) -> bool:
        """Whether its process has died since (checked now: its supervisor reaps it at once)."""
        return self.pid > 0 and not _alive(self.pid)


class LocalFleet(Fleet):
    """One worker's view of the fleet of workers on this host, in the SQLite file at ``path``.

    Args:
        path: The fleet file (created if missing; the supervisor makes one per ``serve --workers``).
        worker: This worker's name in the registry.
        max_calls: Calls all the workers take at once (0: no fleet-wide cap, only each worker's own).
        lease_secs: How long a streaming call's slot is held without a renewal.
        lock_timeout_secs: How long an operation waits for another worker's write lock before failing.
    """

    def __init__(self, path: Path | str, worker: str, *, max_calls: int = 0, lease_secs: float = 15.0,
                 lock_timeout_secs: float = 2.0) -> None:
        # The Redis client of the base class is not made: this fleet keeps its state in the file.
        self.url = f"sqlite:{path}"
        self.worker = worker
        self.max_calls = max_calls
        self.lease_secs = lease_secs
        # One connection used from the default executor's threads, one operation at a time.
        self._lock = threading.Lock()
        # Stream tokens live here: the file is the owner's alone whatever the umask (SQLite gives its -wal and
        # -shm files the database file's mode).
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        os.chmod(path, 0o600)
        self._db = sqlite3.connect(str(path), timeout=lock_timeout_secs, isolation_level=None,
                                   check_same_thread=False)
        # Workers start together and SQLite can answer "locked" at once instead of waiting (a file another worker
        # is still creating), so the set-up is retried for a while (then the error is the worker's).
        deadline = time.monotonic() + max(10.0, lock_timeout_secs)
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=TRUNCATE")  # no -shm: nothing shared as memory
                self._db.execute("PRAGMA mmap_size=0")  # nor the file itself (SQLite's default, whatever the build)
                # No fsync: the file lives as long as its supervisor, and a commit waiting for the disk would hold
                # up this worker's event loop (every call's audio) and the other workers waiting for the lock.
                self._db.execute("PRAGMA synchronous=OFF")
                self._db.executescript(_SCHEMA)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    async def reserve(self, reservation: FleetReservation, token: str, ttl_secs: float) -> bool:
        """Takes a fleet slot for the call and publishes its stream token; False: full (or the file failed)."""
        now = time.time()
        data = json.dumps({"call_id": reservation.call_id, "provider": reservation.provider,
                           "provider_call_id": reservation.provider_call_id, "leg": reservation.leg,
                           "resume_key": reservation.resume_key,
                           "returning_key": reservation.returning_key,
                           "resume_problem": reservation.resume_problem})

        def run(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM slots WHERE until <= ?", (now,))
            db.execute("DELETE FROM tokens WHERE expires <= ?", (now,))
            held = db.execute("SELECT 1 FROM slots WHERE call_id = ?", (reservation.call_id,)).fetchone()
            if held is None and self.max_calls > 0:
                (busy,) = db.execute("SELECT COUNT(*) FROM slots").fetchone()
                if busy >= self.max_calls:
                    return False
            db.execute("INSERT OR REPLACE INTO slots VALUES (?, ?)", (reservation.call_id, now + ttl_secs))
            db.execute("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?)", (token, data, now + ttl_secs))
            self._write_entry(db, reservation.call_id, "reserved", reservation.leg)
            return True

        try:
            return await self._run(run)
        except FleetUnavailable as exc:
            logger.error("fleet: reservation failed ({}); the call is turned away", exc)
            return False

    async def claim(self, token: str) -> FleetReservation | None:
        """The reservation a stream token names, taken so no other worker can (None: unknown or expired).

        Raises:
            FleetUnavailable: The fleet file could not be read; the caller may still know the token itself.
        """

        def run(db: sqlite3.Connection) -> FleetReservation | None:
            row = db.execute("SELECT data, expires FROM tokens WHERE token = ?", (token,)).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM tokens WHERE token = ?", (token,))
            if row[1] <= time.time():
                return None
            data = json.loads(row[0])
            reservation = FleetReservation(str(data["call_id"]), str(data["provider"]),
                                           data.get("provider_call_id"), int(data["leg"]),
                                           str(data.get("resume_key", "")),
                                           str(data.get("returning_key", "")),
                                           str(data.get("resume_problem", "")))
            db.execute("INSERT OR REPLACE INTO slots VALUES (?, ?)",
                       (reservation.call_id, time.time() + self.lease_secs))
            self._write_entry(db, reservation.call_id, "active", reservation.leg)
            return reservation

        return await self._run(run)

    async def hold(self, call_ids: list[str]) -> None:
        """Renews the slots of this worker's streaming calls (every few seconds while they run)."""
        if not call_ids:
            return
        until = time.time() + self.lease_secs
        try:
            await self._run(lambda db: db.executemany("INSERT OR REPLACE INTO slots VALUES (?, ?)",
                                                      [(c, until) for c in call_ids]))
        except FleetUnavailable as exc:
            logger.error("fleet: slot renewal failed: {}", exc)

    async def release(self, call_id: str, state: str = "ended") -> None:
        """Frees the call's slot (its stream ended on this worker)."""

        def run(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM slots WHERE call_id = ?", (call_id,))
            self._write_entry(db, call_id, state, None)

        try:
            await self._run(run)
        except FleetUnavailable as exc:
            logger.error("fleet: slot release failed: {}", exc)

    async def busy(self) -> int:
        """Calls holding a fleet slot now.

        Raises:
            FleetUnavailable: The fleet file could not be read.
        """

        def run(db: sqlite3.Connection) -> int:
            db.execute("DELETE FROM slots WHERE until <= ?", (time.time(),))
            (count,) = db.execute("SELECT COUNT(*) FROM slots").fetchone()
            return int(count)

        return await self._run(run)

    async def calls(self) -> dict[str, dict[str, Any]]:
        """The fleet's registry: call id -> worker, state, leg, updated.

        Raises:
            FleetUnavailable: The fleet file could not be read.
        """
        rows = await self._run(lambda db: db.execute("SELECT call_id, entry FROM calls").fetchall())
        return {call_id: json.loads(entry) for call_id, entry in rows}

    async def beat(self, live: int, accepting: bool) -> tuple[int, list[WorkerLoad]]:
        """Says this worker's load and reads the others': (fleet slots held, the other workers' last word).

        Slots held count the calls of a worker that died too (their slots lapse only with their lease), so a
        survivor knows how many calls the group will carry once they come back.

        Raises:
            FleetUnavailable: The fleet file could not be read or written.
        """

        def run(db: sqlite3.Connection) -> tuple[int, list[WorkerLoad]]:
            now = time.time()
            db.execute("INSERT OR REPLACE INTO workers VALUES (?, ?, ?, ?, ?)",
                       (self.worker, os.getpid(), live, int(accepting), now))
            db.execute("DELETE FROM slots WHERE until <= ?", (now,))
            (busy,) = db.execute("SELECT COUNT(*) FROM slots").fetchone()
            others = []
            rows = db.execute("SELECT worker, pid, live, accepting, beat FROM workers WHERE worker != ?",
                              (self.worker,)).fetchall()
            for name, pid, count, taking, beat in rows:
                if not _alive(int(pid)):  # killed: known at once (its supervisor reaps it), not after its silence
                    db.execute("DELETE FROM workers WHERE worker = ? AND pid = ?", (name, pid))
                    continue
                others.append(WorkerLoad(str(name), int(count), bool(taking), max(0.0, now - float(beat)), int(pid)))
            return int(busy), others

        return await self._run(run)

    async def close(self) -> None:
        """Closes the file."""
        await asyncio.to_thread(self._db.close)

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work`` in one transaction, in a thread; a SQLite failure is :class:`FleetUnavailable`."""

        def locked() -> _T:
            with self._lock, _Transaction(self._db) as db:
                return work(db)

        try:
            return await asyncio.to_thread(locked)
        except sqlite3.Error as exc:
            raise FleetUnavailable(f"fleet file {self.url[len('sqlite:'):]}: {exc}") from None

    def _write_entry(self, db: sqlite3.Connection, call_id: str, state: str, leg: int | None) -> None:
        entry: dict[str, Any] = {"worker": self.worker, "state": state, "updated": round(time.time(), 3)}
        if leg is None:
            row = db.execute("SELECT entry FROM calls WHERE call_id = ?", (call_id,)).fetchone()
            if row is not None and "leg" in (old := json.loads(row[0])):
                entry["leg"] = old["leg"]
        else:
            entry["leg"] = leg
        db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?)", (call_id, json.dumps(entry)))


def _alive(pid: int) -> bool:
    """Whether a process of that id exists and is not a zombie (killed, not yet reaped by its supervisor)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: a zombie's state is Z (the field after the parenthesised name, which may hold spaces)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc here, or it just ended: the next beat's kill(0) says
    return stat[stat.rfind(")") + 2:stat.rfind(")") + 3] != "Z"


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on an exception): one worker at a time writes."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self._db.execute("ROLLBACK" if kind is not None else "COMMIT")
