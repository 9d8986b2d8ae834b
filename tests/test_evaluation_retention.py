"""``voice-agent eval retention``: per-pass retention R per fact kind with a Wilson interval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from voice_agent.harness.evaluation.cli import eval_app
from voice_agent.harness.evaluation.retention import (
    PassEvent,
    base_key,
    kind_of,
    read_drop_logs,
    retention_report,
    retention_table,
    wilson_interval,
)


def test_wilson_interval() -> None:
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(50, 50)
    assert high == 1.0 and low == pytest.approx(0.9287, abs=1e-4)


def test_keys_and_kinds() -> None:
    assert base_key("account_id#2") == "account_id" and base_key("Events_1.date") == "Events_1.date"
    assert base_key("odd#key") == "odd#key"
    kinds = {"account_id": "identifier", "callback": "date_constraint"}
    assert kind_of("ledger:account", kinds) == "ledger (lane-owned)"
    assert kind_of("slot:amount", kinds) == "slot (lane-owned)"
    assert kind_of("callback", kinds) == "date_constraint" and kind_of("other", kinds) == "unknown"


def test_a_fact_in_two_forms_is_one_trial() -> None:
    events = [
        PassEvent("f", "rolling", 10, frozenset({"account_id", "account_id#2", "callback"}),
                  frozenset({"account_id#2"})),
        PassEvent("f", "rolling", 15, frozenset({"account_id"}), frozenset({"account_id"})),
    ]
    rows = {(r["policy"], r["kind"]): r for r in retention_table(
        events, {"account_id": "identifier", "callback": "date_constraint"})}
    assert (rows[("rolling", "identifier")]["offered"], rows[("rolling", "identifier")]["kept"]) == (2, 2)
    assert rows[("rolling", "date_constraint")]["retention"] == 0.0
    assert rows[("rolling", "all")]["passes"] == 2 and rows[("rolling", "all")]["offered"] == 3
    lanes = retention_table([PassEvent("f", "lanes", 10, frozenset({"ledger:account", "callback"}),
                                       frozenset({"callback"}))], {"callback": "date_constraint"})
    by_kind = {r["kind"]: r for r in lanes}
    assert by_kind["ledger (lane-owned)"]["retention"] == 0.0 and by_kind["all"]["offered"] == 1


def _simulate_shaped_report() -> dict[str, object]:
    """The shape proposed for ``voice-agent simulate --json``: per-policy drop logs and the facts' kinds."""
    kept = [{"run": r, "turn": 10, "facts_in": ["account_id"], "facts_out": ["account_id"]} for r in range(90)]
    lost = [{"run": r, "turn": 10, "facts_in": ["account_id"], "facts_out": []} for r in range(90, 100)]
    return {
        "scenario": "billing_dispute", "fact_kinds": {"account_id": "identifier"},
        "policies": {"rolling": {"facts": [{"key": "account_id", "kind": "identifier"}], "drop_log": kept + lost}},
    }


def test_retention_from_a_simulate_report(tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(_simulate_shaped_report()), encoding="utf-8")
    report = retention_report([path])
    row = next(r for r in report["rows"] if r["kind"] == "identifier")
    assert (row["offered"], row["kept"], row["retention"]) == (100, 90, 0.9)
    assert row["ci95"][0] == pytest.approx(0.8256, abs=1e-3) and row["ci95"][1] == pytest.approx(0.9448, abs=1e-3)


def test_a_report_without_drop_log_is_an_error() -> None:
    with pytest.raises(ValueError, match="no drop log"):
        read_drop_logs({"policies": {"lanes": {"facts": []}}}, "old.json")


def test_cli_retention(tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(_simulate_shaped_report()), encoding="utf-8")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(eval_app, ["retention", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Per-pass retention" in result.output and "90.0%" in result.output
    assert json.loads(out.read_text())["passes"] == 100
    bad = tmp_path / "bad.json"
    bad.write_text("not json", encoding="utf-8")
    failed = CliRunner().invoke(eval_app, ["retention", str(bad)])
    assert failed.exit_code == 2 and "not JSON" in failed.output
