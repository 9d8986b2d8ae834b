"""``voice-agent eval pass-safety``: a summary pass at every turn must not change an identifier argument."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from voice_agent.agent.brain import BrainReply, ToolCallRequest
from voice_agent.core.policy import ContextPolicy
from voice_agent.domains.billing import billing_domain
from voice_agent.harness.evaluation.cli import eval_app
from voice_agent.harness.evaluation.pass_safety import (
    TRACE_FORMAT,
    ForcedPassTracker,
    NoPassTracker,
    diff_replies,
    load_traces,
    pass_safety,
    record_trace,
)
from voice_agent.harness.evaluation.retention import retention_report
from voice_agent.harness.scenarios import list_scenarios, load_scenario
from voice_agent.policies import PolicyName


@pytest.fixture(scope="module")
def traces() -> dict[str, dict[str, Any]]:
    return {name: record_trace(load_scenario(name)) for name in list_scenarios()}


def test_a_trace_holds_the_transcript_with_tool_calls_and_arguments(traces: dict[str, dict[str, Any]]) -> None:
    trace = traces["billing_dispute"]
    assert trace["format"] == TRACE_FORMAT and trace["domain"] == "billing" and trace["policy"] == "lanes"
    kinds = {e["kind"] for e in trace["entries"]}
    assert kinds == {"caller", "agent", "tool_call", "tool_result"}
    calls = [e for e in trace["entries"] if e["kind"] == "tool_call"]
    assert any(e["tool"] == "issue_credit" and e["arguments"]["account_id"] == "ACC-4729-18" for e in calls)
    assert trace["drop_log"] and trace["fact_kinds"]["account_id"] == "identifier"
    json.dumps(trace)


async def test_lanes_has_no_identifier_mismatch_on_any_scenario(traces: dict[str, dict[str, Any]]) -> None:
    assert set(traces) >= {"billing_dispute", "refund_orders", "callback_constraints"}
    report = await pass_safety(list(traces.values()), [PolicyName.LANES], runs=3)
    lanes = report["policies"]["lanes"]
    assert lanes["calls_compared"] > 0 and lanes["passes"] > 0
    assert lanes["defects"] == 0, lanes["mismatches"][:5]


async def test_rolling_mismatches_are_listed_with_turn_and_both_values(traces: dict[str, dict[str, Any]]) -> None:
    report = await pass_safety([traces["billing_dispute"]], [PolicyName.ROLLING], runs=3)
    mismatches = report["policies"]["rolling"]["mismatches"]
    assert mismatches
    for m in mismatches:
        assert m["trace"] == "billing_dispute" and m["turn"] >= 1 and m["forced"] != m["raw"]
        assert m["kind"] in ("mismatch", "missing", "extra")


async def test_the_maximal_stress_mode_summarizes_everything_before_the_current_turn(
    traces: dict[str, dict[str, Any]],
) -> None:
    window = await pass_safety([traces["billing_dispute"]], [PolicyName.LANES], mode="window")
    everything = await pass_safety([traces["billing_dispute"]], [PolicyName.LANES], mode="all")
    assert everything["policies"]["lanes"]["passes"] > window["policies"]["lanes"]["passes"]
    # Lanes never hands the model a wrong identifier, even then (a re-ask or an extra lookup is safe).
    assert not [m for m in everything["policies"]["lanes"]["mismatches"] if m["kind"] == "mismatch"]


def test_forced_trackers() -> None:
    policy = ContextPolicy(keep=6, every=5)
    forced = ForcedPassTracker(policy, mode="window")
    assert forced.on_turn_start(7) is None and forced.on_turn_start(8) is not None  # turn 1 leaves at 8
    assert forced.on_turn_start(9) is not None and forced.raw_from(9) == 3
    everything = ForcedPassTracker(policy, mode="all")
    scheduled = everything.on_turn_start(4)
    assert scheduled is not None and (scheduled.first, scheduled.last) == (1, 3)
    assert everything.raw_from(4) == 4
    never = NoPassTracker(policy)
    assert never.on_turn_start(10) is None and never.raw_from(40) == 1


def test_diff_of_identifier_arguments() -> None:
    domain = billing_domain()
    right = BrainReply(tool_calls=(ToolCallRequest("lookup_account", {"account_id": "ACC-4729-18"}),))
    wrong = BrainReply(tool_calls=(ToolCallRequest("lookup_account", {"account_id": "ACC-4729-19"}),))
    compared, found = diff_replies(wrong, right, domain, policy="rolling", seed=0, turn=31, point=70)
    assert compared == 1 and [(m.kind, m.forced, m.raw) for m in found] == [
        ("mismatch", "ACC-4729-19", "ACC-4729-18")]
    _, missing = diff_replies(BrainReply(text="Could you read me your account number?"), right, domain,
                              policy="rolling", seed=0, turn=31, point=70)
    assert [(m.kind, m.forced) for m in missing] == [("missing", None)]
    assert diff_replies(right, right, domain, policy="lanes", seed=0, turn=1, point=1)[1] == []


def test_trace_files_and_retention_from_traces(traces: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps({"traces": traces}), encoding="utf-8")
    assert len(load_traces(path)) == len(traces)
    report = retention_report([path])
    kinds = {row["kind"] for row in report["rows"]}
    assert "all" in kinds and report["passes"] == sum(len(t["drop_log"]) for t in traces.values())
    bad = tmp_path / "bad.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="not a trace"):
        load_traces(bad)


def test_cli_pass_safety(traces: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(traces["refund_orders"]), encoding="utf-8")
    out = tmp_path / "safety.json"
    result = CliRunner().invoke(eval_app, ["pass-safety", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Pass safety" in result.output
    report = json.loads(out.read_text())
    assert report["policies"]["lanes"]["defects"] == 0 and "rolling" in report["policies"]
