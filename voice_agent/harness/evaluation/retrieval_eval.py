"""Retrieval quality on every labelled question set, side by side, with the floor on the held-out set.

The sets (all in ``config/evals/retrieval/``):

* ``tuning``: the questions the scoring constants were calibrated on;
* ``tuning-heldout``: the twelve written after that calibration, in the same file;
* ``heldout``: the query rewrite's set (73 answerable, 22 unanswerable, 14 with ASR slips), written by reading the
  knowledge base as a caller would and frozen before any retrieval change;
* ``blind``: a further 30 + 10, written after ``heldout`` and before any retrieval change, whose misses are never
  printed by default (``--show-failures`` skips it unless ``--blind-failures``), so it stays untuned even
  though ``heldout``'s misses were read while retrieval was worked on.

Figures per set are :func:`voice_agent.retrieval.quality.evaluate`'s (precision@3, MRR, hit@3, nothing-injected
on unanswerable questions, empty-on-answerable), plus precision@3 and MRR over the ASR-slip questions alone.
The floor: precision@3 >= 0.80 on ``heldout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voice_agent.datafiles import data_path
from voice_agent.retrieval.quality import QUESTIONS_PATH, QuestionSet, Searcher, evaluate, load_questions

EVALS_DIR = data_path("evals", "retrieval")
"""Where the held-out question sets live."""

FLOOR_SET = "heldout"
FLOOR_PRECISION_AT_3 = 0.80
"""The floor the held-out set must keep: precision@3 (set when the query rewrite came in)."""


@dataclass(frozen=True)
class QuestionSource:
    """Where one question set is read from.

    Attributes:
        name: The set's name in reports.
        path: The YAML file.
        section: Read the file's ``heldout`` section instead of its top level.
        blind: Its misses are not printed unless asked for.
    """

    name: str
    path: Path
    section: bool = False
    blind: bool = False

    def load(self) -> QuestionSet:
        """The questions.

        Raises:
            ValueError: The file is not a question set.
            OSError: The file cannot be read.
        """
        return load_questions(self.path, heldout=self.section)


DEFAULT_SOURCES = (
    QuestionSource("tuning", QUESTIONS_PATH),
    QuestionSource("tuning-heldout", QUESTIONS_PATH, section=True),
    QuestionSource(FLOOR_SET, EVALS_DIR / "heldout.yaml"),
    QuestionSource("blind", EVALS_DIR / "blind.yaml", blind=True),
)
"""Every labelled set, the calibration set first."""


def _asr_subset(questions: QuestionSet) -> QuestionSet:
    return QuestionSet(tuple(q for q in questions.answerable if q.asr_slip), ())


def evaluate_sets(searcher: Searcher, sources: tuple[QuestionSource, ...] = DEFAULT_SOURCES) -> dict[str, Any]:
    """Scores ``searcher`` on every set and checks the floor.

    Args:
        searcher: The retriever (anything with ``search(query) -> RetrievalResult``).
        sources: The sets; the floor applies to the one named :data:`FLOOR_SET` when present.

    Returns:
        ``{"sets": {name: figures}, "floor": {...}}``; each set's figures carry its ``failures``
        (question, returned ids) and whether it is ``blind``.

    Raises:
        ValueError: A set file is not a question set.
        OSError: A set file cannot be read.
    """
    sets: dict[str, Any] = {}
    for source in sources:
        questions = source.load()
        report = evaluate(searcher, questions)
        figures: dict[str, Any] = {
            "path": str(source.path) + (" (heldout section)" if source.section else ""),
            "answerable": report.answerable,
            "unanswerable": report.unanswerable,
            "precision_at_3": report.precision_at_3,
            "mrr": report.mrr,
            "hit_at_3": report.hit_at_3,
            "nothing_injected_rate": report.nothing_injected_rate,
            "empty_on_answerable_rate": report.empty_on_answerable_rate,
            "blind": source.blind,
            "failures": [{"question": q, "returned": ids} for q, ids in report.failures],
        }
        slips = _asr_subset(questions)
        if slips.answerable:
            slip_report = evaluate(searcher, slips)
            figures["asr_slip"] = {"answerable": slip_report.answerable,
                                   "precision_at_3": slip_report.precision_at_3, "mrr": slip_report.mrr}
        sets[source.name] = figures
    floor: dict[str, Any] = {"set": FLOOR_SET, "precision_at_3_min": FLOOR_PRECISION_AT_3, "met": None}
    if FLOOR_SET in sets:
        value = sets[FLOOR_SET]["precision_at_3"]
        floor.update(precision_at_3=value, met=value >= FLOOR_PRECISION_AT_3)
    return {"sets": sets, "floor": floor}
