"""Verdicts of the date guard, one test per outcome, with citations of the caller's words."""

from __future__ import annotations

from datetime import date

from voice_agent.core.guards.date_guard import (
    Citation,
    DateGuard,
    DateVerdict,
    constraints_in_transcript,
    is_affirmation,
)
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import ToolOutcome, TranscriptLane

REFERENCE = date(2026, 11, 30)
SCHEDULE = ToolSpec(
    name="schedule_callback",
    description="",
    params=(ToolParam("date", "d", kind=ParamKind.DATE), ToolParam("note", "n")),
    mutates=True,
)


def lane(*turns: tuple[str, str]) -> TranscriptLane:
    """A lane from (speaker, text) pairs; each pair is its own turn."""
    out = TranscriptLane()
    for turn, (who, text) in enumerate(turns, start=1):
        (out.append_caller if who == "caller" else out.append_agent)(turn, text)
    return out


def check_one(transcript: TranscriptLane, value: str) -> tuple[DateVerdict, str, tuple[Citation, ...]]:
    (result,) = DateGuard(REFERENCE).check(SCHEDULE, {"date": value, "note": "x"}, transcript)
    return result.verdict, result.reason, result.citations


def test_ok_when_the_caller_named_the_date() -> None:
    t = lane(("agent", "When suits you?"), ("caller", "The 10th would be great."))
    verdict, _, cites = check_one(t, "2026-12-10")
    assert verdict is DateVerdict.OK
    assert cites == (Citation(2, "The 10th would be great"),)


def test_conflict_cites_turn_and_words() -> None:
    t = lane(
        ("agent", "How can I help?"),
        ("caller", "My account is 4729 18."),
        ("caller", "I'm travelling until the 14th."),
        ("agent", "Noted."),
        ("caller", "Any day next week is fine."),
    )
    verdict, reason, cites = check_one(t, "2026-12-10")
    assert verdict is DateVerdict.CONFLICT
    assert cites == (Citation(3, "I'm travelling until the 14th"),)
    assert reason == (
        "Caller said on turn 3: 'I'm travelling until the 14th'. 2026-12-10 falls inside that. "
        "Ask the caller for a date after 2026-12-14."
    )


def test_conflict_on_excluded_weekday_and_window() -> None:
    t = lane(
        ("caller", "Any morning next week except Wednesday."), ("caller", "And not Tuesday, that's the school run.")
    )
    verdict, reason, cites = check_one(t, "2026-12-09")
    assert verdict is DateVerdict.CONFLICT
    assert cites == (Citation(1, "Any morning next week except Wednesday"),)
    assert "2026-12-09 is the day they ruled out" in reason
    verdict, reason, cites = check_one(t, "2026-12-08")
    assert verdict is DateVerdict.CONFLICT
    assert cites == (Citation(2, "And not Tuesday, that's the school run"),)
    assert "not a Tuesday" in reason
    verdict, reason, _ = check_one(t, "2026-12-16")
    assert verdict is DateVerdict.CONFLICT and "the window they gave" in reason
    assert check_one(t, "2026-12-10")[0] is DateVerdict.OK


def test_a_later_correction_lifts_a_constraint() -> None:
    t = lane(("caller", "Not Tuesday."), ("agent", "Sure."), ("caller", "Actually, Tuesday the 8th is fine now."))
    assert check_one(t, "2026-12-08")[0] is DateVerdict.OK
    t = lane(("caller", "Nothing before the 10th."), ("caller", "Actually, nothing before the 5th."))
    assert check_one(t, "2026-12-07")[0] is DateVerdict.UNCONFIRMED  # no conflict any more, but never said


def test_superseded_when_corrected() -> None:
    t = lane(
        ("caller", "Call me back on Saturday."),
        ("agent", "Saturday it is."),
        ("caller", "Actually, make it Sunday."),
    )
    verdict, reason, cites = check_one(t, "2026-12-05")
    assert verdict is DateVerdict.SUPERSEDED
    assert cites == (Citation(1, "Call me back on Saturday"), Citation(3, "Actually, make it Sunday"))
    assert "on 2026-12-06" in reason
    assert check_one(t, "2026-12-06")[0] is DateVerdict.OK


def test_unconfirmed_when_never_said() -> None:
    t = lane(("caller", "Call me back next week sometime."), ("agent", "Will do."))
    verdict, reason, cites = check_one(t, "2026-12-21")
    assert verdict is DateVerdict.CONFLICT  # outside the only window the caller gave
    t = lane(("caller", "Call me back after the 3rd."), ("agent", "Will do."))
    verdict, reason, cites = check_one(t, "2026-12-10")
    assert verdict is DateVerdict.UNCONFIRMED
    assert cites == (Citation(1, "Call me back after the 3rd"),)
    assert reason.startswith("The caller never said 2026-12-10 and did not agree to it.")
    assert "before calling schedule_callback" in reason


def test_unconfirmed_when_the_proposal_was_not_accepted() -> None:
    t = lane(("agent", "Shall I call you on the 10th?"), ("caller", "Hmm, let me check my diary."))
    verdict, reason, cites = check_one(t, "2026-12-10")
    assert verdict is DateVerdict.UNCONFIRMED
    assert cites == (Citation(1, "Shall I call you on the 10th?"), Citation(2, "Hmm, let me check my diary."))
    assert "The agent proposed 2026-12-10 on turn 1" in reason


def test_agreed_by_affirmation_is_ok() -> None:
    t = lane(("agent", "How about Thursday the 3rd?"), ("caller", "Yes, that works."))
    verdict, _, cites = check_one(t, "2026-12-03")
    assert verdict is DateVerdict.OK
    assert cites == (Citation(1, "How about Thursday the 3rd?"), Citation(2, "Yes, that works."))


def test_agreement_does_not_override_a_stated_constraint() -> None:
    t = lane(
        ("caller", "I'm away until the 14th."),
        ("agent", "How about the 10th?"),
        ("caller", "Sure."),
    )
    assert check_one(t, "2026-12-10")[0] is DateVerdict.CONFLICT


def test_unparseable_date_is_unconfirmed_with_citation() -> None:
    t = lane(("caller", "Call me whenever."))
    verdict, reason, cites = check_one(t, "next Tuesday")
    assert verdict is DateVerdict.UNCONFIRMED
    assert "is not a date" in reason and cites == (Citation(1, "Call me whenever."),)
    verdict, _, cites = check_one(TranscriptLane(), "2026-13-01")
    assert verdict is DateVerdict.UNCONFIRMED and len(cites) == 1


def test_only_date_params_are_checked() -> None:
    t = lane(("caller", "The 10th."))
    assert DateGuard(REFERENCE).check(SCHEDULE, {"note": "2026-12-25"}, t) == []


def test_guard_never_modifies_the_transcript() -> None:
    t = lane(("caller", "I'm travelling until the 14th."), ("agent", "How about the 16th?"), ("caller", "OK."))
    t.append_tool_call(3, "schedule_callback", "c1", {"date": "2026-12-16"})
    t.append_tool_result(3, "schedule_callback", "c1", {"ok": True}, ToolOutcome.COMPLETED)
    before = t.entries
    guard = DateGuard(REFERENCE)
    for value in ("2026-12-10", "2026-12-16", "garbage"):
        guard.check(SCHEDULE, {"date": value}, t)
    guard.violations(date(2026, 12, 1), t)
    guard.violation_finder(t)("How about the 2nd?")
    assert t.entries == before and all(a is b for a, b in zip(t.entries, before, strict=True))


def test_rereads_the_whole_lane_and_caches_per_entry() -> None:
    t = lane(("caller", "I'm away until the 14th."))
    for turn in range(2, 200):
        (t.append_caller if turn % 2 else t.append_agent)(turn, "Let me think about that for a moment.")
    guard = DateGuard(REFERENCE)
    assert check_one(t, "2026-12-10")[0] is DateVerdict.CONFLICT
    guard.check(SCHEDULE, {"date": "2026-12-10"}, t)
    cached = dict(guard._said)
    guard.check(SCHEDULE, {"date": "2026-12-10"}, t)
    assert all(guard._said[k] is v for k, v in cached.items())


def test_violations_and_finder_for_the_output_guard() -> None:
    t = lane(("caller", "Not Tuesday, that's the school run."))
    guard = DateGuard(REFERENCE)
    ((turn, c),) = guard.violations(date(2026, 12, 8), t)
    assert turn == 1 and c.weekday == 1
    assert guard.violations(date(2026, 12, 9), t) == []
    (reason,) = guard.violation_finder(t)("Shall I call you next Tuesday?")
    assert reason.startswith("Caller said on turn 1: 'Not Tuesday, that's the school run'.")
    assert [c.weekday for _, c in constraints_in_transcript(t, REFERENCE)] == [1]


def test_affirmations() -> None:
    for text in ("yes", "Yeah, that works", "sounds good", "OK", "Sure thing", "Perfect.", "Great, thanks"):
        assert is_affirmation(text), text
    for text in ("no", "that doesn't work", "not really", "hmm, maybe", "Actually no, that doesn't work for me"):
        assert not is_affirmation(text), text


def test_a_named_limit_is_said_and_a_moved_one_is_superseded() -> None:
    from voice_agent.core.transcript import TranscriptLane

    lane = TranscriptLane()
    lane.append_caller(1, "I need the car until March 10th.")
    dropoff = ToolSpec("reserve_car", "", (ToolParam("dropoff", "", kind=ParamKind.DATE),), mutates=True)
    guard = DateGuard(date(2019, 3, 1))
    (ok,) = guard.check(dropoff, {"dropoff": "2019-03-10"}, lane)
    assert ok.verdict is DateVerdict.OK and ok.citations[0].turn == 1
    lane.append_caller(2, "I want to have the car up to the 12th of March.")
    lane.append_caller(3, "Sorry, I want to have the car up to the 14th of March.")
    (stale,) = DateGuard(date(2019, 3, 1)).check(dropoff, {"dropoff": "2019-03-12"}, lane)
    assert stale.verdict is DateVerdict.SUPERSEDED and [c.turn for c in stale.citations] == [2, 3]


def test_a_bare_day_is_reread_when_the_question_before_it_changes() -> None:
    """The guard caches each utterance's reading; the agent's question is part of that reading."""
    guard = DateGuard(REFERENCE)
    spec = ToolSpec("reserve_car", "", (ToolParam("dropoff_date", "d", kind=ParamKind.DATE),))
    about_pickup = lane(("agent", "And the car, when will you pick it up?"), ("caller", "The 10th."))
    (first,) = guard.check(spec, {"dropoff_date": "2026-12-10"}, about_pickup)
    about_dropoff = lane(("agent", "And the car, when will you drop it off?"), ("caller", "The 10th."))
    (second,) = guard.check(spec, {"dropoff_date": "2026-12-10"}, about_dropoff)
    assert first.verdict is DateVerdict.UNCONFIRMED  # the 10th was the pick-up day
    assert second.verdict is DateVerdict.OK
