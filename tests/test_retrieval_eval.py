"""``voice-agent eval retrieval``: the figures move the right way when retrieval is broken, and the floor bites.

Fake searchers only (no embedding model): the real index's figures are checked in tests/test_retrieval.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from voice_agent.harness.evaluation.cli import eval_app
from voice_agent.harness.evaluation.retrieval_eval import DEFAULT_SOURCES, FLOOR_SET, QuestionSource, evaluate_sets
from voice_agent.retrieval import load_chunks
from voice_agent.retrieval.index import HybridIndex, RetrievalResult, ScoredChunk
from voice_agent.retrieval.quality import load_questions

CHUNKS = {c.id: c for c in load_chunks()}


def _labels() -> dict[str, tuple[str, ...]]:
    labels: dict[str, tuple[str, ...]] = {}
    for source in DEFAULT_SOURCES:
        for q in source.load().answerable:
            labels[q.text] = q.relevant
    return labels


class LabelledSearcher:
    """Returns, for a labelled question, the chunks ``pick`` chooses from its labels (a reference, not a model)."""

    def __init__(self, pick: str) -> None:
        self.pick = pick
        self.labels = _labels()
        self.ids = sorted(CHUNKS)

    def search(self, query: str) -> RetrievalResult:
        relevant = self.labels.get(query)
        if self.pick == "everything":
            ids = self.ids[:3]
        elif relevant is None:
            ids = []
        elif self.pick == "right":
            ids = [relevant[0]]
        else:  # "neighbour": the chunk after the right one, in id order: always wrong, as a broken index would be
            ids = [self.ids[(self.ids.index(relevant[0]) + 1) % len(self.ids)]]
            ids = [i for i in ids if i not in relevant]
        return RetrievalResult(query, tuple(ScoredChunk(CHUNKS[i], 0.9, 0.9, 9.0) for i in ids))


def test_heldout_set_has_its_planned_size_and_names_real_chunks() -> None:
    heldout = next(s for s in DEFAULT_SOURCES if s.name == FLOOR_SET).load()
    assert len(heldout.answerable) >= 60 and len(heldout.unanswerable) >= 20
    assert sum(q.asr_slip for q in heldout.answerable) >= 10
    for source in DEFAULT_SOURCES:
        for q in source.load().answerable:
            assert set(q.relevant) <= set(CHUNKS), (source.name, q.text)


def test_a_right_retriever_meets_the_floor_and_a_broken_one_misses_it() -> None:
    right = evaluate_sets(LabelledSearcher("right"))
    assert right["floor"]["met"] is True
    assert all(body["precision_at_3"] == 1.0 and body["mrr"] == 1.0 for body in right["sets"].values())
    assert all(body["nothing_injected_rate"] == 1.0 for body in right["sets"].values())

    broken = evaluate_sets(LabelledSearcher("neighbour"))
    assert broken["floor"]["met"] is False and broken["floor"]["precision_at_3"] == 0.0
    assert broken["sets"][FLOOR_SET]["mrr"] == 0.0 and broken["sets"][FLOOR_SET]["asr_slip"]["mrr"] == 0.0

    noisy = evaluate_sets(LabelledSearcher("everything"))
    assert noisy["sets"][FLOOR_SET]["nothing_injected_rate"] == 0.0
    assert noisy["floor"]["met"] is False


def test_cli_exits_1_under_strict_when_the_floor_is_missed_and_hides_blind_misses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(HybridIndex, "load", classmethod(lambda cls, *a, **k: LabelledSearcher("neighbour")))
    runner = CliRunner()
    result = runner.invoke(eval_app, ["retrieval", "--strict", "--show-failures", "2",
                                      "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 1, result.output
    assert "missed" in result.output and "blind: 30 misses, not shown" in result.output
    assert (tmp_path / "r.json").is_file()

    monkeypatch.setattr(HybridIndex, "load", classmethod(lambda cls, *a, **k: LabelledSearcher("right")))
    assert runner.invoke(eval_app, ["retrieval", "--strict"]).exit_code == 0


def test_a_broken_question_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("answerable:\n  - q: 'no labels'\n", encoding="utf-8")
    with pytest.raises(ValueError, match="non-empty 'relevant'"):
        evaluate_sets(LabelledSearcher("right"), (QuestionSource("bad", bad),))
    (tmp_path / "worse.yaml").write_text("answerable: [\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_questions(tmp_path / "worse.yaml")
