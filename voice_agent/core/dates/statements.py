"""Date statements: each date a caller names, with what it is about and what it does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from voice_agent.core.dates.extract import extract_constraints
from voice_agent.core.dates.model import DateConstraint
from voice_agent.core.dates.subjects import DateSubject, StatementKind


@dataclass(frozen=True)
class DateStatement:
    """One date statement in a sentence: a view of the constraint the engine read.

    Attributes:
        constraint: The dates it describes, resolved against the call's day, with its subject and kind.
    """

    constraint: DateConstraint

    @property
    def subject(self) -> DateSubject:
        """What it is about (availability, trip, booking, charge period, deadline, none)."""
        return self.constraint.subject

    @property
    def kind(self) -> StatementKind:
        """What it does (constraint, event, request, correction, none)."""
        return self.constraint.statement

    @property
    def topic(self) -> str | None:
        """The thing it is about ("car", "hotel", "callback", ...), if said."""
        return self.constraint.topic

    @property
    def text(self) -> str:
        """The caller's sentence."""
        return self.constraint.text

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"subject": self.subject.value, "kind": self.kind.value, "topic": self.topic,
                "constraint": self.constraint.to_json()}


def read_statements(text: str, reference: date) -> list[DateStatement]:
    """The date statements of one utterance, in the order said.

    Args:
        text: The utterance, as transcribed.
        reference: The day of the call.
    """
    return [
        DateStatement(c) for c in extract_constraints(text, reference)
    ]
