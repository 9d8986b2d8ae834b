"""The date-constraint table: caller sentences and the constraints they carry (reference Monday 2026-11-30).

Each row is a caller's sentence with the constraints :func:`~voice_agent.core.dates.extract_constraints` must
read from it, written by hand. ``tests/test_dates_table.py`` checks every row; ``scripts/bench_guards.py`` times
the extraction over the same sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from voice_agent.core.dates import ConstraintKind

REFERENCE = date(2026, 11, 30)
"""The day the table's sentences are said on (a Monday)."""
K = ConstraintKind

Expected = tuple[ConstraintKind, date | None, date | None, int | None, bool]


def _d(iso: str) -> date:
    return date.fromisoformat(iso if iso.count("-") == 2 and len(iso) == 10 else f"2026-{iso}")


def on(day: str) -> Expected:
    return (K.ON, _d(day), _d(day), None, False)


def rng(lo: str, hi: str, blocked: bool = False) -> Expected:
    return (K.RANGE, _d(lo), _d(hi), None, blocked)


def until(day: str, blocked: bool = False) -> Expected:
    return (K.UNTIL, None, _d(day), None, blocked)


def before(day: str) -> Expected:
    return (K.BEFORE, None, _d(day), None, False)


def after(day: str) -> Expected:
    return (K.AFTER, _d(day), None, None, False)


def exd(day: str) -> Expected:
    return (K.EXCLUDE_DATE, _d(day), _d(day), None, True)


def exw(weekday: int) -> Expected:
    return (K.EXCLUDE_WEEKDAY, None, None, weekday, True)


@dataclass(frozen=True)
class Case:
    """One table row: a caller sentence, its constraints, and whether it is a correction."""

    text: str
    expected: tuple[Expected, ...]
    correction: bool = False
    group: str = ""


def _rows(group: str, *rows: tuple[str, tuple[Expected, ...]] | tuple[str, tuple[Expected, ...], bool]) -> list[Case]:
    return [Case(r[0], r[1], bool(r[2]) if len(r) > 2 else False, group) for r in rows]


NONE: tuple[Expected, ...] = ()

TABLE: list[Case] = [
    *_rows(
        "offline-stack §5",
        ("she is travelling until the 14th", (until("12-14", blocked=True),)),
        ("I'm away until December 14", (until("12-14", blocked=True),)),
        ("not Tuesday, that's the school run", (exw(1),)),
        ("any morning next week except Wednesday", (rng("12-07", "12-13"), exd("12-09"))),
        ("after the 3rd works", (after("12-03"),)),
        ("I can't do anything before the fifth of January", (after("2027-01-05"),)),
        ("call me back in two weeks", (on("12-14"),)),
        ("my account number is 4729 18", NONE),
        ("the charge on the 12th of November", (on("11-12"),)),
    ),
    *_rows(
        "relative",
        ("nothing before the fifth of January", (after("2027-01-05"),)),
        ("tomorrow works for me", (on("12-01"),)),
        ("can you call me the day after tomorrow", (on("12-02"),)),
        ("next week is best", (rng("12-07", "12-13"),)),
        ("next Tuesday please", (on("12-08"),)),
        ("this Friday", (on("12-04"),)),
        ("sometime this week", (rng("11-30", "12-06"),)),
        ("the week after next", (rng("12-14", "12-20"),)),
        ("in a fortnight", (on("12-14"),)),
        ("in three days", (on("12-03"),)),
        ("call me in a week", (on("12-07"),)),
        ("next month would be better", (rng("12-01", "12-31"),)),
        ("how about this weekend", (rng("12-05", "12-06"),)),
        ("next weekend", (rng("12-12", "12-13"),)),
        ("two weeks from today", (on("12-14"),)),
        ("Wednesday next week", (on("12-09"),)),
        ("on Thursday", (on("12-03"),)),
        ("today is fine", (on("11-30"),)),
        ("in a couple of weeks", (on("12-14"),)),
    ),
    *_rows(
        "bare ordinals and spoken forms",
        ("the 14th", (on("12-14"),)),
        ("the fourteenth", (on("12-14"),)),
        ("the 30th", (on("11-30"),)),
        ("the twenty-first works", (on("12-21"),)),
        ("the 1st", (on("12-01"),)),
        ("the 31st", (on("12-31"),)),
        ("the 29th", (on("12-29"),)),
        ("let's do the third", (on("12-03"),)),
        ("the 15 is good", (on("12-15"),)),
        ("Tuesday the 8th", (on("12-08"),)),
        ("the 5th of next month", (on("12-05"),)),
        ("the twenty first of December", (on("12-21"),)),
    ),
    *_rows(
        "absolute",
        ("December 14", (on("12-14"),)),
        ("14 December", (on("12-14"),)),
        ("Dec 14th", (on("12-14"),)),
        ("January 5th", (on("2027-01-05"),)),
        ("December fourteenth", (on("12-14"),)),
        ("fourteenth of December", (on("12-14"),)),
        # Said on the 30th, a day of this month already gone is a day that happened, not one next year.
        ("the twelfth of November", (on("11-12"),)),
        ("on the 3rd of December, 2026", (on("12-03"),)),
        ("December the 9th", (on("12-09"),)),
        ("February 2nd", (on("2027-02-02"),)),
        ("the 30th of November", (on("11-30"),)),
        ("December twenty-third", (on("12-23"),)),
        ("December fourteen", (on("12-14"),)),
    ),
    *_rows(
        "ranges",
        ("from the 3rd till the 9th", (rng("12-03", "12-09"),)),
        ("between the 10th and the 12th", (rng("12-10", "12-12"),)),
        ("December 3 to 9", (rng("12-03", "12-09"),)),
        ("Monday to Wednesday", (rng("12-07", "12-09"),)),
        ("the 20th through the 23rd", (rng("12-20", "12-23"),)),
        ("I'm away from the 18th to the 27th", (rng("12-18", "12-27", blocked=True),)),
        ("any time in January", (rng("2027-01-01", "2027-01-31"),)),
        ("mid-January would suit", (rng("2027-01-11", "2027-01-20"),)),
        ("I'm on holiday next week", (rng("12-07", "12-13", blocked=True),)),
        ("from the 28th to the 2nd", (rng("12-28", "2027-01-02"),)),
    ),
    *_rows(
        "bounds",
        ("I'm busy until the 10th", (until("12-10", blocked=True),)),
        ("any day until the 18th is fine", (until("12-18"),)),
        ("it has to be before the 10th", (before("12-09"),)),
        ("not before the 8th", (after("12-08"),)),
        ("no later than Friday", (until("12-04"),)),
        ("from the 15th onwards", (after("12-15"),)),
        ("the 14th or later", (after("12-14"),)),
        ("nothing after the 20th", (before("12-20"),)),
        ("I won't be back until the 12th", (after("12-12"),)),
        ("by the 18th please", (until("12-18"),)),
        ("after next week", (after("12-14"),)),
        ("I'm out of the country through December 20th", (until("12-20", blocked=True),)),
        ("I'm working till Thursday", (until("12-03", blocked=True),)),
    ),
    *_rows(
        "negations",
        ("not the 14th", (exd("12-14"),)),
        ("I can't do the 14th", (exd("12-14"),)),
        ("the 9th doesn't work for me", (exd("12-09"),)),
        ("Friday's no good", (exw(4),)),
        ("any day except the 11th", (exd("12-11"),)),
        ("not Tuesday or Wednesday", (exw(1), exw(2))),
        ("no weekends please", (exw(5), exw(6))),
        ("I'm busy on the 7th", (exd("12-07"),)),
        ("not Mondays", (exw(0),)),
        ("next week but not Thursday", (rng("12-07", "12-13"), exd("12-10"))),
        ("I can do the 3rd but not the 4th", (on("12-03"), exd("12-04"))),
        ("I can't do Monday but after the 3rd works", (exw(0), after("12-03"))),
    ),
    *_rows(
        "corrections",
        ("actually, make it Sunday", (on("12-06"),), True),
        ("actually the 16th instead", (on("12-16"),), True),
        ("scratch that, the 15th", (on("12-15"),), True),
        ("change it to next Friday", (on("12-11"),), True),
        ("I'd rather do the 18th", (on("12-18"),), True),
    ),
    *_rows(
        "past",
        ("I was billed on the 3rd", (on("11-03"),)),
        ("I paid on Friday", (on("11-27"),)),
        ("it happened last Tuesday", (on("11-24"),)),
        ("last week", (rng("11-23", "11-29"),)),
    ),
    *_rows(
        "identifiers",
        ("invoice INV-2026-1114", NONE),
        ("card ending 1214", NONE),
        ("order 12 14 55", NONE),
        ("my phone number is 07700 900123", NONE),
        ("call me on 555 0114 22", NONE),
        ("the reference is AB-14-12", NONE),
        ("order number 14", NONE),
        ("account 12 14", NONE),
        ("my card ends in 3012", NONE),
        ("invoice number 20261214", NONE),
        ("my PIN is 1 4 1 2", NONE),
        ("ticket #1214", NONE),
        ("customer ID 30 11", NONE),
        ("policy 2026-12-14", NONE),
        ("it says 12 14 2026 on the form", NONE),
        ("extension 14", NONE),
    ),
    *_rows(
        "not dates",
        ("the first time I called", NONE),
        ("I can do the second one", NONE),
        ("the 3 of us", NONE),
        ("you may call me", NONE),
        ("give me a second", NONE),
        ("on second thought, no", NONE),
    ),
]
