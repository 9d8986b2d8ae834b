"""``lanes``: slots, ledger and the caller's own date words verbatim, a structured summary, raw turns."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from voice_agent.core.assembler import AssembledContext, AssemblerConfig, ContextAssembler
from voice_agent.core.call_state import CallState
from voice_agent.core.dates import DateConstraint, extract_constraints
from voice_agent.core.drop_log import SummaryPass
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.passes import PassScheduler
from voice_agent.core.policy import ScheduledPass
from voice_agent.core.summary import Summarizer


class LanesPolicy:
    """Our policy: facts live in lanes that never pass through a model.

    Args:
        assembler: Builds the messages from the lanes.
        summarizer: Writes the narrative summary at each pass.
        date_guard: Shared with the tool gate; its per-utterance extraction cache makes the
            caller-constraint lines cheap on every inference.
    """

    name = "lanes"

    def __init__(
        self, assembler_config: AssemblerConfig, summarizer: Summarizer, date_guard: DateGuard
    ) -> None:
        self.assembler = ContextAssembler(assembler_config)
        self.pass_scheduler = PassScheduler(summarizer)
        # A priced pass is reckoned on what the requests carry: the summary as shown, the knowledge pinned.
        self.pass_scheduler.trigger.shown = self.assembler.shown_sizes
        self.date_guard = date_guard
        # The caller's limits so far, kept up with the guard's list of caller constraints (read from where it
        # was left; started over when the guard starts a new list or the day of the call differs).
        self._limits: tuple[Sequence[tuple[int, DateConstraint]] | None, int, date | None,
                            list[tuple[int, DateConstraint]]] = (None, 0, None, [])

    async def on_turn_start(self, state: CallState) -> SummaryPass | None:
        """Runs a pass on the structured summary when the schedule says so."""
        return await self.pass_scheduler.on_turn_start(state)

    def schedule(self, state: CallState) -> ScheduledPass | None:
        """The pass due now, if any (not run)."""
        return self.pass_scheduler.schedule(state)

    async def run(self, state: CallState, scheduled: ScheduledPass) -> SummaryPass:
        """Runs a scheduled pass on the structured summary."""
        return await self.pass_scheduler.run(state, scheduled)

    def caller_constraint_lines(self, state: CallState) -> list[str]:
        """The caller's utterances that limit when things can happen, verbatim, with their turns.

        Only limits and exclusions that still lie ahead count ("travelling until the 14th",
        "not Tuesday"); a date merely mentioned ("the October invoice") does not. Words a
        slot already holds verbatim are not repeated.
        """
        today = state.reference_date
        limits = self._standing_limits(state)
        held = state.slots.values()
        lines: list[str] = []
        for turn, c in limits:
            # A slot that quotes the caller's words for this very limit already carries it.
            if any(v.rstrip(".!?") in c.text and _same_limit(v, c, today) for v in held):
                continue
            line = f'caller said (turn {turn}): "{c.text}"'
            if line not in lines:
                lines.append(line)
        return lines

    def _standing_limits(self, state: CallState) -> list[tuple[int, DateConstraint]]:
        """The caller's limits and exclusions that still lie ahead, oldest first (only new constraints read)."""
        found = self.date_guard.caller_constraints(state.transcript)
        source, done, day, limits = self._limits
        today = state.reference_date
        if source is not found or done > len(found) or day != today:
            done, limits = 0, []
        limits.extend(
            (turn, c) for turn, c in found[done:] if not c.is_positive and (c.end is None or c.end >= today)
        )
        self._limits = (found, len(found), today, limits)
        return limits

    def build(self, state: CallState, retrieved: Sequence[str] = ()) -> AssembledContext:
        """KNOWN FACTS + summary + retrieved + raw turns + constraints."""
        return self.assembler.build(state, retrieved, extra_facts=self.caller_constraint_lines(state))



def _same_limit(quote: str, limit: DateConstraint, reference: date) -> bool:
    """Whether ``quote`` states ``limit`` itself (same kind, bounds and polarity)."""
    return any(
        (c.kind, c.start, c.end, c.weekday, c.blocked)
        == (limit.kind, limit.start, limit.end, limit.weekday, limit.blocked)
        for c in extract_constraints(quote, reference)
    )
