"""Properties: identifier-shaped digit runs never become dates; the date guard never edits the lane."""

from __future__ import annotations

from datetime import date

from hypothesis import given, settings
from hypothesis import strategies as st

from voice_agent.core.dates import extract_constraints
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane

REFERENCE = date(2026, 11, 30)
SCHEDULE = ToolSpec("schedule_callback", "", (ToolParam("date", "d", kind=ParamKind.DATE),), mutates=True)

digits = st.text("0123456789", min_size=1, max_size=8)
four = st.text("0123456789", min_size=4, max_size=4)
groups = st.lists(st.text("0123456789", min_size=1, max_size=5), min_size=3, max_size=10)
separator = st.sampled_from([" ", "-", " - ", "  "])


@st.composite
def digit_runs(draw: st.DrawFn) -> str:
    parts = draw(groups)
    return "".join(p + (draw(separator) if i < len(parts) - 1 else "") for i, p in enumerate(parts))


@st.composite
def identifier_sentences(draw: st.DrawFn) -> str:
    template = draw(
        st.sampled_from(
            [
                "my account number is {digits}",
                "my account number is {digits} {digits}",
                "order {d1} {d2}",
                "order number {d1} {d2}",
                "card ending {four}",
                "the card ends in {four}",
                "invoice INV-{four}-{four}",
                "invoice number {digits}",
                "my phone number is {run}",
                "{run}",
                "it's {run}, I think",
                "reference {run} please",
            ]
        )
    )
    return template.format(
        digits=draw(digits), d1=draw(digits), d2=draw(digits), four=draw(four), run=draw(digit_runs())
    )


@settings(max_examples=400, deadline=None)
@given(identifier_sentences())
def test_identifier_digit_runs_never_yield_a_constraint(text: str) -> None:
    assert extract_constraints(text, REFERENCE) == []


callers = st.sampled_from(
    [
        "I'm travelling until the 14th",
        "not Tuesday",
        "actually, make it Sunday",
        "my account number is 4729 18",
        "any morning next week except Wednesday",
        "yes",
        "the 3rd works",
    ]
)
agents = st.sampled_from(["How about the 10th?", "Shall I call on Thursday?", "Noted.", "Anything else?"])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.one_of(callers, agents)), max_size=12),
    st.one_of(st.dates(date(2026, 11, 1), date(2027, 3, 1)).map(date.isoformat), st.text(max_size=12)),
)
def test_date_guard_never_modifies_the_lane(turns: list[tuple[bool, str]], value: str) -> None:
    lane = TranscriptLane()
    for turn, (is_caller, text) in enumerate(turns, start=1):
        (lane.append_caller if is_caller else lane.append_agent)(turn, text)
    before = lane.entries
    guard = DateGuard(REFERENCE)
    checks = guard.check(SCHEDULE, {"date": value}, lane)
    assert len(checks) == 1
    assert checks[0].accepted or checks[0].citations
    assert lane.entries == before and all(a is b for a, b in zip(lane.entries, before, strict=True))
