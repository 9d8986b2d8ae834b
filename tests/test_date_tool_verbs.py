"""A date tool whose verb is a retraction word elsewhere ("cancel", "skip", "drop"): the caller's "please cancel it
on the 31st" asks that tool for the 31st, and its read-back names its own action, not a callback. For a callback
tool the same words keep their meaning: "cancel the callback on the 9th" never books the 9th."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import yaml

from voice_agent.core.guards.date_contract import DateAction, DateContract
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.guards.tool_verbs import action_phrase, action_verbs
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane
from voice_agent.datafiles import data_path
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

TODAY = dt.date(2026, 12, 3)


def tool(name: str) -> ToolSpec:
    return ToolSpec(name, "a date tool", (ToolParam("customer_ref", "ref", ParamKind.IDENTIFIER, role="customer"),
                                          ToolParam("effective_date", "YYYY-MM-DD", ParamKind.DATE)), mutates=True)


def decide(spec: ToolSpec, day: dt.date, *lines: str) -> Any:
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


# -- the caller saying the tool's own action (wordings written here, not from the blind set) -----------------------

@pytest.mark.parametrize(("name", "said", "day"), [
    ("move_out", "we're moving out on the 22nd of December", dt.date(2026, 12, 22)),
    ("stop_milk", "stop the milk from the 14th please", dt.date(2026, 12, 14)),
    ("collect_bin", "I'll be collecting it on the 15th of December", dt.date(2026, 12, 15)),
])
def test_the_caller_saying_the_tools_own_action_on_a_day_asks_for_it(name: str, said: str, day: dt.date) -> None:
    decision = decide(tool(name), day, said)
    assert decision.action is DateAction.RUN, decision.reason


def test_a_yes_to_the_action_from_a_day_runs_and_uh_huh_is_a_yes() -> None:
    decision = decide(tool("stop_milk"), dt.date(2026, 12, 14), "agent: Shall I stop the milk from Monday 14 December?",
                      "uh-huh, go on")
    assert decision.action is DateAction.RUN, decision.reason


@pytest.mark.parametrize("said", ["we're moving out on the 22nd, no sorry, the 23rd",
                                  "we were moving out on the 22nd but that fell through"])
def test_the_tools_own_action_never_runs_a_day_taken_back(said: str) -> None:
    assert decide(tool("move_out"), dt.date(2026, 12, 22), said).action is not DateAction.RUN


def load_set(half: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load(data_path("evals", "dates", "tools", f"{half}.yaml").read_text(encoding="utf-8")))


@pytest.mark.parametrize("half", ["dev", "test"])
def test_the_blind_tool_cases_never_run_a_day_that_must_not_run(half: str) -> None:
    unsafe = []
    for case in load_set(half):
        spec = ToolSpec(case["tool"], "", (ToolParam("date", "", ParamKind.DATE),))
        lines = [("agent", t[6:].strip()) if t.lower().startswith("agent:") else ("caller", t) for t in case["lines"]]
        (decision,) = DateContract(DateGuard(dt.date.fromisoformat(case["reference_date"]))).decide(
            spec, {"date": case["date"]}, TranscriptLane.of_lines(lines))
        if case["expect"] != "run" and decision.action is DateAction.RUN:
            unsafe.append(case["id"])
    assert unsafe == []
