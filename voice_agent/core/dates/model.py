"""Date constraints: what a caller said about when they can and cannot be reached."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import Any

from voice_agent.core.dates.subjects import DateSubject, StatementKind

WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
"""Weekday names indexed like ``date.weekday()`` (0 = Monday)."""


class ConstraintKind(StrEnum):
    """The cue that produced a constraint."""

    ON = "on"
    UNTIL = "until"
    BEFORE = "before"
    AFTER = "after"
    RANGE = "range"
    EXCLUDE_DATE = "exclude_date"
    EXCLUDE_WEEKDAY = "exclude_weekday"


@dataclass(frozen=True)
class DateConstraint:
    """One statement about dates, resolved against a reference day.

    ``start`` and ``end`` are always inclusive bounds of the *described span*
    (``None`` = open). ``blocked`` gives the span's polarity:

    * ``blocked=False``: the span is when the caller is available (or the date
      they named). ``allows(d)`` is true inside the span.
    * ``blocked=True``: the span is when the caller is NOT available.
      ``allows(d)`` is true outside it.

    How the cues map:

    * ON: ``start == end`` = the named day ("tomorrow", "the 14th").
    * RANGE: ``start..end`` ("next week", "from the 3rd till the 9th"); blocked
      when the caller is away for it ("I'm away next week").
    * UNTIL: ``end`` only. "I'm travelling/away/busy until X" is blocked: not
      available on or before X, so ``allows(d)`` is ``d > X``. A neutral
      "any day until X works" / "by X" is not blocked: ``allows(d)`` is ``d <= X``.
    * BEFORE: ``end`` only, not blocked: "before the 10th" gives ``end`` = the 9th.
    * AFTER: ``start`` only, not blocked: the earliest allowed day. "after the
      3rd" gives the 3rd (callers use "after" loosely; only dates strictly
      earlier are flagged), and "nothing before the 5th of January" gives the 5th.
    * EXCLUDE_DATE: ``start == end`` = a day ruled out; always blocked.
    * EXCLUDE_WEEKDAY: ``weekday`` (0 = Monday) ruled out every week; always blocked.

    Attributes:
        kind: The cue that produced it.
        start: Earliest day of the span, inclusive, or None if open.
        end: Latest day of the span, inclusive, or None if open.
        weekday: For EXCLUDE_WEEKDAY, the weekday (0 = Monday).
        text: The caller's own words (the sentence that produced it).
        purpose: What the date is for ("callback", "delivery", "appointment"), if said.
        blocked: True when the span is when the caller is NOT available.
        correction: True when the sentence carries a correction cue ("actually",
            "make it", "instead", ...), so it replaces earlier statements.
        subject: What the statement is about (see ``subjects``): only subjects a tool
            parameter binds can block or confirm its date.
        statement: What it does: a constraint, an event, a request, a correction or none.
        topic: The thing it is about ("car", "hotel", "callback", ...), if said.
        role: "start" or "end" of that thing (pick-up / drop-off), if said.
    """

    kind: ConstraintKind
    start: date | None
    end: date | None
    weekday: int | None
    text: str
    purpose: str | None = None
    blocked: bool = False
    correction: bool = False
    subject: DateSubject = DateSubject.AVAILABILITY
    statement: StatementKind = StatementKind.CONSTRAINT
    topic: str | None = None
    role: str | None = None

    def contains(self, d: date) -> bool:
        """Whether ``d`` lies inside the described span (ignoring polarity)."""
        if self.weekday is not None:
            return d.weekday() == self.weekday
        return (self.start is None or d >= self.start) and (self.end is None or d <= self.end)

    def covers(self, d: date) -> bool:
        """Whether ``d`` is among the days the statement speaks of, whatever its polarity: "till the 20th" covers
        every day up to the 20th, "from the 25th" every day from it, "no Tuesdays" every Tuesday."""
        if self.weekday is not None:
            return d.weekday() == self.weekday
        if self.kind is ConstraintKind.AFTER:
            return self.start is None or d >= self.start
        if self.kind in (ConstraintKind.UNTIL, ConstraintKind.BEFORE):
            return self.end is None or d <= self.end
        return self.contains(d)

    def allows(self, d: date) -> bool:
        """Whether this constraint permits scheduling on ``d``."""
        inside = self.contains(d)
        return not inside if self.blocked else inside

    @property
    def is_positive(self) -> bool:
        """True for a named day or window the caller offered (ON, or RANGE not blocked)."""
        return self.kind in (ConstraintKind.ON, ConstraintKind.RANGE) and not self.blocked

    def describe(self) -> str:
        """A short plain-English rendering of the allowed dates, for tool results."""
        s = self.start.isoformat() if self.start else None
        e = self.end.isoformat() if self.end else None
        if self.weekday is not None:
            return f"no {WEEKDAY_NAMES[self.weekday]}s"
        if self.kind is ConstraintKind.EXCLUDE_DATE:
            return f"not on {s}"
        if self.blocked:
            if s is None:
                return f"unavailable until {e} inclusive"
            if e is None:
                return f"unavailable from {s}"
            return f"unavailable {s} to {e}"
        if s is not None and s == e:
            return f"on {s}"
        if s is None:
            return f"on or before {e}"
        if e is None:
            return f"on or after {s}"
        return f"between {s} and {e}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; dates as ISO strings."""
        return {
            "kind": self.kind.value,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "weekday": self.weekday,
            "text": self.text,
            "purpose": self.purpose,
            "blocked": self.blocked,
            "correction": self.correction,
            "subject": self.subject.value,
            "statement": self.statement.value,
            "topic": self.topic,
            "role": self.role,
        }
