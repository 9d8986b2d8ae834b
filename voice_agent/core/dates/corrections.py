"""Corrections: a later "actually, make it Sunday" replaces what it corrects."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from voice_agent.core.dates.extract import extract_constraints
from voice_agent.core.dates.model import ConstraintKind, DateConstraint

_EXCLUSIONS = (ConstraintKind.EXCLUDE_DATE, ConstraintKind.EXCLUDE_WEEKDAY)
_LIMITS = (ConstraintKind.UNTIL, ConstraintKind.BEFORE, ConstraintKind.AFTER)


def family(constraint: DateConstraint) -> str:
    """Which statements a correction can replace: "when" (named days and windows), "exclude" or "limit"."""
    if constraint.is_positive:
        return "when"
    if constraint.kind in _EXCLUSIONS or constraint.kind is ConstraintKind.RANGE:
        return "exclude"
    return "limit"  # UNTIL / BEFORE / AFTER


def supersedes(later: DateConstraint, earlier: DateConstraint) -> bool:
    """Whether ``later`` (said after ``earlier``) replaces it.

    A sentence with a correction cue replaces a statement of the same family. A limit
    restated the same way ("up to the 11th", later "up to the 12th") replaces the earlier
    one even without a cue: the caller moved it. Either way only for the same purpose
    when both name one.
    """
    same_purpose = later.purpose is None or earlier.purpose is None or later.purpose == earlier.purpose
    if family(later) != family(earlier) or not same_purpose:
        return False
    if later.correction:
        return True
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
