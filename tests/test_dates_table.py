"""The date-constraint table (:mod:`voice_agent.harness.evaluation.date_table`): every row, and the engine's details."""

from __future__ import annotations

from datetime import date

import pytest

from voice_agent.core.dates import DateConstraint, extract_constraints, resolve_corrections
from voice_agent.harness.evaluation.date_table import REFERENCE, TABLE, Case, Expected


def _shape(c: DateConstraint) -> Expected:
    return (c.kind, c.start, c.end, c.weekday, c.blocked)


def _correct(case: Case) -> bool:
    got = extract_constraints(case.text, REFERENCE)
    if tuple(_shape(c) for c in got) != case.expected:
        return False
    return all(c.correction == case.correction for c in got)


def test_table_size_and_coverage() -> None:
    assert len(TABLE) >= 85
    assert len({c.text for c in TABLE}) == len(TABLE)
    assert sum(1 for c in TABLE if c.group == "identifiers" or "number" in c.text) >= 12


@pytest.mark.parametrize("case", TABLE, ids=[c.text for c in TABLE])
def test_row(case: Case) -> None:
    got = extract_constraints(case.text, REFERENCE)
    assert [_shape(c) for c in got] == list(case.expected)
    assert all(c.correction == case.correction for c in got)
    assert all(c.text for c in got)


def test_overall_accuracy_is_total() -> None:
    correct = sum(_correct(case) for case in TABLE)
    assert correct / len(TABLE) == 1.0, [c.text for c in TABLE if not _correct(c)]


def test_text_is_the_callers_words_and_json_is_iso() -> None:
    (c,) = extract_constraints("Well, she is travelling until the fourteenth. Call me then.", REFERENCE)
    assert c.text == "Well, she is travelling until the fourteenth"
    assert c.to_json() == {
        "kind": "until",
        "start": None,
        "end": "2026-12-14",
        "weekday": None,
        "text": "Well, she is travelling until the fourteenth",
        "purpose": None,
        "blocked": True,
        "correction": False,
        "subject": "availability",
        "statement": "constraint",
        "topic": None,
        "role": None,
    }


def test_polarity_of_until() -> None:
    (away,) = extract_constraints("I'm away until the 14th", REFERENCE)
    (free,) = extract_constraints("any day until the 14th works", REFERENCE)
    assert not away.allows(date(2026, 12, 14)) and away.allows(date(2026, 12, 15))
    assert free.allows(date(2026, 12, 14)) and not free.allows(date(2026, 12, 15))


def test_purpose_is_read() -> None:
    (c,) = extract_constraints("can you call me back on the 14th", REFERENCE)
    assert c.purpose == "callback"


def test_resolution_uses_the_reference_not_the_clock() -> None:
    (c,) = extract_constraints("the 14th", date(2031, 3, 20))
    assert c.start == date(2031, 4, 14)


def test_resolve_corrections_replaces_same_purpose_only() -> None:
    standing = resolve_corrections(
        [
            (1, "please deliver it on the 14th"),
            (2, "and call me back on Saturday"),
            (4, "actually, make the callback Sunday"),
        ],
        REFERENCE,
    )
    assert [(turn, c.purpose, c.start) for turn, c in standing] == [
        (1, "delivery", date(2026, 12, 14)),
        (4, "callback", date(2026, 12, 6)),
    ]
