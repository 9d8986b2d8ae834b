"""A date tool whose verb is a retraction word elsewhere ("cancel", "skip", "drop"): the caller's "please cancel it
on the 31st" asks that tool for the 31st, and its read-back names its own action, not a callback. For a callback
tool the same words keep their meaning: "cancel the callback on the 9th" never books the 9th."""

from __future__ import annotations

import datetime as dt

import pytest

from voice_agent.core.guards.date_contract import DateAction, DateContract
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.guards.tool_verbs import action_phrase, action_verbs
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

TODAY = dt.date(2026, 12, 3)


def tool(name: str) -> ToolSpec:
    return ToolSpec(name, "a date tool", (ToolParam("customer_ref", "ref", ParamKind.IDENTIFIER, role="customer"),
                                          ToolParam("effective_date", "YYYY-MM-DD", ParamKind.DATE)), mutates=True)


def decide(spec: ToolSpec, day: dt.date, *lines: str) -> object:
    transcript = TranscriptLane.of_lines(("agent", t[6:]) if t.startswith("agent:") else ("caller", t) for t in lines)
    (decision,) = DateContract(DateGuard(TODAY)).decide(
        spec, {"customer_ref": "CU-77Q1", "effective_date": day.isoformat(), "date": day.isoformat()}, transcript)
    return decision


def test_the_verbs_and_the_phrase_come_from_the_tool_name() -> None:
    assert action_verbs("cancel_subscription") == ("cancel",)
    assert action_verbs("skipDelivery") == ("skip",) and action_verbs("schedule_callback") == ()
    assert action_phrase("cancel_subscription") == "cancel the subscription"
    assert action_phrase("reschedule") == "reschedule it"


@pytest.mark.parametrize(("name", "said"), [
    ("cancel_subscription", "Please cancel it on 31 January 2027."),
    ("cancel_subscription", "Can you cancel my subscription on the 31st of January please"),
    ("skip_delivery", "Skip the delivery on Friday the 11th please"),
    ("drop_off_parcel", "I'd like to drop it off on the 11th of December"),
])
def test_a_request_in_the_tools_own_verb_runs(name: str, said: str) -> None:
    day = dt.date(2027, 1, 31) if "January" in said else dt.date(2026, 12, 11)
    decision = decide(tool(name), day, said)
    assert decision.action is DateAction.RUN, decision.reason
    assert decision.citations[0].words.rstrip(".?") in said  # quoted as said, the verb unmasked


def test_a_yes_to_a_paraphrased_question_runs() -> None:
    decision = decide(tool("cancel_subscription"), dt.date(2027, 1, 31), "I want to cancel, from the end of January",
                      "agent: Shall I cancel it on Sunday 31 January 2027?", "Yes please.")
    assert decision.action is DateAction.RUN, decision.reason


def test_the_read_back_names_the_tools_action_and_quotes_the_caller_verbatim() -> None:
    decision = decide(tool("cancel_subscription"), dt.date(2027, 1, 31),
                      "Please cancel it on 31 January, but I'm away until the 2nd of February so don't cancel it "
                      "while I'm away")
    assert decision.action is not DateAction.RUN
    assert "callback" not in decision.readback and "cancel the subscription" in decision.readback
    assert all("zzdo" not in c.words for c in decision.citations) and "cancel" in decision.readback


@pytest.mark.parametrize("said", ["Actually cancel the callback on the 9th, I can't do it",
                                  "cancel the 9th, it's no good"])
def test_for_a_callback_tool_cancel_still_takes_the_day_back(said: str) -> None:
    (decision,) = DateContract(DateGuard(TODAY)).decide(
        SCHEDULE_CALLBACK, {"account_id": "ACC-1234-56", "date": "2026-12-09"},
        TranscriptLane.of_lines([("caller", "Ring me on the 9th please"), ("caller", said)]))
    assert decision.action is not DateAction.RUN


def test_a_ruled_out_day_of_a_cancel_tool_never_runs() -> None:
    decision = decide(tool("cancel_subscription"), dt.date(2026, 12, 20),
                      "Don't cancel it before Christmas, the kids are using it", "Cancel it on the 20th")
    assert decision.action is not DateAction.RUN
