"""``voice-agent eval FILE``: replaying call records through the context core, guards and date-guard audit.

Uses the public SGD-derived calls in ``../shared/data/`` (Schema-Guided Dialogue, Rastogi et al. 2019,
CC BY-SA 4.0) and small hand-written records.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from voice_agent.core.tool_spec import ParamKind
from voice_agent.harness.evaluation.cli import eval_app, parse_policies
from voice_agent.harness.evaluation.perturb import limit_violation, resolve_wording, stale_dates, unrelated_date
from voice_agent.harness.evaluation.replay import (
    EvalResult,
    ReplayConfig,
    distance_bucket,
    evaluate_file,
    evaluate_records,
    fact_labels,
    key_matches,
    tool_specs,
    verbatim_in,
)
from voice_agent.harness.scenarios import Scenario
from voice_agent.policies import PolicyName

SGD = Path(__file__).resolve().parents[2] / "shared" / "data" / "sgd-calls-public.jsonl"
needs_sgd = pytest.mark.skipif(not SGD.is_file(), reason=f"public SGD calls not found at {SGD}")


@pytest.fixture(scope="module")
def sgd() -> EvalResult:
    if not SGD.is_file():
        pytest.skip(f"public SGD calls not found at {SGD}")
    return evaluate_file(SGD, ReplayConfig())


def _record(**fields: Any) -> Scenario:
    base: dict[str, Any] = {"id": "t", "domain": "billing", "reference_date": "2026-11-30", "turns": [],
                            "facts": [], "actions": []}
    return Scenario.model_validate({**base, **fields})


def _turns(*caller: str) -> list[dict[str, str]]:
    out = []
    for text in caller:
        out += [{"speaker": "caller", "text": text}, {"speaker": "agent", "text": "Okay."}]
    return out


# -- the SGD file ---------------------------------------------------------------------------------------------------


@needs_sgd
def test_sgd_replay_reads_every_call_and_is_json(sgd: EvalResult) -> None:
    report = sgd.report
    assert report["records"] == 61 and report["errors"] == []
    assert set(report["policies"]) == {"lanes", "rolling", "window"}
    json.dumps(report)  # the report is plain JSON
    assert len(report["timelines"]) == 61


@needs_sgd
def test_sgd_presence_inside_the_raw_window_is_complete_for_every_policy(sgd: EvalResult) -> None:
    for policy in ("lanes", "rolling", "window"):
        for kind in ("date_constraint", "other"):
            cell = sgd.report["policies"][policy]["by_kind_bucket"][kind]["0-6"]
            assert cell["n"] > 100 and cell["rate"] == 1.0, (policy, kind)


@needs_sgd
def test_sgd_window_loses_what_left_the_window_and_lanes_keeps_it(sgd: EvalResult) -> None:
    policies = sgd.report["policies"]
    far_window = policies["window"]["by_kind_bucket"]["date_constraint"]["7-15"]
    far_lanes = policies["lanes"]["by_kind_bucket"]["date_constraint"]["7-15"]
    # Default harvest (ids): tool results hand no argument back, so lanes has no slot echo to lean on.
    assert far_lanes["rate"] >= 0.9 and far_window["rate"] < 0.8
    assert policies["lanes"]["linked_arguments"]["rate"] >= policies["rolling"]["linked_arguments"]["rate"]
    assert policies["window"]["tokens_per_request"] < policies["lanes"]["tokens_per_request"]
    assert policies["window"]["drop_log"] == [] and policies["rolling"]["drop_log"]


@needs_sgd
def test_sgd_every_date_argument_gets_a_date_guard_verdict_with_citations(sgd: EvalResult) -> None:
    rows = [r for rep in sgd.replays for r in rep.arguments if r.param_kind == ParamKind.DATE.value]
    assert rows and all(r.date_guard is not None for r in rows)
    assert sum(sgd.report["guards"]["date"].values()) == len(rows)
    for row in rows:
        assert row.date_guard is not None
        if row.date_guard["verdict"] != "ok":
            assert row.date_guard["citations"] and row.date_guard["citations"][0]["turn"] >= 1


@needs_sgd
def test_sgd_date_guard_audit_catches_perturbations_and_explains_failures(sgd: EvalResult) -> None:
    audit = sgd.report["date_guard_accuracy"]
    assert audit["perturbed"]["unrelated"]["n"] == audit["recorded"]["n"] > 200
    assert audit["perturbed"]["unrelated"]["rate"] == 1.0
    assert audit["perturbed"]["limit"]["n"] > 10 and audit["perturbed"]["limit"]["rate"] >= 0.9
    assert audit["perturbed"]["stale"]["n"] > 10
    assert len(audit["failures"]) == audit["recorded"]["false_alarms"]
    for failure in audit["failures"]:
        assert failure["verdict"] != "ok" and failure["reason"] and failure["citations"]


@needs_sgd
def test_sgd_replay_is_deterministic() -> None:
    config = ReplayConfig(policies=(PolicyName.ROLLING,), perturb=False)
    first = evaluate_file(SGD, config).report["policies"]
    second = evaluate_file(SGD, config).report["policies"]
    assert first == second


# -- tool specs, links, presence -------------------------------------------------------------------------------------


def test_identifier_arguments_come_from_identifier_fact_keys_after_the_dot() -> None:
    record = _record(
        facts=[{"key": "Bank_1.account_id", "value": "ACC-1234-56", "stated_turn": 0, "kind": "identifier"}],
        actions=[{"turn": 1, "tool": "lookup", "args": {"account_id": "ACC-1234-56", "day": "2026-12-01",
                                                        "note": "x"}}],
        turns=_turns("my account is ACC-1234-56"),
    )
    spec = tool_specs(record)["lookup"]
    kinds = {p.name: p.kind for p in spec.params}
    assert kinds == {"account_id": ParamKind.IDENTIFIER, "day": ParamKind.DATE, "note": ParamKind.PLAIN}
    assert key_matches("Events_2.date", "date") and not key_matches("Events_2.date", "end_date")


def test_a_tools_map_overrides_inference() -> None:
    record = _record(
        actions=[{"turn": 1, "tool": "refund", "args": {"order_id": "ORD-1", "when": "2026-12-01"}}],
        tools={"refund": {"order_id": "identifier", "when": "plain"}}, turns=_turns("hi"),
    )
    kinds = {p.name: p.kind for p in tool_specs(record)["refund"].params}
    assert kinds == {"order_id": ParamKind.IDENTIFIER, "when": ParamKind.PLAIN}


def test_repeated_fact_keys_get_distinct_labels() -> None:
    record = _record(facts=[
        {"key": "Cars.date", "value": "the 9th", "stated_turn": 0, "kind": "date_constraint"},
        {"key": "Cars.date", "value": "the 10th", "stated_turn": 4, "kind": "date_constraint"},
        {"key": "Cars.city", "value": "Oslo", "stated_turn": 0, "kind": "other"},
    ])
    assert fact_labels(record) == ["Cars.date@0", "Cars.date@4", "Cars.city"]


def test_verbatim_presence_does_not_match_inside_longer_numbers() -> None:
    assert verbatim_in("2", "2 tickets") and not verbatim_in("2", "on 2019-03-12x")
    assert verbatim_in("Vancouver", "to Vancouver, BC") and not verbatim_in("Van", "Vancouver")
    assert [distance_bucket(d) for d in (0, 6, 7, 15, 16, 31, None)] == [
        "0-6", "0-6", "7-15", "7-15", "16-30", "31+", "n/a"]


# -- guards through the replay ---------------------------------------------------------------------------------------


def _id_record(expect: dict[str, str] | None) -> Scenario:
    filler = [f"question number {i} about something else entirely" for i in range(10)]
    return _record(
        id="ids", turns=_turns("my account number is ACC-1234-56", *filler, "please refund it now"),
        facts=[{"key": "Billing_1.account_id", "value": "ACC-1234-56", "canonical": "ACC-1234-56",
                "stated_turn": 0, "kind": "identifier"}],
        actions=[
            {"turn": 1, "tool": "lookup_account", "args": {"account_id": "ACC-1234-56"}},
            {"turn": 23, "tool": "refund", "args": {"account_id": "ACC-1234-57"}},
        ],
        expect=expect,
    )


async def test_replay_runs_the_id_guard_on_identifier_arguments_and_checks_expect() -> None:
    result = await evaluate_records([_id_record({"id_guard": "mutated"})], ReplayConfig(perturb=False))
    rows = {(r["tool"], r["argument"]): r for r in result.report["arguments"]}
    assert rows[("lookup_account", "account_id")]["id_guard"]["verdict"] == "ok"
    assert rows[("refund", "account_id")]["id_guard"]["verdict"] == "mutated"
    expect = result.report["expect"]
    assert (expect["records"], expect["met"], expect["unmet"]) == (1, 1, [])
    assert [m["call"] for m in expect["missing_twin"]] == ["ids"]  # no clean twin: listed, not paired
    lanes = result.report["policies"]["lanes"]["by_kind"]["identifier"]
    window = result.report["policies"]["window"]["by_kind"]["identifier"]
    assert lanes["n"] == 2 and window["n"] == 2


async def test_an_unmet_expect_is_reported() -> None:
    result = await evaluate_records([_id_record({"id_guard": "unknown"})], ReplayConfig(perturb=False))
    assert result.report["expect"]["met"] == 0
    assert result.report["expect"]["unmet"][0]["checks"][0]["observed"] == ["ok", "mutated"]


async def test_harvested_identifiers_stay_in_the_lanes_context_after_the_window() -> None:
    filler = [f"question number {i} about something else entirely" for i in range(10)]
    record = _record(
        turns=_turns("my account number is ACC-1234-56", *filler, "now refund it"),
        facts=[{"key": "account_id", "value": "ACC-1234-56", "stated_turn": 0, "kind": "identifier"}],
        actions=[{"turn": 1, "tool": "lookup_account", "args": {"account_id": "ACC-1234-56"}},
                 {"turn": 23, "tool": "refund", "args": {"account_id": "ACC-1234-56"}}],
    )
    result = await evaluate_records([record], ReplayConfig(perturb=False))
    refund = next(r for r in result.report["arguments"] if r["tool"] == "refund")
    assert refund["present"] == {"lanes": True, "rolling": refund["present"]["rolling"], "window": False}
    assert refund["id_guard"]["verdict"] == "ok" and refund["distance"] == 11 and refund["bucket"] == "7-15"


async def test_a_date_against_a_stated_limit_is_a_conflict_and_its_perturbations_are_caught() -> None:
    record = _record(
        id="dates",
        turns=_turns("I'm travelling until the 14th, so please don't call me before then.",
                     "A callback on the 16th of December would be good."),
        facts=[{"key": "callback.date", "value": "16th of December", "canonical": "2026-12-16", "stated_turn": 2,
                "kind": "date_constraint", "other_values_stated_for_slot": ["the 10th"]}],
        actions=[{"turn": 3, "tool": "schedule_callback", "args": {"date": "2026-12-10"}}],
        tools={"schedule_callback": {"date": "date"}},
        expect={"date_guard": "conflict"},
    )
    result = await evaluate_records([record], ReplayConfig(policies=(PolicyName.LANES,)))
    row = result.report["arguments"][0]
    assert row["date_guard"]["verdict"] == "conflict"
    assert row["date_guard"]["citations"][0]["turn"] == 1
    assert result.report["expect"]["met"] == 1
    audit = result.report["date_guard_accuracy"]
    assert audit["recorded"]["false_alarms"] == 1 and audit["failures"][0]["verdict"] == "conflict"
    assert audit["perturbed"]["unrelated"]["caught"] == 1


def test_malformed_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    good = _record(id="good", turns=_turns("hello"))
    path = tmp_path / "calls.jsonl"
    path.write_text(good.model_dump_json() + "\n{not json\n" + '{"id": "x"}\n', encoding="utf-8")
    report = evaluate_file(path, ReplayConfig(perturb=False)).report
    assert report["records"] == 1
    assert [e["line"] for e in report["errors"]] == [2, 3]


# -- perturbations ----------------------------------------------------------------------------------------------------


def test_perturbation_helpers() -> None:
    reference = dt.date(2019, 3, 1)
    assert resolve_wording("next Monday", reference) == dt.date(2019, 3, 4)
    fact_record = _record(
        reference_date="2019-03-01", turns=[{"speaker": "caller", "text": "Nope, I need the car till the 9th."}],
        facts=[{"key": "Cars.dropoff", "value": "the 9th", "canonical": "2019-03-09", "stated_turn": 0,
                "kind": "date_constraint", "prose_limit_phrase": True, "other_values_stated_for_slot": ["the 7th"]}],
    )
    fact = fact_record.facts[0]
    assert limit_violation(fact_record, fact, reference) == dt.date(2019, 3, 11)
    assert stale_dates(fact, dt.date(2019, 3, 9), reference) == [dt.date(2019, 3, 7)]
    recorded = dt.date(2019, 3, 9)
    rng = random.Random(0)
    for _ in range(20):
        day = unrelated_date(recorded, {recorded + dt.timedelta(days=10)}, rng)
        assert 9 <= abs((day - recorded).days) <= 45 and day != recorded + dt.timedelta(days=10)
    everything = {recorded + dt.timedelta(days=d) for d in range(-45, 46)}
    assert unrelated_date(recorded, everything, rng) not in everything


# -- the command line --------------------------------------------------------------------------------------------------


def test_policy_names_parse() -> None:
    assert parse_policies("all") == (PolicyName.LANES, PolicyName.ROLLING, PolicyName.WINDOW)
    assert parse_policies("rolling, lanes") == (PolicyName.ROLLING, PolicyName.LANES)
    with pytest.raises(ValueError, match="--policy"):
        parse_policies("lanes,summary")


def test_cli_replays_a_file_by_default_and_writes_json(tmp_path: Path) -> None:
    record = _id_record(None)
    path = tmp_path / "calls.jsonl"
    path.write_text(record.model_dump_json() + "\n", encoding="utf-8")
    out = tmp_path / "report.json"
    result = CliRunner().invoke(eval_app, [str(path), "--policy", "lanes,window", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Argument value in the assembled context" in result.output
    report = json.loads(out.read_text())
    assert set(report["policies"]) == {"lanes", "window"}
    explicit = CliRunner().invoke(eval_app, ["replay", str(path), "--policy", "lanes", "--no-perturb"])
    assert explicit.exit_code == 0, explicit.output


def test_cli_rejects_bad_options(tmp_path: Path) -> None:
    missing = CliRunner().invoke(eval_app, [str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2 and "no such file" in missing.output
    path = tmp_path / "calls.jsonl"
    path.write_text(_id_record(None).model_dump_json() + "\n", encoding="utf-8")
    bad = CliRunner().invoke(eval_app, [str(path), "--replay", "some"])
    assert bad.exit_code == 2 and "--replay" in bad.output
