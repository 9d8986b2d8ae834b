"""Every headline of ``voice-agent eval`` can fail: the bad thing happens and the metric shows it.

* the default harvest (``ids``) hands no plain argument back, so ``lanes`` cannot "keep" what the caller said long
  ago through a tool result; ``echo`` (the upper bound) does;
* a perturbed record is scored at exactly its perturbed action and argument, and its clean twin at the same one:
  a guard that accepts everything loses the catch, a guard that refuses everything loses the twin;
* a perturbed action that is not the record's last is still scored; a record without its twin is listed.

Uses small hand-made records and the public SGD-derived calls in ``../shared/data/`` (Schema-Guided Dialogue,
Rastogi et al. 2019, CC BY-SA 4.0).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from voice_agent.core.call_state import CallState
from voice_agent.core.guards.date_guard import DateVerdict
from voice_agent.core.guards.id_guard import IdVerdict
from voice_agent.core.tool_gate import GateDecision, ToolGate
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.harness.evaluation.cli import eval_app
from voice_agent.harness.evaluation.html_report import render_html
from voice_agent.harness.evaluation.replay import (
    HARVEST_MODES,
    EvalResult,
    ReplayConfig,
    created_reference,
    evaluate_records,
    read_action_extras,
    replay_backend,
    tool_specs,
)
from voice_agent.harness.scenarios import Action, Scenario, load_call_records
from voice_agent.policies import PolicyName

SGD = Path(__file__).resolve().parents[2] / "shared" / "data" / "sgd-calls-public.jsonl"
needs_sgd = pytest.mark.skipif(not SGD.is_file(), reason=f"public SGD calls not found at {SGD}")
LANES = (PolicyName.LANES,)


def _record(**fields: Any) -> Scenario:
    base: dict[str, Any] = {"id": "t", "domain": "billing", "reference_date": "2026-11-30", "turns": [],
                            "facts": [], "actions": []}
    return Scenario.model_validate({**base, **fields})


def _turns(*caller: str) -> list[dict[str, str]]:
    out = []
    for text in caller:
        out += [{"speaker": "caller", "text": text}, {"speaker": "agent", "text": "Okay."}]
    return out


FILLER = [f"question number {i} about something else entirely" for i in range(10)]


# -- (a) the default harvest hands back no plain argument --------------------------------------------------------------


def _far_city_record() -> Scenario:
    """The caller names the city once, at the start; a booking 11 turns later carries it again."""
    return _record(
        id="far-city", domain="restaurants",
        turns=_turns("I'd like a table in Oslo please", *FILLER, "book it now"),
        facts=[{"key": "Restaurants_1.city", "value": "Oslo", "canonical": "Oslo", "stated_turn": 0,
                "kind": "other"}],
        actions=[{"turn": 1, "tool": "FindRestaurants", "args": {"city": "Oslo"}},
                 {"turn": 23, "tool": "ReserveRestaurant", "args": {"city": "Oslo", "party_size": "2"}}],
    )


FAR_CITY_EXTRAS = {"far-city": [{"service": "Restaurants_1", "transactional": False},
                                {"service": "Restaurants_1", "transactional": True}]}


async def _far_city(harvest: str) -> EvalResult:
    # R = 0: every summary pass damages the city, so only a tool result or a slot can carry it to the booking.
    config = ReplayConfig(policies=LANES, retention=0.0, perturb=False, harvest="echo" if harvest == "echo" else "ids")
    return await evaluate_records([_far_city_record()], config, extras=FAR_CITY_EXTRAS)


async def test_default_harvest_tool_results_hold_no_plain_argument_and_lanes_does_not_keep_it() -> None:
    result = await _far_city("ids")
    replay = result.replays[0]
    assert replay.tool_results[0] == {"status": "ok"}  # a lookup: no echo of the city
    booking = replay.tool_results[1]
    assert set(booking) == {"status", "reservation_id"} and booking["status"] == "ok"
    assert re.fullmatch(r"RSV-[0-9A-F]{8}", booking["reservation_id"])
    assert booking["reservation_id"] == created_reference("far-city", 1, "RSV")  # deterministic from the call id
    assert "Oslo" not in json.dumps(replay.tool_results)
    city = next(r for r in replay.arguments if (r.tool, r.argument) == ("ReserveRestaurant", "city"))
    assert city.distance == 11 and city.bucket == "7-15"
    assert city.present == {"lanes": False}
    assert result.report["harvest"] == "ids"
    assert result.report["policies"]["lanes"]["by_kind_bucket"]["other"]["7-15"]["rate"] == 0.0


async def test_echo_harvest_hands_every_argument_back_and_lanes_keeps_it_through_the_slot() -> None:
    result = await _far_city("echo")
    replay = result.replays[0]
    assert replay.tool_results[0] == {"status": "ok", "city": "Oslo"}
    city = next(r for r in replay.arguments if (r.tool, r.argument) == ("ReserveRestaurant", "city"))
    assert city.present == {"lanes": True}
    assert result.report["harvest"] == "echo"
    assert result.report["harvest_meaning"] == "echo (upper bound: tool results hand every argument back)"
    assert result.report["policies"]["lanes"]["by_kind_bucket"]["other"]["7-15"]["rate"] == 1.0


def test_the_backend_returns_identifiers_and_a_status_never_a_plain_argument() -> None:
    spec = ToolSpec("issue_refund", "", (ToolParam("order_id", "", ParamKind.IDENTIFIER, role="order_id"),
                                         ToolParam("reason", ""), ToolParam("when", "", ParamKind.DATE)),
                    mutates=True)
    args = {"order_id": "ORD-1A2B3C", "reason": "late", "when": "2026-12-01"}
    action = Action(turn=3, tool="issue_refund", args=args)
    result = replay_backend(action, spec, call="c1", index=4)
    assert result == {"status": "ok", "order_id": "ORD-1A2B3C", "confirmation_id": created_reference("c1", 4, "CNF")}
    assert replay_backend(action, spec, call="c1", index=4) == result
    assert replay_backend(action, spec, "echo") == {"status": "ok", **action.args}
    failed = replay_backend(action, spec, call="c1", index=4, extra={"n_results": 0})
    assert failed == {"status": "failed", "order_id": "ORD-1A2B3C"}  # nothing booked, nothing created
    lookup = dataclasses.replace(spec, mutates=False)
    assert replay_backend(action, lookup, extra={"n_results": 0}) == {"status": "no_results", "order_id": "ORD-1A2B3C"}


def test_only_identifiers_and_created_references_are_harvested_by_default() -> None:
    record = _record(
        actions=[{"turn": 1, "tool": "BookAppointment", "args": {"patient_id": "P-12345", "date": "2026-12-01",
                                                                 "doctor": "Dr Who"}}],
        tools={"BookAppointment": {"patient_id": "identifier", "date": "date"}}, turns=_turns("hi"),
    )
    extras = [{"transactional": True}]
    ids = tool_specs(record, "ids", extras)["BookAppointment"]
    assert [(h.path, h.role, h.slot) for h in ids.harvest] == [("patient_id", "patient_id", None),
                                                                ("booking_id", "booking_id", None)]
    echo = tool_specs(record, "echo", extras)["BookAppointment"]
    assert {h.path for h in echo.harvest if h.slot} == {"date", "doctor"}


@needs_sgd
def test_public_calls_default_tool_results_never_echo_a_non_identifier_argument() -> None:
    import asyncio

    records, _ = load_call_records(SGD)
    extras = read_action_extras(SGD)
    config = ReplayConfig(policies=LANES, perturb=False)
    result = asyncio.run(evaluate_records(records, config, extras=extras))
    echoed = 0
    for record, replay in zip(records, result.replays, strict=True):
        for a_index, action in enumerate(record.actions):
            body = replay.tool_results[a_index]
            if body.get("status") in ("rejected", "confirm"):  # the guards answered, not the tool
                continue
            assert set(body) <= {"status", "reservation_id", "booking_id", "ticket_id", "confirmation_id"}, body
            echoed += sum(1 for k in action.args if k in body)
    assert echoed == 0
    echo = asyncio.run(evaluate_records(records[:5], dataclasses.replace(config, harvest="echo"), extras=extras))
    ran = [(action, replay.tool_results[i]) for record, replay in zip(records[:5], echo.replays, strict=True)
           for i, action in enumerate(record.actions)
           if replay.tool_results[i].get("status") not in ("rejected", "confirm")]
    assert ran, "no action of the first five calls ran"
    action, body = ran[0]
    assert {k: body[k] for k in action.args} == action.args


# -- (b), (c), (d) perturbed records and their clean twins ------------------------------------------------------------


def _account(record_id: str, refund_value: str, expect: dict[str, str] | None = None) -> Scenario:
    """A refund whose account id comes from a lookup 10 turns earlier; the last action carries no identifier."""
    return _record(
        id=record_id, turns=_turns("my account number is ACC-1234-56", *FILLER, "please refund it", "thanks, bye"),
        facts=[{"key": "Billing_1.account_id", "value": "ACC-1234-56", "canonical": "ACC-1234-56",
                "stated_turn": 0, "kind": "identifier"}],
        actions=[
            {"turn": 1, "tool": "lookup_account", "args": {"account_id": "ACC-1234-56"}},
            {"turn": 23, "tool": "refund", "args": {"account_id": refund_value, "amount": "20"}},
            {"turn": 25, "tool": "send_survey", "args": {"channel": "sms"}},
        ],
        expect=expect,
    )


def _pair() -> list[Scenario]:
    return [_account("acct", "ACC-1234-56"), _account("acct-bad-id", "ACC-1234-57", {"id_guard": "mutated"})]


Review = Callable[[ToolGate, CallState, str, Mapping[str, Any]], GateDecision]


def _patch_review(monkeypatch: pytest.MonkeyPatch, id_verdict: IdVerdict, date_verdict: DateVerdict) -> None:
    """Every verdict of the gate's review replaced by ``id_verdict`` / ``date_verdict`` (refusing unless ok)."""
    real: Review = ToolGate.review

    def review(self: ToolGate, state: CallState, tool_name: str, arguments: Mapping[str, Any]) -> GateDecision:
        decision = real(self, state, tool_name, arguments)
        ids = tuple(dataclasses.replace(c, verdict=id_verdict) for c in decision.id_checks)
        dates = tuple(dataclasses.replace(c, verdict=date_verdict) for c in decision.date_checks)
        refused = (id_verdict is not IdVerdict.OK and ids) or (date_verdict is not DateVerdict.OK and dates)
        rejection = {"status": "rejected", "guard": "patched", "verdict": "refused", "reason": "test"}
        return GateDecision(tool_name, ids, dates, rejection if refused else None)

    monkeypatch.setattr(ToolGate, "review", review)


async def _score() -> dict[str, Any]:
    result = await evaluate_records(_pair(), ReplayConfig(policies=LANES, perturb=False))
    expect: dict[str, Any] = result.report["expect"]
    return expect


async def test_the_perturbed_action_is_scored_even_when_it_is_not_the_last_and_the_twin_is_accepted() -> None:
    expect = await _score()
    assert expect["harvest"] == "ids" and expect["records"] == 1 and expect["met"] == 1
    (pair,) = expect["pairs"]
    assert (pair["call"], pair["twin"], pair["kind"], pair["located_by"]) == ("acct-bad-id", "acct", "bad-id",
                                                                                "arguments")
    (loc,) = pair["locations"]
    assert (loc["action"], loc["tool"], loc["argument"], loc["value"]) == (1, "refund", "account_id", "ACC-1234-57")
    assert loc["action"] != len(_pair()[1].actions) - 1  # not the last action: the old check never saw it
    assert (loc["verdict"], loc["twin_verdict"]) == ("mutated", "ok")
    kind = expect["by_kind"]["bad-id"]
    assert (kind["n"], kind["caught"], kind["twin_accepted"], kind["pair"]) == (1, 1, 1, 1)
    assert kind["pair_rate"] == 1.0 and expect["missing_twin"] == []
    assert expect["at_argument"]["id_guard"] == {"perturbed": {"mutated": 1}, "twin": {"ok": 1}}


async def test_a_guard_that_accepts_everything_loses_the_catch_and_the_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_review(monkeypatch, IdVerdict.OK, DateVerdict.OK)
    expect = await _score()
    kind = expect["by_kind"]["bad-id"]
    assert (kind["caught"], kind["refused"], kind["twin_accepted"], kind["pair"]) == (0, 0, 1, 0)
    assert kind["caught_rate"] == 0.0 and kind["pair_rate"] == 0.0
    assert expect["met"] == 0 and expect["unmet"][0]["call"] == "acct-bad-id"


async def test_a_guard_that_refuses_everything_loses_the_clean_twin_and_the_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It even says the expected verdict everywhere: the catch alone would look perfect.
    _patch_review(monkeypatch, IdVerdict.MUTATED, DateVerdict.CONFLICT)
    expect = await _score()
    kind = expect["by_kind"]["bad-id"]
    assert (kind["caught"], kind["twin_accepted"], kind["pair"]) == (1, 0, 0)
    assert kind["twin_accepted_rate"] == 0.0 and kind["pair_rate"] == 0.0
    assert expect["at_argument"]["id_guard"]["twin"] == {"mutated": 1}


async def test_a_record_whose_twin_is_missing_is_listed_not_skipped() -> None:
    result = await evaluate_records([_pair()[1]], ReplayConfig(policies=LANES, perturb=False))
    expect = result.report["expect"]
    assert expect["records"] == 1 and expect["pairs"] == []
    (missing,) = expect["missing_twin"]
    assert (missing["call"], missing["twin"], missing["kind"]) == ("acct-bad-id", "acct", "bad-id")
    assert expect["by_kind"]["bad-id"]["missing_twin"] == 1 and expect["by_kind"]["bad-id"]["n"] == 0


async def test_an_explicit_perturbation_field_names_the_twin_and_the_argument() -> None:
    twin, bad = _account("clean-call", "ACC-1234-56"), _account("copy-7", "ACC-1234-57", {"id_guard": "mutated"})
    raw = {"copy-7": {"meta": {"perturbation": {"of": "clean-call", "kind": "swap", "action": 1, "arg": "account_id"}}}}
    result = await evaluate_records([twin, bad], ReplayConfig(policies=LANES, perturb=False), raw=raw)
    (pair,) = result.report["expect"]["pairs"]
    assert (pair["twin"], pair["kind"], pair["located_by"], pair["pair"]) == ("clean-call", "swap", "explicit", True)


@needs_sgd
async def test_a_perturbed_copy_of_a_public_call_is_scored_at_its_perturbed_date_not_the_last_action() -> None:
    records, _ = load_call_records(SGD)
    extras = read_action_extras(SGD)
    clean = next(r for r in records if r.id == "sgd-dev-9_00039")
    assert clean.actions[0].args["date"] == "2019-03-08" and len(clean.actions) > 1
    actions = [a.model_dump() for a in clean.actions]
    actions[0]["args"]["date"] = "2019-04-19"  # a date nobody in the call mentions
    bad = Scenario.model_validate({**clean.model_dump(), "id": f"{clean.id}-bad-date", "actions": actions,
                                   "expect": {"date_guard": "unconfirmed"}})
    extras[bad.id] = extras[clean.id]
    result = await evaluate_records([clean, bad], ReplayConfig(policies=LANES, perturb=False), extras=extras)
    expect = result.report["expect"]
    (pair,) = expect["pairs"]
    (loc,) = pair["locations"]
    assert (pair["kind"], loc["action"], loc["argument"], loc["guard"]) == ("bad-date", 0, "date", "date_guard")
    assert loc["refused"] and loc["twin_verdict"] == "ok" and pair["twin_accepted"]
    assert expect["by_kind"]["bad-date"]["pair"] == int(loc["verdict"] == "unconfirmed")
    assert result.report["guards"]["date_by_set"]["perturbed"]


# -- the harvest mode beside every headline --------------------------------------------------------------------------


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(r.model_dump_json(exclude_none=True) + "\n" for r in _pair()), encoding="utf-8")
    return path


def test_cli_prints_the_harvest_mode_beside_every_headline(tmp_path: Path) -> None:
    path = _write(tmp_path)
    out = tmp_path / "report.json"
    done = CliRunner().invoke(eval_app, [str(path), "--policy", "lanes,window", "--json", str(out)],
                              env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())  # rich wraps long titles
    assert f"harvest: {HARVEST_MODES['ids']}" in text
    for headline in ("Argument value in the assembled context at the action (verbatim) (harvest=ids)",
                     "(harvest=ids) ID guard verdicts", "at exactly the perturbed argument (harvest=ids)",
                     "false alarms on recorded actions (harvest=ids)"):
        assert headline in text, headline
    report = json.loads(out.read_text())
    assert report["harvest"] == "ids" and report["config"]["harvest"] == "ids"
    assert {b["harvest"] for b in report["policies"].values()} == {"ids"}
    for headline in ("guards", "expect", "date_guard_accuracy"):
        assert report[headline]["harvest"] == "ids", headline
    assert report["expect"]["by_kind"]["bad-id"]["pair"] == 1

    echo = CliRunner().invoke(eval_app, [str(path), "--policy", "lanes", "--harvest", "echo", "--no-perturb"],
                              env={"COLUMNS": "200"})
    assert echo.exit_code == 0, echo.output
    echo_text = " ".join(echo.output.split())
    assert "echo (upper bound: tool results hand every argument back)" in echo_text
    assert "(harvest=echo)" in echo_text and "(harvest=ids)" not in echo_text
    old = CliRunner().invoke(eval_app, [str(path), "--harvest", "all"])
    assert old.exit_code == 2 and "echo" in old.output
    helped = CliRunner().invoke(eval_app, ["replay", "--help"], env={"COLUMNS": "200"})
    help_text = " ".join(helped.output.replace("│", " ").split())
    assert "ids (default): only what a real backend returns" in help_text
    assert "echo: upper bound, not a measurement" in help_text


async def test_the_html_report_has_the_distance_id_guard_and_expect_sections_with_the_mode(tmp_path: Path) -> None:
    result = await evaluate_records(_pair(), ReplayConfig(policies=(PolicyName.LANES, PolicyName.WINDOW)))
    page = render_html(result.report, tmp_path, timeline_calls=1).read_text(encoding="utf-8")
    for section in ("distance-breakdown", "id-guard", "expect"):
        start = page.index(f'<section id="{section}">')
        block = page[start:page.index("</section>", start)]
        assert "(harvest=ids)" in block, section
        assert "<table>" in block, section
    distance = page[page.index('id="distance-breakdown"'):]
    assert "7-15" in distance and "identifier" in distance
    guard = page[page.index('id="id-guard"'):page.index('id="expect"')]
    assert "mutated" in guard and "clean twin, same argument" in guard
    expect = page[page.index('id="expect"'):]
    assert "bad-id" in expect and "pair (caught AND twin ok)" in expect
    assert 'id="harvest-mode"' in page
