"""Corrections: a later "actually, make it Sunday" replaces what it corrects."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date

from voice_agent.core.dates.extract import extract_constraints
from voice_agent.core.dates.model import ConstraintKind, DateConstraint
from voice_agent.core.dates.subjects import DateSubject, StatementKind

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
# A day said as another option, not instead of the one before.
_ADDITION = re.compile(
    r"\b(?:also|too|as\swell|either|alternatively|otherwise|failing\sthat|if\snot|or\s(?:the|on|maybe|else)"
    r"|another|backup|back-up|second\schoice|as\san\soption|in\saddition)\b"
)
# The day an utterance asks for in place of another: "the 21st rather than the 18th", "not the 3rd, the 5th".
_ALTERNATIVE = re.compile(
    r"\b(?:rather\sthan|instead\sof|in\splace\sof|better\sthan)\b"
    r"|\bnot\s(?:on\s)?(?:the\s)?[\w-]+(?:\sof\s[a-z]+)?,?\s(?:the\s|on\s)?\d|\bnot\s(?:the\s)?[\w-]+,"
)


def supersedes(
    later: DateConstraint, earlier: DateConstraint, for_role: str | None = None, *, one_day: bool = False
) -> bool:
    """Whether ``later`` (said after ``earlier``, in another utterance) replaces it.

    A sentence with a correction cue replaces a statement of the same family. A limit
    restated the same way ("up to the 11th", later "up to the 12th") replaces the earlier
    one even without a cue: the caller moved it. A named day asked for replaces a named day
    asked for earlier for the same thing ("the 11th" ... "the 12th, then"). Always only for
    the same purpose, topic and role where both name one: a new drop-off day leaves the
    pick-up day standing.

    ``for_role``: the end the checked parameter books ("start", "end"), when the check is for one
    parameter that is one end of a pair; None otherwise. ``one_day``: the checked parameter is a
    single day (a callback, a show), so a new day asked for without a cue or a word of addition
    replaces the old one.
    """
    if not _same_thing(later, earlier):
        return False
    if later.correction and keeps_until(later) and earlier.kind is ConstraintKind.ON and earlier.role != "start":
        return True  # "I'll return it on the 9th" ... "actually I'll need it until the 10th": a new end day
    if family(later) != family(earlier):
        return False
    if family(later) == "when" and _ADDITION.search(later.text.lower()):
        return False  # "also the 16th", "or the 4th works too", "if not, the 5th": another day, not a new one
    if later.correction:
        # A new named day replaces the old one; a limit or exclusion only one of its own kind
        # ("sorry, not Tuesdays, Wednesdays" replaces the Tuesday rule, not "avoid Mondays"), and a
        # limit one that sets the same end ("good news, I'm back early, anything after the 10th" moves
        # "I'm away until the 20th").
        if family(later) == "when":
            # A new day replaces the day asked for before, not the only window the caller allowed.
            return not (earlier.statement is StatementKind.CONSTRAINT and later.kind is ConstraintKind.ON)
        if family(later) == "limit":
            return bound(later) == bound(earlier)
        return later.kind is earlier.kind
    if later.kind is ConstraintKind.ON and earlier.kind is ConstraintKind.ON:
        # A trip's day counts as asked for: "a trip to San Diego next Monday" ... "I need to leave today".
        asked_before = earlier.statement in _ASKS or (
            earlier.subject is DateSubject.TRIP and earlier.statement is StatementKind.EVENT
        )
        asked = later.start != earlier.start and later.statement in _ASKS and asked_before
        return asked and _same_end(later, earlier, for_role, one_day)
    # Without a cue, only a limit restated the same way: "up to the 11th", later "up to the 12th".
    return later.kind is earlier.kind and later.kind in _LIMITS and later.blocked == earlier.blocked


def _same_end(later: DateConstraint, earlier: DateConstraint, for_role: str | None, one_day: bool) -> bool:
    """Whether a day asked for without a cue is surely for the same end as the day asked before.

    The same end named both times, or the new day names the end the checked parameter books ("a trip
    next Monday" ... "I need to leave today", for a leaving date). A bare "the 14th" after "I leave on
    the 3rd" may well be the return. For a single day, any day asked for again replaces the last one
    (words of addition were ruled out before).
    """
    if later.role is None:
        return one_day and earlier.role is None
    return later.role == earlier.role or (earlier.role is None and later.role == for_role)


def keeps_until(constraint: DateConstraint) -> bool:
    """Whether it is how long the caller keeps a booked thing ("I need the car until the 10th"): its end day."""
    return (
        constraint.kind is ConstraintKind.UNTIL
        and not constraint.blocked
        and constraint.subject is DateSubject.BOOKING
    )


def bound(constraint: DateConstraint) -> str | None:
    """Which end of the caller's availability a limit sets: "earliest" or "latest" (None: not a limit).

    "I'm away until the 14th" and "any day after the 20th" both set the earliest day, so a later one
    moves the earlier ("good news, I'm back early, anything after the 10th"); "before the 9th" and
    "up to the 12th" both set the latest.
    """
    if constraint.kind is ConstraintKind.AFTER or (constraint.kind is ConstraintKind.UNTIL and constraint.blocked):
        return "earliest"
    if constraint.kind in (ConstraintKind.BEFORE, ConstraintKind.UNTIL):
        return "latest"
    return None


def lifts(
    later: DateConstraint, said_with: Iterable[DateConstraint], earlier: DateConstraint, for_role: str | None = None
) -> bool:
    """Whether ``later``, said with ``said_with`` (its utterance's constraints), replaces ``earlier``.

    The day an utterance asks for instead of another ("the 21st rather than the 18th") comes with
    that other day ruled out: that exclusion takes back the old request, not any day the caller
    ruled out before, so it replaces no earlier exclusion.
    """
    swapped = any(c.is_positive for c in said_with) and _ALTERNATIVE.search(later.text.lower())
    if family(later) == "exclude" and family(earlier) == "exclude" and swapped:
        return False
    return supersedes(later, earlier, for_role)


def resolve_corrections(utterances: Iterable[tuple[int, str]], reference: date) -> list[tuple[int, DateConstraint]]:
    """The constraints still standing once corrections are applied.

    Args:
        utterances: ``(turn, text)`` pairs of one speaker, oldest first.
        reference: The day of the call.

    Returns:
        ``(turn, constraint)`` pairs, oldest first, without the superseded ones.
    """
    by_pos = [(turn, extract_constraints(text, reference)) for turn, text in utterances]
    return [
        (turn, c)
        for pos, (turn, found) in enumerate(by_pos)
        for c in found
        if not any(lifts(later, siblings, c) for _, siblings in by_pos[pos + 1 :] for later in siblings)
    ]
