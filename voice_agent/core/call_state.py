"""One call's state: its lanes, its turn counter and its policy tracker."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from voice_agent.core.drop_log import DropLog
from voice_agent.core.ledger import Ledger
from voice_agent.core.policy import ContextPolicy, PolicyTracker
from voice_agent.core.slots import SlotLane
from voice_agent.core.summary import EpisodeSummary
from voice_agent.core.transcript import TranscriptEntry, TranscriptLane


class NoSlots(BaseModel):
    """The slot model of a domain that declares no slots."""


@dataclass
class CallState:
    """The lanes of one call.

    Args:
        call_id: Identifies the call in logs and spans.
        reference_date: The call's "today": relative dates resolve against it, never the machine clock.
        policy: Context policy (K, S, optional token threshold).
        slot_model: The domain's slot model.
        ledger_capacity: Most identifiers held at once.
    """

    call_id: str = "call"
    reference_date: dt.date = field(default_factory=dt.date.today)
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    slot_model: type[BaseModel] = NoSlots
    ledger_capacity: int = 64
    transcript: TranscriptLane = field(init=False, default_factory=TranscriptLane)
    summary: EpisodeSummary = field(init=False, default_factory=EpisodeSummary)
    drop_log: DropLog = field(init=False, default_factory=DropLog)
    turn: int = field(init=False, default=0)
    unsummarized_from: int | None = field(init=False, default=None)
    """First turn handed to a summary pass still running in the background: it stays raw until the pass lands."""

    def __post_init__(self) -> None:
        self.ledger = Ledger(capacity=self.ledger_capacity)
        self.slots: SlotLane[Any] = SlotLane(self.slot_model)
        self.tracker = PolicyTracker(self.policy)

    def start_turn(self, caller_text: str) -> int:
        """Begins the next turn with the caller's final utterance; returns its number."""
        self.turn += 1
        self.transcript.append_caller(self.turn, caller_text)
        return self.turn

    def add_caller_text(self, text: str) -> None:
        """Records a further caller utterance within the current turn."""
        if self.turn == 0:
            self.start_turn(text)
        else:
            self.transcript.append_caller(self.turn, text)

    def record_agent(self, text: str, *, interrupted: bool = False) -> None:
        """Records what the agent said in the current turn, as heard."""
        self.transcript.append_agent(max(self.turn, 1), text, interrupted=interrupted)

    def raw_entries(self) -> list[TranscriptEntry]:
        """Transcript entries kept verbatim right now (never fewer than the last K turns under the cadence).

        Turns a background summary pass is still folding count as unsummarized until it lands. Turns the
        ``reference`` trigger holds because the recent turns still refer to them come first, in order.
        """
        first = self.tracker.raw_from(max(self.turn, 1))
        if self.unsummarized_from is not None:
            first = min(first, self.unsummarized_from)
        held = [e for t in sorted(set(self.tracker.held)) if t < first for e in self.transcript.in_turns(t, t)]
        return held + self.transcript.in_turns(first, self.turn)

    def recent_entries(self) -> list[TranscriptEntry]:
        """Entries of the last K turns plus the current one: the ID guard's raw view."""
        # The last K turns whatever the trigger: a trigger decides what the model sees, not what the guard reads.
        first = max(1, max(self.turn, 1) - self.policy.keep)
        return self.transcript.in_turns(first, self.turn)
