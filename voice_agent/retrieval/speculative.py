"""Per-call speculative retrieval: retrieve on interim transcripts, serve the final from the cache.

While the caller is still speaking, every interim transcript (debounced) is retrieved in the background and the
result cached under the normalised query. When the final transcript arrives, a cached result is used if its query
is close enough to the final text (token Jaccard similarity over the current turn's queries, or the exact same
normalised query from any earlier turn): a slightly stale hit is preferred over a fresh miss. Otherwise the final
text is retrieved on the critical path.

Speculative work has no side effects (it only fills this cache), is idempotent (a normalised query is retrieved at
most once per call), and is cancellable (:meth:`SpeculativeRetriever.cancel_pending` on a barge-in,
:meth:`SpeculativeRetriever.close` at the end of the call). With no interims at all, every final is simply a miss.

At most one retrieval runs at a time and at most one waits to run; a newer interim replaces the waiting one (the
debounce). A running retrieval is never cancelled by a newer interim: its result may still serve the final.

Speculation can be budgeted: an interim is then only retrieved when it changed enough since the turn's last
speculative retrieval (token Jaccard below ``requery_below``), and at most ``max_per_turn`` speculative retrievals
run per turn. Both are off by default: on word-by-word interims (``scripts/bench_retrieval.py``) the budget cut
retrievals from 6.6 to 2.2 per turn but the hit rate from 96 % to 79 % (the cached queries are older), while a
debounce longer than the gap between interims (retrieve when the interims pause) gave 1.03 per turn at 96 %.
``min_new_words`` is the budgeted calls' gate (:data:`BUDGETED_SPECULATION`): an interim repeats what the last
one said, so only one bringing new content words is worth a search. Every record counts its searches
(speculative and critical-path), and the per-call report holds the mean against :data:`SEARCH_BUDGET_PER_TURN`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from voice_agent.retrieval.index import RetrievalResult

FILLERS = frozenset({"um", "umm", "uh", "uhh", "er", "erm", "ah", "hmm", "mm", "mhm"})
"""Hesitation tokens dropped by :func:`normalise_tokens` (ASRs emit them inconsistently between interim and final)."""

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")

STOP_WORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "so", "to", "of", "in", "on", "at", "for", "with", "from", "by", "is",
    "are", "was", "were", "be", "been", "am", "it", "its", "this", "that", "my", "me", "i", "im", "ive",
    "you", "your", "we", "our", "can", "could", "would", "will", "do", "does", "did", "have", "has", "had", "just",
    "like", "please", "yes", "no", "okay", "ok", "well", "oh", "there", "what", "how", "about", "if", "not",
    "dont", "cant", "whats", "thats", "youre", "hi", "hello", "thanks", "want", "need", "know", "get", "when",
    "where", "why", "yeah", "sure", "one",
})
"""Words that do not make an interim worth a new search (:attr:`SpeculativeConfig.min_new_words`), as
:func:`normalise_tokens` spells them (apostrophes dropped). Not "id": "I'd" becomes it too, but here it is mostly
an account or order ID, a word worth searching on."""

SEARCH_BUDGET_PER_TURN = 2.0
"""Most searches (speculative and critical-path) a turn may cost on average."""


class Searcher(Protocol):
    """A synchronous retriever (:class:`~voice_agent.retrieval.index.HybridIndex`)."""

    def search(self, query: str) -> RetrievalResult:
        """Retrieves for ``query``."""
        ...


Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]
"""Starts a background task (``asyncio.create_task``, or a pipecat processor's ``create_task``)."""


def normalise_tokens(text: str) -> list[str]:
    """Lower-case word tokens without punctuation or hesitation fillers (apostrophes inside words dropped)."""
    return [w.replace("'", "") for w in _WORD.findall(text.lower()) if w not in FILLERS]


def content_words(tokens: frozenset[str]) -> frozenset[str]:
    """The tokens that can make an interim worth a new search (those not in :data:`STOP_WORDS`)."""
    return tokens - STOP_WORDS


def normalise(text: str) -> str:
    """The cache key of ``text``: its normalised tokens joined by single spaces."""
    return " ".join(normalise_tokens(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two token sets (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class SpeculativeConfig:
    """Tuning of the speculative cache.

    Attributes:
        debounce_s: Quiet time after an interim before it is retrieved; a newer interim restarts the wait.
        min_words: Interims with fewer normalised words are not retrieved (too little to go on).
        match_threshold: Least token Jaccard similarity between the final text and a cached query of the same
            turn for the cached result to be used.
        max_entries: Cached queries kept per call (least recently used dropped first).
        requery_below: An interim is retrieved only when its token Jaccard similarity with the turn's last
            speculative query is below this (1.0, the default: every new interim is retrieved).
        max_per_turn: Most speculative retrievals per turn (the final's own retrieval on a miss is not counted;
            None, the default: no limit).
        min_new_words: An interim is retrieved only when it has at least this many content words (not
            :data:`STOP_WORDS`) absent from the turn's last speculative query (0, the default: no such gate).
    """

    debounce_s: float = 0.08
    min_words: int = 3
    match_threshold: float = 0.6
    max_entries: int = 128
    requery_below: float = 1.0
    max_per_turn: int | None = None
    min_new_words: int = 0


BUDGETED_SPECULATION = SpeculativeConfig(debounce_s=0.0, min_words=4, requery_below=0.6, min_new_words=2)
"""The tuning of served and simulated calls (at most :data:`SEARCH_BUDGET_PER_TURN` searches a turn on
average). In the audio path interims are partial decodes of the growing segment, at pauses and every 1.5 s,
each repeating the last; in text mode they come word by word. A search is only worth it once the last one could
no longer serve the interim (token Jaccard below the match threshold, 0.6) and the interim brings two new content
words; the first waits for four words, as a shorter prefix rarely matches the final. Searches then grow
geometrically with the utterance (at about 4, 7 and 12 words) instead of one per interim; a fixed cap per turn
would spend itself on the early, useless prefixes. No debounce: partials come half a second or more apart, and
the last one often lands just before the final, which would cancel a search still waiting.
``voice-agent simulate`` (both modalities) prints the hit rate and searches per turn."""


@dataclass(frozen=True)
class TurnRetrieval:
    """What retrieval did for one final transcript (the observability record of the turn).

    Attributes:
        status: ``hit`` (served by speculative work) or ``miss`` (retrieved on the critical path).
        source: ``cache``, ``inflight`` (a speculative retrieval still running was awaited) or ``critical_path``.
        critical_path_ms: Time from the final transcript to having the chunks.
        final_query: The final text, normalised.
        matched_query: The normalised interim the result was retrieved for (the final itself on a miss).
        similarity: Token Jaccard similarity of the matched query and the final.
        staleness_words: Words in one of the two but not the other (0 when the interim equals the final).
        chunk_ids: Retrieved chunk ids, best first.
        scores: Their fused scores.
        interims: Interim transcripts seen in this turn.
        speculative_retrievals: Background retrievals completed or started in this turn.
        searches: Searches this turn cost: its speculative retrievals, plus the final's own on a miss.
        result: The retrieval result used.
    """

    status: Literal["hit", "miss"]
    source: Literal["cache", "inflight", "critical_path"]
    critical_path_ms: float
    final_query: str
    matched_query: str
    similarity: float
    staleness_words: int
    chunk_ids: tuple[str, ...]
    scores: tuple[float, ...]
    interims: int
    speculative_retrievals: int
    searches: int
    result: RetrievalResult = field(repr=False, compare=False)

    @property
    def texts(self) -> list[str]:
        """The chunk texts to inject."""
        return self.result.texts

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict for the turn record and span (no caller words: queries are PII)."""
        return {
            "status": self.status,
            "source": self.source,
            "critical_path_ms": round(self.critical_path_ms, 3),
            "similarity": round(self.similarity, 3),
            "staleness_words": self.staleness_words,
            "chunk_ids": list(self.chunk_ids),
            "scores": list(self.scores),
            "interims": self.interims,
            "speculative_retrievals": self.speculative_retrievals,
            "searches": self.searches,
        }


@dataclass
class _Entry:
    key: str
    tokens: frozenset[str]
    generation: int
    result: RetrievalResult | None = None
    task: asyncio.Task[None] | None = None
    running: bool = False


class SpeculativeRetriever:
    """One call's speculative retrieval cache.

    Args:
        searcher: The synchronous retriever; it runs in a worker thread.
        config: Debounce, thresholds and size.
        spawn: Starts background tasks; ``asyncio.create_task`` by default. A pipecat processor passes its own
            ``create_task`` so the pipeline's task manager tracks them.
        clock: Seconds, for :attr:`TurnRetrieval.critical_path_ms`; ``time.perf_counter`` by default (tests pass
            one that moves only when they say).

    Attributes:
        retrievals: Retrievals run so far (speculative and critical-path), for the bench.
        skipped: Interims not retrieved because the turn's budget was spent or they had not changed enough.
        turns: The record of every final so far.
    """

    def __init__(self, searcher: Searcher, config: SpeculativeConfig | None = None, spawn: Spawn | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._searcher = searcher
        self.config = config or SpeculativeConfig()
        self._spawn: Spawn = spawn or asyncio.create_task
        self._clock = clock
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._pending: _Entry | None = None
        self._run_slot = asyncio.Lock()
        self._generation = 0
        self._interims = 0
        self._speculative = 0
        self._last_speculated: frozenset[str] | None = None
        self._closed = False
        self.retrievals = 0
        self.skipped = 0
        self.turns: list[TurnRetrieval] = []

    # -- interims -------------------------------------------------------------------------------------------------

    def on_interim(self, text: str) -> None:
        """Schedules a speculative retrieval of an interim transcript (debounced, deduplicated).

        Args:
            text: The interim transcript as the STT sent it.
        """
        if self._closed:
            return
        self._interims += 1
        tokens = normalise_tokens(text)
        if len(tokens) < self.config.min_words:
            return
        key = " ".join(tokens)
        existing = self._cache.get(key)
        if existing is not None:
            existing.generation = self._generation  # said again in this turn: eligible for a stale hit
            self._cache.move_to_end(key)
            return
        if self._pending is not None and self._pending.task is not None:
            self._pending.task.cancel()  # debounce: the newer interim replaces the one waiting to run
            self._cache.pop(self._pending.key, None)
        entry = _Entry(key=key, tokens=frozenset(tokens), generation=self._generation)
        self._cache[key] = entry
        self._pending = entry
        entry.task = self._spawn(self._speculate(entry, text))
        self._evict()

    async def _speculate(self, entry: _Entry, text: str) -> None:
        try:
            await asyncio.sleep(self.config.debounce_s)
            async with self._run_slot:
                if self._pending is entry:
                    self._pending = None
                if not self._worth_retrieving(entry):
                    self.skipped += 1
                    if self._cache.get(entry.key) is entry:
                        del self._cache[entry.key]
                    return
                entry.running = True
                self._speculative += 1
                self._last_speculated = entry.tokens
                entry.result = await self._search(text)
        except asyncio.CancelledError:
            if entry.result is None and self._cache.get(entry.key) is entry:
                del self._cache[entry.key]
            if self._pending is entry:
                self._pending = None
            raise
        finally:
            entry.running = False
            entry.task = None

    def _worth_retrieving(self, entry: _Entry) -> bool:
        """Whether the turn's budget allows ``entry`` and it changed enough since the last speculative query."""
        if entry.generation != self._generation:
            return False
        if self.config.max_per_turn is not None and self._speculative >= self.config.max_per_turn:
            return False
        last = self._last_speculated
        if last is None:
            return True
        if self.config.min_new_words and len(content_words(entry.tokens - last)) < self.config.min_new_words:
            return False
        return jaccard(entry.tokens, last) < self.config.requery_below

    async def _search(self, text: str) -> RetrievalResult:
        self.retrievals += 1
        return await asyncio.to_thread(self._searcher.search, text)

    # -- the final ------------------------------------------------------------------------------------------------

    async def on_final(self, text: str) -> TurnRetrieval:
        """The chunks for a final transcript: from the cache when close enough, else retrieved now.

        Args:
            text: The final transcript (or the text-mode user message).

        Returns:
            The turn's record; ``.texts`` are what to inject. The next turn starts after this call.
        """
        started = self._clock()
        tokens = normalise_tokens(text)
        key = " ".join(tokens)
        token_set = frozenset(tokens)
        self._drop_pending()
        best: _Entry | None = None
        best_similarity = -1.0
        for entry in reversed(self._cache.values()):  # newest first: ties go to the latest interim
            if entry.key == key:
                similarity = 1.0
            elif entry.generation == self._generation:
                similarity = jaccard(entry.tokens, token_set)
            else:
                continue
            if similarity >= self.config.match_threshold and similarity > best_similarity:
                if entry.result is None and not entry.running:
                    continue
                best, best_similarity = entry, similarity
        record: TurnRetrieval
        if best is not None:
            source: Literal["cache", "inflight"] = "cache"
            if best.result is None and best.task is not None:
                source = "inflight"
                current = asyncio.current_task()
                try:
                    await asyncio.shield(best.task)
                except asyncio.CancelledError:
                    if current is not None and current.cancelling():
                        raise  # we are cancelled ourselves; otherwise the speculation was, so retrieve below
            if best.result is not None:
                self._cache.move_to_end(best.key)
                record = self._record("hit", source, started, key, best, best_similarity, token_set)
                return self._finish(record)
        result = await self._search(text)
        entry = _Entry(key=key, tokens=token_set, generation=self._generation, result=result)
        if key:
            self._cache[key] = entry
            self._evict()
        record = self._record("miss", "critical_path", started, key, entry, 1.0, token_set)
        return self._finish(record)

    def _record(
        self,
        status: Literal["hit", "miss"],
        source: Literal["cache", "inflight", "critical_path"],
        started: float,
        final_key: str,
        entry: _Entry,
        similarity: float,
        final_tokens: frozenset[str],
    ) -> TurnRetrieval:
        result = entry.result if entry.result is not None else RetrievalResult(query=final_key)
        return TurnRetrieval(
            status=status,
            source=source,
            critical_path_ms=(self._clock() - started) * 1000,
            final_query=final_key,
            matched_query=entry.key,
            similarity=similarity,
            staleness_words=len(entry.tokens ^ final_tokens),
            chunk_ids=tuple(result.ids),
            scores=tuple(result.scores),
            interims=self._interims,
            speculative_retrievals=self._speculative,
            searches=self._speculative + (status == "miss"),
            result=result,
        )

    def _finish(self, record: TurnRetrieval) -> TurnRetrieval:
        self.turns.append(record)
        self._generation += 1
        self._interims = 0
        self._speculative = 0
        self._last_speculated = None
        return record

    # -- cancellation ---------------------------------------------------------------------------------------------

    def _drop_pending(self) -> None:
        pending = self._pending
        if pending is not None and pending.task is not None and not pending.running:
            pending.task.cancel()
            self._cache.pop(pending.key, None)
        self._pending = None

    def cancel_pending(self) -> int:
        """Cancels every speculative retrieval not finished (a barge-in); cached results stay.

        Returns:
            How many tasks were cancelled.
        """
        cancelled = 0
        for entry in list(self._cache.values()):
            if entry.task is not None and not entry.task.done():
                entry.task.cancel()
                cancelled += 1
            if entry.result is None:
                del self._cache[entry.key]
        self._pending = None
        return cancelled

    async def close(self) -> None:
        """Ends the call: cancels all speculative work, waits for it to stop and empties the cache."""
        self._closed = True
        tasks = [e.task for e in self._cache.values() if e.task is not None and not e.task.done()]
        self.cancel_pending()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._cache.clear()

    @property
    def in_flight(self) -> int:
        """Speculative tasks not finished."""
        return sum(1 for e in self._cache.values() if e.task is not None and not e.task.done())

    @property
    def cached_queries(self) -> list[str]:
        """Normalised queries with a result, oldest first."""
        return [k for k, e in self._cache.items() if e.result is not None]

    def _evict(self) -> None:
        while len(self._cache) > self.config.max_entries:
            key, entry = next(iter(self._cache.items()))
            if entry.task is not None and not entry.task.done():
                break  # never drop work in progress; the cache shrinks once it finishes
            del self._cache[key]
