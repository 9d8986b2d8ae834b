"""Measuring a real summarizer: the presence rule, inversions, the trials, and capture in the calculator."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from voice_agent.cli import app
from voice_agent.core.policy import ContextPolicy
from voice_agent.core.summary import EpisodeSummary, RejectedItem, SummaryRequest
from voice_agent.harness.evaluation.real_retention import (
    SGD_PATH,
    CallInput,
    contradictions,
    find_fact,
    load_inputs,
    measure,
    ruled_out,
)
from voice_agent.harness.policy_report import PolicyQuestion, policy_report
from voice_agent.harness.scenarios import Fact, load_scenario
from voice_agent.harness.simulation.fault_summarizer import FaultInjectingSummarizer
from voice_agent.summarizers.extractive import ExtractiveSummarizer

RESOLUTION = Fact(key="requested_resolution", value="credited back to my account, not refunded to my card",
                  canonical="account_credit", stated_turn=12, kind="other")
TIMING = Fact(key="timing_constraint", value="I'm travelling until the 14th, so please don't call me before then",
              canonical="2026-12-15", stated_turn=14, kind="date_constraint")
ATTEMPTED = Fact(key="already_attempted", canonical="cloudvault_app_support", stated_turn=4, kind="other",
                 value="I already tried getting it fixed through the CloudVault app, and their chat told me to "
                       "call you")


def test_a_paraphrase_counts_and_a_near_topic_line_does_not() -> None:
    summary = EpisodeSummary(established=["The caller is away until the 14th; do not call before then."],
                             pending=["Credit the duplicate charge to the account, not the card."])
    assert find_fact(TIMING, summary) == ("established", summary.established[0])
    assert find_fact(RESOLUTION, summary) == ("pending", summary.pending[0])  # every word of account_credit
    # Shares the app's name and "call", but says the opposite of what the caller did: not the fact.
    assert find_fact(ATTEMPTED, EpisodeSummary(pending=["call the CloudVault app for assistance"])) is None
    assert find_fact(ATTEMPTED, EpisodeSummary(established=["Caller already tried CloudVault app support"]))
    # Every number must be there: the 15th is another constraint.
    assert find_fact(TIMING, EpisodeSummary(established=["Travelling until the 15th, do not call before"])) is None


def test_inversions_and_rejected_listed_as_decided() -> None:
    assert ruled_out(RESOLUTION) == {"refund", "card"}
    summary = EpisodeSummary(
        established=["The caller wants a refund to the card."],
        decided=["Refund to card issued."],
        rejected=[RejectedItem(item="a refund to the card", reason="the card is cancelled")],
        pending=["Credit to the account rather than a refund to the card."],
    )
    inversions, decided = contradictions(RESOLUTION, summary)
    assert inversions == ["The caller wants a refund to the card."]  # pending says "rather than": fine
    assert decided == ["Refund to card issued."]  # the rejected section says it was ruled out: fine


def test_an_until_limit_turned_round_is_an_inversion() -> None:
    until = Fact(key="travelling_until", value="I'm travelling until the 14th", canonical="2026-12-14",
                 stated_turn=4, kind="date_constraint")
    summary = EpisodeSummary(pending=["take calls before the 14th"], established=["No calls before the 14th."])
    assert contradictions(until, summary) == (["take calls before the 14th"], [])


def test_a_resolved_date_counts_as_the_relative_one() -> None:
    monday = Fact(key="pickup_date", value="Monday next week", canonical="2019-03-04", stated_turn=2, kind="other")
    assert find_fact(monday, EpisodeSummary(pending=["Pick up the car in Concord on March 4th"]))
    assert find_fact(monday, EpisodeSummary(pending=["Pick up the car in Concord on March 14th"])) is None


def test_the_measurement_counts_capture_survival_and_leaks_with_the_extractive_summarizer() -> None:
    record = load_scenario("billing_dispute")
    report = asyncio.run(measure([CallInput(record, "scenarios")], ExtractiveSummarizer(),
                                 ContextPolicy(keep=6, every=5), summarizer_name="extractive", max_passes=3))
    assert report["passes"] == 3 and report["failed_passes"] == 0
    assert [d["turns"] for d in report["details"]] == [[1, 3], [4, 8], [9, 13]]
    assert report["capture"]["all"]["offered"] == 1  # already_attempted, turn 3: the first pass's only fact
    assert report["intake"]["all"]["offered"] == 3  # disputed item, resolution, timing: turns 6-7
    assert report["survival"]["all"]["offered"] >= 1
    # The extractive summarizer copies the caller's words, the account number with them: a leak, scrubbed.
    assert report["identifier_leaks"]["passes_with_leak"] >= 1
    assert all("ACC-4729-18" not in json.dumps(d["summary"]) for d in report["details"])
    assert report["attribution"] is None and report["model_check"][0]["passes"] == 1


@pytest.mark.skipif(not SGD_PATH.is_file(), reason=f"public SGD calls not found at {SGD_PATH}")
def test_sgd_calls_carry_their_attribution() -> None:
    inputs = load_inputs(["sgd"], calls=2, seed=0)
    assert len(inputs) == 2 and all(i.source == "sgd" for i in inputs)
    report = asyncio.run(measure(inputs, ExtractiveSummarizer(), ContextPolicy(), summarizer_name="extractive",
                                 max_passes=1))
    assert "CC BY-SA 4.0" in report["attribution"]


def test_the_calculator_takes_capture_apart_from_r() -> None:
    same = policy_report(PolicyQuestion(6, 5, 4, 31, 0.9))
    assert same["capture"] is None and round(same["survival"], 3) == 0.656
    measured = policy_report(PolicyQuestion(6, 5, 4, 31, 1.0, capture=0.5))
    assert measured["rewrites"] == 4 and measured["survival"] == 0.5  # lost at capture, then copied
    result = CliRunner().invoke(app, ["policy", "--capture", "0.5", "--retention", "0.98"])
    assert result.exit_code == 0
    assert "survival at capture 0.5 on the first pass, then R=0.98 per later pass: 47.1 %" in result.stdout
    bad = CliRunner().invoke(app, ["policy", "--capture", "1.5"])
    assert bad.exit_code == 2 and "--capture must lie in [0, 1]" in bad.stderr


def test_the_fault_model_can_lose_at_capture_only() -> None:
    fault = FaultInjectingSummarizer(1.0, {"a": "ACC-4729-18"}, seed=0, capture=0.0)
    from voice_agent.core.transcript import TranscriptLane

    lane = TranscriptLane()
    lane.append_caller(1, "My account is ACC-4729-18.")
    request = SummaryRequest(previous=EpisodeSummary(), turns=lane.in_turns(1, 1), ledger_roles=(), slot_names=(),
                             pass_turn=5)
    first = asyncio.run(fault.summarize(request))
    assert "ACC-4729-18" not in first.render()
    assert fault.faults and fault.faults[0][0] == "a"
