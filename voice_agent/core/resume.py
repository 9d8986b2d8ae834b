"""What a resumed call says first: one short line naming where the call was, and nothing it would re-ask."""

from __future__ import annotations

from collections.abc import Mapping

from voice_agent.core.call_state import CallState
from voice_agent.core.transcript import EntryKind

DEFAULT_TOPIC = "where we left off"
"""The topic when the call had used no tool yet (or none the domain names)."""


def resume_topic(state: CallState, topics: Mapping[str, str]) -> str:
    """What the call was on: the topic of its latest tool call the domain names, else :data:`DEFAULT_TOPIC`.

    Args:
        state: The restored call.
        topics: Tool name -> how to say what it is about ("issue_credit" -> "the credit for your invoice").
            Never an identifier: the line is spoken and identifiers are never read back.
    """
    for entry in reversed(state.transcript.entries):
        name = entry.tool_name
        if entry.kind is EntryKind.TOOL_CALL and name is not None and name in topics:
            return topics[name]
    return DEFAULT_TOPIC


CUT_OFF = "Sorry, we got cut off"
"""How every line a resumed leg opens with begins (see :func:`resume_line`)."""


def unanswered(state: CallState) -> bool:
    """Whether the caller's last line got no complete answer: the call was cut before the agent finished it.

    The caller's line is saved when it opens its turn, before the agent answers; an answer said in full
    is saved at the end of the turn. So a last turn with caller words and no agent line (or only one the
    caller cut off) was never answered as far as the call knows.
    """
    entries = state.transcript.in_turns(state.turn, state.turn) if state.turn else []
    if not any(e.kind is EntryKind.CALLER for e in entries):
        return False
    # A resumed leg's apology is not an answer: a leg that died before answering leaves the line unanswered still.
    return not any(e.kind is EntryKind.AGENT and not e.interrupted and not e.text.startswith(CUT_OFF)
                   for e in entries)


def resume_line(state: CallState, topics: Mapping[str, str]) -> str:
    """The apology a resumed call opens with, e.g. "Sorry, we got cut off. We were on the credit for your invoice."."""
    if unanswered(state):
        # The agent answers that line next (the resumed leg runs the model on it): promise only that.
        return "Sorry, we got cut off. I have what you just said; let me answer that."
    topic = resume_topic(state, topics)
    if topic == DEFAULT_TOPIC:
        return "Sorry, we got cut off. I still have everything you told me, so let's carry on where we left off."
    return f"Sorry, we got cut off. We were on {topic}; I still have everything you told me."
