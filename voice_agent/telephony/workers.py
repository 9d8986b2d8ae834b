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
that dies while no stop was asked for (kill -9, a crash) is forked again in its place while the others
go on serving; its calls come back through the provider and resume on a live worker once their store
leases lapse; with the local fleet, the survivors take only their share of them and the rest wait
for the replacement (:mod:`voice_agent.telephony.accept_gate`). A worker dying more than five times in
a minute stops the others, and the supervisor exits non-zero. Each
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
import time
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
        count: Workers the supervisor runs (0: unknown).
    """

    index: int
    fleet_path: Path
    sock: socket.socket
    _ready: Connection
    count: int = 0

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


RESTARTS_PER_MINUTE = 5
"""A worker that dies more often than this in a minute is crash-looping: the supervisor stops them all."""


def run_workers(count: int, sock: socket.socket, worker: Callable[[WorkerSlot], None],
                log: Callable[[str], None] | None = None, *, restarts_per_minute: int = RESTARTS_PER_MINUTE) -> int:
    """Forks ``count`` processes running ``worker(slot)`` on the listening ``sock`` and waits for them.

    A worker that dies while no stop was asked for (killed, crashed) is forked again in its place: the
    others keep serving, and the calls it ran resume on them once their leases lapse. A worker that dies
    more than ``restarts_per_minute`` times in a minute stops them all.

    Args:
        count: Worker processes (at least 2; one worker needs no supervisor).
        sock: The bound, listening socket every worker accepts on (the supervisor keeps its copy to give
            a replacement worker; it never accepts on it).
        worker: Serves until drained; runs in the forked child and calls ``slot.ready()`` when accepting.
        log: Where the supervisor's lines go (default: stderr).
        restarts_per_minute: The crash-loop limit per worker.

    Returns:
        0 when every worker exited cleanly after a stop was asked for; else the first failing worker's
        status (128 + N for a death by signal N), or 1 when a worker ended on its own with 0.
    """
    say = log or (lambda line: print(f"voice-agent serve: {line}", file=sys.stderr, flush=True))
    context = multiprocessing.get_context("fork")
    supervisor = os.getpid()
    # What a worker is forked with: a replacement forked later must not inherit the supervisor's forwarding
    # handlers (a stop during its warm-up was then forwarded again by it, to its siblings, and it went on serving).
    # Python's SIGINT handler raises KeyboardInterrupt (a worker still warming up would exit 1, not stop cleanly).
    handlers = {sig: signal.SIG_DFL if h is None or h is signal.default_int_handler else h
                for sig, h in ((sig, signal.getsignal(sig)) for sig in FORWARDED)}
    stopping: list[int] = []
    with tempfile.TemporaryDirectory(prefix="voice-agent-fleet-") as directory:
        fleet_path = Path(directory) / FLEET_FILE
        processes: dict[int, Any] = {}
        previous: dict[int, Any] = {}

        def forward(sig: int, _frame: FrameType | None) -> None:
            stopping.append(sig)
            for process in processes.values():
                if process.pid is not None and process.exitcode is None:
                    # A hang-up of the supervisor's terminal is a request to stop: drain as on SIGTERM.
                    os.kill(process.pid, signal.SIGTERM if sig == signal.SIGHUP else sig)

        def spawn(index: int) -> Connection:
            # Signals blocked while forking: one arriving now is held, then forwarded once the process is in
            # the table, so no worker is left out of it (each child unblocks them for itself).
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
            try:
                receiver, sender = context.Pipe(duplex=False)
                slot = WorkerSlot(index, fleet_path, sock, sender, count)
                process = context.Process(target=_worker_main, args=(worker, slot, supervisor, blocked, handlers),
                                          name=f"worker-{index}", daemon=False)
                process.start()
                sender.close()
                processes[index] = process
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            return receiver

        readiness = {spawn(index): index for index in range(count)}
        previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
        try:
            return _Supervisor(processes, readiness, stopping, forward, spawn, say, restarts_per_minute).run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            sock.close()


class _Supervisor:
    """Waits on every worker at once: readiness lines, restarts, and the stop of all on a crash loop."""

    def __init__(self, processes: dict[int, Any], readiness: dict[Connection, int], stopping: list[int],
                 forward: Callable[[int, FrameType | None], None], spawn: Callable[[int], Connection],
                 say: Callable[[str], None], restarts_per_minute: int) -> None:
        self.processes = processes
        self.readiness = readiness
        self.stopping = stopping
        self.forward = forward
        self.spawn = spawn
        self.say = say
        self.limit = restarts_per_minute
        self.deaths: dict[int, list[float]] = {}
        self.ready: set[int] = set()
        self.done: set[int] = set()  # stopped for good
        self.failure = 0

    def run(self) -> int:
        """Supervises until every worker has stopped for good; the exit status (see :func:`run_workers`)."""
        while True:
            sentinels = {p.sentinel: i for i, p in self.processes.items() if i not in self.done}
            if not sentinels and not self.readiness:
                return self.failure
            for item in wait([*sentinels, *self.readiness]):
                if isinstance(item, Connection):
                    self._readied(item)
                elif isinstance(item, int) and item in sentinels:
                    self._died(sentinels[item])

    def _readied(self, item: Connection) -> None:
        index = self.readiness.pop(item)
        try:
            item.recv()
        except (EOFError, OSError):
            return  # it died before it was ready: its sentinel says how
        finally:
            item.close()
        self.ready.add(index)
        self.say(f"worker-{index} ready ({len(self.ready)}/{len(self.processes)})")

    def _died(self, index: int) -> None:
        process = self.processes[index]
        process.join()
        self.ready.discard(index)
        status = exit_status(process.exitcode)
        # Asked to stop, a worker still warming up dies of the signal itself (no handler yet): a clean stop too.
        if self.stopping and (status == 0 or process.exitcode in (-signal.SIGTERM, -signal.SIGINT)):
            self.done.add(index)
            return
        code = process.exitcode or 0
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {status}"
        now = time.monotonic()
        recent = [t for t in self.deaths.get(index, []) if now - t < 60] + [now]
        self.deaths[index] = recent
        if not self.stopping and len(recent) <= self.limit:
            self.say(f"{process.name} (pid {process.pid}) {how}; restarting it ({len(recent)} in the last minute)")
            self.readiness[self.spawn(index)] = index
            return
        self.done.add(index)
        if self.stopping:
            self.say(f"{process.name} (pid {process.pid}) {how}")
        else:
            self.say(f"{process.name} (pid {process.pid}) {how} {len(recent)} times in a minute; "
                     "stopping the other workers")
            self.forward(signal.SIGTERM, None)
        self.failure = self.failure or status or 1


def _worker_main(worker: Callable[[WorkerSlot], None], slot: WorkerSlot, supervisor: int,
                 mask: set[signal.Signals], handlers: dict[signal.Signals, Any]) -> None:
    # A process group of its own: a terminal's Ctrl+C (sent to the whole foreground group) reaches the
    # supervisor only, which forwards it once; a second signal would make the worker exit without draining.
    os.setpgid(0, 0)
    _die_with_parent()
    if os.getppid() != supervisor:  # the supervisor died before the request above took effect
        os._exit(1)
    for sig, handler in handlers.items():  # still blocked: a stop already sent reaches these, not the supervisor's
        signal.signal(sig, handler)
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
