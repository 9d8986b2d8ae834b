"""The live trigger: run summary regenerations when the policy says so, and log drops."""

from __future__ import annotations

from collections.abc import Mapping

from voice_agent.core.call_state import CallState
from voice_agent.core.drop_log import DropEvent, facts_present
from voice_agent.core.summary import Summarizer, SummaryRequest


def tracked_facts(state: CallState) -> dict[str, str]:
    """Facts whose survival the drop log follows by default: ledger values and slot values.

    Keys are names (``ledger:role``, ``slot:name``), never values, so they are safe in spans.
    """
    facts = {f"ledger:{e.role}": e.value for e in state.ledger.entries}
    for name, slot in state.slots.filled().items():
        facts[f"slot:{name}"] = ", ".join(map(str, slot.value)) if isinstance(slot.value, list) else str(slot.value)
    return facts


class Compactor:
    """Runs the policy's regenerations for one call.

    Args:
        summarizer: Produces the new summary from the previous one plus what left the window.
        extra_facts: More tracked facts (key -> exact value) to follow in the drop log,
            for example the facts a scenario declares.
    """

    def __init__(self, summarizer: Summarizer, extra_facts: Mapping[str, str] | None = None) -> None:
        self.summarizer = summarizer
        self.extra_facts = dict(extra_facts or {})

    async def on_turn_start(self, state: CallState, context_tokens: int | None = None) -> DropEvent | None:
        """Regenerates the summary if due at the start of ``state.turn``; returns the drop event."""
        regeneration = state.tracker.on_turn_start(state.turn, context_tokens)
        if regeneration is None:
            return None
        leaving = state.transcript.in_turns(regeneration.first, regeneration.last)
        request = SummaryRequest(
            previous=state.summary,
            turns=leaving,
            ledger_roles=[e.role for e in state.ledger.entries],
            slot_names=state.slots.fields,
            regeneration_turn=regeneration.turn,
            identifiers={e.value: e.role for e in state.ledger.entries},
        )
        tracked = {**tracked_facts(state), **self.extra_facts}
        text_in = state.summary.render() + "\n" + "\n".join(e.render() for e in leaving)
        new_summary = await self.summarizer.summarize(request)
        state.summary = new_summary.model_copy(update={"covers_through_turn": regeneration.last})
        return state.drop_log.record(
            regeneration.turn, facts_present(text_in, tracked), facts_present(new_summary.render(), tracked)
        )
