"""Which worker of ``serve --workers N`` takes the next connection: the least loaded, not the first awake.

The workers share one listening socket, and the kernel gives a connection to whichever worker's event loop
accepts first; asyncio then accepts every connection waiting, so a burst goes to one worker. Nothing tied
that to load: one worker could run 16 calls while the other ran 4, and when a worker was killed, every call
it ran came back (1 to 3 s later, through the provider) before its replacement had started, so the survivor
took them all. Past what one process serves (one core), every call on it fell behind: replies 15 to 45 s
late on all of them, and the replacement sat idle.

So each worker stops accepting while another worker runs fewer calls, and, while a worker of
the group is missing (killed, restarting), once it carries its share of the calls the group holds: the dead
worker's calls wait in the socket's queue for its replacement (at most :data:`MAX_DEAF_SECS`; then the
survivor takes them rather than let the provider time out). Each worker says its load in the local fleet
file every :data:`BEAT_SECS`; a worker silent for :data:`STALE_SECS` counts as missing.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from loguru import logger

from voice_agent.telephony.fleet import FleetUnavailable
from voice_agent.telephony.local_fleet import LocalFleet, WorkerLoad

BEAT_SECS = 0.25
"""How often a worker says its load and reads the others'."""

STALE_SECS = 3.0
"""A worker that has said nothing for this long is missing (stalled; a dead one is missing at once). A worker
just started, or on a busy machine, can miss a few beats: taken for missing, it was not given its share."""

MAX_DEAF_SECS = 8.0
"""Longest a worker stops accepting for a missing worker's replacement, once per absence (a provider's request
waits in the queue meanwhile: Twilio gives a webhook 15 s, and a stream's token lives 10 s). A replacement
starts in 2 to 8 s on a busy 2-core machine."""


@dataclass(frozen=True)
class Decision:
    """Whether to accept, and why (logged when it changes)."""

    accept: bool
    why: str
    waited_out: bool = False
    """The wait for a missing worker's replacement ran out (the worker then takes calls until the group is whole)."""
    waiting: bool = False
    """This worker stops for a missing worker's replacement (logged when it starts, even if already stopped)."""


def should_accept(live: int, busy: int, group: int, others: list[WorkerLoad], deaf_secs: float,
                  waited_out: bool = False) -> Decision:
    """Whether a worker running ``live`` calls takes new connections now.

    Args:
        live: Calls streaming on this worker.
        busy: Calls the whole group holds a slot for (a dead worker's calls included until their lease lapses).
        group: Workers the group runs when none is missing.
        others: What the other workers last said of themselves.
        deaf_secs: How long this worker has not been accepting.
        waited_out: This worker already waited :data:`MAX_DEAF_SECS` for the missing worker's replacement
            during this absence: it does not stop for it again.
    """
    present = [w for w in others if w.age_secs < STALE_SECS]
    # With every worker present, the least loaded never stops (ties all go on): no flag of another worker's, read
    # a beat late, is trusted for that. While one is missing, a survivor waits for its replacement once, bounded.
    if present and live > (least := min(w.live for w in present)):
        return Decision(False, f"another worker runs fewer calls ({least} < {live})")
    waiting = busy - live - sum(w.live for w in present)  # slots held that no worker here streams: a dead one's
    share = math.ceil(busy / max(1, group))
    if len(present) + 1 < group and waiting > 0 and live >= share:
        if deaf_secs < MAX_DEAF_SECS and not waited_out:
            return Decision(False, f"a worker is missing; {waiting} call(s) wait for its replacement "
                                   f"({live} >= {share} of {busy})", waiting=True)
        return Decision(True, "a worker is missing, and this one waited for its replacement long enough",
                        waited_out=True)
    return Decision(True, f"fewest calls: {live} here, {busy} held, {len(present)} other worker(s) present")


class Listener(Protocol):
    """What the gate switches: the worker's accepting on the shared socket."""

    def pause_accepting(self) -> None: ...

    async def resume_accepting(self) -> None: ...


class AcceptGate:
    """Runs :func:`should_accept` for one worker and pauses or resumes its accepting to match.

    Args:
        fleet: The group's local fleet file.
        group: Workers in the group.
        live: This worker's streaming calls now.
        listener: Pauses and resumes the accepting.
    """

    def __init__(self, fleet: LocalFleet, group: int, live: Callable[[], int], listener: Listener) -> None:
        self.fleet, self.group, self.live, self.listener = fleet, group, live, listener
        self.accepting = True
        self._deaf_since = 0.0
        self._busy = 0
        self._others: list[WorkerLoad] = []
        self._seen_at = 0.0
        self._why = ""
        self.pauses = 0
        self._unshared = False
        self._waiting = False
        self._waited_out = False  # set when the wait for a missing worker's replacement ran out; reset once whole
        self._deciding = asyncio.Lock()  # streams starting and the beat decide one at a time (one listener at most)

    async def run(self) -> None:
        """Says this worker's load and follows the others' every :data:`BEAT_SECS` (until cancelled)."""
        while True:
            await self.beat()
            await asyncio.sleep(BEAT_SECS)

    async def beat(self) -> None:
        """Says this worker's load, reads the others' and decides again."""
        try:
            self._busy, self._others = await self.fleet.beat(self.live(), self.accepting)
            self._seen_at = time.monotonic()
        except FleetUnavailable as exc:
            if not self._unshared:
                logger.error("fleet: load not shared ({}); accepting meanwhile", exc)
            # Nothing known of the group: no worker is waited for, and this one accepts.
            self._busy, self._others, self._unshared = 0, [], True
        else:
            if self._unshared:
                logger.info("fleet: load shared again")
            self._unshared = False
        await self.check()

    async def check(self) -> None:
        """Decides again on what is known now, and resumes accepting if the decision says so."""
        async with self._deciding:
            if self.decide():
                await self.listener.resume_accepting()
                self.accepting = True
                self.decide(resume=False)  # a stream that started meanwhile may have changed the decision

    def stream_started(self) -> None:
        """Decides at once, when a stream starts on this worker (called before anything else runs).

        A burst of returning calls reaches the app together: deciding later, after the burst was counted,
        the survivor of a kill saw nothing left to wait for and took every call. Only a pause is decided
        here (a pause needs no await); resuming waits for the beat.
        """
        self.decide(resume=False)

    def decide(self, resume: bool = True) -> bool:
        """Pauses accepting now if the decision says so; returns whether it says to resume (the caller does)."""
        now = time.monotonic()
        since = now - self._seen_at
        # A worker killed since the last beat is gone now, not a beat (and the burst of its calls coming back) later.
        self._others = [w for w in self._others if not w.gone()]
        others = [WorkerLoad(w.worker, w.live, w.accepting, w.age_secs + since, w.pid) for w in self._others]
        deaf = 0.0 if self.accepting else now - self._deaf_since
        if not self._others and self.group <= 1:
            return False
        if self._unshared:
            others = []  # with nothing held (busy 0) nothing is waited for: this worker accepts
        if len([w for w in others if w.age_secs < STALE_SECS]) + 1 >= self.group:
            self._waited_out = False
        decision = should_accept(self.live(), self._busy, self.group, others, deaf, self._waited_out)
        self._waited_out = self._waited_out or decision.waited_out
        starts_waiting, self._waiting = decision.waiting and not self._waiting, decision.waiting
        if decision.accept == self.accepting and not starts_waiting:
            return False
        if decision.accept and not resume:
            return False
        if decision.why != self._why:
            logger.info("workers: {} connections ({})", "accepting" if decision.accept else "not accepting",
                        decision.why)
            self._why = decision.why
        if decision.accept:
            return True
        if self.accepting:
            self.listener.pause_accepting()
            self.accepting, self._deaf_since = False, now
            self.pauses += 1
        return False
