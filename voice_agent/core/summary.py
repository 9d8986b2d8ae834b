"""The summary lane: a structured, lossy narrative of turns that left the window."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, Field

from voice_agent.core.transcript import TranscriptEntry


class RejectedItem(BaseModel):
    """Something ruled out, with the reason (summaries tend to lose exactly these)."""

    item: str
    reason: str


class Commitment(BaseModel):
    """A promise the agent made, verbatim, with the turn it was said on."""

    text: str
    turn: int


class EpisodeSummary(BaseModel):
    """The structured episode summary. It refers to identifiers by ledger role only."""

    established: list[str] = Field(default_factory=list)
    rejected: list[RejectedItem] = Field(default_factory=list)
    decided: list[str] = Field(default_factory=list)
    pending: list[str] = Field(default_factory=list)
    commitments: list[Commitment] = Field(default_factory=list)
    covers_through_turn: int = 0

    def is_empty(self) -> bool:
        """True when nothing has been summarized yet."""
        return not (self.established or self.rejected or self.decided or self.pending or self.commitments)

    def map_text(self, fn: Callable[[str], str]) -> EpisodeSummary:
        """A copy with ``fn`` applied to every line of every section (items, reasons, commitments)."""
        return self.model_copy(update={
            "established": [fn(x) for x in self.established],
            "rejected": [RejectedItem(item=fn(r.item), reason=fn(r.reason)) for r in self.rejected],
            "decided": [fn(x) for x in self.decided],
            "pending": [fn(x) for x in self.pending],
            "commitments": [Commitment(text=fn(c.text), turn=c.turn) for c in self.commitments],
        })

    def render_sections(self) -> list[tuple[str, list[str]]]:
        """The summary as (section, lines) pairs, oldest line first within each section."""
        return [
            ("Established", list(self.established)),
            # A ruling kept whole already says why: the reason is not said twice.
            ("Rejected", [f"{r.item} (because {r.reason})" if r.reason and r.reason not in r.item else r.item
                          for r in self.rejected]),
            ("Decided", list(self.decided)),
            ("Pending", list(self.pending)),
            ("Commitments", [f'turn {c.turn}: "{c.text}"' for c in self.commitments]),
        ]

    def render(self) -> str:
        """The summary as plain text."""
        parts = []
        for title, lines in self.render_sections():
            if lines:
                parts.append(f"{title}:\n" + "\n".join(f"- {line}" for line in lines))
        return "\n".join(parts)


SUMMARIZER_INSTRUCTIONS = """\
You maintain the narrative summary of a support phone call.
You receive the previous summary and the turns that have just left the live window.
Return the updated summary with these fields: established, rejected (each with its reason),
decided, pending, commitments (the agent's promise verbatim, with its turn).

You do NOT own, and must not write:
- identifier values (account, invoice, order, ticket numbers and the like): they live in the
  ledger; refer to them by their ledger role instead, e.g. "the disputed_invoice";
- slot facts (the domain's typed facts listed below): they live in the slots lane.
Keep what was ruled out and why: that is what summaries usually lose.
"""


@dataclass(frozen=True)
class SummaryRequest:
    """Everything one summary pass receives.

    Attributes:
        previous: The summary so far.
        turns: Transcript entries of the turns that just left the window.
        ledger_roles: Roles the summary may refer to.
        slot_names: Slot facts the summarizer does not own.
        pass_turn: The turn at whose start this pass runs.
        identifiers: Ledger value -> role, so a summarizer can write the role where the turns
            say the value (the summary must never carry identifier values).
    """

    previous: EpisodeSummary
    turns: Sequence[TranscriptEntry]
    ledger_roles: Sequence[str]
    slot_names: Sequence[str]
    pass_turn: int
    identifiers: Mapping[str, str] = field(default_factory=dict)

    def instructions(self) -> str:
        """The summarizer's instructions, naming the roles and slots it does not own."""
        roles = ", ".join(sorted(set(self.ledger_roles))) or "(none yet)"
        slots = ", ".join(self.slot_names) or "(none)"
        return f"{SUMMARIZER_INSTRUCTIONS}\nLedger roles: {roles}\nSlot facts: {slots}\n"


class Summarizer(Protocol):
    """Writes the next summary from the previous summary plus what just left the window."""

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        """Returns the new summary for ``request``."""
        ...
