"""``rolling``: the ordinary policy. One free-text summary, rewritten from itself at each pass, no slots, no ledger."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from voice_agent.core.assembler import (
    LANE_ROLE,
    AssembledContext,
    AssemblerConfig,
    Message,
    constraints_message,
    entries_to_messages,
    lane_of,
    retrieved_message,
    system_lane,
)
from voice_agent.core.call_state import CallState
from voice_agent.core.drop_log import SummaryPass
from voice_agent.core.pass_trigger import PassTrigger
from voice_agent.core.passes import folded_entries
from voice_agent.core.policy import ScheduledPass
from voice_agent.core.transcript import TranscriptEntry


class TextSummarizer(Protocol):
    """Writes a free-text summary from the previous one plus the turns that left the window."""

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        """Returns the new summary text."""
        ...


class RollingPolicy:
    """The baseline this project exists to beat: a summary of the summary.

    Args:
        assembler_config: System prompt and hard constraints (the same as for ``lanes``).
        summarizer: The free-text summarizer.
    """

    name = "rolling"

    def __init__(
        self, assembler_config: AssemblerConfig, summarizer: TextSummarizer
    ) -> None:
        self.config = assembler_config
        self.summarizer = summarizer
        self.summary = ""
        self.trigger = PassTrigger(lanes_shown=False)  # rolling shows no ledger or slots

    async def on_turn_start(self, state: CallState) -> SummaryPass | None:
        """Folds the turns that left the window into the summary, when the schedule says so."""
        scheduled = self.schedule(state)
        if scheduled is None:
            return None
        return await self.run(state, scheduled)

    def schedule(self, state: CallState) -> ScheduledPass | None:
        """The pass due now, if any (not run)."""
        return self.trigger.schedule(state)

    async def run(self, state: CallState, scheduled: ScheduledPass) -> SummaryPass:
        """Folds the turns of ``scheduled`` into the summary text as it is now."""
        leaving = folded_entries(state, scheduled)
        text_in = self.summary + "\n" + "\n".join(e.render() for e in leaving)
        self.summary = await self.summarizer.summarize_text(self.summary, leaving)
        # Rolling keeps no ledger or slots, so the call itself follows no facts through the pass.
        event = state.drop_log.record(scheduled.turn, frozenset(), frozenset())
        return SummaryPass(scheduled.turn, text_in, self.summary, event)

    def build(self, state: CallState, retrieved: Sequence[str] = ()) -> AssembledContext:
        """System prompt, the summary, retrieved chunks, the unsummarized raw turns, constraints."""
        lanes: dict[str, list[Message]] = {
            "system": system_lane(self.config.system_prompt),
            "summary": (
                [{"role": LANE_ROLE, "content": f"SUMMARY of earlier turns:\n{self.summary}"}] if self.summary else []
            ),
            "retrieved": lane_of(retrieved_message(list(retrieved)[: self.config.max_retrieved])),
            "recent": entries_to_messages(state.raw_entries()),
            "constraints": lane_of(constraints_message(self.config.hard_constraints)),
        }
        return AssembledContext.from_lanes(lanes)
