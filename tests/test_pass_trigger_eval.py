"""``voice-agent eval triggers`` and ``voice-agent policy --trigger``: the table's instruments can fail."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from voice_agent.cli import app
from voice_agent.core.pass_trigger import PassTrigger
from voice_agent.harness.evaluation.long_calls import QUESTIONS, TOPICS, long_call
from voice_agent.harness.evaluation.pass_triggers import (
    PIPECAT,
    TriggerSpec,
    lost_facts,
    run_table,
    table_rows,
    verdicts,
)
from voice_agent.harness.scenarios import load_scenario

runner = CliRunner()
ACTION_WORDS = re.compile(r"\b(credit|refund|dispute|invoice|bill|statement|call|ring|transfer|person|human|"
                          r"thank|bye|problem|issue|wrong|twice|double|account)\b", re.I)


def test_long_calls_state_facts_early_and_need_them_late() -> None:
    base = load_scenario("billing_dispute")
    long = long_call(base, seed=1)
    assert long.exchanges >= 100
    assert long_call(base, seed=1) == long  # seeded
    for fact in long.facts:
        needed = long.fact_needed_turn(fact)
        assert long.fact_stated_turn(fact) <= 10
        assert needed is None or needed >= 100
    side = [t.text for t in long.turns if t.speaker == "caller" and t.text not in {u.text for u in base.turns}]
    assert len(side) == long.exchanges - base.exchanges >= 60
    visits = {topic: sum(topic in line for line in side) for topic in TOPICS}
    assert sum(1 for n in visits.values() if n >= 2) >= 3  # the call comes back to its topics
    assert not any(ACTION_WORDS.search(q) for q in QUESTIONS)  # side questions ask the agent to do nothing


def test_a_trigger_that_folds_a_referenced_turn_shows_as_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # R = 0: every pass loses every fact it receives, so only a turn kept raw keeps its fact.
    played = {"scenarios": [(load_scenario("late_first_use"), 0)]}
    good = run_table([TriggerSpec("reference", "reference")], retention=0.0, corpora=["scenarios"], played=played)
    monkeypatch.setattr(PassTrigger, "_referenced", lambda *_: None)  # nothing refers to anything
    bad = run_table([TriggerSpec("folds referenced", "reference")], retention=0.0, corpora=["scenarios"],
                    played=played)
    results = good + bad
    lost = lost_facts(results, baseline="reference")
    assert lost[("scenarios", "rolling", "folds referenced")] >= 1
    assert lost[("scenarios", "rolling", "reference")] == 0
    rows = {(r["policy"], r["trigger"]): r for r in table_rows(results, baseline="reference")}
    assert rows[("rolling", "folds referenced")]["present"] < rows[("rolling", "reference")]["present"]
    assert rows[("rolling", "folds referenced")]["reasks_per_call"] > 0  # the agent asks for it again
    # lanes holds the account number in its ledger: folding the turn loses nothing there.
    assert lost[("scenarios", "lanes", "folds referenced")] == 0


def _row(policy: str, trigger: str, tokens: float, lost: int = 0, gained: int = 0) -> dict[str, object]:
    return {"corpus": "scenarios", "policy": policy, "trigger": trigger, "tokens_mean": tokens, "lost": lost,
            "gained": gained, "passes_per_call": 3.0}


def test_verdicts_need_no_loss_and_tokens_at_or_under_pipecat() -> None:
    rows = [_row("rolling", PIPECAT, 600), _row("lanes", "cheap", 590), _row("lanes", "dear", 700),
            _row("lanes", "lossy", 500, lost=2, gained=1), _row("lanes", "swapped", 500, lost=1, gained=1)]
    found = {v["trigger"]: v for v in verdicts(rows)}
    assert found["cheap"]["meets_goal"]
    assert not found["dear"]["meets_goal"] and found["dear"]["no_fact_lost"]
    assert not found["lossy"]["meets_goal"] and found["lossy"]["tokens_at_or_under_pipecat"]
    assert found["swapped"]["meets_goal"]  # facts that swap by chance are no net loss


def test_policy_explains_a_reference_run() -> None:
    result = runner.invoke(app, ["policy", "--trigger", "reference", "--scenario", "late_first_use"])
    assert result.exit_code == 0, result.output
    assert "folded turns" in result.output and "refers to it" in result.output


def test_policy_refuses_a_reference_trigger_without_a_scenario() -> None:
    result = runner.invoke(app, ["policy", "--trigger", "reference"])
    assert result.exit_code == 2
    bad = runner.invoke(app, ["policy", "--trigger", "sometimes", "--scenario", "late_first_use"])
    assert bad.exit_code == 2


def test_eval_triggers_refuses_an_unknown_corpus() -> None:
    result = runner.invoke(app, ["eval", "triggers", "--corpora", "nope", "--jobs", "1"])
    assert result.exit_code == 2
