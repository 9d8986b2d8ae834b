"""The date contract: run, confirm or refuse, by failure class (examples written here, not from any eval set).

Each class is a kind of wording the cue-word rules have misread; the contract must never *run* a day the
caller ruled out or replaced, whatever the rules read, and must run a day the caller firmly asked for last.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import pytest

from voice_agent.core.dates.reading import (
    INSTRUCTIONS,
    READING_SCHEMA,
    DateReading,
    ModelDateReader,
    ReadingStatus,
    verify,
)
from voice_agent.core.guards.date_contract import DateAction, DateContract, Why, readback_line, spoken_date
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

TODAY = dt.date(2026, 11, 18)  # a Wednesday


def lane(*lines: tuple[str, str]) -> TranscriptLane:
    return TranscriptLane.of_lines(("caller" if who == "c" else "agent", text) for who, text in lines)


def decide(transcript: TranscriptLane, day: dt.date, reading: DateReading | None = None) -> Any:
    (decision,) = DateContract(DateGuard(TODAY)).decide(
        SCHEDULE_CALLBACK, {"account_id": "ACC-1234-56", "date": day.isoformat()}, transcript, reading)
    return decision


def asked_for_a_day(said: str, answer: str) -> TranscriptLane:
    """The caller says ``said``; the agent asks which day; the caller answers ``answer``."""
    return lane(("c", said), ("a", "Which day would you like the callback?"), ("c", answer))


def d(month: int, day: int) -> dt.date:
    return dt.date(2026 if month >= 11 else 2027, month, day)


def test_a_day_asked_for_last_runs_and_cites_the_caller() -> None:
    call = lane(("a", "Which day would suit you for a callback?"), ("c", "Thursday the 26th please"))
    decision = decide(call, d(11, 26))
    assert decision.action is DateAction.RUN and decision.why is Why.ASKED_LAST
    assert decision.citations[0].words == "Thursday the 26th please"


def test_a_yes_to_the_agents_proposal_runs_a_bare_yes_to_nothing_does_not() -> None:
    proposed = lane(("c", "can someone ring me back"), ("a", "I can book a callback for Friday 27 November. OK?"),
                    ("c", "yes please"))
    assert decide(proposed, d(11, 27)).action is DateAction.RUN
    assert decide(proposed, d(11, 26)).action is not DateAction.RUN
    assert decide(lane(("c", "yes please")), d(11, 27)).action is DateAction.CONFIRM


@pytest.mark.parametrize("day", [d(11, 19), d(11, 20), d(11, 24)])
def test_absence_read_as_a_window_never_runs_inside_it(day: dt.date) -> None:
    # class: an absence ("on nights till the 24th, days I sleep") the rules may read as when the caller is free
    call = lane(("c", "I'm stuck on a block of nights till the 24th so days are when I sleep"),
                ("a", "I can book a callback for " + spoken_date(day) + ". Would that be alright?"),
                ("c", "hmm, maybe"))
    assert decide(call, day).action is not DateAction.RUN


def test_ruled_out_days_named_in_a_list_never_run_even_when_the_model_books_them() -> None:
    call = lane(("c", "Thursday and Friday this week are no use to me at all"), ("a", "OK, noted."),
                ("c", "so can you get someone to ring me"))
    for day in (d(11, 19), d(11, 20)):
        assert decide(call, day).action is not DateAction.RUN


def test_a_correction_that_names_the_rejected_day_never_runs_it_and_the_read_back_yes_runs_the_new_one() -> None:
    said = ("c", "the 3rd, oh wait, the 3rd is the kids' nativity, go for the 4th instead")
    first = lane(said)
    assert decide(first, d(12, 3)).action is not DateAction.RUN
    asked = decide(first, d(12, 4))
    assert asked.action is DateAction.CONFIRM and asked.readback.endswith("Friday 4 December?")
    confirmed = lane(said, ("a", asked.readback), ("c", "yes that's right"))
    assert decide(confirmed, d(12, 4)).action is DateAction.RUN
    assert decide(confirmed, d(12, 3)).action is not DateAction.RUN


def test_a_period_without_a_day_number_is_read_back_before_any_day_runs() -> None:
    call = lane(("c", "honestly nothing until the school holidays are over"),
                ("a", "I can book a callback for Monday 23 November. Does that work?"), ("c", "what"))
    decision = decide(call, d(11, 23))
    assert decision.action is DateAction.CONFIRM
    assert "nothing until the school holidays are over" in decision.readback


def test_an_event_with_a_duration_is_cited_in_the_confirmation() -> None:
    call = lane(("c", "my father-in-law arrives on the 7th and that's the whole week gone"),
                ("a", "Would the 9th suit for a callback?"), ("c", "erm, I suppose the 9th could work?"))
    decision = decide(call, d(12, 9))
    assert decision.action is DateAction.CONFIRM
    assert any("father-in-law" in c.words for c in decision.citations)


def test_dates_about_other_things_do_not_stop_a_clear_request() -> None:
    call = lane(("c", "the bill dated the 1st of November had it on twice"), ("a", "I see."),
                ("c", "I rang you about it on the 14th as well"), ("a", "Sorry about that. When suits for a call?"),
                ("c", "Tuesday the 24th is good"))
    assert decide(call, d(11, 24)).action is DateAction.RUN


def test_a_cue_word_said_later_does_not_lift_an_earlier_exclusion() -> None:
    call = lane(("c", "any day but a Tuesday, that's my dialysis"), ("a", "Noted."),
                ("c", "and ring me to check it's actually sorted would you"))
    assert decide(call, d(11, 24)).action is not DateAction.RUN  # a Tuesday


def test_until_keeps_the_named_day_out() -> None:
    call = lane(("c", "I'm in Lanzarote until the 28th"), ("a", "When would you like the callback?"),
                ("c", "erm whenever"))
    assert decide(call, d(11, 28)).action is not DateAction.RUN


def test_a_replaced_day_is_refused_with_the_correction_cited() -> None:
    call = lane(("c", "call me on the 24th"), ("a", "I can book a callback for Tuesday 24 November. OK?"),
                ("c", "actually no, make it the 25th"))
    decision = decide(call, d(11, 24))
    assert decision.action is DateAction.REFUSE and decision.why is Why.BREAKS
    assert any("make it the 25th" in c.words for c in decision.citations)


def test_anything_said_about_dates_after_the_yes_turns_a_run_into_a_question() -> None:
    call = lane(("a", "When suits?"), ("c", "Monday the 23rd please"), ("a", "Lovely."),
                ("c", "oh hang on, is that the week my sister visits"))
    decision = decide(call, d(11, 23))
    assert decision.action is DateAction.CONFIRM and decision.why is Why.SAID_MORE


def test_a_no_to_the_read_back_never_runs() -> None:
    said = ("c", "not before the 1st of December please")
    asked = decide(lane(said, ("a", "When suits?"), ("c", "the 2nd I guess")), d(12, 2))
    assert asked.action is DateAction.CONFIRM
    refused = lane(said, ("a", "When suits?"), ("c", "the 2nd I guess"), ("a", asked.readback), ("c", "no, sorry"))
    assert decide(refused, d(12, 2)).action is not DateAction.RUN


def test_a_malformed_date_is_refused() -> None:
    (decision,) = DateContract(DateGuard(TODAY)).decide(SCHEDULE_CALLBACK, {"date": "next tuesday"}, lane())
    assert decision.action is DateAction.REFUSE and decision.why is Why.NOT_A_DATE


def test_the_result_the_model_reads_says_what_to_do() -> None:
    decision = decide(lane(("c", "any time next week")), d(11, 24))
    body = decision.result()
    assert body["status"] == "confirm" and body["verdict"] == "confirm" and body["say"] == decision.readback
    assert json.dumps(body)  # plain JSON for the tool result


def test_readback_line_quotes_verbatim_and_names_the_day() -> None:
    line = readback_line(d(11, 26), ["I'm away till the 20th"])
    assert '"I\'m away till the 20th"' in line and "Thursday 26 November" in line


# -- the model reader ---------------------------------------------------------------------------------------------


def reply(*statements: dict[str, Any]) -> str:
    return json.dumps({"statements": list(statements)})


def test_quotes_not_in_the_transcript_are_dropped_and_counted() -> None:
    call = lane(("c", "I'm in hospital from the 8th for a few days"))
    text = reply({"turn": 1, "quote": "in hospital from the 8th", "about": "callback", "polarity": "unavailable",
                  "when": ["from the 8th"]},
                 {"turn": 1, "quote": "I will be away all December", "about": "callback", "polarity": "unavailable",
                  "when": ["all December"]})
    reading = verify(text, call.entries, TODAY)
    assert reading.ok and reading.quotes == 2 and reading.dropped == 1
    assert [s.quote for s in reading.statements] == ["in hospital from the 8th"]


def test_a_reply_that_is_not_the_json_asked_for_is_a_failed_reading() -> None:
    assert verify("sure! the caller is away", lane().entries, TODAY).status is ReadingStatus.FAILED


def test_readers_that_disagree_mean_confirm() -> None:
    # The rules read nothing binding in an unusual wording; the model quotes it and says the day is out.
    call = lane(("c", "the 26th is my mum's op so that one's a write-off really"), ("a", "When suits?"),
                ("c", "the 26th then, sure"))
    rules_only = decide(call, d(11, 26))
    reading = verify(reply({"turn": 1, "quote": "the 26th is my mum's op", "about": "callback",
                            "polarity": "unavailable", "when": ["the 26th"]}), call.entries, TODAY)
    with_model = decide(call, d(11, 26), reading)
    assert with_model.action is not DateAction.RUN
    if rules_only.action is DateAction.RUN:
        assert with_model.why is Why.READERS_DISAGREE


def test_a_failed_model_means_confirm_whenever_something_could_bind() -> None:
    call = lane(("c", "I'm away the week of the 30th"), ("a", "When suits?"), ("c", "Friday the 27th please"))
    assert decide(call, d(11, 27)).action is DateAction.RUN
    failed = DateReading(ReadingStatus.TIMEOUT, error="no reply within 8 s")
    decision = decide(call, d(11, 27), failed)
    assert decision.action is DateAction.CONFIRM and decision.why is Why.MODEL_FAILED
    # nothing that could bind: a failed model changes nothing
    plain = lane(("a", "When suits?"), ("c", "Friday the 27th please"))
    assert decide(plain, d(11, 27), failed).action is DateAction.RUN


async def test_the_model_reader_sends_the_schema_and_survives_errors_and_timeouts() -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    async def complete(instructions: str, user: str, schema: dict[str, Any]) -> str:
        seen.append((instructions, user, schema))
        return reply()

    call = lane(("c", "hello there"), ("a", "Would Monday suit for a callback?"), ("c", "yes"),
                ("c", "my mum is staying till the 30th"))
    reading = await ModelDateReader(complete).read(call.entries, TODAY)
    assert reading.ok and seen[0][0] == INSTRUCTIONS and seen[0][2] is READING_SCHEMA
    # Only what could be about when reaches the model: no "hello there", but the yes with its question.
    assert "hello there" not in seen[0][1]
    assert "AGENT: Would Monday suit for a callback?\n[turn 2] CALLER: yes" in seen[0][1]
    assert "[turn 3] CALLER: my mum is staying till the 30th" in seen[0][1]

    async def broken(instructions: str, user: str, schema: dict[str, Any]) -> str:
        raise RuntimeError("HTTP 500")

    assert (await ModelDateReader(broken).read(call.entries, TODAY)).status is ReadingStatus.FAILED

    async def slow(instructions: str, user: str, schema: dict[str, Any]) -> str:
        import asyncio

        await asyncio.Event().wait()
        return ""

    timed = await ModelDateReader(slow, timeout_secs=0.05).read(call.entries, TODAY)
    assert timed.status is ReadingStatus.TIMEOUT


def _days(statements: Sequence[Any]) -> list[str]:
    return [s.quote for s in statements]


@pytest.mark.parametrize("reply", [
    "I need to ask my wife first", "what day is that", "let me have a look at the calendar",
    "hmm I think so", "yes but not in the morning", "yeah or the Friday", "sure, if I'm back by then",
])
def test_a_reply_that_defers_questions_or_hedges_is_not_a_yes(reply: str) -> None:
    call = lane(("c", "can someone call me back"), ("a", "I can book a callback for Thursday 26 November. OK?"),
                ("c", reply))
    assert decide(call, d(11, 26)).action is not DateAction.RUN


@pytest.mark.parametrize("reply", ["aye", "yes pet, the 26th, that's lovely", "yeah Thursday", "sorted, the 26th",
                                   "lovely, thank you", "ta"])
def test_a_yes_may_echo_the_day_or_the_weekday_in_the_callers_own_words(reply: str) -> None:
    call = lane(("c", "can someone call me back"), ("a", "So that's Thursday the 26th of November?"), ("c", reply))
    assert decide(call, d(11, 26)).action is DateAction.RUN


def test_an_echo_of_another_weekday_is_not_a_yes() -> None:
    call = lane(("c", "can someone call me back"), ("a", "So that's Thursday the 26th of November?"),
                ("c", "yeah Friday"))
    assert decide(call, d(11, 26)).action is not DateAction.RUN


def test_a_proposal_of_two_days_answered_yes_runs_neither() -> None:
    call = lane(("c", "ring me back"), ("a", "I have Thursday the 26th or Friday the 27th?"), ("c", "yes"))
    assert decide(call, d(11, 26)).action is not DateAction.RUN
    assert decide(call, d(11, 27)).action is not DateAction.RUN


PROPOSE_26 = ("a", "Shall I book Thursday 26 November?")


@pytest.mark.parametrize("said", [
    "I'll be over in Portugal on Thursday the 26th",            # where the caller will be, no absence word
    "Thursday the 26th. No chance at all.",                      # the refusal in the next sentence
    "Thursdays are bingo, sorry",                                # a recurring weekday
    "it has to be a Tuesday for me",                             # the only days
    "I'm in for surgery 25th-27th",                              # a span the normaliser masks
    "the 26th is a complete write-off",                          # a day called bad
    "26th? nah.",                                                # a bare ordinal, then no
    "the 26th, so I'll be at my sister's",                       # the reason in a clause of its own
])
def test_a_yes_never_runs_a_day_the_caller_spoke_against_before(said: str) -> None:
    call = lane(("c", said), PROPOSE_26, ("c", "yes"))
    assert decide(call, d(11, 26)).action is not DateAction.RUN


@pytest.mark.parametrize("question", ["Which days are no good for you?", "When are you back from your trip?",
                                      "When was that bill dated?", "Any days we should avoid?"])
def test_an_answer_to_a_question_about_bad_days_is_not_a_request(question: str) -> None:
    assert decide(lane(("a", question), ("c", "Thursday the 26th")), d(11, 26)).action is not DateAction.RUN


@pytest.mark.parametrize("reply", ["yes, the Friday after", "ok, the day before", "fine, Thursday fortnight",
                                   "yes, tomorrow", "yes, the 3rd of December", "yeah, Boxing Day"])
def test_a_yes_naming_another_day_is_not_a_yes_to_the_proposal(reply: str) -> None:
    call = lane(("c", "call me back please"), PROPOSE_26, ("c", reply))
    assert decide(call, d(11, 26)).action is not DateAction.RUN


@pytest.mark.parametrize("after", ["scratch that", "oh hold on that's parents' evening", "is my op", "forget it"])
def test_anything_but_an_acknowledgement_after_the_yes_is_read_back(after: str) -> None:
    call = lane(("a", "Which day would suit for the callback?"), ("c", "Thursday the 26th please"), ("c", after))
    assert decide(call, d(11, 26)).action is not DateAction.RUN


def test_a_yes_to_two_agent_lines_offering_two_days_runs_neither() -> None:
    call = lane(("c", "ring me"), ("a", "I can do Friday 27 November."), ("a", "Or Thursday 26 November?"),
                ("c", "yes"))
    assert decide(call, d(11, 26)).action is not DateAction.RUN


def test_only_a_quoted_read_back_counts_as_heard() -> None:
    call = lane(("c", "the 26th is out"), ("a", "the 26th is out, got it. Shall I book Thursday 26 November?"),
                ("c", "yes"))
    assert decide(call, d(11, 26)).action is not DateAction.RUN
    quoted = lane(("c", "the 26th is out"), ("a", readback_line(d(11, 26), ["the 26th is out"], "the callback")),
                  ("c", "yes"))
    assert decide(quoted, d(11, 26)).action is DateAction.RUN  # heard, and the caller said yes anyway


def test_a_limit_the_rules_read_and_the_day_fits_still_runs() -> None:
    call = lane(("c", "I'm away till the 24th"), ("a", "When suits?"), ("c", "Thursday the 26th please"))
    assert decide(call, d(11, 26)).action is DateAction.RUN
    weekends = lane(("c", "weekends are a no for me"), ("a", "When suits?"), ("c", "Thursday the 26th please"))
    assert decide(weekends, d(11, 26)).action is DateAction.RUN


def test_a_malformed_model_statement_fails_the_reading() -> None:
    bad = json.dumps({"statements": [{"turn": 1, "quote": "x", "about": "callback", "polarity": "unavailable",
                                      "when": 5}]})
    assert verify(bad, lane(("c", "x")).entries, TODAY).status is ReadingStatus.FAILED


@pytest.mark.parametrize("said", ["I've got a thing on the 26th", "I told you the 26th was a no go",
                                  "like I said, the 26th was out"])
def test_what_the_caller_has_on_or_said_before_against_a_day_is_read_back(said: str) -> None:
    call = lane(("c", said), PROPOSE_26, ("c", "yes"))
    assert decide(call, d(11, 26)).action is not DateAction.RUN


@pytest.mark.parametrize("said", ["the 26th would be the worst", "sooner than the 26th please"])
def test_the_yes_line_itself_is_read_for_what_it_says_against_the_day(said: str) -> None:
    assert decide(lane(("a", "When suits?"), ("c", said)), d(11, 26)).action is not DateAction.RUN


def test_a_recogniser_repeating_itself_after_the_yes_is_read_word_by_word() -> None:
    from voice_agent.core.dates import signals

    assert signals.only_acknowledges("you too " * 30) and not signals.only_acknowledges("you too " * 30 + "no")
    call = lane(("a", "When suits?"), ("c", "the 26th please"), ("c", "you too " * 30 + "no"))
    assert decide(call, d(11, 26)).action is DateAction.CONFIRM


# -- friction: a clean day the caller named after their limits runs with no question -----------------------------------


@pytest.mark.parametrize("lines", [
    # the limit points back ("not that week"); the caller then names their own day
    [("c", "the removal van comes on the 28th and I'm in boxes till the 4th, so not that week"),
     ("a", "When would suit instead?"), ("c", "Monday the 7th then, please")],
    # the caller corrects themselves to the day, then says yes to the read-back
    [("c", "I'm at my daughter's in Leeds the whole of that first week of December"),
     ("a", "Would Thursday the 3rd work?"), ("c", "no, that's Leeds, make it Tuesday the 8th instead"),
     ("a", "Tuesday the 8th of December?"), ("c", "yes")],
    # a yes that echoes the proposed day by weekday and a recogniser's day number
    [("c", "nothing before the 10th, I've exams all that fortnight"),
     ("a", "How about Friday the 11th of December?"), ("c", "yeah friday the elevent")],
    # a bare day number with no month, named after the limit, then a yes
    [("c", "not before Christmas, I'm flat out with the shop till then"),
     ("a", "So after Christmas, which day?"), ("c", "the 29th"), ("a", "Tuesday the 29th of December?"),
     ("c", "yes lovely")],
])
def test_a_day_the_caller_named_after_their_limits_runs(lines: list[tuple[str, str]]) -> None:
    call = lane(*lines)
    last = [t for w, t in lines if w == "a"]
    day = {"Monday the 7th then, please": d(12, 7)}.get(lines[-1][1])
    if day is None:
        day = d(12, 8) if "8th" in last[-1] else d(12, 11) if "11th" in last[-1] else d(12, 29)
    assert decide(call, day).action is DateAction.RUN


def test_naming_the_day_answers_only_what_came_before_it() -> None:
    # The same words after the caller named the day still unsettle it, and a bare yes to a proposal of a day the
    # caller spoke against before is still read back: the naming must be the caller's own.
    after = lane(("a", "When suits?"), ("c", "Monday the 7th"), ("c", "oh but that's the week the van comes"))
    assert decide(after, d(12, 7)).action is not DateAction.RUN
    bare = lane(("c", "the 7th is the removal van, forget that day"), ("a", "How about Monday the 7th?"),
                ("c", "yes"))
    assert decide(bare, d(12, 7)).action is not DateAction.RUN
    denied = lane(("c", "I'm away the whole week of the 7th"), ("a", "How about Wednesday the 9th?"),
                  ("c", "not the 9th, no"), ("a", "Wednesday the 9th then?"), ("c", "yes"))
    assert decide(denied, d(12, 9)).action is not DateAction.RUN


@pytest.mark.parametrize("agent", [
    "I'll put a hold on it so nothing's taken until it's sorted. When would you like the call back?",
    "Nothing will go out before then, I promise. Which day suits you?",
])
def test_the_agents_question_is_read_apart_from_what_it_said_before(agent: str) -> None:
    # class: an agent line whose first sentence holds a negation or a limit, then asks which day
    assert decide(lane(("a", agent), ("c", "Monday 30th.")), d(11, 30)).action is DateAction.RUN


@pytest.mark.parametrize("said, runs", [
    ("yeah the 10th could work", True),
    ("the 10th would work for me", True),
    ("the 10th, I'm at work all day", False),
    ("I work on the 10th", False),
])
def test_work_as_a_job_binds_and_as_suiting_does_not(said: str, runs: bool) -> None:
    call = lane(("a", "Which day would you like the callback?"), ("c", said))
    assert (decide(call, d(12, 10)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said", [
    "the harvest starts about the 14th and from then I'm flat out till Christmas",
    "we go on the 14th and we're there till after New Year",
])
def test_a_stretch_kept_busy_starts_at_the_day_named_before_it(said: str) -> None:
    # class: "till X" with a start named before it in the sentence; the days before that start are free
    before = asked_for_a_day(said, "Thursday the 10th of December")
    assert decide(before, d(12, 10)).action is DateAction.RUN
    inside = asked_for_a_day(said, "Wednesday the 16th of December")
    assert decide(inside, d(12, 16)).action is not DateAction.RUN


@pytest.mark.parametrize("said, free_from", [
    ("we're lambing from the 30th, out in the fields dawn to dusk", False),
    ("I'm decorating the whole house from Monday the 30th", False),
    ("I'm available from the 30th", True),
])
def test_doing_something_from_a_day_is_busy_from_it_being_back_is_free(said: str, free_from: bool) -> None:
    # class: "from X" after the caller's activity ("we're shearing from the 30th") is the start of a busy stretch
    call = asked_for_a_day(said, "Friday the 27th of November")
    assert (decide(call, d(11, 27)).action is DateAction.RUN) is not free_from


@pytest.mark.parametrize("said", [
    "I'm on nights every weekday before the 1st",
    "on placement till the 30th so phones are in lockers",
])
def test_a_duty_before_or_until_a_day_is_busy_then_free_after(said: str) -> None:
    # class: "on twelves / on nights / on placement" with a limit: the days of the duty are out, not the window
    after = asked_for_a_day(said, "Friday the 4th of December")
    assert decide(after, d(12, 4)).action is DateAction.RUN


def test_a_span_joined_by_right_through_to_is_one_span_and_booked_means_busy() -> None:
    said = "the market stall's booked from Friday the 4th right through to the 13th, every single day"
    before = asked_for_a_day(said, "Tuesday the 1st of December")
    assert decide(before, d(12, 1)).action is DateAction.RUN
    inside = lane(("c", said), ("a", "How about Wednesday the 9th of December?"), ("c", "hmm maybe"))
    assert decide(inside, d(12, 9)).action is DateAction.REFUSE


def test_a_day_off_before_a_stay_does_not_start_the_stay() -> None:
    # "off" is a day off, not setting off: the stay in hospital still runs from today
    call = lane(("c", "I'm off on the 20th and I'm in hospital till the 30th"),
                ("a", "Would Thursday the 19th of November suit?"), ("c", "yes"))
    assert decide(call, d(11, 19)).action is not DateAction.RUN
    after = lane(("c", "it's my last shift on Friday the 20th, and after that I'm away till the 30th"),
                 ("a", "Would Saturday the 21st of November suit?"), ("c", "yes"))
    assert decide(after, d(11, 21)).action is not DateAction.RUN


def test_a_recogniser_loop_is_read_at_both_ends_in_bounded_work() -> None:
    from voice_agent.core.dates.extract import MAX_EXPRESSIONS, extract_constraints

    looping = "the 9th " * (MAX_EXPRESSIONS * 4) + "but not the 20th, I'm in hospital"
    found = extract_constraints(looping, TODAY)
    assert any(c.blocked and c.start == d(11, 20) for c in found)  # the last words still count
    call = lane(("c", looping), ("a", "How about Friday the 20th of November?"), ("c", "yes"))
    assert decide(call, d(11, 20)).action is not DateAction.RUN


def test_a_month_named_about_something_else_is_not_a_choice_of_another_day() -> None:
    # "the October one" (the normaliser writes "october 1") names no day: the yes to the 15th runs
    call = lane(("c", "Can you pull up my invoices? It's the October one that's wrong."),
                ("c", "Could someone call me back? Any day is fine."),
                ("a", "I can book a callback for Tuesday the 15th of December. Does that work for you?"),
                ("c", "Perfect, thank you."))
    assert decide(call, d(12, 15)).action is DateAction.RUN


# -- third round (dev, dev-b, dev-c): classes mended, each on sentences written here --------------------------------


def test_a_weekday_said_with_another_days_number_says_nothing_of_the_day() -> None:
    # "Monday the 30th" is the 30th: a later Monday the caller asks for is not the day they spoke against
    call = asked_for_a_day("could they phone on Monday the 30th? no wait, that's the day of my scan",
                           "the 7th of December please")
    assert decide(call, d(12, 7)).action is DateAction.RUN
    # every Monday, or a weekday whose number is not that weekday ("Monday the 8th", a Tuesday), still binds
    every = asked_for_a_day("no Mondays for me, I'm at the clinic", "the 7th of December please")
    assert decide(every, d(12, 7)).action is not DateAction.RUN
    # "Monday the 8th" when the 8th is a Tuesday: the Monday or the 8th, read back either way
    for day, proposed in ((d(12, 7), "Monday the 7th"), (d(12, 8), "Tuesday the 8th")):
        muddled = lane(("c", "I can't do Monday the 8th, I'm at the clinic"), ("a", f"How about {proposed}?"),
                       ("c", "yes"))
        assert decide(muddled, day).action is not DateAction.RUN


def test_the_week_after_next_is_a_week_named_not_a_stretch() -> None:
    call = lane(("c", "the week after next is best for me"), ("a", "How about Wednesday the 2nd of December?"),
                ("c", "yes please"))
    assert decide(call, d(12, 2)).action is DateAction.RUN
    laid_up = lane(("c", "my op's on the 30th and I'm laid up for the week after"),
                   ("a", "How about Wednesday the 2nd of December?"), ("c", "yes please"))
    assert decide(laid_up, d(12, 2)).action is not DateAction.RUN


@pytest.mark.parametrize("said, runs", [
    ("Tuesdays are my days off", True),
    ("rest days are Mondays and Tuesdays", True),
    ("Tuesdays I'm usually free", True),
    ("Tuesdays I do the food bank", False),
    ("Tuesdays there's a free lunch at the club so I'm out", False),
    ("Tuesdays I'm off to my mum's", False),
    ("I'm free on Tuesday the 1st after the funeral", False),
    ("Tuesdays are fine but not this one", False),
])
def test_words_that_speak_for_the_day_need_no_read_back(said: str, runs: bool) -> None:
    # class: a free day, a day off or a day that suits, named before the caller asks for it; a word against it
    # (a duty, being out, a limit, a contrast) still needs the read-back
    call = asked_for_a_day(said, "Tuesday the 1st of December please")
    assert (decide(call, d(12, 1)).action is DateAction.RUN) is runs
    yes = lane(("c", said), ("a", "How about Tuesday the 1st of December?"), ("c", "yes please"))
    assert (decide(yes, d(12, 1)).action is DateAction.RUN) is runs


PROPOSED = "How about Thursday the 3rd of December?"


@pytest.mark.parametrize("reply, runs", [
    ("no problem", True), ("not a bother", True), ("that's no problem", True), ("of course", True),
    ("you bet", True), ("sound", True), ("I can do that", True), ("please go ahead and book it", True),
    ("no", False), ("of course not", False), ("no, that's fine", False), ("not really", False),
    ("no problem, but not Thursday", False),
])
def test_a_yes_said_as_no_problem_or_of_course_is_a_yes(reply: str, runs: bool) -> None:
    # class: assent in other words ("no problem", "not a bother", "of course"); "no, that's fine" can decline
    call = lane(("c", "can someone ring me about the refund"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


def test_of_course_is_not_a_course_but_a_course_is_an_absence() -> None:
    call = lane(("c", "I'm on a course on the 3rd"), ("a", PROPOSED), ("c", "yes"))
    assert decide(call, d(12, 3)).action is not DateAction.RUN


@pytest.mark.parametrize("lines, runs", [
    # what happened, said in the same breath as the request, neither asks nor doubts
    ([("c", "I rang about it on the 14th and nobody got back to me, so ring me on the 24th")], True),
    ([("c", "the charge went out on the 2nd, anyway can you call me the 24th")], True),
    # a yes with an aside in the past tense
    ([("a", "How about Tuesday the 24th? That's the day after our sale."),
      ("c", "ha, we had ours in October. The 24th, yes")], True),
    # an aside after the yes changes nothing
    ([("a", "How about Tuesday the 24th?"), ("c", "yes please"), ("a", "Booked."),
      ("c", "I rang twice last week and nobody called me back")], True),
    # a bare weekday stays a bare weekday whatever the aside names
    ([("c", "the bill's dated the 1st, anyway call me Tuesday")], False),
    # an aside that points back at the day, or says the caller is away, is no aside
    ([("a", "How about Tuesday the 24th?"), ("c", "yes"), ("a", "Booked."), ("c", "oh I had the dentist that day")],
     False),
    ([("c", "ring me on the 24th, I was told I'd be in hospital then")], False),
])
def test_an_aside_about_what_happened_neither_asks_nor_doubts(lines: list[tuple[str, str]], runs: bool) -> None:
    assert (decide(lane(*lines), d(11, 24)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("reply, day, runs", [
    ("aye, Friday t'27th, that's grand", d(11, 27), True),
    ("aye go on, t'2nd o' December", d(12, 2), False),
])
def test_a_northern_the_of_and_while_are_read(reply: str, day: dt.date, runs: bool) -> None:
    # class: "t'27th", "o' December", "while t'Thursday" (until), "afore" (before)
    call = lane(("c", "I'm off to our Jean's on t'Monday, t'30th, and I'll not be back while t'Thursday"),
                ("a", f"How about {spoken_date(day)}?"), ("c", reply))
    assert (decide(call, day).action is DateAction.RUN) is runs
    before = lane(("c", "ring us afore t'20th"), ("a", "How about Wednesday the 25th?"), ("c", "aye"))
    assert decide(before, d(11, 25)).action is not DateAction.RUN


@pytest.mark.parametrize("lines, day, runs", [
    ([("a", "Which day would you like?"), ("c", "Saturday then, the 28th")], d(11, 28), True),
    ([("a", "How about Monday the 30th?"), ("c", "yes, the Monday is fine, the 30th")], d(11, 30), True),
    ([("a", "The 4th of December, that's a Friday?"), ("c", "yeah the forth friday good")], d(12, 4), True),
    # a weekday that is not the number's weekday names neither for sure
    ([("a", "Which day would you like?"), ("c", "Saturday then, the 29th")], d(11, 29), False),
    ([("a", "Which day would you like?"), ("c", "Saturday then, the 29th")], d(11, 21), False),
])
def test_a_weekday_beside_the_number_it_falls_on_is_one_day(lines: list[tuple[str, str]], day: dt.date,
                                                             runs: bool) -> None:
    # class: "Saturday then, the 28th", "the Monday is fine, the 30th", "the 4th, Friday": one day, not two
    assert (decide(lane(*lines), day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("day, runs", [(d(12, 4), True), (d(12, 8), False), (d(12, 11), False)])
def test_not_back_till_a_day_is_away_from_the_day_set_off(day: dt.date, runs: bool) -> None:
    # class: "going on the 5th and won't be back till the 12th": away the 5th to the 11th, free before
    call = lane(("c", "we're going on the 5th and won't be back till the 12th"),
                ("a", f"How about {spoken_date(day)}?"), ("c", "yes please"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("after, runs", [
    ("yes, no change, Thursday the 3rd", True),
    ("lovely, I'll not change it, the 3rd", True),
    ("that's sorted, don't change anything", True),
    ("hmm, change it to the 4th", False),
    ("don't change it to the 4th, move it to the 5th", False),
    ("I can't change my shift that day", False),
])
def test_a_change_said_not_to_happen_keeps_the_day(after: str, runs: bool) -> None:
    # class: "no change", "I'll not change it", "don't change anything" after the booking keep the day
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", "yes please"), ("a", "Booked. Anything else?"),
                ("c", after))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("reply, runs", [
    ("he says aye, that's right", True), ("she says yes, that's fine", True),
    ("he says no", False), ("she says she's at the hospital that day", False),
])
def test_a_yes_relayed_for_the_account_holder_is_a_yes(reply: str, runs: bool) -> None:
    # class: a caller speaking for someone ("he says aye")
    call = lane(("c", "I'm ringing for my dad about his bill"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("reply, runs", [
    ("aye, check", True), ("yes, check, the 3rd", True),
    ("I'll check with my wife", False), ("yes, I just need to check the rota", False),
])
def test_check_defers_only_as_a_check_the_caller_must_make(reply: str, runs: bool) -> None:
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


def test_a_day_offered_among_others_is_no_word_against_it() -> None:
    # class: "the 14th might work or the 15th", then a yes to the 14th
    call = lane(("c", "the 14th might work, or the 15th, either"), ("a", "I'll put the 14th, the Monday. Okay?"),
                ("c", "yes"))
    assert decide(call, d(12, 14)).action is DateAction.RUN
    # an offer with a word against the day is no offer
    against = lane(("c", "the 14th might work, but I might be out, or the 15th"),
                   ("a", "I'll put the 14th, the Monday. Okay?"), ("c", "yes"))
    assert decide(against, d(12, 14)).action is not DateAction.RUN


@pytest.mark.parametrize("question, runs", [("When works for you?", True), ("Any days to avoid?", False)])
def test_a_bare_list_of_days_answering_when_works_offers_them(question: str, runs: bool) -> None:
    # class: "so Tuesdays or Thursdays" after the days that are out, answering "when works?"
    call = lane(("a", question), ("c", "Mondays, Wednesdays, Fridays I'm on the ward, so Tuesdays or Thursdays"),
                ("a", "How about Thursday the 3rd of December?"), ("c", "yes"))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("hour, runs", [
    ("after five, when I finish work", True), ("morning, I'm at the clinic in the afternoon", True),
    ("actually I'm at work all day", False), ("after five, but not Thursday", False),
])
def test_the_hour_asked_for_after_the_yes_keeps_the_day(hour: str, runs: bool) -> None:
    # class: the caller's answer to "any particular time?" after the yes speaks of hours, not of the day
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", "yes please"),
                ("a", "Thursday the 3rd. Any particular time?"), ("c", hour))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("reply, runs", [
    ("ja, Thursday is okay", True), ("haan, that is fine only", True), ("alrighty", True), ("you betcha", True),
    ("sounds like a plan", True), ("Thursday it is", True), ("I'm happy with that", True),
    ("yeah no, that's grand", True), ("no issues", True), ("book me in", True), ("that'd be just fine", True),
    ("I'm happy with Thursday", True),
    ("yeah no, I can't", False), ("I'm at the hospital Thursday", False), ("Thursday is no good", False),
    ("that works?", False), ("I'm happy with Friday", False),
])
def test_a_yes_in_the_callers_own_dialect_is_a_yes(reply: str, runs: bool) -> None:
    # class: assent in South African, Indian, American and Irish English; a yes asked back ("that works?") is no yes
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("proposal, runs", [
    ("We could do the 3rd of December, a Thursday. How does that sound?", True),
    ("Would the 3rd work for you, that's a Thursday?", True),
    ("Right, so not the week of the 23rd. How about the 3rd of December?", True),
    ("Got it, you're away till the 30th. Could we say Thursday the 3rd?", True),
    ("The earliest we have is Thursday the 3rd. Does that suit?", True),
    ("How about the 3rd, or any day after the 5th?", False),
    ("Would any day after the 3rd suit?", False),
    ("Would the 3rd work for you, that's a Friday?", False),
])
def test_an_agents_proposal_may_restate_limits_and_name_the_weekday(proposal: str, runs: bool) -> None:
    # class: the agent proposes one day beside the caller's limits it keeps, its weekday or its first free slot
    call = lane(("c", "refund please"), ("a", proposal), ("c", "yes please"))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said", [
    "I'm not having that second one stay on the bill, it was never mine.",
    "It's not the first time this has gone wrong, honestly.",
    "Don't leave the third charge on there.",
])
def test_an_ordinal_that_counts_a_thing_is_no_word_against_the_day(said: str) -> None:
    # class: "second", "first", "third" counting charges or times, which the could-bind signal read as days
    call = lane(("c", said), ("a", "I can book a callback for " + spoken_date(d(11, 24)) + ". Does that work?"),
                ("c", "Perfect, thank you."))
    assert decide(call, d(11, 24)).action is DateAction.RUN


def test_an_ordinal_day_beside_an_absence_still_could_bind() -> None:
    call = lane(("c", "I'm away on the second, can't take calls"),
                ("a", "I can book a callback for " + spoken_date(d(12, 2)) + ". Does that work?"), ("c", "ok"))
    assert decide(call, d(12, 2)).action is not DateAction.RUN


@pytest.mark.parametrize("answer", ["Lovely. Could you also email me the invoice?",
                                    "Yes please. And can you put the credit through now?"])
def test_a_yes_then_a_question_about_another_matter_is_a_yes(answer: str) -> None:
    # class: the caller agrees, then asks about something else in the same breath ("Great. And can you...?")
    call = lane(("c", "can someone ring me back"), ("a", "I can book a callback for Friday 27 November. OK?"),
                ("c", answer))
    assert decide(call, d(11, 27)).action is DateAction.RUN


@pytest.mark.parametrize("answer", ["Yes. Is that a Friday?", "Okay. Will I be home by then?",
                                    "Fine. Could it be later in the week?"])
def test_a_yes_then_a_question_about_the_day_is_no_yes(answer: str) -> None:
    call = lane(("c", "can someone ring me back"), ("a", "I can book a callback for Friday 27 November. OK?"),
                ("c", answer))
    assert decide(call, d(11, 27)).action is not DateAction.RUN


def test_what_went_wrong_that_day_said_with_a_negation_is_no_word_against_the_day() -> None:
    # class: a past narrative that points back at its own day and ends in a negated past ("so it wasn't my fault"),
    # which the clause splitter glued into one piece with a negation and a "that day"
    call = lane(("c", "the bank said their system went wrong that day so it wasnt my fault"),
                ("c", "can someone ring me back"), ("a", "I can book a callback for Friday 27 November. OK?"),
                ("c", "yes please"))
    assert decide(call, d(11, 27)).action is DateAction.RUN


def test_a_negation_about_a_day_to_come_still_binds_after_a_past_clause() -> None:
    call = lane(("c", "I rang you on the 14th, but I can't do that day next week either"),
                ("a", "I can book a callback for " + spoken_date(d(11, 24)) + ". OK?"), ("c", "yes"))
    assert decide(call, d(11, 24)).action is not DateAction.RUN


@pytest.mark.parametrize("said, day, runs", [
    ("I'm on leave the first week of December", d(12, 3), False),
    ("I'm on leave the first week of December", d(12, 16), True),
    ("I'm away the last week of November", d(11, 26), False),
    ("I'm away the last week of November", d(12, 9), True),
])
def test_the_nth_week_of_a_month_is_that_week_not_the_month(said: str, day: dt.date, runs: bool) -> None:
    # class: "the first week of December" (days 1-7, widened to the Monday-to-Sunday weeks they touch)
    call = lane(("c", said), ("a", f"How about {spoken_date(day)}?"), ("c", "yes please"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said, day, runs", [
    ("I'm in hospital from the 23rd for five days", d(11, 26), False),
    ("I'm in hospital from the 23rd for five days", d(12, 1), True),
    ("I'm in hospital from the 23rd for about a week", d(12, 1), False),  # "about": a margin
    ("I'm in hospital from the 23rd for a week or more", d(12, 9), False),  # may run on
    ("I'm in hospital from the 23rd for weeks", d(12, 9), False),  # no end said
    ("I'm on the tills from the 23rd for 5 days a week", d(12, 9), False),  # a rate kept from then on
    ("I'm away at my sister's from the 23rd for 3 nights", d(11, 26), False),  # home on the 26th
    ("I'm away at my sister's from the 23rd for 3 nights", d(12, 2), True),
    ("I'm away at my sister's from the 23rd for three nights", d(12, 9), False),  # a count it cannot read: from then on
    ("I'm in hospital starting Monday, 4 days of it", d(11, 25), False),  # the count straight after the day
    ("I'm in hospital starting Monday, 4 days of it", d(12, 2), True),
    ("I'm on nights from Monday, 4 days on 3 off", d(12, 2), False),  # a rota, kept from then on
])
def test_a_stay_from_a_day_for_a_while_ends(said: str, day: dt.date, runs: bool) -> None:
    # class: "in hospital from the 23rd for five days": busy for that long, not from then on
    call = lane(("c", said), ("a", f"How about {spoken_date(day)}?"), ("c", "yes please"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said, day, runs", [
    ("not before the Day of Reconciliation", d(12, 15), False),
    ("not before the Day of Reconciliation", d(12, 17), True),
    ("we're away over Black Friday", d(11, 27), False),
    ("nothing till after St Stephen's Day", d(12, 22), False),
])
def test_holidays_of_other_countries_are_days(said: str, day: dt.date, runs: bool) -> None:
    call = lane(("c", said), ("a", f"How about {spoken_date(day)}?"), ("c", "yes please"))
    assert (decide(call, day).action is DateAction.RUN) is runs


def test_nothing_else_on_is_free_and_a_question_after_the_yes_leaves_it_a_yes() -> None:
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", "aye, Thursday. Do I send the bills back?"),
                ("a", "No need. So Thursday the 3rd?"), ("c", "aye, I've nowt else on"))
    assert decide(call, d(12, 3)).action is DateAction.RUN
    asked_back = lane(("c", "refund please"), ("a", PROPOSED), ("c", "Thursday? Is that the 3rd?"))
    assert decide(asked_back, d(12, 3)).action is not DateAction.RUN


@pytest.mark.parametrize("reply, runs", [
    ("aye. Do I need the account number for that?", True),  # a question about something else
    ("Yes please. Will you ring before the weekend?", False),  # asks back about when
    ("Yeah. Or is the Friday better for you?", False),
    ("Thursday? Sorry, which one?", False),
])
def test_a_question_after_a_yes_is_a_yes_only_when_it_is_not_about_when(reply: str, runs: bool) -> None:
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said, day, runs", [
    ("I'm down in Devon from the 2nd to the 6th, snowed under, no phone", d(12, 4), False),
    ("I'm down in Devon from the 2nd to the 6th, snowed under, no phone", d(12, 9), True),
    ("from the second to the sixth I'm flat out, phone's off", d(12, 3), False),
    ("from the 2nd to the 6th, not answering", d(12, 5), False),
])
def test_a_span_with_no_phone_in_it_is_an_absence_not_an_offer(said: str, day: dt.date, runs: bool) -> None:
    # class: out of reach said in other words after the span, in the same sentence
    call = lane(("c", said), ("a", f"How about {spoken_date(day)}?"), ("c", "yes please"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said, day, runs", [
    ("down the coast from the second to the sixth visiting me nan no phone down there", d(12, 4), False),
    ("down the coast from the second to the sixth visiting me nan no phone down there", d(12, 8), True),
])
def test_a_span_end_followed_by_what_the_caller_is_doing_is_a_day(said: str, day: dt.date, runs: bool) -> None:
    # class: speech written without commas, "to the 6th visiting": the 6th still ends the span
    call = lane(("c", said), ("a", f"How about {spoken_date(day)}?"), ("c", "yes please"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("answer, runs", [
    ("the 3rd of December works, the kitchen's finished by then", True),
    ("the 3rd of December. The builders are done by then.", True),
    ("the 3rd of December works, but we'll have left by then", False),  # no word of being ready: read back
    ("the 3rd of December, I'm away by then", False),
    ("the 3rd of December, if I'm not back by then ring the week after", False),
])
def test_ready_by_then_after_the_day_named_is_why_it_suits(answer: str, runs: bool) -> None:
    # class: "by then" pointing at the day the caller has just named, with a word of something ready by it
    call = asked_for_a_day("I need a callback about my bill", answer)
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


def test_tens_as_quick_speech_writes_them_are_tens() -> None:
    # class: "the twenny third" (a recogniser's spelling of quick or accented speech) is the 23rd
    assert decide(asked_for_a_day("I need a callback about my bill", "the twenny third please"),
                  d(11, 23)).action is DateAction.RUN
    assert decide(asked_for_a_day("I need a callback about my bill", "the twenny third please"),
                  d(11, 20)).action is not DateAction.RUN


@pytest.mark.parametrize("said, answer, day, runs", [
    ("I've Monday and Tuesday off next week", "Tuesday the 24th then", d(11, 24), True),
    ("we've got the 24th free", "the 24th then", d(11, 24), True),
    ("I've Monday off but Tuesday's out, I'm in Leeds", "Tuesday the 24th then", d(11, 24), False),
    ("I've Friday off to the coast with the kids", "Friday the 27th then", d(11, 27), False),  # off to: away
])
def test_days_off_are_days_offered(said: str, answer: str, day: dt.date, runs: bool) -> None:
    # class: "I've Monday off": a day off work the caller offers, not a statement of where they are
    call = lane(("c", said), ("a", "Which day would you like the callback?"), ("c", answer))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("reply, runs", [
    ("Thursday the 3rd, yep. Mobile though, the landline's dead.", True),
    ("Thursday the 3rd, yes. But ring my cell.", True),
    ("Thursday the 3rd, yes. But hang on.", False),  # a "but" about nothing said: still a doubt
    ("Thursday the 3rd, yes. Though my mobile's off that morning.", False),  # a time word: about when
])
def test_a_but_about_the_number_leaves_the_day_settled(reply: str, runs: bool) -> None:
    # class: a contrast about how to reach the caller, after the day, is not a doubt about the day
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("offer, runs", [
    ("the 2nd might work or the 3rd, either", True),
    ("maybe the 3rd or the 4th would suit", True),
    ("the 2nd might work, the 3rd I might work late", False),  # a job that day: read back
    ("the 2nd might work but not the 3rd", False),
])
def test_days_offered_then_one_agreed_runs(offer: str, runs: bool) -> None:
    # class: the caller offers days ("might work", "would suit"), the agent picks one, the caller says yes
    call = lane(("c", "refund please"), ("a", "Sure, I'll raise it now."), ("c", offer),
                ("a", "I'll put Thursday the 3rd of December. Okay?"), ("c", "yeah righto"))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("agent_day, day, runs", [
    ("So Thursday the 3rd of December?", d(12, 3), True),
    ("So Friday the 4th of December?", d(12, 4), False),  # a yes to another day than the one just chosen
])
def test_a_day_then_after_the_agent_flags_a_clash_is_the_new_choice(agent_day: str, day: dt.date,
                                                                    runs: bool) -> None:
    # class: "Thursday then, Thursday the 3rd" settles on a day after the one first asked for
    call = lane(("c", "I'm off to Spain from the 26th to the 2nd"), ("a", "When would you like the call?"),
                ("c", "the 1st of December"), ("a", "The 1st? That's while you're in Spain, isn't it?"),
                ("c", "oh aye, so it is. Thursday then, Thursday the 3rd"), ("a", agent_day), ("c", "yes"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("reply, runs", [
    ("yessir", True), ("for sure", True), ("that's the one", True), ("lock it in", True), ("too easy", True),
    ("nae bother", True), ("sure, why not", True), ("kindly book it", True), ("that is fine madam", True),
    ("100%", True), ("y'all go ahead and do that", True), ("sounds about right", True),
    ("why not the 4th?", False), ("yessir, but make it the 4th", False), ("lock it in for the 4th", False),
    ("too easy, hang on, I'm at the dentist then", False), ("that's the one I can't do", False),
    ("sure, why not, no wait, I'm away", False), ("that's alright", False),  # "I'm alright, thanks": no yes
])
def test_more_ways_of_saying_yes_and_their_near_misses(reply: str, runs: bool) -> None:
    # class: assent in other words (US South, Indian, Scots, Australian English), never with a day or doubt added
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("reply, runs", [
    ("go with Thursday", True), ("Thursday would suit", True), ("Thursday, that'll do", True),
    ("Thursday morning is fine", True), ("Thursday afternoon would be good", True), ("Thursday's no problem", True),
    ("Thursday in the morning please", True), ("any time Thursday", True), ("Thursday it is then", True),
    ("Thursday should be fine", True),
    ("go with Friday", False), ("Thursday's no good", False), ("Thursday morning I'm out", False),
    ("any time but Thursday", False), ("Thursday week would suit", False), ("Thursday the 10th would suit", False),
    ("Thursday in the morning, no, Friday", False), ("nae chance", False),
    ("that'll do, make it the 4th though", False),
])
def test_the_day_proposed_approved_by_its_weekday_or_hour(reply: str, runs: bool) -> None:
    # class: "Thursday would suit", "Thursday morning is fine" to "How about Thursday the 3rd?": the day proposed
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", reply))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("answer, runs", [
    ("I'm free on the 3rd of December", True), ("the 3rd, I'm home all day", True), ("I'm thinking the 3rd", True),
    ("make it the 3rd, but I might be out", False), ("I'm free on the 3rd but not all day", False),
    ("I'm thinking the 3rd or the 4th", False), ("actually the 3rd, no wait, the 4th", False),
    ("I'm home on the 3rd from hospital, so not then", False), ("I'm free from the 3rd", False),
    ("make it the 3rd, sorry, the 4th", False), ("I'm home the 3rd but the builders are in", False),
])
def test_reachable_words_answer_which_day(answer: str, runs: bool) -> None:
    # class: "I'm free on the 3rd", "I'm thinking the 3rd" answering "which day?": a firm request, not a state
    call = asked_for_a_day("I need a callback about my bill", answer)
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said, day, runs", [
    ("any day but Friday", d(12, 3), True),  # "Friday" after "but" is no choice of Friday
    ("any day but Friday", d(12, 4), False),
    ("I won't be around the last week of November", d(12, 3), True),  # the 30th is a Monday: not December's week
    ("I won't be around the last week of November", d(11, 30), False),
    ("I won't be around the last week of November", d(11, 23), False),  # the week most of it lies in
    ("I'm off to Leeds on the 25th for two days", d(12, 3), True),  # a trip that long, then back
    ("I'm off to Leeds on the 25th for two days", d(11, 26), False),
    ("we fly to Spain on the 25th for a week", d(12, 1), False),
    ("I'm going to my mum's on the 25th for two nights", d(11, 27), False),
])
def test_limits_said_before_the_agents_proposal(said: str, day: dt.date, runs: bool) -> None:
    # classes: a weekday after "any day but", the nth week of a month, a trip with its length
    call = lane(("c", "I'd like a refund"), ("a", "Sure. Any days to avoid?"), ("c", said),
                ("a", f"Noted. How about {spoken_date(day)}?"), ("c", "yes that's fine"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("after, runs", [
    ("I'll make sure I'm in", True), ("I'll be home that day", True), ("I'll be waiting by the phone", True),
    ("lovely, talk then", True), ("what time roughly?", True), ("I've nothing on that day", True),
    ("I'll be in hospital that day", False), ("I'll be home on the 4th", False), ("actually I'll be out then", False),
    ("talk then, or maybe the 4th", False), ("I'll be around but not that day", False), ("I'm away then", False),
    ("I'll be about, unless I'm called in", False), ("what time? I'm away till noon that day", False),
])
def test_being_in_for_the_call_after_the_yes_leaves_the_day_settled(after: str, runs: bool) -> None:
    # class: after the yes, "I'll be in", "talk then", "what time roughly?" speak of the day settled, naming no other
    call = lane(("c", "refund please"), ("a", PROPOSED), ("c", "yes please"), ("a", "Booked. Any particular time?"),
                ("c", after))
    assert (decide(call, d(12, 3)).action is DateAction.RUN) is runs


@pytest.mark.parametrize("offer, reply, day, runs", [
    ("I have Wednesday the 2nd or Thursday the 3rd.", "the Thursday please", d(12, 3), True),
    ("I have Wednesday the 2nd or Thursday the 3rd.", "the Thursday please", d(12, 2), False),
    ("I have Thursday the 3rd or Thursday the 10th.", "the Thursday please", d(12, 3), False),  # which Thursday?
    ("I have Wednesday the 2nd or Thursday the 3rd.", "not the Thursday please", d(12, 3), False),
    ("I have Wednesday the 2nd or Thursday the 3rd.", "Friday please", d(12, 3), False),
    ("I have Wednesday the 2nd or Thursday the 3rd.", "Thursday week please", d(12, 3), False),  # its own day
    ("I have Wednesday the 2nd or Thursday the 3rd.", "next Thursday please", d(12, 3), False),
])
def test_a_weekday_picks_one_of_the_days_the_agent_offered(offer: str, reply: str, day: dt.date, runs: bool) -> None:
    # class: "the Thursday please" after the agent names two days: the one on that weekday, when only one is
    call = lane(("c", "refund please"), ("a", offer), ("c", reply))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("answer, day, runs", [
    ("the 3rd, no actually the 4th", d(12, 4), True),
    ("the 3rd. No, sorry, the 4th", d(12, 4), True),
    ("the 3rd, no actually the 4th", d(12, 3), False),  # the day taken back
    ("the 3rd, no, the 4th is bad", d(12, 4), False),  # a "no" about the day after it
    ("the 3rd, no actually the 4th is out", d(12, 4), False),
])
def test_a_no_that_opens_a_correction_takes_back_the_day_before(answer: str, day: dt.date, runs: bool) -> None:
    # class: "no actually the 4th": the "no" is about the 3rd; the 4th is the caller's choice
    call = lane(("c", "I need a callback about my bill"), ("a", "Which day would you like the callback?"),
                ("c", answer), ("a", f"So {spoken_date(day)}?"), ("c", "yes"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("said, day, runs", [
    ("I can't do the first three days of December", d(12, 4), True),
    ("I can't do the first three days of December", d(12, 3), False),
    ("I'm away the last two weeks of December", d(12, 21), False),  # this December, not last year's
    ("I'm away the last two weeks of December", d(12, 16), True),
    ("the first few days of December are out", d(12, 7), False),  # "few" taken wide
])
def test_the_first_or_last_days_of_a_month_are_those_days(said: str, day: dt.date, runs: bool) -> None:
    # class: "the first three days of December", "the last two weeks of December"
    call = lane(("c", "I want a refund"), ("a", "Any days to avoid?"), ("c", said), ("a", "Noted. Which day suits?"),
                ("c", f"{spoken_date(day)} then"))
    assert (decide(call, day).action is DateAction.RUN) is runs


@pytest.mark.parametrize("limit", ["I'm in hospital from the 1st to the 5th", "I'm away till the 4th",
                                   "not the first week of December"])
@pytest.mark.parametrize("reply", ["make it the 3rd", "I'm free on the 3rd", "Thursday would suit", "go with Thursday",
                                   "the Thursday please", "yes. Do I need the account number?", "lock it in"])
def test_the_new_ways_of_saying_yes_never_answer_a_limit_on_that_day(limit: str, reply: str) -> None:
    # the classes that make more replies firm must not make a day the caller ruled out run
    proposed = lane(("c", limit), ("a", "Noted."), ("c", "refund please"), ("a", PROPOSED), ("c", reply))
    asked = lane(("c", limit), ("a", "Which day then?"), ("c", reply))
    assert decide(proposed, d(12, 3)).action is not DateAction.RUN
    assert decide(asked, d(12, 3)).action is not DateAction.RUN
