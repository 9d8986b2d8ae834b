"""The brain protocol: assembled messages + tool names in, one reply out.

A brain sees ONLY what an LLM would see (the assembled context and the tools), so
a fact the lanes lost shows up as a re-ask, exactly as it would with a real model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the brain wants to make."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BrainReply:
    """One reply: text to speak, tool calls to make, or both.

    Attributes:
        text: What to say (may be empty when only calling tools).
        tool_calls: Tool calls to make.
        asks_for: When the reply asks the caller for a value, the argument name it asks
            for (e.g. ``account_id``); the simulation counts a re-ask when the caller
            had already given it.
    """

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    asks_for: str | None = None


class Brain(Protocol):
    """Decides the next reply from the assembled context alone."""

    def respond(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[str]) -> BrainReply:
        """Returns the reply to ``messages`` (OpenAI format) given the available tool names."""
        ...
