"""The live trigger: run summary passes when the policy says so, and log drops."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

from loguru import logger

from voice_agent.core.call_state import CallState
from voice_agent.core.drop_log import SummaryPass, facts_present
from voice_agent.core.pass_trigger import PassTrigger
from voice_agent.core.policy import ScheduledPass
from voice_agent.core.role_scrub import scrub_summary
from voice_agent.core.summary import Summarizer, SummaryRequest
from voice_agent.core.transcript import TranscriptEntry


def tracked_facts(state: CallState) -> dict[str, str]:
    """Facts whose survival the drop log follows: ledger values and slot values.

    Keys are names (``ledger:role#n``, ``slot:name``), never values, so they are safe in spans.
    """
    facts: dict[str, str] = {}
    for entry in state.ledger.entries:
        key = f"ledger:{entry.role}"
        n = 2
        while key in facts:  # several entries can share a role ("order"): each is followed
            key = f"ledger:{entry.role}#{n}"
            n += 1
        facts[key] = entry.value
    for name, slot in state.slots.filled().items():
        facts[f"slot:{name}"] = ", ".join(map(str, slot.value)) if isinstance(slot.value, list) else str(slot.value)
    return facts


def folded_entries(state: CallState, scheduled: ScheduledPass) -> list[TranscriptEntry]:
    """The transcript entries a pass receives (a ``reference`` pass skips the turns it holds)."""
    entries = state.transcript.in_turns(scheduled.first, scheduled.last)
    return [e for e in entries if scheduled.folds(e.turn)] if scheduled.turns else entries


class PassScheduler:
    """Schedules and runs the policy's summary passes for one call.

    Every pass's output is scrubbed: ledger values become their roles, whatever the
    summarizer wrote (DESIGN rule 9).

    Args:
        summarizer: Produces the new summary from the previous one plus what left the window.
    """

    def __init__(self, summarizer: Summarizer) -> None:
        self.summarizer = summarizer
        self.trigger = PassTrigger()

    async def on_turn_start(self, state: CallState, context_tokens: int | None = None) -> SummaryPass | None:
        """Runs a summary pass if one is due at the start of ``state.turn``; returns the pass."""
        scheduled = self.schedule(state, context_tokens)
        if scheduled is None:
            return None
        return await self.run(state, scheduled)

    def schedule(self, state: CallState, context_tokens: int | None = None) -> ScheduledPass | None:
        """The pass due at the start of ``state.turn``, if any (steps the policy's trigger; runs nothing)."""
        return self.trigger.schedule(state, context_tokens)

    async def run(self, state: CallState, scheduled: ScheduledPass) -> SummaryPass:
        """Runs one scheduled pass on the summary and ledger as they are now, and logs its drops.

        In the background this may start turns after it was scheduled: the turns it folds are fixed by
        ``scheduled``, the previous summary is the one the last landed pass left.
        """
        leaving = folded_entries(state, scheduled)
        tracked = tracked_facts(state)
        # Keyed like the drop log ("ledger:order#2"), so several entries of one role stay apart.
        identifiers = {value: key.removeprefix("ledger:") for key, value in tracked.items()
                       if key.startswith("ledger:")}
        request = SummaryRequest(
            previous=state.summary,
            turns=leaving,
            ledger_roles=[e.role for e in state.ledger.entries],
            slot_names=state.slots.fields,
            pass_turn=scheduled.turn,
            identifiers={e.value: e.role for e in state.ledger.entries},
        )
        text_in = state.summary.render() + "\n" + "\n".join(e.render() for e in leaving)
        scrubbed: dict[str, int] = {}
        new_summary = scrub_summary(await self.summarizer.summarize(request), identifiers, scrubbed)
        state.summary = new_summary.model_copy(update={"covers_through_turn": scheduled.last})
        text_out = new_summary.render()
        event = state.drop_log.record(
            scheduled.turn, facts_present(text_in, tracked), facts_present(text_out, tracked),
            {f"ledger:{role}": n for role, n in scrubbed.items()},
        )
        return SummaryPass(scheduled.turn, text_in, text_out, event)


PassRunner = Callable[[ScheduledPass], Awaitable[SummaryPass]]
"""Runs one scheduled pass (a policy's ``run`` bound to its call state)."""


class BackgroundPasses:
    """Runs a call's summary passes off the turn: the turn that schedules a pass does not wait for it.

    Passes run one after another, in schedule order, each from the summary the previous one left. The
    turns a pass folds stay raw (``CallState.unsummarized_from``) until it lands, so nothing leaves the
    context before its summary is in. A pass that raises is logged and its turns are released as if it
    had kept the previous summary (what every summarizer does when it fails).

    Args:
        state: The call's lanes.
        on_landed: Called with each pass when it lands (e.g. the session's pass log).
    """

    def __init__(self, state: CallState, on_landed: Callable[[SummaryPass], None]) -> None:
        self.state = state
        self.on_landed = on_landed
        self._pending: deque[ScheduledPass] = deque()
        self._tasks: list[asyncio.Task[SummaryPass | None]] = []

    @property
    def in_flight(self) -> int:
        """Passes scheduled and not yet landed."""
        return len(self._pending)

    def _release(self) -> None:
        self._pending.popleft()
        self.state.unsummarized_from = self._pending[0].first if self._pending else None

    def start(self, scheduled: ScheduledPass, run: PassRunner) -> asyncio.Task[SummaryPass | None]:
        """Schedules ``run(scheduled)`` after every pass already started; returns at once."""
        self._pending.append(scheduled)
        self.state.unsummarized_from = self._pending[0].first
        previous = self._tasks[-1] if self._tasks else None

        async def chained() -> SummaryPass | None:
            if previous is not None:
                await asyncio.wait([previous])  # its outcome is its own; this pass needs only its summary
            try:
                summary_pass = await run(scheduled)
            except asyncio.CancelledError:
                self._release()
                raise
            except Exception:  # a broken pass must not take the call down
                logger.exception("summary pass of turn {} failed; its turns leave the window unsummarized",
                                 scheduled.turn)
                self._release()
                return None
            self._release()
            landed = replace(summary_pass, landed_turn=self.state.turn)
            self.on_landed(landed)
            return landed

        task = asyncio.create_task(chained(), name=f"summary-pass-{scheduled.turn}")
        self._tasks = [t for t in self._tasks if not t.done()] + [task]
        return task

    async def drain(self) -> None:
        """Waits until every started pass has landed (end of a call, tests)."""
        while self._tasks:
            tasks, self._tasks = self._tasks, []
            await asyncio.wait(tasks)

    def cancel(self) -> None:
        """Cancels every pass not yet landed (the call ended)."""
        for task in self._tasks:
            task.cancel()
