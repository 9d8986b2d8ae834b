"""Scenario files and call records: loading, turn mapping, fact timing, malformed lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from voice_agent.datafiles import SGD_CALLS, shared_data_path
from voice_agent.harness.scenarios import Scenario, list_scenarios, load_call_records, load_scenario

SGD = shared_data_path(SGD_CALLS)
"""The public SGD call records, in ``../shared/data/`` beside the checkout."""
OURS = ("billing_dispute", "callback_constraints", "refund_orders")


@pytest.mark.parametrize("name", OURS)
def test_scenarios_load_and_alternate(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.id == name and scenario.domain == "billing"
    assert [t.speaker for t in scenario.turns] == ["caller", "agent"] * (len(scenario.turns) // 2)
    assert len(scenario.facts) >= 4 and scenario.actions
    assert set(OURS) <= set(list_scenarios())


def test_scenario_lengths() -> None:
    assert load_scenario("billing_dispute").exchanges >= 35
    assert load_scenario("refund_orders").exchanges >= 20
    assert load_scenario("callback_constraints").exchanges >= 25


def test_caller_turns_map_utterances_to_exchanges() -> None:
    scenario = load_scenario("billing_dispute")
    caller = scenario.caller_turns()
    assert caller[0] == (1, scenario.turns[0].text)
    assert [n for n, _ in caller] == list(range(1, scenario.exchanges + 1))
    assert caller[3] == (4, scenario.turns[6].text) and "ACC-4729-18" in caller[3][1]


def test_billing_dispute_account_stated_on_4_needed_on_31() -> None:
    scenario = load_scenario("billing_dispute")
    account = scenario.fact("account_id")
    assert account.value == "ACC-4729-18" and account.kind == "identifier"
    assert scenario.fact_stated_turn(account) == 4
    assert scenario.fact_needed_turn(account) == 31
    assert [a.tool for a in scenario.actions_in_exchange(31)] == ["issue_credit"]
    assert scenario.fact_needed_turn(scenario.fact("timing_constraint")) == 33
    kinds = {f.kind for f in scenario.facts}
    assert kinds == {"identifier", "date_constraint", "other"} and len(scenario.facts) == 5


def test_needed_turn_falls_back_to_first_action_holding_the_canonical_value() -> None:
    scenario = load_scenario("billing_dispute")
    account = scenario.fact("account_id").model_copy(update={"needed_turn": None})
    assert scenario.fact_needed_turn(account) == 4  # lookup_account, issued before utterance 7
    unknown = account.model_copy(update={"canonical": "ACC-0000-00"})
    assert scenario.fact_needed_turn(unknown) is None


def test_billing_dispute_middle_stretch_restates_nothing_and_calls_nothing() -> None:
    scenario = load_scenario("billing_dispute")
    cues = re.compile(r"ACC-|4729|cloudvault|october|14th|travelling|credited|refunded|the app", re.IGNORECASE)
    for exchange, text in scenario.caller_turns():
        if 9 <= exchange <= 30:
            assert not cues.search(text), (exchange, text)
    assert not [a for a in scenario.actions if 9 <= (a.turn - 1) // 2 + 1 <= 30]
    assert all("ACC-4729-18" not in json.dumps(a.args) for a in scenario.actions if 9 <= (a.turn - 1) // 2 + 1 <= 30)


def test_callback_constraints_are_early_and_the_request_is_vague_and_late() -> None:
    scenario = load_scenario("callback_constraints")
    constraints = [f for f in scenario.facts if f.kind == "date_constraint"]
    assert {scenario.fact_stated_turn(f) for f in constraints} <= {2, 3, 4}
    (callback,) = [a for a in scenario.actions if a.tool == "schedule_callback"]
    exchange = (callback.turn - 1) // 2 + 1
    assert exchange >= 25
    # The request comes one exchange before the booking: the agent proposes a day, the caller agrees.
    request = scenario.turns[callback.turn - 3].text
    assert "next week" in request and "14th" not in request and "Tuesday" not in request


def test_refund_orders_keeps_near_identical_orders_apart() -> None:
    scenario = load_scenario("refund_orders")
    damaged = scenario.fact("damaged_order").canonical
    duplicate = scenario.fact("duplicate_charge_order").canonical
    assert damaged and duplicate and sum(a != b for a, b in zip(damaged, duplicate, strict=True)) == 1
    credits = [a.args for a in scenario.actions if a.tool == "issue_credit"]
    assert [c["order_id"] for c in credits] == [damaged, duplicate]


def test_missing_scenario_lists_available_names() -> None:
    with pytest.raises(FileNotFoundError, match="billing_dispute"):
        load_scenario("no_such_scenario")


def test_load_by_path_and_invalid_file(tmp_path: Path) -> None:
    path = Path(__file__).resolve().parent.parent / "config" / "scenarios" / "refund_orders.yaml"
    assert load_scenario(path).id == "refund_orders"
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\nturns: 3\n")
    with pytest.raises(ValueError, match="not a valid call record"):
        load_scenario(bad)


def test_malformed_lines_are_reported_with_line_numbers_and_skipped(tmp_path: Path) -> None:
    good = {
        "id": "a", "source": "test", "domain": "billing", "reference_date": "2026-11-30",
        "turns": [{"speaker": "caller", "text": "hi"}], "facts": [], "actions": [], "unknown_field": 1,
    }
    path = tmp_path / "calls.jsonl"
    path.write_text(
        "\n".join([json.dumps(good), "{not json", "", json.dumps({"id": "b"}), json.dumps({**good, "id": "c"})])
        + "\n"
    )
    records, errors = load_call_records(path)
    assert [r.id for r in records] == ["a", "c"]
    assert [e.line for e in errors] == [2, 4]
    assert "invalid JSON" in errors[0].message and "turns" in errors[1].message


@pytest.mark.skipif(not SGD.exists(), reason="public SGD call records not present")
def test_public_sgd_records_load() -> None:
    records, errors = load_call_records(SGD)
    assert len(records) == 61 and errors == []
    assert all(isinstance(r, Scenario) and r.reference_date is not None for r in records)
    first = records[0]
    for fact in first.facts:
        needed = first.fact_needed_turn(fact)
        assert needed is None or needed >= 1
