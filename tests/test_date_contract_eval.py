"""``voice-agent eval dates``: every figure it prints has a case in which the bad thing happens and it shows."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from voice_agent.core.dates.reading import DateReading, verify
from voice_agent.core.guards.date_contract import DateAction, DateContract, DateDecision
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.tool_spec import ToolSpec
from voice_agent.core.transcript import TranscriptEntry, TranscriptLane
from voice_agent.harness.evaluation.cli import eval_app
from voice_agent.harness.evaluation.date_contract_eval import (
    CONTRACT_DIR,
    CachedOnly,
    ContractConfig,
    ContractFactory,
    InputError,
    evaluate_contract,
    figures,
    load_set,
    score_set,
    targets_met,
)

SENTENCES = """
reference_date: "2026-11-18"
items:
  - id: s1
    class: absence
    text: "I'm away till the 24th"
    probes: [{date: "2026-11-20", label: ruled_out}, {date: "2026-11-26", label: open}]
  - id: s2
    class: plain_request
    agent: "When would suit for a callback?"
    text: "Thursday the 26th please"
    probes: [{date: "2026-11-26", label: asked}]
"""
CALLS = """
reference_date: "2026-11-18"
calls:
  - id: c1
    classes: [correction]
    turns:
      - agent: "Billing, how can I help?"
      - caller: "I need a callback, but I'm away till the 24th"
      - agent: "When would suit?"
      - caller: "the 25th"
      - agent: "Wednesday 25 November?"
      - caller: "no wait, make it the 27th"
      - agent: "Friday 27 November, is that right?"
      - caller: "yes that's right"
    clean: "2026-11-27"
    bad: ["2026-11-23"]
    stale: ["2026-11-25"]
"""


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "dev"
    folder.mkdir()
    (folder / "sentences.yaml").write_text(SENTENCES)
    (folder / "calls.yaml").write_text(CALLS)
    return tmp_path


class Always:
    """A broken contract: every date gets the same action (the defect each test plants)."""

    def __init__(self, action: DateAction) -> None:
        self.action = action

    def __call__(self, reference: dt.date) -> Always:
        self.reference = reference
        return self

    def decide(self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane,
               reading: DateReading | None = None) -> list[DateDecision]:
        (real,) = DateContract(DateGuard(self.reference)).decide(tool, arguments, transcript, reading)
        return [replace(real, action=self.action)]


def run(data: Path, contract: ContractFactory | None = None) -> dict[str, Any]:
    sentences, calls = load_set(data, "dev")
    outs = score_set("dev", sentences, calls, contract=contract) if contract else score_set("dev", sentences, calls)
    return figures(outs)


def test_the_contract_meets_every_target_on_the_small_set(data: Path) -> None:
    fig = run(data)
    assert fig["bad_run"] == fig["stale_run"] == fig["ruled_out_run"] == fig["open_run"] == 0
    assert fig["clean_run_rate"] == 1.0 and fig["clean_refused_rate"] == 0.0
    assert all(targets_met(fig).values())


def test_a_contract_that_runs_everything_shows_bad_stale_ruled_out_and_open_dates_run(data: Path) -> None:
    fig = run(data, Always(DateAction.RUN))
    assert (fig["bad_run"], fig["stale_run"], fig["ruled_out_run"], fig["open_run"]) == (1, 1, 1, 1)
    met = targets_met(fig)
    assert met["bad_run"] is met["stale_run"] is met["ruled_out_run"] is met["open_run"] is False


def test_a_contract_that_refuses_everything_shows_clean_dates_refused(data: Path) -> None:
    fig = run(data, Always(DateAction.REFUSE))
    assert fig["clean_refused_rate"] == 1.0 and targets_met(fig)["clean_refused_rate"] is False


def test_a_contract_that_asks_about_everything_shows_no_clean_runs_and_a_confirm_per_action(data: Path) -> None:
    fig = run(data, Always(DateAction.CONFIRM))
    assert fig["clean_run_rate"] == 0.0 and fig["confirms_per_action"] == 1.0
    assert targets_met(fig)["clean_run_rate"] is False


class QuotesWhatWasNeverSaid:
    """A model reader that invents one quote per call (the dropped-quote count must show it)."""

    name = "invents"

    async def read(self, entries: Sequence[TranscriptEntry], reference: dt.date) -> DateReading:
        reply = json.dumps({"statements": [
            {"turn": 1, "quote": "I am on holiday all of December", "about": "callback", "polarity": "unavailable",
             "when": ["all of December"]}]})
        return verify(reply, entries, reference)


def test_quotes_the_model_made_up_are_counted_as_dropped(data: Path) -> None:
    report = evaluate_contract(ContractConfig(sets=("dev",), root=data, reader=QuotesWhatWasNeverSaid(),
                                              reader_name="invents"))
    reading = report["sets"]["dev"]["reading"]
    assert reading["quotes"] == reading["dropped"] == reading["readings"] == 3  # 2 sentences and 1 call
    # A dropped quote changes nothing: the made-up December holiday never turns a clean date into a question.
    assert report["sets"]["dev"]["readers"]["invents"]["overall"]["clean_run_rate"] == 1.0


@pytest.mark.timeout(240)  # every date set through the command: 13 s of CPU, over 60 s on a busy machine
def test_the_command_prints_both_halves_and_fails_clearly_on_broken_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(eval_app, ["dates", "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert set(report["sets"]) == {"dev", "test", "dev-b", "test-b", "dev-c", "test-c"}
    assert "never read item by item" in result.output
    broken = tmp_path / "broken" / "dev"
    broken.mkdir(parents=True)
    (broken / "sentences.yaml").write_text("items: [{text: hi, probes: [{date: nope, label: asked}]}]")
    (broken / "calls.yaml").write_text("calls: []")
    bad = CliRunner().invoke(eval_app, ["dates", "--data", str(tmp_path / "broken"), "--set", "dev"])
    assert bad.exit_code == 2 and "not an ISO date" in bad.output
    with pytest.raises(InputError, match="no data set"):
        load_set(tmp_path, "dev")


def test_the_shipped_halves_load() -> None:
    for name, least in (("dev", 150), ("test", 150), ("dev-b", 40), ("test-b", 40), ("dev-c", 150), ("test-c", 140)):
        sentences, calls = load_set(CONTRACT_DIR, name)
        assert len(sentences) >= least and len(calls) >= 30
        assert all(any(role == "clean" for _, role in c.twins) for c in calls)


class TimesOut:
    name = "slow"

    async def read(self, entries: Sequence[TranscriptEntry], reference: dt.date) -> DateReading:
        from voice_agent.core.dates.reading import ReadingStatus

        return DateReading(ReadingStatus.TIMEOUT, error="no reply within 1 s")


def test_a_reading_that_timed_out_is_asked_again_next_time(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "readings.json"
    evaluate_contract(ContractConfig(sets=("dev",), root=data, reader=TimesOut(), reader_name="slow", cache=cache))
    assert not cache.exists() or json.loads(cache.read_text()) == {}
    evaluate_contract(ContractConfig(sets=("dev",), root=data, reader=QuotesWhatWasNeverSaid(), reader_name="x",
                                     cache=cache))
    kept = json.loads(cache.read_text())
    assert kept and all(v["reader"] == "x" for v in kept.values())  # a reply is kept, under its reader


def test_cached_only_scores_the_readings_kept_and_times_out_the_rest(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "readings.json"
    # one run that reads everything with a (fake) model and keeps its replies
    evaluate_contract(ContractConfig(sets=("dev",), root=data, reader=QuotesWhatWasNeverSaid(), reader_name="local",
                                     cache=cache))
    kept = json.loads(cache.read_text())
    dropped_key = next(iter(kept))
    del kept[dropped_key]  # one reading not finished yet
    cache.write_text(json.dumps(kept))
    reader = CachedOnly()
    report = evaluate_contract(ContractConfig(sets=("dev",), root=data, reader=reader, reader_name="local",
                                              cache=cache))
    reading = report["sets"]["dev"]["reading"]
    assert reader.asked == 1 and reading["failed"] == 1  # the missing one times out, the model is never asked
    assert reading["dropped"] == reading["readings"] - 1  # the kept replies are checked again
    assert json.loads(cache.read_text()) == kept  # a timeout is never cached
    result = CliRunner().invoke(eval_app, ["dates", "--set", "dev", "--data", str(data), "--reader", "local",
                                           "--cached-only", "--cache", str(cache)])
    assert result.exit_code == 0, result.output
    assert "1 readings not cached: counted as timed out" in result.output
    assert CliRunner().invoke(eval_app, ["dates", "--cached-only"]).exit_code != 0  # rules only: nothing to score
