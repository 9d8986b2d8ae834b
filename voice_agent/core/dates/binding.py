"""Which date statements bind a date parameter.

A callback's date is bound by when the caller can be reached, not by their flight or by
the month a fee went up; a hotel check-out is bound by the trip and the hotel booking, not
by "I need the van till the 8th". A tool parameter says so with ``ToolParam.binds`` and
``ToolParam.topic``; parameters that say nothing get :data:`DEFAULT_BINDS` and the topic and
role read from the tool's and parameter's names.
"""

from __future__ import annotations

from dataclasses import dataclass

from voice_agent.core.dates.model import DateConstraint
from voice_agent.core.dates.subjects import DateSubject, StatementKind, role_of, topic_of

DEFAULT_BINDS: tuple[DateSubject, ...] = (DateSubject.AVAILABILITY, DateSubject.BOOKING, DateSubject.TRIP)
"""Subjects that bind a date parameter that does not name its own."""

_NEVER = (StatementKind.NONE,)


@dataclass(frozen=True)
class DateBinding:
    """What may block or confirm one date parameter.

    Attributes:
        subjects: Subjects whose statements bind it.
        topic: The thing it books ("callback", "car", "hotel", ...), or None for any.
        role: "start" or "end" of that thing, or None for either.
    """

    subjects: tuple[DateSubject, ...] = DEFAULT_BINDS
    topic: str | None = None
    role: str | None = None

    @classmethod
    def for_param(
        cls, tool_name: str, param_name: str, binds: tuple[str, ...] = (), topic: str | None = None
    ) -> DateBinding:
        """The binding of one parameter: declared subjects and topic, else read from the names."""
        words = f"{tool_name} {param_name}".replace("_", " ").replace("-", " ")
        subjects = tuple(DateSubject(b) for b in binds) or DEFAULT_BINDS
        return cls(subjects, topic or topic_of(words), role_of(param_name.replace("_", " ")))

    def admits(self, c: DateConstraint) -> bool:
        """Whether ``c`` is about this parameter."""
        if c.subject not in self.subjects or c.statement in _NEVER:
            return False
        if c.topic is not None and self.topic is not None and c.topic != self.topic:
            # A callback request says nothing about a car; a limit on the van says nothing about the hotel.
            return False
        return c.role is None or self.role is None or c.role == self.role
