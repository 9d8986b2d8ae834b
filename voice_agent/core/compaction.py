"""The live trigger: run summary regenerations when the policy says so, and log drops."""

from __future__ import annotations

from voice_agent.core.call_state import CallState
from voice_agent.core.drop_log import SummaryPass, facts_present
from voice_agent.core.role_scrub import scrub_summary
from voice_agent.core.summary import Summarizer, SummaryRequest


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


class Compactor:
    """Runs the policy's regenerations for one call.

    Every pass's output is scrubbed: ledger values become their roles, whatever the
    summarizer wrote (DESIGN rule 9).

    Args:
        summarizer: Produces the new summary from the previous one plus what left the window.
    """

    def __init__(self, summarizer: Summarizer) -> None:
        self.summarizer = summarizer

    async def on_turn_start(self, state: CallState, context_tokens: int | None = None) -> SummaryPass | None:
        """Regenerates the summary if due at the start of ``state.turn``; returns the pass."""
        regeneration = state.tracker.on_turn_start(state.turn, context_tokens)
        if regeneration is None:
            return None
        leaving = state.transcript.in_turns(regeneration.first, regeneration.last)
        tracked = tracked_facts(state)
        # Keyed like the drop log ("ledger:order#2"), so several entries of one role stay apart.
        identifiers = {value: key.removeprefix("ledger:") for key, value in tracked.items()
                       if key.startswith("ledger:")}
        request = SummaryRequest(
            previous=state.summary,
            turns=leaving,
            ledger_roles=[e.role for e in state.ledger.entries],
            slot_names=state.slots.fields,
            regeneration_turn=regeneration.turn,
            identifiers={e.value: e.role for e in state.ledger.entries},
        )
        text_in = state.summary.render() + "\n" + "\n".join(e.render() for e in leaving)
        scrubbed: dict[str, int] = {}
        new_summary = scrub_summary(await self.summarizer.summarize(request), identifiers, scrubbed)
        state.summary = new_summary.model_copy(update={"covers_through_turn": regeneration.last})
        text_out = new_summary.render()
        event = state.drop_log.record(
            regeneration.turn, facts_present(text_in, tracked), facts_present(text_out, tracked),
            {f"ledger:{role}": n for role, n in scrubbed.items()},
        )
        return SummaryPass(regeneration.turn, text_in, text_out, event)
