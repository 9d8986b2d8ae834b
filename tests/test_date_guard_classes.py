"""Failure classes of the date guard found on generated calls and SGD dialogues it was not tuned on.

Each test is one class (not one sentence): the reading that went wrong, and the verdict it caused.
"""

from __future__ import annotations

from datetime import date

import pytest

from tests.fakes.lanes import lane
from voice_agent.core.dates import ConstraintKind, DateSubject, extract_constraints
from voice_agent.core.guards.date_guard import DateGuard, DateVerdict
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane

REFERENCE = date(2026, 11, 30)  # a Monday
SCHEDULE = ToolSpec("schedule_callback", "", (ToolParam("date", "d", kind=ParamKind.DATE),), mutates=True)
RESERVE_CAR = ToolSpec(
    "reserve_car", "",
    (ToolParam("pickup_date", "p", kind=ParamKind.DATE), ToolParam("dropoff_date", "d", kind=ParamKind.DATE)),
    mutates=True,
)
BUY_BUS_TICKET = ToolSpec("buy_bus_ticket", "", (ToolParam("leaving_date", "l", kind=ParamKind.DATE),), mutates=True)




def verdict(transcript: TranscriptLane, value: str, spec: ToolSpec = SCHEDULE, param: str = "date") -> DateVerdict:
    args = {p.name: value if p.name == param else "2026-12-31" for p in spec.params}
    checks = DateGuard(REFERENCE).check(spec, args, transcript)
    return next(c for c in checks if c.argument == param).verdict


def kinds(text: str) -> list[tuple[ConstraintKind, date | None, date | None, bool]]:
    return [(c.kind, c.start, c.end, c.blocked) for c in extract_constraints(text, REFERENCE)]


@pytest.mark.parametrize(
    "text",
    [
        "any day before the 9th works, after that I'm away for a month",
        "any day before the 9th works after that i'm away for a month",
        "it'll need to be before the 9th i'm camping up north with no signal from then",
        "sometime before the 9 th of december after that im travelling and cant take calls",
    ],
)
def test_what_follows_after_that_is_about_the_days_beyond_the_date(text: str) -> None:
    assert kinds(text) == [(ConstraintKind.BEFORE, None, date(2026, 12, 8), False)]
    t = lane(("caller", text), ("agent", "How about the 10th?"), ("caller", "yes that's fine"))
    assert verdict(t, "2026-12-10") is DateVerdict.CONFLICT


def test_only_that_week_with_away_either_side_is_the_window_not_a_blocked_week() -> None:
    text = "only the week of the 14th works for me, i'm away either side of it"
    assert kinds(text) == [(ConstraintKind.RANGE, date(2026, 12, 14), date(2026, 12, 20), False)]
    assert verdict(lane(("caller", text)), "2026-12-23") is DateVerdict.CONFLICT


def test_a_month_said_on_both_ends_of_a_range_is_one_range() -> None:
    assert kinds("i'm only free from december 6th till the 19th of december") == [
        (ConstraintKind.RANGE, date(2026, 12, 6), date(2026, 12, 19), False)
    ]


@pytest.mark.parametrize("text", ["Not any earlier than next week on Saturday", "no earlier than Saturday next week"])
def test_a_weekday_of_a_named_week_is_one_day(text: str) -> None:
    assert kinds(text) == [(ConstraintKind.AFTER, date(2026, 12, 12), None, False)]


def test_avoid_the_whole_of_a_week_rules_it_out() -> None:
    assert kinds("Avoid the whole of next week if you can") == [
        (ConstraintKind.RANGE, date(2026, 12, 7), date(2026, 12, 13), True)
    ]


def test_a_limit_said_with_now_after_it_is_read() -> None:
    t = lane(
        ("caller", "I'm away until the 1st"),
        ("caller", "Bad news, my trip got extended, I'm away until the 7th now."),
    )
    assert verdict(t, "2026-12-05") is DateVerdict.CONFLICT


def test_one_day_said_straight_after_another_corrects_it() -> None:
    text = "uh hang on not the 31st the twenty-fifth"
    assert [(c.kind, c.start) for c in extract_constraints(text, REFERENCE)] == [
        (ConstraintKind.EXCLUDE_DATE, date(2026, 12, 31)),
        (ConstraintKind.ON, date(2026, 12, 25)),
    ]
    assert verdict(lane(("caller", text)), "2026-12-31") is DateVerdict.CONFLICT
    assert verdict(lane(("caller", text)), "2026-12-25") is DateVerdict.OK


def test_the_day_an_alternative_replaces_does_not_lift_a_day_ruled_out_before() -> None:
    t = lane(
        ("caller", "Anything but Tuesday the 15th, I'm moving house that day."),
        ("agent", "How about the 18th?"),
        ("caller", "sorry could we do December 21st rather than the 18th"),
    )
    assert verdict(t, "2026-12-15") is DateVerdict.CONFLICT
    assert verdict(t, "2026-12-21") is DateVerdict.OK


def test_a_new_earliest_day_moves_an_away_until_limit() -> None:
    t = lane(
        ("caller", "I'm travelling for work until the 20th and I can't take calls."),
        ("caller", "Good news, I'm back early, so anything after Thursday the 10th is fine now."),
        ("agent", "Would the 14th suit you?"),
        ("caller", "yes that works"),
    )
    assert verdict(t, "2026-12-14") is DateVerdict.OK
    assert verdict(t, "2026-12-08") is DateVerdict.CONFLICT


def test_an_agent_line_that_asks_nothing_gives_the_next_day_no_topic() -> None:
    t = lane(
        ("caller", "Can someone call me back about it?"),
        ("agent", "Would Monday, December 7th suit you?"),
        ("caller", "yes that works"),
        ("agent", "That's the router rental. It was added on the October invoice."),
        ("caller", "Actually can you make that Thursday next week instead"),
    )
    assert verdict(t, "2026-12-10") is DateVerdict.OK
    assert verdict(t, "2026-12-07") is DateVerdict.SUPERSEDED


def test_the_agent_offering_to_have_someone_call_you_is_a_callback_proposal() -> None:
    t = lane(
        ("caller", "So will somebody call me?"),
        ("agent", "I can book a specialist to call you on the 3rd of December. Does that work?"),
        ("caller", "OK book it"),
    )
    assert verdict(t, "2026-12-03") is DateVerdict.OK


def test_returning_a_booked_thing_is_its_end_day_not_a_deadline() -> None:
    (c,) = extract_constraints("Yes, sounds good. I will return the car on December 12th,", REFERENCE)
    assert c.subject is DateSubject.BOOKING and c.role == "end"
    (letter,) = extract_constraints("I'll return the form by the 12th", REFERENCE)
    assert letter.subject is DateSubject.DEADLINE
    t = lane(
        ("caller", "I need a car, picking it up on the 10th."),
        ("caller", "Yes, sounds good. I will return the car on December 12th,"),
    )
    assert verdict(t, "2026-12-12", RESERVE_CAR, "dropoff_date") is DateVerdict.OK


def test_needing_it_until_a_day_moves_the_drop_off() -> None:
    t = lane(
        ("agent", "What date would you like to return the car?"),
        ("caller", "I'd like to return it on the 9th of December."),
        ("caller", "Is there anything else? I would like a compact and will actually need it until December 10th."),
    )
    assert verdict(t, "2026-12-09", RESERVE_CAR, "dropoff_date") is DateVerdict.SUPERSEDED
    assert verdict(t, "2026-12-10", RESERVE_CAR, "dropoff_date") is DateVerdict.OK


def test_a_later_day_for_the_end_a_parameter_books_replaces_the_trip_day() -> None:
    t = lane(
        ("caller", "I am planning a trip to San Diego next Monday."),
        ("agent", "You'd like 1 ticket on December 7th."),
        ("caller", "I'm sorry, I need to leave tomorrow."),
    )
    assert verdict(t, "2026-12-07", BUY_BUS_TICKET, "leaving_date") is DateVerdict.SUPERSEDED
    assert verdict(t, "2026-12-01", BUY_BUS_TICKET, "leaving_date") is DateVerdict.OK


def test_a_bare_day_for_the_other_end_does_not_replace_this_one() -> None:
    """'I leave the day after tomorrow' ... 'On the 14th please' (answering when they come back)."""
    t = lane(
        ("caller", "I'm leaving the day after tomorrow."),
        ("agent", "When do you want to get back?"),
        ("caller", "On the 14th please."),
    )
    assert verdict(t, "2026-12-02", BUY_BUS_TICKET, "leaving_date") is DateVerdict.OK


# --- counter-examples from review: the fixes above must not overreach ---------------------------------------------


@pytest.mark.parametrize(
    "turns",
    [
        (("caller", "Please call me on the 3rd."), ("caller", "Can you also call me on the 16th?")),
        (("caller", "Call me on the 3rd."), ("caller", "Or the 4th works too.")),
        (("caller", "Could you call me on the 3rd?"), ("caller", "If not, the 5th.")),
        (("caller", "Please call me on the 3rd."), ("agent", "And is there a backup day?"), ("caller", "The 5th.")),
        (("caller", "Call me on the 3rd."), ("caller", "Oh wait, I'm also free on the 5th.")),
    ],
)
def test_a_second_day_offered_as_another_option_replaces_nothing(turns: tuple[tuple[str, str], ...]) -> None:
    assert verdict(lane(*turns), "2026-12-03") is DateVerdict.OK


def test_a_week_said_before_a_weekday_without_on_stays_a_week() -> None:
    t = lane(("caller", "im away next week friday works though"), ("agent", "How about Tuesday the 8th?"),
             ("caller", "yeah ok"))
    assert verdict(t, "2026-12-08") is DateVerdict.CONFLICT


def test_a_limit_added_without_a_cue_leaves_the_stricter_one_standing() -> None:
    t = lane(
        ("caller", "Don't call before the 10th, I'm at a conference."),
        ("caller", "Oh, and I'm on holiday until the 5th as well, just so you know."),
        ("agent", "Would the 7th work?"),
        ("caller", "sure"),
    )
    assert verdict(t, "2026-12-07") is DateVerdict.CONFLICT


@pytest.mark.parametrize(
    "text", ["I'll let you know by the end of next week.", "I'll return the modem by the 12th."]
)
def test_the_callers_own_errands_stay_deadlines(text: str) -> None:
    assert {c.subject for c in extract_constraints(text, REFERENCE)} == {DateSubject.DEADLINE}


def test_an_agent_request_for_the_return_day_gives_the_answer_its_end() -> None:
    t = lane(("caller", "I need a car from the 10th."), ("agent", "Please tell me the day you will return it."),
             ("caller", "The 14th."))
    assert verdict(t, "2026-12-14", RESERVE_CAR, "pickup_date") is not DateVerdict.OK


def test_choosing_an_option_now_is_not_a_date() -> None:
    assert extract_constraints("I'll take the second now, thanks.", REFERENCE) == []
    t = lane(("caller", "Please call me on the 14th."), ("caller", "Okay the first now please."))
    assert verdict(t, "2026-12-14") is DateVerdict.OK


def test_a_corrected_exclusion_is_lifted_even_with_a_new_day_in_the_same_breath() -> None:
    t = lane(
        ("caller", "I can't do the 15th."),
        ("caller", "Sorry, I meant I can't do the 16th. Call me on the 18th instead."),
    )
    assert verdict(t, "2026-12-15") is not DateVerdict.CONFLICT
    assert verdict(t, "2026-12-16") is DateVerdict.CONFLICT


def test_a_window_with_away_otherwise_is_the_only_window() -> None:
    t = lane(
        ("caller", "Sometime between the 9th and the 17th would suit me, I'm away otherwise."),
        ("agent", "The first slot I have is the 14th. Would that be OK?"),
        ("caller", "What about the 18th instead?"),
    )
    assert verdict(t, "2026-12-21") is DateVerdict.CONFLICT
