"""The main job's new rows can show the bad thing: lanes below rolling, and actions done wrong."""

from __future__ import annotations

from typing import Any

from voice_agent.harness.simulation.console import console, print_comparison
from voice_agent.harness.simulation.report import (
    RunOutcome,
    TrackedFact,
    actions_correct,
    lanes_minus_rolling,
    policy_report,
)

FACTS = [TrackedFact("wish", "credit it", ("credit it",), "other", 3, 30),
         TrackedFact("tried", "tried the app", ("tried the app",), "other", 2, 32)]


def _outcomes(present: list[dict[str, bool]]) -> list[RunOutcome]:
    return [RunOutcome(present_at_need=p, run=run) for run, p in enumerate(present)]


def test_the_row_counts_a_fact_rolling_kept_and_lanes_lost_in_the_same_run() -> None:
    lanes = policy_report("lanes", _outcomes([{"wish": True, "tried": False}, {"wish": True, "tried": True}]), FACTS)
    rolling = policy_report("rolling", _outcomes([{"wish": False, "tried": True}, {"wish": True, "tried": True}]),
                            FACTS)
    paired = lanes_minus_rolling(lanes, rolling, FACTS)
    assert paired["lost"] == [{"run": 0, "fact": "tried"}] and paired["gained"] == 1
    assert paired["by_fact"] == {"wish": 50.0, "tried": -50.0}
    assert paired["worst"] == {"fact": "tried", "points": -50.0}


def test_the_table_prints_the_negative_row() -> None:
    lanes = policy_report("lanes", _outcomes([{"wish": True, "tried": False}]), FACTS)
    rolling = policy_report("rolling", _outcomes([{"wish": True, "tried": True}]), FACTS)
    report = {"scenario": "x", "runs": 1, "summarizer": "fault", "keep": 6, "every": 5,
              "sides": {"scripted": {"lanes": lanes, "rolling": rolling}},
              "lanes_minus_rolling": {"scripted": lanes_minus_rolling(lanes, rolling, FACTS)}}
    with console.capture() as captured:
        print_comparison(report)
    text = captured.get()
    assert "lanes - rolling, worst fact" in text and "-100.0 pts" in text
    assert "tried -100.0" in text


def test_an_action_counts_only_when_its_invoice_amount_order_and_day_are_right() -> None:
    Calls = list[tuple[str, dict[str, Any]]]
    expected: Calls = [("issue_credit", {"invoice_id": "INV-1", "amount": 49.0, "order_id": "ORD-A"}),
                       ("issue_credit", {"invoice_id": "INV-2", "amount": 89.0, "order_id": "ORD-B"}),
                       ("schedule_callback", {"account_id": "ACC-1", "date": "2026-12-16"})]
    right: Calls = [("issue_credit", {"invoice_id": "INV-1", "amount": 49, "order_id": "ORD-A", "account_id": "ACC-1"}),
                    ("issue_credit", {"invoice_id": "INV-2", "amount": 89.0, "order_id": "ORD-B"}),
                    ("schedule_callback", {"account_id": "ACC-1", "date": "2026-12-16"})]
    assert actions_correct(expected, right) == {"credit": True, "callback": True}
    swapped = [right[1], right[0], right[2]]
    assert actions_correct(expected, swapped)["credit"] is False  # the right credits in the wrong order
    wrong_amount = [right[0], ("issue_credit", {"invoice_id": "INV-2", "amount": 19.99, "order_id": "ORD-B"})]
    assert actions_correct(expected, wrong_amount) == {"credit": False, "callback": False}
    twice = [*right, right[2]]
    assert actions_correct(expected, twice)["callback"] is False
