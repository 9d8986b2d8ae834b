"""Scripted calls end to end through the pipeline, and the Monte Carlo check against the calculator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from voice_agent.cli import app
from voice_agent.core.policy import ContextPolicy, rewrite_schedule
from voice_agent.core.transcript import EntryKind, TranscriptEntry
from voice_agent.domains.billing import billing_domain
from voice_agent.harness.scenarios import list_scenarios, load_scenario
from voice_agent.harness.simulation.fault_summarizer import FaultInjectingSummarizer
from voice_agent.harness.simulation.runner import SimulationPlan, caller_lines, run_once, run_plan
from voice_agent.policies import PolicyName
from voice_agent.settings import Settings, with_overrides

SCENARIOS = ["billing_dispute", "refund_orders", "callback_constraints"]


def sim_settings(keep: int = 6, every: int = 5) -> Settings:
    """The offline defaults with K and S pinned (the calculator's prediction below depends on them)."""
    return with_overrides(Settings(), policy={"keep": keep, "every": every})


def test_all_scenarios_are_present() -> None:
    assert set(SCENARIOS) <= set(list_scenarios())


@pytest.mark.parametrize("name", SCENARIOS)
async def test_lanes_run_performs_exactly_the_recorded_actions(name: str) -> None:
    scenario = load_scenario(name)
    domain = billing_domain()
    plan = SimulationPlan(scenario, [], lambda: domain, [PolicyName.LANES], sim_settings())
    backend = domain.extra["backend"]
    outcome = await run_once(plan, PolicyName.LANES, 0)
    assert outcome.failure is None and outcome.errors == []
    assert outcome.present_at_need and all(outcome.present_at_need.values()) and outcome.reasks == 0
    assert outcome.rejected_offers == 0
    assert outcome.unledgered_executed == 0
    effects = {
        "open_dispute": len(backend.disputes), "issue_credit": len(backend.credits),
        "schedule_callback": len(backend.callbacks),
    }
    for tool, count in effects.items():
        assert count == sum(1 for a in scenario.actions if a.tool == tool), tool
    for action in scenario.actions:
        if action.tool == "schedule_callback":
            assert any(c["date"] == action.args["date"] for c in backend.callbacks)
        if action.tool == "issue_credit":
            assert any(c["invoice_id"] == action.args["invoice_id"] for c in backend.credits)


def test_caller_lines_map_utterances_to_turns() -> None:
    lines = caller_lines(load_scenario("billing_dispute"))
    assert lines[3].turn == 4 and "ACC-4729-18" in lines[3].text and lines[-1].turn == 36


ACCOUNT = "ACC-4729-18"
RETENTION = 0.9


async def _account_kept_at_each_pass(seed: int, passes: int) -> list[bool]:
    """The fault model on its own, no call: the account said once, then carried by each pass's summary.

    Whether the summary still holds it after each of ``passes`` passes, with the seed a simulated run gets.
    """
    model = FaultInjectingSummarizer(RETENTION, {"account_id": ACCOUNT}, seed)
    summary, kept = "", []
    for n in range(passes):
        said = f"My account number is {ACCOUNT}." if n == 0 else "Thanks. And one more question."
        summary = await model.summarize_text(summary, [TranscriptEntry(n, n + 1, EntryKind.CALLER, said)])
        kept.append(ACCOUNT in summary)
    return kept


async def test_the_fault_model_loses_a_fact_at_the_rate_the_calculator_predicts() -> None:
    passes = len(rewrite_schedule(ContextPolicy(6, 5), 4, 31))
    assert passes == 4
    fates = [await _account_kept_at_each_pass(seed, passes) for seed in range(2000)]
    # 2,000 seeds: 0.02 and 0.03 are three standard deviations of the two rates.
    assert abs(sum(f[0] for f in fates) / len(fates) - RETENTION) <= 0.02
    assert abs(sum(all(f) for f in fates) / len(fates) - RETENTION ** passes) <= 0.03


@pytest.mark.timeout(300)
def test_monte_carlo_rolling_matches_the_calculator_and_lanes_keeps_everything() -> None:
    """Every simulated rolling call keeps the account exactly when the fault model, run apart, keeps it at each
    scheduled pass: the pipeline passes the summary at the calculator's turns and the recorder reads it at need.

    With the test above (the fault model's rate over many seeds is R per pass), the simulation's rate is the
    calculator's: run by run here, rather than within a tolerance over hundreds of full calls.
    """
    scenario = load_scenario("billing_dispute")
    runs, seed = 60, 1  # run r plays seed 1 + r; 60 runs lose the account at every pass, and keep it
    rolling_plan = SimulationPlan(scenario, [], billing_domain, [PolicyName.ROLLING], sim_settings(), runs, RETENTION,
                                  seed=seed)
    rolling = run_plan(rolling_plan, jobs=2)
    assert rolling["failed_runs"] == 0
    account = next(f for f in rolling["policies"]["rolling"]["facts"] if f["key"] == "account_id")
    assert (account["stated_turn"], account["needed_turn"]) == (4, 31)
    passes = len(rewrite_schedule(ContextPolicy(6, 5), account["stated_turn"], account["needed_turn"]))
    fates = [asyncio.run(_account_kept_at_each_pass(seed + run, passes)) for run in range(runs)]
    assert {sum(f) for f in fates if not all(f)} == {0, 1, 2, 3}, "the runs lose the account at every pass"
    # The first pass takes the account into the rolling summary (captured); it is there at need only if no pass
    # damaged it since: per run, so the report's rates are the fault model's, to the run.
    assert account["captured"] == pytest.approx(sum(f[0] for f in fates) / runs)
    assert account["present_at_need"] == pytest.approx(sum(all(f) for f in fates) / runs)
    lanes = run_plan(SimulationPlan(scenario, [], billing_domain, [PolicyName.LANES], sim_settings(), 10, RETENTION,
                                    seed=seed), jobs=2)
    assert lanes["failed_runs"] == 0
    report = lanes["policies"]["lanes"]
    assert all(f["present_at_need"] == 1.0 for f in report["facts"])
    assert report["reasks"] == 0 and report["unledgered_executed"] == 0


@pytest.mark.timeout(300)
def test_simulate_cli_writes_the_report(tmp_path: Path) -> None:
    out = str(tmp_path / "report.json")
    # --jobs 1: every run in this process (the Monte Carlo test above runs the worker pool; starting one costs seconds).
    result = CliRunner().invoke(app, ["simulate", "--runs", "1", "--policy", "all", "--no-knowledge", "--jobs", "1",
                                      "--json", out])
    assert result.exit_code == 0, result.output
    assert "account_id @ turn 31 (said 4)" in result.stdout and "T31" in result.stdout
    report = json.loads(Path(out).read_text())
    assert set(report["policies"]) == {"lanes", "rolling", "window"}
    # The paraphrased variants are played by default; "policies" is the scripted side.
    assert set(report["sides"]) == {"scripted", "paraphrased"} and report["variants"]
    assert report["policies"] == report["sides"]["scripted"] and report["failed_runs"] == 0
    for side in report["sides"].values():
        assert set(side) == {"lanes", "rolling", "window"}
        for policy in side.values():
            assert {"runs", "facts", "reasks", "tokens_per_request", "guard_rejections",
                    "rejected_offers"} <= set(policy)
            assert policy["failed_runs"] == 0 and policy["first_failure"] is None
            assert {"key", "stated_turn", "needed_turn", "present_at_need", "captured",
                    "kept_once_captured"} <= set(policy["facts"][0])
    assert report["policies"]["window"]["facts"][0]["present_at_need"] == 0.0
    # The property's row: lanes minus rolling, run by run, on both sides; never a fact rolling had and lanes lost.
    assert "lanes - rolling, worst fact" in result.stdout
    assert set(report["lanes_minus_rolling"]) == {"scripted", "paraphrased"}
    assert all(side["lost"] == [] and side["worst"]["points"] >= 0 for side in report["lanes_minus_rolling"].values())
    assert "callback done right" in result.stdout
    assert report["policies"]["lanes"]["facts"][0]["present_at_need"] == 1.0


@pytest.mark.parametrize(("args", "message"), [
    (["nonexistent"], "no scenario"), (["--policy", "nope"], "--policy"), (["--runs", "0"], "--runs"),
    (["--retention", "2"], "--retention"),
])
def test_simulate_bad_arguments(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["simulate", *args])
    assert result.exit_code == 2 and message in result.stderr


KNOWLEDGE_CALL = """
id: knowledge_question
domain: billing
reference_date: 2026-11-30
turns:
- {speaker: caller, text: "Hi there, I have a quick question about my bill please."}
- {speaker: agent, text: "Of course."}
- {speaker: caller, text: "How long does a dispute usually take to resolve?"}
- {speaker: agent, text: "Most disputes are resolved within ten working days."}
"""


def test_simulated_knowledge_question_shows_the_injected_chunks_and_the_hit(tmp_path: Path) -> None:
    scenario, out = tmp_path / "knowledge_question.yaml", tmp_path / "report.json"
    scenario.write_text(KNOWLEDGE_CALL)
    args = ["simulate", str(scenario), "--runs", "1", "--policy", "lanes", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "disputes/how-long-a-dispute-takes" in result.stdout and "knowledge hit" in result.stdout
    retrieval = json.loads(out.read_text())["policies"]["lanes"]["retrieval"]
    question = next(t for t in retrieval["first_run"] if t["turn"] == 2)
    assert question["status"] == "hit" and question["chunk_ids"][0] == "disputes/how-long-a-dispute-takes"
