"""Date statements with a subject and a kind: one test per failure class of the date guard.

Each class is tested with more than the sentence that exposed it, so a rule that fits only its
example fails here; the labelled evaluation (`voice-agent eval dates`) measures the classes at scale.
"""

from __future__ import annotations

from datetime import date

import pytest

from tests.fakes.lanes import lane
from voice_agent.core.dates import DateSubject, StatementKind, read_statements
from voice_agent.core.dates.binding import DateBinding
from voice_agent.core.guards.date_guard import DateGuard, DateVerdict
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

REFERENCE = date(2026, 12, 1)  # a Tuesday
HOTEL = ToolSpec("book_hotel", "", (ToolParam("check_out_date", "", kind=ParamKind.DATE),))




def callback(day: str, transcript: TranscriptLane) -> tuple[DateVerdict, list[int]]:
    (check,) = DateGuard(REFERENCE).check(SCHEDULE_CALLBACK, {"account_id": "A", "date": day}, transcript)
    return check.verdict, [c.turn for c in check.citations]


@pytest.mark.parametrize(
    "text",
    [
        "please make sure I'm not billed twice again next month",
        "how come the fee rose this month",
        "The price went up at the start of the month without any warning.",
        "Every Monday I get a text saying my balance is low.",
    ],
)
def test_small_talk_with_month_words_neither_blocks_nor_agrees(text: str) -> None:
    statements = read_statements(text, REFERENCE)
    assert all(s.subject in (DateSubject.CHARGE_PERIOD, DateSubject.NONE) for s in statements)
    t = lane(("caller", text), ("agent", "I can book a callback for the 8th."), ("caller", "Hmm."))
    verdict, _ = callback("2026-12-08", t)
    assert verdict is DateVerdict.UNCONFIRMED  # neither a conflict nor an "ok" citing the small talk


@pytest.mark.parametrize(
    "text, day",
    [
        ("I'm flying to Denver on the 3rd.", "2026-12-03"),
        ("I'll be in Boston on Friday.", "2026-12-04"),
        ("I'm off to Lisbon on the 9th but I'll have my phone.", "2026-12-09"),
    ],
)
def test_an_event_date_is_a_trip_not_a_blocked_day(text: str, day: str) -> None:
    (statement,) = read_statements(text, REFERENCE)
    assert (statement.subject, statement.kind) == (DateSubject.TRIP, StatementKind.EVENT)
    verdict, _ = callback(day, lane(("caller", text), ("caller", f"Call me on {day}, please.")))
    assert verdict is not DateVerdict.CONFLICT


def test_a_trip_that_cuts_the_caller_off_is_availability() -> None:
    for text in ("I'm travelling until the 14th.", "I'm at my daughter's till Sunday and there's no signal there."):
        statements = read_statements(text, REFERENCE)
        assert statements and statements[0].subject is DateSubject.AVAILABILITY, text
    verdict, cites = callback("2026-12-10", lane(("caller", "I'm travelling until the 14th."), ("caller", "The 10th.")))
    assert verdict is DateVerdict.CONFLICT and cites == [1]


@pytest.mark.parametrize(
    "first, correction, old, new",
    [
        ("Call me back on the 8th.", "Could you move it to the 9th?", "2026-12-08", "2026-12-09"),
        ("The 3rd of May works.", "No, the 6th of May.", "2027-05-03", "2027-05-06"),
        ("Call me on Thursday.", "Sorry, make it the 5th instead.", "2026-12-03", "2026-12-05"),
        ("Ring me on the 10th.", "no no the fifteenth not the fifth", "2026-12-10", "2026-12-15"),
    ],
)
def test_corrections_replace_the_old_date(first: str, correction: str, old: str, new: str) -> None:
    t = lane(("caller", first), ("agent", "Noted."), ("caller", correction))
    assert callback(old, t)[0] in (DateVerdict.SUPERSEDED, DateVerdict.CONFLICT)
    verdict, cites = callback(new, t)
    assert verdict is DateVerdict.OK and cites[0] == 2


@pytest.mark.parametrize(
    "text, blocked, allowed",
    [
        ("don't call me until after the 14th", "2026-12-14", "2026-12-15"),
        ("not till after the 14th please", "2026-12-10", "2026-12-15"),
        ("No sooner than the 9th.", "2026-12-08", "2026-12-09"),
        ("Not on or before the 4th.", "2026-12-04", "2026-12-07"),
        ("Any time except the week of the 7th.", "2026-12-09", "2026-12-15"),
    ],
)
def test_compound_cues_read_forwards(text: str, blocked: str, allowed: str) -> None:
    t = lane(("caller", text), ("agent", "When then?"), ("caller", "You pick."))
    assert callback(blocked, t)[0] is DateVerdict.CONFLICT
    assert callback(allowed, t)[0] is not DateVerdict.CONFLICT


@pytest.mark.parametrize(
    "text",
    ["I need the van till the 8th.", "We have the cottage until the 3rd.", "I'll let you know by Monday.",
     "Please have the credit applied by the 20th."],
)
def test_a_limit_about_another_subject_does_not_bind_a_callback(text: str) -> None:
    t = lane(("caller", text), ("agent", "When shall we call?"), ("caller", "Call me on the 22nd."))
    verdict, cites = callback("2026-12-22", t)
    assert verdict is DateVerdict.OK and cites == [2]


def test_a_car_limit_does_not_bind_a_hotel_check_out_but_a_hotel_limit_does() -> None:
    t = lane(("caller", "I need the van till the 8th."), ("caller", "Check out on the 10th, please."))
    (check,) = DateGuard(REFERENCE).check(HOTEL, {"check_out_date": "2026-12-10"}, t)
    assert check.verdict is DateVerdict.OK
    t2 = lane(("caller", "We need the room until the 8th."), ("caller", "Check out on the 10th, please."))
    (check2,) = DateGuard(REFERENCE).check(HOTEL, {"check_out_date": "2026-12-10"}, t2)
    assert check2.verdict is DateVerdict.CONFLICT


def test_a_proposal_not_yet_agreed_is_unconfirmed_and_agreement_cites_the_caller() -> None:
    """The rule: a date the agent proposed counts once the caller's next words agree to it."""
    asked = lane(("caller", "Not before the 14th."), ("agent", "I can book a callback for Tuesday the 15th."))
    assert callback("2026-12-15", asked)[0] is DateVerdict.UNCONFIRMED
    agreed = lane(("caller", "Not before the 14th."), ("agent", "I can book a callback for Tuesday the 15th."),
                  ("caller", "Yes, that works."))
    verdict, cites = callback("2026-12-15", agreed)
    assert verdict is DateVerdict.OK
    assert 2 in cites and 1 in cites  # the agreement, and the limit it meets


def test_binding_comes_from_the_tool_spec() -> None:
    param = SCHEDULE_CALLBACK.param("date")
    assert param is not None
    binding = DateBinding.for_param(SCHEDULE_CALLBACK.name, param.name, param.binds, param.topic)
    assert binding.subjects == (DateSubject.AVAILABILITY,) and binding.topic == "callback"
    assert DateBinding.for_param("reserve_car", "dropoff_date").topic == "car"
    assert DateBinding.for_param("reserve_car", "dropoff_date").role == "end"


@pytest.mark.parametrize("text", ["i cant take calls on wednesdays", "im away til the 9 th"])
def test_asr_forms(text: str) -> None:
    statements = read_statements(text, REFERENCE)
    assert statements and statements[0].subject is DateSubject.AVAILABILITY
    assert statements[0].kind is StatementKind.CONSTRAINT


def test_a_weekday_rule_taken_back_no_longer_binds() -> None:
    t = lane(("caller", "Fridays are no good for me, that's my dialysis day."), ("agent", "Noted."),
             ("caller", "Sorry, I got that wrong earlier, Fridays are OK, it's Tuesdays that are bad."),
             ("caller", "Can you do Friday the 11th?"))
    assert callback("2026-12-11", t)[0] is DateVerdict.OK
    assert callback("2026-12-08", t)[0] is DateVerdict.CONFLICT  # a Tuesday


def test_an_agreed_date_then_corrected_is_superseded() -> None:
    t = lane(("agent", "I can book a callback for Thursday the 10th."), ("caller", "Yep."),
             ("agent", "Done."), ("caller", "Oh wait, scratch that, the 11th is better for me."))
    assert callback("2026-12-10", t)[0] is DateVerdict.SUPERSEDED
    assert callback("2026-12-11", t)[0] is DateVerdict.OK


@pytest.mark.parametrize("reply", ["That's right.", "OK, book it.", "uh yeah that should be fine", "Perfect."])
def test_a_readback_confirmed_is_agreement(reply: str) -> None:
    t = lane(("caller", "Not before the 9th."), ("agent", "So that's a callback on Thursday the 10th, is that right?"),
             ("caller", reply))
    assert callback("2026-12-10", t)[0] is DateVerdict.OK


@pytest.mark.parametrize(
    "text, inside, outside",
    [
        ("Heads up, I'm not around until March the eighth, I'm camping with no signal.", "2027-03-03", "2027-03-09"),
        ("Actually I'm going to be away longer, until September the eighth.", "2027-09-04", "2027-09-09"),
        ("It'll need to be before the 15th, we're on a cruise from then.", "2026-12-16", "2026-12-10"),
    ],
)
def test_limits_whose_reason_or_cue_sits_in_another_clause(text: str, inside: str, outside: str) -> None:
    t = lane(("caller", text), ("agent", "When shall we call?"), ("caller", "You choose."))
    assert callback(inside, t)[0] is DateVerdict.CONFLICT
    assert callback(outside, t)[0] is not DateVerdict.CONFLICT


def test_a_window_the_caller_says_it_has_to_be_binds_after_a_new_day() -> None:
    t = lane(("caller", "It'll have to be the week of the 7th, that's the only time I'm home."),
             ("agent", "Noted."), ("caller", "Actually, the 9th is better for me."))
    assert callback("2026-12-16", t)[0] is DateVerdict.CONFLICT
    assert callback("2026-12-09", t)[0] is DateVerdict.OK
