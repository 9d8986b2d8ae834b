"""``window``: truncation only. The last K turns, nothing older."""

from __future__ import annotations

from collections.abc import Sequence

from voice_agent.core.assembler import (
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
from voice_agent.policies.base import NoPasses


class WindowPolicy(NoPasses):
    """Keeps the last K turns raw and forgets the rest: it fails at a turn you can compute."""

    name = "window"

    def __init__(self, assembler_config: AssemblerConfig) -> None:
        self.config = assembler_config

    def build(self, state: CallState, retrieved: Sequence[str] = ()) -> AssembledContext:
        """System prompt, retrieved chunks, the last K turns, constraints."""
        lanes: dict[str, list[Message]] = {
            "system": system_lane(self.config.system_prompt),
            "retrieved": lane_of(retrieved_message(list(retrieved)[: self.config.max_retrieved])),
            "recent": entries_to_messages(state.recent_entries()),
            "constraints": lane_of(constraints_message(self.config.hard_constraints)),
        }
        return AssembledContext.from_lanes(lanes)
