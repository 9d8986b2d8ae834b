"""Corrections: a later "actually, make it Sunday" replaces what it corrects."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from voice_agent.core.dates.extract import extract_constraints
from voice_agent.core.dates.model import ConstraintKind, DateConstraint
from voice_agent.core.dates.subjects import StatementKind

_EXCLUSIONS = (ConstraintKind.EXCLUDE_DATE, ConstraintKind.EXCLUDE_WEEKDAY)
_LIMITS = (ConstraintKind.UNTIL, ConstraintKind.BEFORE, ConstraintKind.AFTER)


def family(constraint: DateConstraint) -> str:
    """Which statements a correction can replace: "when" (named days and windows), "exclude" or "limit"."""
    if constraint.is_positive:
        return "when"
    if constraint.kind in _EXCLUSIONS or constraint.kind is ConstraintKind.RANGE:
        return "exclude"
    return "limit"  # UNTIL / BEFORE / AFTER


def _same_thing(later: DateConstraint, earlier: DateConstraint) -> bool:
    """Whether both can be about the same date: purpose, topic and role agree where both name one."""
    pairs = ((later.purpose, earlier.purpose), (later.topic, earlier.topic), (later.role, earlier.role))
    return all(a is None or b is None or a == b for a, b in pairs)


_ASKS = (StatementKind.REQUEST, StatementKind.CORRECTION)


def supersedes(later: DateConstraint, earlier: DateConstraint) -> bool:
    """Whether ``later`` (said after ``earlier``, in another utterance) replaces it.

    A sentence with a correction cue replaces a statement of the same family. A limit
    restated the same way ("up to the 11th", later "up to the 12th") replaces the earlier
    one even without a cue: the caller moved it. A named day asked for replaces a named day
    asked for earlier for the same thing ("the 11th" ... "the 12th, then"). Always only for
    the same purpose, topic and role where both name one: a new drop-off day leaves the
    pick-up day standing.
    """
    if family(later) != family(earlier) or not _same_thing(later, earlier):
        return False
    if later.correction:
        # A new named day replaces the old one; a limit or exclusion only one of its own kind
        # ("sorry, not Tuesdays, Wednesdays" replaces the Tuesday rule, not "avoid Mondays").
        if family(later) == "when":
            # A new day replaces the day asked for before, not the only window the caller allowed.
            return not (earlier.statement is StatementKind.CONSTRAINT and later.kind is ConstraintKind.ON)
        return later.kind is earlier.kind
    if later.kind is ConstraintKind.ON and earlier.kind is ConstraintKind.ON:
        # Without a cue, only for the same end of a booking: "also call me on the 16th" adds a day.
        said_for = later.role is not None and later.role == earlier.role
        return said_for and later.start != earlier.start and later.statement in _ASKS and earlier.statement in _ASKS
    return later.kind is earlier.kind and later.kind in _LIMITS and later.blocked == earlier.blocked


def resolve_corrections(utterances: Iterable[tuple[int, str]], reference: date) -> list[tuple[int, DateConstraint]]:
    """The constraints still standing once corrections are applied.

    Args:
        utterances: ``(turn, text)`` pairs of one speaker, oldest first.
        reference: The day of the call.

    Returns:
        ``(turn, constraint)`` pairs, oldest first, without the superseded ones.
    """
    said = [(pos, turn, c) for pos, (turn, text) in enumerate(utterances) for c in extract_constraints(text, reference)]
    return [
        (turn, c)
        for pos, turn, c in said
        if not any(later_pos > pos and supersedes(later, c) for later_pos, _, later in said)
    ]
