"""Calendar arithmetic for the rule layer, and dateparser for phrases it gets right.

dateparser resolves canonical month/day phrases ("14 December") and relative
counts ("in 2 weeks"); it is called only on those short phrases (never a whole
sentence, where it invents dates from identifiers) and cached per
(phrase, base, preference). Bare ordinals, weekdays and weeks are computed
here, because the libraries resolve them into the wrong month or week.
"""

from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any

from dateutil.relativedelta import relativedelta

MONTH_NAMES = tuple(calendar.month_name)
"""English month names indexed 1..12 (index 0 is empty)."""

_parser: Any = None


def _dateparser() -> Any:
    """Imports and warms dateparser on first use: its first parse costs ~300 ms."""
    global _parser
    if _parser is None:
        import dateparser

        dateparser.parse("14 December", languages=["en"], settings={"PREFER_DATES_FROM": "future"})
        _parser = dateparser
    return _parser


@lru_cache(maxsize=4096)
def parse_phrase(phrase: str, base: date, prefer: str) -> date | None:
    """Resolves a canonical phrase with dateparser.

    Args:
        phrase: A short canonical phrase ("14 December", "in 2 weeks").
        base: The day the phrase is relative to (never the machine clock).
        prefer: "future" or "past", for phrases without a year.

    Returns:
        The date, or None if dateparser cannot read it (e.g. "31 November").
    """
    settings = {
        "RELATIVE_BASE": datetime(base.year, base.month, base.day),
        "PREFER_DATES_FROM": prefer,
        "RETURN_AS_TIMEZONE_AWARE": False,
    }
    parsed = _dateparser().parse(phrase, languages=["en"], settings=settings)
    return parsed.date() if parsed is not None else None


def month_day(day: int, month: int, year: int | None, reference: date, past: bool) -> date | None:
    """A day of a named month: the next one on/after ``reference``, or the last one on/before it if ``past``."""
    if not 1 <= day <= 31:
        return None
    phrase = f"{day} {MONTH_NAMES[month]}" + (f" {year}" if year else "")
    if past or (year is None and month == reference.month and day < reference.day):
        # "the 2nd to the 10th of November", said on the 18th: days this month already gone, not next year's.
        return parse_phrase(phrase, reference, "past")
    # dateparser's "future" excludes the base day itself, so anchor a day earlier: today counts.
    return parse_phrase(phrase, reference - timedelta(days=1), "future")


def in_units(count: int, unit: str, reference: date) -> date | None:
    """``count`` days/weeks/months/fortnights after ``reference``."""
    unit = unit.rstrip("s")
    if unit == "fortnight":
        count, unit = count * 2, "week"
    if count < 1 or count > 400 or unit not in ("day", "week", "month", "year"):
        return None
    return parse_phrase(f"in {count} {unit}{'s' if count > 1 else ''}", reference, "future")


def day_of_month(day: int, reference: date, past: bool) -> date | None:
    """The next day numbered ``day`` on/after ``reference`` (or last on/before it if ``past``).

    Months too short for ``day`` are skipped, so "the 31st" in November is 31 December.
    """
    if not 1 <= day <= 31:
        return None
    step = -1 if past else 1
    first = reference.replace(day=1)
    for k in range(13):
        month_start = first + relativedelta(months=step * k)
        if day > calendar.monthrange(month_start.year, month_start.month)[1]:
            continue
        candidate = month_start.replace(day=day)
        if (candidate <= reference) if past else (candidate >= reference):
            return candidate
    return None


def weekday_day_of_month(weekday: int, day: int, reference: date, past: bool) -> date | None:
    """The next day numbered ``day`` that falls on ``weekday`` ("Friday the 5th"), within two years.

    None when no such day is near: the caller's weekday and number disagree, and the number alone is used.
    """
    probe: date | None = reference
    for _ in range(25):
        if probe is None:
            return None
        found = day_of_month(day, probe, past)
        if found is None:
            return None
        if found.weekday() == weekday:
            return found
        probe = found + timedelta(days=-1 if past else 1)
    return None


def week_start(d: date) -> date:
    """Monday of the week holding ``d``."""
    return d - timedelta(days=d.weekday())


def weekday_date(weekday: int, reference: date, qualifier: str | None, past: bool) -> date:
    """Resolves a weekday name.

    * no qualifier: the next such day strictly after ``reference`` (the last one
      strictly before it if ``past``);
    * "this": that day of the reference's week, or of next week if already gone;
    * "next": that day of next week (Monday 30 Nov: "next Tuesday" = 8 Dec);
    * "coming": the next such day strictly after ``reference``;
    * "last": the last such day strictly before ``reference``.
    """
    if qualifier == "next":
        return week_start(reference) + timedelta(days=7 + weekday)
    if qualifier == "this":
        d = week_start(reference) + timedelta(days=weekday)
        return d if d >= reference else d + timedelta(days=7)
    if qualifier == "last" or (past and qualifier is None):
        delta = (reference.weekday() - weekday) % 7 or 7
        return reference - timedelta(days=delta)
    delta = (weekday - reference.weekday()) % 7 or 7
    return reference + timedelta(days=delta)


def month_span(month: int, reference: date, past: bool, part: str | None = None) -> tuple[date, date]:
    """A named month (or its early/mid/late part) in the year that is current or next (or last if ``past``)."""
    year = reference.year
    if past and month > reference.month:
        year -= 1
    elif not past and month < reference.month:
        year += 1
    last = calendar.monthrange(year, month)[1]
    lo, hi = 1, last
    if part == "early":
        hi = 10
    elif part == "mid":
        lo, hi = 11, 20
    elif part == "late":
        lo = 21
    return date(year, month, lo), date(year, month, hi)


@lru_cache(maxsize=1024)
def relative_month(offset: int, reference: date) -> tuple[date, date]:
    """This (0), next (1) or last (-1) calendar month; "this month" starts at ``reference``.

    Cached: a call has one reference day, and ``relativedelta`` arithmetic costs tens of µs a time.
    """
    first = reference.replace(day=1) + relativedelta(months=offset)
    last = first + relativedelta(months=1) - timedelta(days=1)
    return (reference if offset == 0 else first), last
