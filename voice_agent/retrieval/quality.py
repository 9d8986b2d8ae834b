"""Retrieval quality on labelled caller questions: precision@3, MRR and the nothing-injected rate.

Definitions (``k`` = 3, the most chunks ever injected):

* precision@3: per answerable question, relevant chunks among those returned (at most 3) divided by the number
  returned; a question for which nothing is returned scores 0. Averaged over answerable questions. The
  denominator is what was injected, not 3, because returning fewer chunks is the point (precision over recall).
* MRR: mean of 1 / rank of the first relevant chunk returned (0 when none is).
* hit@3: share of answerable questions with at least one relevant chunk returned.
* nothing-injected rate: share of unanswerable questions for which nothing is returned.
* empty-on-answerable rate: share of answerable questions for which nothing is returned (the cost of the floor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from voice_agent.datafiles import data_path
from voice_agent.retrieval.index import RetrievalResult

QUESTIONS_PATH = data_path("evals", "retrieval", "calibration.yaml")
"""The labelled question set."""


class Searcher(Protocol):
    """Anything with :meth:`HybridIndex.search`'s shape."""

    def search(self, query: str) -> RetrievalResult:
        """Retrieves for ``query``."""
        ...


@dataclass(frozen=True)
class LabelledQuestion:
    """A caller question and the chunks that answer it.

    Attributes:
        text: The question as an ASR would hand it over.
        relevant: Ids of the chunks that answer it (empty for an unanswerable question).
        asr_slip: The text carries a misrecognised or split word (``asr_slip: true`` in the file).
    """

    text: str
    relevant: tuple[str, ...]
    asr_slip: bool = False


@dataclass(frozen=True)
class QuestionSet:
    """Answerable and unanswerable questions.

    Attributes:
        answerable: Questions with at least one relevant chunk.
        unanswerable: Questions with no answer in the base.
    """

    answerable: tuple[LabelledQuestion, ...]
    unanswerable: tuple[LabelledQuestion, ...]


def _parse(data: object, where: str) -> QuestionSet:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping with 'answerable' and 'unanswerable'")
    answerable: list[LabelledQuestion] = []
    for item in data.get("answerable") or []:
        if not isinstance(item, dict) or not item.get("q") or not item.get("relevant"):
            raise ValueError(f"{where}: an answerable entry needs 'q' and a non-empty 'relevant': {item!r}")
        answerable.append(LabelledQuestion(str(item["q"]), tuple(str(r) for r in item["relevant"]),
                                           bool(item.get("asr_slip", False))))
    unanswerable = [LabelledQuestion(str(q), ()) for q in data.get("unanswerable") or []]
    return QuestionSet(tuple(answerable), tuple(unanswerable))


def load_questions(path: Path | str = QUESTIONS_PATH, *, heldout: bool = False) -> QuestionSet:
    """Reads the question set YAML (``answerable: [{q, relevant}]``, ``unanswerable: [str]``).

    Args:
        path: The YAML file.
        heldout: Read the ``heldout`` section (questions never used for calibration) instead.

    Raises:
        ValueError: The file does not have that shape.
        OSError: The file cannot be read.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    if heldout:
        section = data.get("heldout") if isinstance(data, dict) else None
        return _parse(section or {}, f"{path} (heldout)")
    return _parse(data, str(path))


@dataclass
class QualityReport:
    """Figures over a question set.

    Attributes:
        precision_at_3: See the module docstring.
        mrr: Mean reciprocal rank.
        hit_at_3: Share of answerable questions with a relevant chunk returned.
        nothing_injected_rate: Share of unanswerable questions with nothing returned.
        empty_on_answerable_rate: Share of answerable questions with nothing returned.
        answerable: Number of answerable questions.
        unanswerable: Number of unanswerable questions.
        failures: Answerable questions whose first returned chunk is not relevant, and unanswerable questions
            that injected something: (question, returned ids).
    """

    precision_at_3: float = 0.0
    mrr: float = 0.0
    hit_at_3: float = 0.0
    nothing_injected_rate: float = 0.0
    empty_on_answerable_rate: float = 0.0
    answerable: int = 0
    unanswerable: int = 0
    failures: list[tuple[str, list[str]]] = field(default_factory=list)

    def summary(self) -> str:
        """One line of figures."""
        return (
            f"precision@3 {self.precision_at_3:.3f}  MRR {self.mrr:.3f}  hit@3 {self.hit_at_3:.3f}  "
            f"nothing-injected {self.nothing_injected_rate:.3f} ({self.unanswerable} unanswerable)  "
            f"empty-on-answerable {self.empty_on_answerable_rate:.3f} ({self.answerable} answerable)"
        )


def evaluate(searcher: Searcher, questions: QuestionSet, k: int = 3) -> QualityReport:
    """Runs every question through ``searcher`` and scores the results.

    Args:
        searcher: The retriever.
        questions: The labelled questions.
        k: Only the first ``k`` returned chunks count.

    Returns:
        The figures and the failures.
    """
    report = QualityReport(answerable=len(questions.answerable), unanswerable=len(questions.unanswerable))
    precision = mrr = hits = empty = 0.0
    for question in questions.answerable:
        ids = searcher.search(question.text).ids[:k]
        relevant = set(question.relevant)
        if not ids:
            empty += 1
        else:
            precision += sum(1 for i in ids if i in relevant) / len(ids)
        rank = next((n for n, i in enumerate(ids, start=1) if i in relevant), None)
        if rank is not None:
            mrr += 1.0 / rank
            hits += 1
        if rank != 1:
            report.failures.append((question.text, ids))
    nothing = 0.0
    for question in questions.unanswerable:
        ids = searcher.search(question.text).ids[:k]
        if ids:
            report.failures.append((question.text, ids))
        else:
            nothing += 1
    n = max(report.answerable, 1)
    report.precision_at_3 = precision / n
    report.mrr = mrr / n
    report.hit_at_3 = hits / n
    report.empty_on_answerable_rate = empty / n
    report.nothing_injected_rate = nothing / max(report.unanswerable, 1)
    return report
