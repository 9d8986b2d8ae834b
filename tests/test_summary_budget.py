"""The summary lane's budget: by class and by last use, never by when a line was first said."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel

from voice_agent.core.call_state import CallState
from voice_agent.core.policy import ContextPolicy
from voice_agent.core.summary import Commitment, EpisodeSummary, RejectedItem
from voice_agent.core.summary_budget import (
    LineClass,
    LineStanding,
    SummaryStanding,
    budgeted_summary,
    classify_line,
    is_question,
)


class Slots(BaseModel):
    account_id: str | None = None


def call(lines: list[str]) -> CallState:
    state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(6, 5), slot_model=Slots)
    for line in lines:
        state.start_turn(line)
        state.record_agent("Of course.")
    state.start_turn("And one more thing.")
    return state


def test_lines_are_classed_by_what_they_are() -> None:
    assert classify_line("Established", "turn 3: caller said: How do I switch it on?") is LineClass.SMALL_TALK
    assert classify_line("Established", "turn 3: caller said: Thanks. Is there a fee?") is LineClass.SMALL_TALK
    assert classify_line("Established", "turn 3: caller said: I tried the app. Any news?") is LineClass.CALLER
    assert classify_line("Pending", "turn 3: caller asked: Can you credit it?") is LineClass.CALLER
    assert classify_line("Rejected", "Not Tuesday (because school run)") is LineClass.CALLER
    assert classify_line("Decided", "turn 4: open_dispute completed") is LineClass.DECIDED
    assert classify_line("Commitments", 'turn 4: "I will call you"') is LineClass.COMMITMENT
    assert classify_line("Established", "The caller wants a credit.") is LineClass.CALLER  # a model's own line
    facts = '- requested_resolution (turn 7): "I tried the app first."'
    assert classify_line("Established", "turn 7: caller said: I tried the app first.", facts) is LineClass.REDUNDANT
    assert not is_question("Okay.") and is_question("Right. Is there a fee?")


def test_a_line_a_later_turn_refers_to_is_in_play_until_that_turn() -> None:
    state = call(["My Zephyrlink router keeps dropping.", "What hours are you open?", "Do you do paperless?",
                  "The Zephyrlink light is orange now."])
    standing = SummaryStanding()
    standing.catch_up(state)
    assert standing.last_use(state, 1) == 4  # "zephyrlink", a rare word, said again on turn 4
    assert standing.last_use(state, 2) == 2  # nothing refers to the opening hours


def _summary() -> EpisodeSummary:
    questions = [f"turn {t}: caller said: What about the {w} option?" for t, w in
                 zip(range(4, 14), ["paper", "fibre", "mobile", "annual", "family", "business", "student",
                                    "senior", "travel", "basic"], strict=True)]
    return EpisodeSummary(
        established=["turn 2: caller said: I went into the shop first and they sent me to you.", *questions],
        rejected=[RejectedItem(item="Not back on the card, it's closed", reason="closed")],
        decided=["turn 3: open_dispute completed"],
        commitments=[Commitment(text="I'll email the reference.", turn=3)],
    )


def test_over_budget_small_talk_goes_first_and_the_callers_words_stay() -> None:
    summary = _summary()
    text, dropped = budgeted_summary(summary, 90)
    assert "I went into the shop first" in text and "Not back on the card, it's closed" in text
    assert "paper option" not in text  # the oldest question nothing refers to left first
    assert "basic option" in text and dropped >= 1
    # The newest-first order it replaces would have dropped the caller's attempt, the oldest line.


def test_a_referred_question_outlives_one_nothing_refers_to() -> None:
    summary = _summary()
    rows = []
    for title, lines in summary.render_sections():
        row = []
        for line in lines:
            turn = int(line.split(":")[0].split()[1]) if line.startswith("turn ") else 0
            last = 20 if "paper option" in line else turn
            row.append(LineStanding(classify_line(title, line), turn, last))
        rows.append(row)
    text, _ = budgeted_summary(summary, 90, rows)
    assert "paper option" in text and "fibre option" not in text


def test_past_the_ceiling_even_the_callers_lines_leave_least_used_first() -> None:
    summary = EpisodeSummary(established=[f"turn {t}: caller said: I said a thing numbered {t} here." for t in
                                          range(1, 40)])
    text, dropped = budgeted_summary(summary, 50, None, ceiling=100)
    assert dropped > 0 and "numbered 39" in text and "numbered 1 " not in text
    unbounded, none = budgeted_summary(summary, 50)
    assert none == 0 and "numbered 1 " in unbounded
