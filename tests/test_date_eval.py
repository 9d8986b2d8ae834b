"""``voice-agent eval dates``: the labelled sentences, the call generator, the scorer and its command.

Every metric is shown to move when the bad thing happens, with fake guards and a fake statement
reader written here (the engine is never asked for a label). The hand-checked calls pin the
generator's seed-0 output: when the generator's templates change, re-read those calls and update
the expectations by hand.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from voice_agent.core.dates.model import ConstraintKind, DateConstraint
from voice_agent.core.guards.date_guard import Citation, DateCheck, DateVerdict
from voice_agent.core.tool_spec import ToolSpec
from voice_agent.core.transcript import TranscriptLane
from voice_agent.harness.evaluation import date_eval, perturb
from voice_agent.harness.evaluation.cli import eval_app
from voice_agent.harness.evaluation.date_calls import CALL_CLASSES, generate_calls, say_day, write_calls
from voice_agent.harness.evaluation.date_eval import (
    DEFAULT_SENTENCES,
    SENTENCE_CLASSES,
    DatesConfig,
    InputError,
    Probe,
    SentenceItem,
    binds,
    evaluate_dates,
    lane_turns,
    load_sentences,
    parse_sentences,
    replay_lane,
    score_calls,
    score_sentences,
    side_by_side,
    statement_blocks,
)
from voice_agent.harness.scenarios import Scenario

REF = dt.date(2026, 11, 18)  # a Wednesday


@pytest.fixture(scope="module")
def calls() -> list[dict[str, Any]]:
    return generate_calls(60, 0)


@pytest.fixture(scope="module")
def sentences() -> list[SentenceItem]:
    return load_sentences()


# -- fakes ------------------------------------------------------------------------------------------------------------


def _check(verdict: DateVerdict, param: str = "date", turns: Sequence[int] = (1,)) -> DateCheck:
    return DateCheck(verdict, param, None, f"fake {verdict.value}", tuple(Citation(t, "words") for t in turns))


class ConstantGuard:
    """Says the same verdict about every date argument, citing turn 1."""

    def __init__(self, verdict: DateVerdict) -> None:
        self.verdict = verdict

    def __call__(self, reference: dt.date) -> ConstantGuard:
        return self

    def check(self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane) -> list[DateCheck]:
        return [_check(self.verdict, p.name) for p in tool.params if p.name in arguments and p.kind.value == "date"]


class OracleGuard:
    """Knows every generated record's answer (by reference, date and the last utterance before the action)."""

    def __init__(self, records: Sequence[Mapping[str, Any]], *, cite_right: bool = True,
                 stale_verdict: DateVerdict = DateVerdict.SUPERSEDED) -> None:
        self.answers: dict[tuple[str, str, str], tuple[DateVerdict, list[int]]] = {}
        verdicts = {"ok": DateVerdict.OK, "conflict": DateVerdict.CONFLICT, "superseded": stale_verdict}
        for rec in records:
            action = rec["actions"][-1]
            turns = lane_turns(rec["turns"])
            cites = [turns[i] for i in rec["expect_cite_turns"]] if cite_right else [1]
            key = (rec["reference_date"], action["args"]["date"], rec["turns"][action["turn"] - 1]["text"])
            self.answers[key] = (verdicts[rec["expect_verdict"]], cites)
        self.reference = ""

    def __call__(self, reference: dt.date) -> OracleGuard:
        self.reference = reference.isoformat()
        return self

    def check(self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane) -> list[DateCheck]:
        verdict, cites = self.answers[(self.reference, arguments["date"], transcript.entries[-1].text)]
        return [_check(verdict, "date", cites)]


@dataclass(frozen=True)
class FakeStatement:
    """A statement of the engine's contract (subject, kind, topic, constraint), written by hand."""

    subject: str
    kind: str
    topic: str | None
    constraint: DateConstraint
    text: str = ""


def _on(day: dt.date) -> DateConstraint:
    return DateConstraint(ConstraintKind.ON, day, day, None, "")


def _blocked_until(day: dt.date) -> DateConstraint:
    return DateConstraint(ConstraintKind.UNTIL, None, day, None, "", blocked=True)


FAKE_ENGINE: dict[str, list[FakeStatement]] = {
    "I'm away until the 14th.": [FakeStatement("availability", "constraint", None,
                                               _blocked_until(dt.date(2026, 12, 14)))],
    "I'm flying to Denver on the 3rd.": [FakeStatement("trip", "event", "flight", _on(dt.date(2026, 12, 3)))],
    "Call me back on the 9th.": [FakeStatement("availability", "request", "call", _on(dt.date(2026, 12, 9)))],
    "How come the fee rose this month?": [FakeStatement(
        "charge_period", "event", None, DateConstraint(ConstraintKind.RANGE, dt.date(2026, 11, 1),
                                                       dt.date(2026, 11, 30), None, ""))],
}


def fake_reader(text: str, reference: dt.date) -> list[FakeStatement]:
    """A tiny engine that knows four sentences and nothing else."""
    return FAKE_ENGINE.get(text, [])


def paranoid_reader(text: str, reference: dt.date) -> list[FakeStatement]:
    """Reads every sentence as the caller being away until a month from now."""
    return [FakeStatement("availability", "constraint", None, _blocked_until(reference + dt.timedelta(days=30)))]


def _items(*rows: tuple[str, str, str, str, list[tuple[str, bool]]]) -> list[SentenceItem]:
    data = {"reference_date": REF.isoformat(), "items": [
        {"text": text, "class": klass, "subject": subject, "kind": kind,
         "probes": [{"date": d, "blocks": b} for d, b in probes]}
        for text, klass, subject, kind, probes in rows]}
    return parse_sentences(data)


# -- the labelled sentences -------------------------------------------------------------------------------------------


def test_the_sentences_file_loads_with_enough_items_in_every_class(sentences: list[SentenceItem]) -> None:
    assert len(sentences) >= 320
    per_class = Counter(item.klass for item in sentences)
    assert set(per_class) == set(SENTENCE_CLASSES)
    assert min(per_class.values()) >= 35, per_class
    assert all(item.probes for item in sentences if item.klass != "agreement")
    agreements = [i for i in sentences if i.klass == "agreement"]
    assert all(i.agent and i.proposed and i.agreed is not None for i in agreements)
    assert {True, False} == {i.agreed for i in agreements}
    assert DEFAULT_SENTENCES.read_text(encoding="utf-8").startswith("# Labelled caller sentences")


def test_probes_of_non_binding_classes_never_block(sentences: list[SentenceItem]) -> None:
    for item in sentences:
        if item.klass in ("small_talk", "event_date", "other_subject_limit"):
            assert not any(p.blocks for p in item.probes), item.text


def test_hand_checked_sentence_labels(sentences: list[SentenceItem]) -> None:
    by_text = {(i.text, i.reference): i for i in sentences}
    denver = by_text[("I'm flying to Denver on the 3rd.", REF)]
    assert (denver.subject, denver.kind, denver.tool) == ("trip", "event", "schedule_callback.date")
    assert denver.probes == (Probe(dt.date(2026, 12, 3), False), Probe(dt.date(2026, 12, 4), False))
    away = by_text[("I'm away until the 14th.", REF)]
    assert away.probes == (Probe(dt.date(2026, 12, 10), True), Probe(dt.date(2026, 12, 16), False))
    week = by_text[("Any time except the week of the 7th.", REF)]
    assert [p.blocks for p in week.probes] == [True, True, False, False]
    vans = [i for i in sentences if i.text == "I need the van till the 8th." and i.reference == REF]
    assert {v.tool for v in vans} == {"book_hotel.check_out", "schedule_callback.date"}
    assert all(v.topic == "car" and v.klass == "other_subject_limit" for v in vans)
    assert by_text[("We're going to Florida a week on Tuesday.", REF)].probes[0].day == dt.date(2026, 12, 1)


def test_a_broken_sentences_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown class"):
        parse_sentences({"reference_date": "2026-11-18", "items": [{"text": "x", "class": "chit_chat",
                                                                     "subject": "none", "kind": "none"}]})
    with pytest.raises(InputError, match="agreement item needs"):
        parse_sentences({"reference_date": "2026-11-18", "items": [{"text": "yes", "class": "agreement",
                                                                     "subject": "none", "kind": "none"}]})
    with pytest.raises(InputError, match="not an ISO date"):
        parse_sentences({"reference_date": "2026-11-18", "items": [
            {"text": "x", "class": "request", "subject": "none", "kind": "none",
             "probes": [{"date": "soon", "blocks": True}]}]})
    bad = tmp_path / "bad.yaml"
    bad.write_text("items: [unclosed", encoding="utf-8")
    with pytest.raises(InputError, match="not YAML"):
        load_sentences(bad)


# -- statements: binding and blocking ---------------------------------------------------------------------------------


def test_binding_follows_subject_and_topic() -> None:
    away = FakeStatement("availability", "constraint", None, _blocked_until(dt.date(2026, 12, 14)))
    van = FakeStatement("booking", "constraint", "van", _blocked_until(dt.date(2026, 12, 8)))
    assert binds(away, "schedule_callback.date") and not binds(away, "book_hotel.check_out")
    assert binds(van, "reserve_car.dropoff_date") and not binds(van, "book_hotel.check_out")
    assert not binds(van, "schedule_callback.date")
    trip = FakeStatement("trip", "event", "flight", _on(dt.date(2026, 12, 3)))
    assert not binds(trip, "schedule_callback.date") and not binds(trip, "book_flight.departure_date")


def test_requests_are_alternatives_constraints_add_up_and_a_correction_replaces() -> None:
    d8, d9, d10 = dt.date(2026, 12, 8), dt.date(2026, 12, 9), dt.date(2026, 12, 10)
    either = [FakeStatement("availability", "request", None, _on(d8)),
              FakeStatement("availability", "request", None, _on(d9))]
    assert not statement_blocks(either, "schedule_callback.date", d8)
    assert not statement_blocks(either, "schedule_callback.date", d9)
    assert statement_blocks(either, "schedule_callback.date", d10)
    away = FakeStatement("availability", "constraint", None, _blocked_until(d9))
    assert statement_blocks([*either, away], "schedule_callback.date", d8)
    fixed = [FakeStatement("availability", "request", None, _on(d8)),
             FakeStatement("availability", "correction", None, _on(d10))]
    assert statement_blocks(fixed, "schedule_callback.date", d8)
    assert not statement_blocks(fixed, "schedule_callback.date", d10)


# -- sentence metrics: each one moves when the bad thing happens ------------------------------------------------------


def test_the_fake_engine_scores_perfectly_on_what_it_knows() -> None:
    items = _items(
        ("I'm away until the 14th.", "availability_constraint", "availability", "constraint",
         [("2026-12-10", True), ("2026-12-16", False)]),
        ("I'm flying to Denver on the 3rd.", "event_date", "trip", "event", [("2026-12-03", False)]),
        ("Call me back on the 9th.", "request", "availability", "request", [("2026-12-09", False),
                                                                             ("2026-12-10", True)]),
        ("How come the fee rose this month?", "small_talk", "charge_period", "event", [("2026-11-20", False)]),
    )
    report = score_sentences(items, fake_reader, None)
    for metric in ("subject", "kind", "probes", "probes_ruled_out", "probes_free"):
        assert report["all"][metric]["rate"] == 1.0, metric
    assert report["failures"] == []
    assert report["all"]["guard_probes"]["n"] == 0  # no guard asked


def test_an_engine_that_reads_nothing_misses_every_subject_and_block() -> None:
    items = _items(("I'm away until the 14th.", "availability_constraint", "availability", "constraint",
                    [("2026-12-10", True), ("2026-12-16", False)]),
                   ("ugh its been a crazy week", "small_talk", "none", "none", [("2026-11-20", False)]))
    report = score_sentences(items, lambda text, ref: [], None)
    assert report["by_class"]["availability_constraint"]["subject"]["rate"] == 0.0
    assert report["by_class"]["small_talk"]["subject"]["rate"] == 1.0  # "none" is right for an empty reading
    assert report["all"]["probes_ruled_out"]["rate"] == 0.0 and report["all"]["probes_free"]["rate"] == 1.0
    assert {f["metric"] for f in report["failures"]} == {"subject", "kind", "probes"}


def test_a_paranoid_engine_blocks_the_free_dates_of_small_talk(sentences: list[SentenceItem]) -> None:
    report = score_sentences(sentences, paranoid_reader, None)
    assert report["by_class"]["small_talk"]["probes"]["rate"] < 0.5
    assert report["by_class"]["small_talk"]["subject"]["rate"] == 0.0
    assert report["by_class"]["availability_constraint"]["probes_ruled_out"]["rate"] > 0.5


def test_guard_probe_and_agreement_metrics_move_with_the_guard(sentences: list[SentenceItem]) -> None:
    trusting = score_sentences(sentences, None, ConstantGuard(DateVerdict.OK))
    assert trusting["all"]["guard_ruled_out_refused"]["rate"] == 0.0
    assert trusting["all"]["guard_free_kept"]["rate"] == 1.0
    agreements = [i for i in sentences if i.klass == "agreement"]
    share_agreed = sum(i.agreed is True for i in agreements) / len(agreements)
    assert trusting["all"]["agreement"]["rate"] == pytest.approx(share_agreed)
    assert trusting["all"]["subject"]["n"] == 0  # no reader, no statement metrics
    refusing = score_sentences(sentences, None, ConstantGuard(DateVerdict.CONFLICT))
    assert refusing["all"]["guard_free_kept"]["rate"] == 0.0
    assert refusing["all"]["guard_ruled_out_refused"]["rate"] == 1.0
    assert refusing["by_class"]["small_talk"]["guard_probes"]["rate"] == 0.0


def test_a_crashing_reader_is_a_miss_not_an_abort() -> None:
    def broken(text: str, reference: dt.date) -> list[FakeStatement]:
        raise RuntimeError("boom")

    items = _items(("Call me back on the 9th.", "request", "availability", "request", [("2026-12-09", False)]))
    report = score_sentences(items, broken, None)
    assert report["all"]["subject"]["rate"] == 0.0 and "boom" in report["failures"][0]["got"]


# -- the call generator -----------------------------------------------------------------------------------------------


def test_the_generator_is_deterministic_per_seed(calls: list[dict[str, Any]]) -> None:
    assert generate_calls(60, 0) == calls
    other = generate_calls(60, 1)
    assert [r["turns"] for r in other] != [r["turns"] for r in calls]


def test_at_least_60_long_calls_each_with_its_twins(calls: list[dict[str, Any]]) -> None:
    clean = [r for r in calls if r["twin_role"] == "clean"]
    assert len(clean) >= 60
    assert Counter(r["call_class"] for r in clean).keys() == set(CALL_CLASSES)
    ids = {r["id"] for r in calls}
    for rec in clean:
        assert 30 <= len(rec["turns"]) <= 60
        assert f"{rec['id']}-bad-date" in ids
        assert (f"{rec['id']}-stale-date" in ids) == ("correction" in rec["flags"])
    stale = [r for r in calls if r["twin_role"] == "stale"]
    assert len(stale) >= 20
    for rec in calls:
        Scenario.model_validate(rec)  # a call record
        speakers = [t["speaker"] for t in rec["turns"]]
        assert speakers == ["caller", "agent"] * (len(speakers) // 2)
        action = rec["actions"][-1]
        assert action["tool"] == "schedule_callback"
        assert action["turn"] >= len(rec["turns"]) * 0.6  # late in the call
        assert all(speakers[i] == "caller" and i < action["turn"] for i in rec["expect_cite_turns"])
        assert rec["expect"] == ({} if rec["twin_role"] == "clean" else {"date_guard": rec["expect_verdict"]})
    twins = {r["id"]: r for r in calls}
    for rec in calls:
        if rec["twin_role"] != "clean":
            clean_twin = twins[rec["twin"]]
            assert rec["turns"] == clean_twin["turns"] and rec["actions"][0] == clean_twin["actions"][0]
            assert rec["actions"][1]["args"]["date"] != clean_twin["actions"][1]["args"]["date"]


def _allows(rule: Mapping[str, Any], day: dt.date) -> bool:
    """The generator's constraint, re-read from its JSON with this test's own arithmetic."""
    if rule["kind"] == "no_weekday":
        return day.weekday() != int(rule["weekday"])
    start = dt.date.fromisoformat(rule["start"]) if rule["start"] else dt.date.min
    end = dt.date.fromisoformat(rule["end"]) if rule["end"] else dt.date.max
    inside = start <= day <= end
    return not inside if rule["kind"] in ("blocked_until", "blocked_span", "blocked_day") else inside


def test_every_twin_keeps_or_breaks_the_constraints_it_claims(calls: list[dict[str, Any]]) -> None:
    for rec in calls:
        day = dt.date.fromisoformat(rec["actions"][-1]["args"]["date"])
        binding = [c for c in rec["constraints"] if c["binding"]]
        assert day.weekday() < 5 and day > dt.date.fromisoformat(rec["reference_date"])
        if rec["twin_role"] == "bad":
            broken = [c for c in binding if not _allows(c, day)]
            assert len(broken) == 1 and broken[0]["turn"] == rec["broken"]["turn"], rec["id"]
        else:
            assert all(_allows(c, day) for c in binding), rec["id"]
            for named in (n for c in binding if c["kind"] != "blocked_day" for n in c["named"]):
                assert abs((day - dt.date.fromisoformat(named)).days) >= 2  # never on an arguable boundary


def test_hand_checked_calls(calls: list[dict[str, Any]]) -> None:
    by_id = {r["id"]: r for r in calls}

    def date_of(rid: str) -> str:
        return str(by_id[rid]["actions"][-1]["args"]["date"])

    # Wednesday 2027-02-03: "until the twenty-first" is 2027-02-21; the caller asks for March 8th.
    call = by_id["datecall-0-000"]
    assert call["reference_date"] == "2027-02-03"
    assert call["turns"][10]["text"] == "I'm on holiday until the twenty-first, so nobody will pick up."
    assert call["turns"][26]["text"] == "I'd like the callback on March 8th."
    assert (date_of("datecall-0-000"), call["expect_cite_turns"]) == ("2027-03-08", [26])
    assert date_of("datecall-0-000-bad-date") == "2027-02-15"  # a Monday inside the holiday
    assert "datecall-0-000-stale-date" not in by_id
    # No Fridays; the agent offers Monday October 5th and the caller agrees, twice.
    call = by_id["datecall-0-003"]
    assert call["turns"][6]["text"].startswith("Not on a Friday")
    assert call["turns"][41]["text"] == "The first slot I have is October 5th. Would that be OK?"
    assert [call["turns"][i]["text"] for i in call["expect_cite_turns"]] == ["Yes, that works.", "Yes please."]
    assert date_of("datecall-0-003") == "2026-10-05"
    assert dt.date.fromisoformat(date_of("datecall-0-003-bad-date")).strftime("%A") == "Friday"
    # Away till the 14th, later back by the 8th: the 10th is now fine, the 4th is not, the 21st was replaced.
    call = by_id["datecall-0-007"]
    assert call["reference_date"] == "2026-12-02"
    assert call["turns"][10]["text"] == "Oh, before I forget, I'm away till the 14th."
    assert call["turns"][30]["text"] == "Update on the dates: I'm only away until the 8th now."
    assert call["turns"][40]["text"] == "The 21st, in the morning if possible."
    assert call["turns"][42]["text"] == "Can we move the callback to December 10th?"
    assert (date_of("datecall-0-007"), date_of("datecall-0-007-bad-date"),
            date_of("datecall-0-007-stale-date")) == ("2026-12-10", "2026-12-04", "2026-12-21")
    assert by_id["datecall-0-007-stale-date"]["expect_cite_turns"] == [40, 42]


def test_spoken_dates_name_exactly_their_day() -> None:
    import random

    rng = random.Random(3)
    ref = dt.date(2026, 11, 18)  # Wednesday
    seen = {say_day(dt.date(2026, 12, 1), ref, rng) for _ in range(300)}
    assert "a week on Tuesday" in seen and "Tuesday" not in seen and "next Tuesday" not in seen
    assert {say_day(dt.date(2026, 11, 19), ref, rng) for _ in range(200)} >= {"tomorrow", "Thursday"}
    assert "the 19th" not in {say_day(dt.date(2026, 12, 19), ref, rng) for _ in range(200)}  # 31 days out


def test_calls_are_written_as_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    assert write_calls(path, 3, 5) == len(generate_calls(3, 5))
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert rows == generate_calls(3, 5)


# -- call metrics -----------------------------------------------------------------------------------------------------


def test_a_guard_that_accepts_everything_catches_nothing(calls: list[dict[str, Any]]) -> None:
    report = score_calls(calls, ConstantGuard(DateVerdict.OK))
    body = report["all"]
    assert body["breaks_caught"]["rate"] == 0.0 and body["stale_caught"]["rate"] == 0.0
    assert body["false_alarm"]["rate"] == 0.0
    assert body["clean_cited"]["rate"] < 0.2  # it cites turn 1, which no call asked for the date on


def test_a_guard_that_refuses_everything_raises_only_false_alarms(calls: list[dict[str, Any]]) -> None:
    report = score_calls(calls, ConstantGuard(DateVerdict.CONFLICT))
    body = report["all"]
    assert body["false_alarm"]["rate"] == 1.0 and body["clean_cited"]["rate"] == 0.0
    assert body["breaks_caught"]["rate"] == 1.0 and body["stale_caught"]["rate"] == 1.0
    assert body["stale_superseded"]["rate"] == 0.0
    assert all(cell["false_alarm"]["rate"] == 1.0 for cell in report["by_class"].values())
    assert {f["what"] for f in report["failures"]} == {"false alarm"}


def test_an_oracle_meets_every_target_and_a_wrong_citation_drops_the_cited_rate(calls: list[dict[str, Any]]) -> None:
    right = score_calls(calls, OracleGuard(calls))
    body = right["all"]
    assert (body["false_alarm"]["rate"], body["breaks_caught"]["rate"], body["stale_caught"]["rate"],
            body["clean_cited"]["rate"], body["stale_superseded"]["rate"]) == (0.0, 1.0, 1.0, 1.0, 1.0)
    assert right["failures"] == [] and all(r["met"] for r in side_by_side(right, None))
    wrong = score_calls(calls, OracleGuard(calls, cite_right=False))
    assert wrong["all"]["false_alarm"]["rate"] == 0.0 and wrong["all"]["clean_cited"]["rate"] == 0.0
    assert {f["what"] for f in wrong["failures"]} == {"accepted without citing the caller's turn"}
    conflicted = score_calls(calls, OracleGuard(calls, stale_verdict=DateVerdict.CONFLICT))
    assert conflicted["all"]["stale_caught"]["rate"] == 1.0 and conflicted["all"]["stale_superseded"]["rate"] == 0.0


def test_lane_turns_count_caller_utterances() -> None:
    alternating = [{"speaker": s, "text": str(i)} for i, s in enumerate(["caller", "agent"] * 3)]
    assert lane_turns(alternating) == [1, 1, 2, 2, 3, 3]
    agent_first = [{"speaker": "agent", "text": "hi"}, {"speaker": "caller", "text": "a"},
                   {"speaker": "caller", "text": "b"}, {"speaker": "agent", "text": "c"}]
    assert lane_turns(agent_first) == [1, 1, 2, 2]
    lane = replay_lane({"turns": alternating}, 3)
    assert [(e.turn, e.kind.value, e.text) for e in lane.entries] == [(1, "caller", "0"), (1, "agent", "1"),
                                                                      (2, "caller", "2")]


def test_the_real_guard_is_scored_and_reported(calls: list[dict[str, Any]]) -> None:
    report = score_calls(calls[:12])
    assert report["calls"] == 5 and sum(c["n"] for c in report["all"].values() if c) > 0
    assert set(report["verdicts"]) <= {"clean", "bad", "stale"}
    for failure in report["failures"]:
        assert failure["verdict"] and failure["reason"]


# -- the whole evaluation and the command -----------------------------------------------------------------------------


def test_evaluate_dates_puts_sgd_beside_the_generated_calls(tmp_path: Path) -> None:
    sgd = tmp_path / "sgd.jsonl"
    write_calls(sgd, 2, 9)
    report = evaluate_dates(DatesConfig(sentences=None, n=2, seed=9, sgd=sgd), guard_factory=ConstantGuard(
        DateVerdict.CONFLICT), use_default_reader=False)
    assert report["sentences"] is None and report["calls"]["calls"] == 2
    assert report["sgd"]["records"] == len(generate_calls(2, 9)) and report["sgd"]["recorded"]["n"] > 0
    rows = {r["metric"]: r for r in report["targets"]}
    assert rows["false_alarm"]["generated"] == 1.0 and rows["false_alarm"]["met"] is False
    assert rows["false_alarm"]["sgd"] is not None
    assert report["targets_met"] is False
    missing = evaluate_dates(DatesConfig(sentences=None, n=1, sgd=tmp_path / "none.jsonl"),
                             use_default_reader=False)
    assert "error" in missing["sgd"]


def test_the_command_prints_tables_writes_json_and_exits_by_the_rules(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    small = tmp_path / "s.yaml"
    small.write_text(json.dumps({"reference_date": "2026-11-18", "items": [
        {"text": "I'm away until the 14th.", "class": "availability_constraint", "subject": "availability",
         "kind": "constraint", "probes": [{"date": "2026-12-10", "blocks": True}]}]}), encoding="utf-8")
    monkeypatch.setattr(date_eval, "DateGuard", ConstantGuard(DateVerdict.CONFLICT))
    out = tmp_path / "report.json"
    written = tmp_path / "calls.jsonl"
    args = ["date-verdicts", "--sentences", str(small), "--n", "2", "--no-sgd", "--json", str(out),
            "--write-calls", str(written)]
    result = CliRunner().invoke(eval_app, args)
    assert result.exit_code == 0, result.output
    assert "false alarms" in result.output and "Labelled sentences" in result.output
    assert json.loads(out.read_text())["calls"]["calls"] == 2 and written.is_file()
    strict = CliRunner().invoke(eval_app, [*args, "--strict"])
    assert strict.exit_code == 1
    replayed = CliRunner().invoke(eval_app, ["date-verdicts", "--sentences", str(small), "--calls", str(written),
                                             "--no-sgd"])
    assert replayed.exit_code == 0, replayed.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("items: [{text: x, class: nope, subject: none, kind: none}]", encoding="utf-8")
    assert CliRunner().invoke(eval_app, ["date-verdicts", "--sentences", str(broken), "--no-sgd"]).exit_code == 2
    assert CliRunner().invoke(eval_app, ["date-verdicts", "--sentences", str(tmp_path / "no.yaml")]).exit_code == 2


# -- SGD perturbations from the annotations, not the engine ------------------------------------------------------------


def test_perturbed_dates_come_from_the_annotations_not_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_engine(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the date engine must not compute a perturbation")

    monkeypatch.setattr(perturb, "extract_constraints", no_engine)
    ref = dt.date(2019, 3, 1)  # a Friday
    record = Scenario.model_validate({
        "id": "t", "domain": "Cars", "reference_date": "2019-03-01",
        "turns": [{"speaker": "caller", "text": "I need the car till the 9th."}],
        "facts": [{"key": "Cars.dropoff_date", "value": "the 9th", "canonical": "2019-03-12", "stated_turn": 0,
                   "kind": "date_constraint", "prose_limit_phrase": True,
                   "other_values_stated_for_slot": ["the 11th", "Thursday next week", "9th of March", "10:30"]}]})
    fact = record.facts[0]
    # The limit is the annotation's canonical (not the "9th" of the words), plus two days.
    assert perturb.limit_violation(record, fact, ref) == dt.date(2019, 3, 14)
    assert perturb.stale_dates(fact, dt.date(2019, 3, 12), ref) == [
        dt.date(2019, 3, 11), dt.date(2019, 3, 7), dt.date(2019, 3, 9)]
    assert perturb.resolve_wording("March 1st", ref) == ref
    assert perturb.resolve_wording("the fourteenth", ref) == dt.date(2019, 3, 14)
    assert perturb.resolve_wording("next week", ref) is None
