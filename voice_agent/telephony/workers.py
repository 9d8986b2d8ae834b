"""``serve --workers N``: N bridge processes sharing one listening socket, one supervisor.

One process runs every call of its worker on one event loop, so one core is its ceiling (about two
dozen fake-stack calls on this project's 2-core machine). The supervisor binds the port once,
without ``SO_REUSEPORT`` (a port another process holds is refused in one line, and no later process
can join the group and take a share of its calls), and forks the workers, which inherit that socket
and start accepting on it only once warmed up (until then connections wait in the backlog for a
worker that is ready). A call's webhook and its stream are two connections and usually reach
different workers, so the workers share a fleet: the Redis one with the ``redis`` store, else a
:class:`LocalFleet` file the supervisor creates (stream tokens any worker accepts, the fleet-wide
call cap). ``--max-calls`` is each worker's own cap.

The supervisor forks the workers before anything else starts (no threads, no event loop, no open
store yet: each worker opens its own). SIGTERM, SIGINT and SIGHUP are blocked while it forks, then
forwarded to the workers (SIGHUP as SIGTERM: each drains its calls); it exits when all have. A worker
that exits while no stop was asked for stops the others, and the supervisor exits non-zero. Each
worker is in a process group of its own, so only the supervisor is to be signalled (under systemd:
``KillMode=mixed``); a second signal to a worker makes it exit at once, without draining. A worker
whose supervisor dies (even by SIGKILL) gets SIGTERM from the kernel (Linux ``PR_SET_PDEATHSIG``)
and drains.
"""

from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import FrameType
from typing import Any

FLEET_FILE = "fleet.sqlite3"
"""The local fleet's file, in the supervisor's temporary directory."""

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals the supervisor passes on to its workers (blocked while it forks them)."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class WorkerSlot:
    """What one forked worker is given.

    Attributes:
        index: The worker's number, from 0.
        fleet_path: The shared local fleet file.
        sock: The supervisor's listening socket (inherited; accept on it only once warmed up).
    """

    index: int
    fleet_path: Path
    sock: socket.socket
    _ready: Connection

    def ready(self) -> None:
        """Tells the supervisor this worker has warmed up and is accepting calls (once)."""
        try:
            self._ready.send("ready")
            self._ready.close()
        except (OSError, ValueError):  # already told, or the supervisor is gone
            pass


def exit_status(code: int | None) -> int:
    """A worker's exit code as a shell reports it: a death by signal N is 128 + N."""
    if code is None:
        return 1
    return 128 - code if code < 0 else code


def run_workers(count: int, sock: socket.socket, worker: Callable[[WorkerSlot], None],
                log: Callable[[str], None] | None = None) -> int:
    """Forks ``count`` processes running ``worker(slot)`` on the listening ``sock`` and waits for them.

    Args:
        count: Worker processes (at least 2; one worker needs no supervisor).
        sock: The bound, listening socket every worker accepts on (the supervisor's copy is closed
            once the workers have it, so the port closes when the last worker stops).
        worker: Serves until drained; runs in the forked child and calls ``slot.ready()`` when accepting.
        log: Where the supervisor's lines go (default: stderr).

    Returns:
        0 when every worker exited cleanly after a stop was asked for; else the first failing worker's
        status (128 + N for a death by signal N), or 1 when a worker ended on its own with 0.
    """
    say = log or (lambda line: print(f"voice-agent serve: {line}", file=sys.stderr, flush=True))
    context = multiprocessing.get_context("fork")
    supervisor = os.getpid()
    stopping: list[int] = []
    with tempfile.TemporaryDirectory(prefix="voice-agent-fleet-") as directory:
        fleet_path = Path(directory) / FLEET_FILE
        processes: list[Any] = []
        readiness: dict[Connection, int] = {}
        previous: dict[int, Any] = {}

        def forward(sig: int, _frame: FrameType | None) -> None:
            stopping.append(sig)
            for process in processes:
                if process.pid is not None and process.exitcode is None:
                    # A hang-up of the supervisor's terminal is a request to stop: drain as on SIGTERM.
                    os.kill(process.pid, signal.SIGTERM if sig == signal.SIGHUP else sig)

        # Blocked while forking: a signal arriving now is held, then forwarded once the handler is in,
        # so no worker is left out of it (each child unblocks them for itself).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            for index in range(count):
                receiver, sender = context.Pipe(duplex=False)
                slot = WorkerSlot(index, fleet_path, sock, sender)
                process = context.Process(target=_worker_main, args=(worker, slot, supervisor, blocked),
                                          name=f"worker-{index}", daemon=False)
                process.start()
                sender.close()
                processes.append(process)
                readiness[receiver] = index
            previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        sock.close()  # the workers hold it now
        try:
            return _supervise(processes, readiness, stopping, forward, say)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _supervise(processes: list[Any], readiness: dict[Connection, int], stopping: list[int],
               forward: Callable[[int, FrameType | None], None], say: Callable[[str], None]) -> int:
    """Waits on every worker at once: readiness lines, and the first unexpected death stops the rest."""
    sentinels = {process.sentinel: process for process in processes}
    ready = 0
    failure = 0
    while sentinels or readiness:
        for item in wait([*sentinels, *readiness]):
            if isinstance(item, Connection):
                index = readiness.pop(item)
                try:
                    item.recv()
                except (EOFError, OSError):
                    continue  # it died before it was ready: its sentinel says how
                finally:
                    item.close()
                ready += 1
                say(f"worker-{index} ready ({ready}/{len(processes)})")
                continue
            if not isinstance(item, int):
                continue
            process = sentinels.pop(item)
            process.join()
            status = exit_status(process.exitcode)
            if stopping and status == 0:
                continue
            code = process.exitcode or 0
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {status}"
            say(f"{process.name} (pid {process.pid}) {how}" + ("" if stopping else "; stopping the other workers"))
            failure = failure or status or 1
            if not stopping:
                forward(signal.SIGTERM, None)
    return failure


def _worker_main(worker: Callable[[WorkerSlot], None], slot: WorkerSlot, supervisor: int,
                 mask: set[signal.Signals]) -> None:
    # A process group of its own: a terminal's Ctrl+C (sent to the whole foreground group) reaches the
    # supervisor only, which forwards it once; a second signal would make the worker exit without draining.
    os.setpgid(0, 0)
    _die_with_parent()
    if os.getppid() != supervisor:  # the supervisor died before the request above took effect
        os._exit(1)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    worker(slot)


def _die_with_parent() -> None:
    """Asks the kernel for SIGTERM when the supervisor dies (Linux; elsewhere the supervisor must stop us)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


async def serve_reporting(serve: Callable[[asyncio.Event], Awaitable[None]], slot: WorkerSlot | None) -> None:
    """Runs ``serve(ready)``; in a worker (``slot``), tells the supervisor once ``ready`` is set."""
    ready = asyncio.Event()
    told = asyncio.ensure_future(ready.wait())
    if slot is not None:
        told.add_done_callback(lambda waited: None if waited.cancelled() else slot.ready())
    try:
        await serve(ready)
    finally:
        told.cancel()
