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


def resume_line(state: CallState, topics: Mapping[str, str]) -> str:
    """The apology a resumed call opens with, e.g. "Sorry, we got cut off. We were on the credit for your invoice."."""
    topic = resume_topic(state, topics)
    if topic == DEFAULT_TOPIC:
        return "Sorry, we got cut off. I still have everything you told me, so let's carry on where we left off."
    return f"Sorry, we got cut off. We were on {topic}; I still have everything you told me."
