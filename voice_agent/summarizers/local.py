"""An in-process summarizer on llama-cpp-python and the packaged model (``summarizer.kind = "local"``).

It serves both policies, like :class:`~voice_agent.summarizers.llm.LLMSummarizer`: the structured
:class:`~voice_agent.core.summary.EpisodeSummary` of ``lanes`` (JSON constrained by the summary's
schema, which llama.cpp turns into a grammar, so every reply parses) and the free text of ``rolling``.
Identifier values in its output are replaced by ledger roles after every ``lanes`` pass by the pass scheduler
(:func:`voice_agent.core.role_scrub.scrub_summary`, DESIGN rule 9), which counts each substitution into
the drop log; it is not scrubbed here too, or the drop log would count nothing.

llama.cpp blocks, so every pass runs on one worker thread per process (the model is not thread-safe;
passes of all calls queue there) and the event loop only awaits it. With the session's background
scheduling (``summarizer.background``) a pass never delays a reply. A pass that fails,
exceeds ``local_timeout_secs`` or is cancelled stops generating at the next token and keeps the previous
summary: the call never breaks because of a summary.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import copy
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from loguru import logger
from pydantic import ValidationError

from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.transcript import TranscriptEntry
from voice_agent.settings import SummarizerConfig
from voice_agent.summarizers.llm import EPISODE_SUMMARY_SCHEMA, TEXT_SUMMARY_INSTRUCTIONS
from voice_agent.summarizers.local_model import DEFAULT_MODEL, LocalModelError, ensure_model, extra_status

DEFAULT_CONTEXT_TOKENS = 4096

T = TypeVar("T")


def _without_coverage(schema: dict[str, Any]) -> dict[str, Any]:
    """The summary schema minus ``covers_through_turn``: the pass scheduler sets it, the model need not write it."""
    out = copy.deepcopy(schema)
    out["properties"].pop("covers_through_turn", None)
    out["required"] = [name for name in out["required"] if name != "covers_through_turn"]
    return out


LOCAL_SUMMARY_SCHEMA = _without_coverage(EPISODE_SUMMARY_SCHEMA)

LOCAL_GUIDANCE = """\
Write every section as short English sentences, one fact per item.
Copy every item of the previous summary that is still true, then add what the new turns say:
every fact the caller stated, every option the caller ruled out (in rejected, with the reason),
every action completed (in decided) and every request not yet done (in pending).
"""
"""Added to the shared instructions for a small model, which otherwise keeps the old summary and
skips the new turns (measured: capture and intake are where it loses facts)."""


@dataclass(frozen=True)
class Completion:
    """What one generation returned.

    Attributes:
        text: The generated text ("" when nothing came).
        prompt_tokens: Tokens read.
        completion_tokens: Tokens written.
        seconds: Wall time of the generation on the worker thread.
        stopped: Why it stopped early (``cancelled``, ``timeout``), None when it finished.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    stopped: str | None = None


class CompletionEngine(Protocol):
    """Blocking chat completion; runs on the summarizer's worker thread, never on the event loop."""

    def complete(
        self, messages: list[dict[str, str]], schema: dict[str, Any] | None, *, max_tokens: int,
        temperature: float, seed: int, stop: threading.Event,
    ) -> Completion:
        """Generates a reply; checks ``stop`` between tokens and returns what it has when it is set."""
        ...


class LlamaEngine:
    """The packaged GGUF model in llama-cpp-python, loaded on first use (on the worker thread).

    Args:
        model: A local model manifest key.
        threads: CPU threads llama.cpp uses.
        context_tokens: Context window.
        model_path: A GGUF file to use instead of the assembled packaged model (no digest check).
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, threads: int | None = None,
                 context_tokens: int = DEFAULT_CONTEXT_TOKENS, model_path: Path | None = None) -> None:
        self.model = model
        self.threads = threads or default_threads()
        self.context_tokens = context_tokens
        self.model_path = model_path
        self._llama: Any = None
        self.load_seconds: float | None = None

    def _load(self) -> Any:
        if self._llama is None:
            started = time.monotonic()
            path = self.model_path or ensure_model(self.model)
            from llama_cpp import Llama  # imported here: the extra is optional

            self._llama = Llama(model_path=str(path), n_ctx=self.context_tokens, n_threads=self.threads,
                                n_threads_batch=self.threads, verbose=False)
            # Free the model before interpreter teardown: llama.cpp's own finaliser runs after its
            # module globals are gone and prints a TypeError on every exit otherwise.
            atexit.register(self._llama.close)
            self.load_seconds = time.monotonic() - started
            logger.info("local summarizer: loaded {} ({} threads) in {:.1f} s", path.name, self.threads,
                        self.load_seconds)
        return self._llama

    def complete(
        self, messages: list[dict[str, str]], schema: dict[str, Any] | None, *, max_tokens: int,
        temperature: float, seed: int, stop: threading.Event,
    ) -> Completion:
        """Streams a chat completion token by token, so a set ``stop`` ends it at the next token."""
        llama = self._load()
        started = time.monotonic()
        prompt = "\n".join(m["content"] for m in messages)
        prompt_tokens = len(llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=False))
        kwargs: dict[str, Any] = {}
        if schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        stream = llama.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=temperature,
                                              seed=seed, stream=True, **kwargs)
        pieces: list[str] = []
        stopped = None
        try:
            for chunk in stream:
                if stop.is_set():
                    stopped = "cancelled"
                    break
                delta = chunk["choices"][0].get("delta", {})
                content = delta.get("content")
                if content:
                    pieces.append(content)
        finally:
            close = getattr(stream, "close", None)
            if callable(close):
                close()  # ends llama.cpp's generation loop now, not at the next max_tokens
        return Completion("".join(pieces), prompt_tokens, len(pieces), time.monotonic() - started, stopped)


def default_threads() -> int:
    """All CPU cores but one, at least one: a served call's audio and LLM keep a core.

    It also keeps a pass steady on a busy machine: llama.cpp's threads wait for each other, so with both
    cores of two and two other busy processes a pass went from 11 s to over 120 s; one thread took 21 s.
    """
    return max(1, (os.cpu_count() or 2) - 1)


class _Worker:
    """One daemon thread running blocking jobs in order (llama.cpp contexts are not thread-safe).

    A daemon, so a process never waits at exit for a pass nobody needs; at exit every running job is
    told to stop (its ``stop`` event), which llama.cpp sees at the next token.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.stops: set[threading.Event] = set()

    def submit(self, job: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Queues ``job`` behind the running one; its result or exception lands in the returned future."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="local-summarizer", daemon=True)
                self._thread.start()
        self._jobs.put((job, future))
        return future

    def _run(self) -> None:
        while True:
            job, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the awaiting coroutine
                future.set_exception(exc)

    def stop_all(self) -> None:
        """Tells every running job to stop at its next token (process exit)."""
        for event in list(self.stops):
            event.set()


_WORKER = _Worker()
atexit.register(_WORKER.stop_all)

_ENGINES: dict[tuple[str, int, int], LlamaEngine] = {}
_ENGINES_LOCK = threading.Lock()


def shared_engine(model: str = DEFAULT_MODEL, *, threads: int | None = None,
                  context_tokens: int = DEFAULT_CONTEXT_TOKENS) -> LlamaEngine:
    """The process-wide engine for ``model``: every call of a server shares one loaded model."""
    key = (model, threads or default_threads(), context_tokens)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = LlamaEngine(model, threads=key[1], context_tokens=context_tokens)
        return engine


@dataclass(frozen=True)
class PassStats:
    """One pass as the summarizer saw it (for reports; no caller words).

    Attributes:
        kind: ``structured``, ``text``, or ``pipecat`` (a pass of pipecat's own summarizer).
        prompt_tokens: Tokens read.
        completion_tokens: Tokens written.
        seconds: Wall time from the request to the reply, queueing included.
        outcome: ``ok``, or why the previous summary was kept.
    """

    kind: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    outcome: str


def _transcript(turns: Sequence[TranscriptEntry]) -> str:
    # With turn numbers: a commitment is kept with the turn it was made on.
    return "\n".join(f"turn {entry.turn} {entry.render()}" for entry in turns) or "(no turns)"


@dataclass
class LocalSummarizer:
    """Summarizes with a local llama.cpp model; implements ``Summarizer`` and ``TextSummarizer``.

    Args:
        config: The ``summarizer`` settings section; this summarizer reads its ``local_*`` keys (model, timeout,
            sampling, threads) and ``max_tokens``.
        engine: The completion engine; default: the process-wide :class:`LlamaEngine` for ``config.local_model``.

    Raises:
        LocalModelError: Without an engine, when the ``local-summarizer`` extra is not installed (one line).
    """

    config: SummarizerConfig = field(default_factory=SummarizerConfig)
    engine: CompletionEngine | None = None
    failures: int = 0
    """Passes that kept the previous summary."""
    passes: list[PassStats] = field(default_factory=list)
    in_flight: int = 0
    """Passes started and not yet returned (observable in tests: a reply can come while this is above 0)."""

    def __post_init__(self) -> None:
        if self.engine is None:
            problem = extra_status(self.config.local_model)
            if problem is not None:
                raise LocalModelError(problem)
            self.engine = shared_engine(self.config.local_model, threads=self.config.local_threads)

    async def _complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None,
                        max_tokens: int | None = None) -> Completion:
        engine = self.engine
        assert engine is not None  # set in __post_init__
        stop = threading.Event()
        config = self.config
        budget = min(max_tokens, config.max_tokens) if max_tokens is not None else config.max_tokens

        def job() -> Completion:
            if stop.is_set():  # timed out or cancelled while queued: do not start reading the prompt
                return Completion("", 0, 0, 0.0, "cancelled")
            _WORKER.stops.add(stop)
            try:
                return engine.complete(messages, schema, max_tokens=budget,
                                       temperature=config.local_temperature, seed=config.local_seed, stop=stop)
            finally:
                _WORKER.stops.discard(stop)

        future = asyncio.wrap_future(_WORKER.submit(job))
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=config.local_timeout_secs)
        except TimeoutError:
            stop.set()  # the thread stops at its next token; the queue moves on
            raise
        except asyncio.CancelledError:
            stop.set()
            raise

    def _failed(self, kind: str, started: float, reason: str, completion: Completion | None = None) -> None:
        self.failures += 1
        self.passes.append(PassStats(kind, completion.prompt_tokens if completion else 0,
                                     completion.completion_tokens if completion else 0,
                                     time.monotonic() - started, reason))
        logger.warning(f"LocalSummarizer: {kind} pass failed, keeping the previous summary ({reason})")

    async def _run(self, kind: str, messages: list[dict[str, str]], schema: dict[str, Any] | None,
                   max_tokens: int | None = None) -> tuple[Completion | None, float]:
        started = time.monotonic()
        self.in_flight += 1
        try:
            completion = await self._complete(messages, schema, max_tokens)
        except TimeoutError:
            self._failed(kind, started, f"no reply within {self.config.local_timeout_secs:g} s")
            return None, started
        except LocalModelError as exc:
            self._failed(kind, started, str(exc))
            return None, started
        except Exception as exc:  # a model error must not end the call
            self._failed(kind, started, f"{type(exc).__name__}: {exc}")
            return None, started
        except asyncio.CancelledError:
            # Counted too: a caller's timeout (pipecat's own) or the call's end cancels the pass.
            self._failed(kind, started, "cancelled")
            raise
        finally:
            self.in_flight -= 1
        return completion, started

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        """Structured pass for the ``lanes`` policy.

        Args:
            request: The previous summary, the turns that left the window, and the ledger roles and slot
                names the summary must not own.

        Returns:
            The new summary (identifier values not yet scrubbed: the pass scheduler does it and counts it),
            or ``request.previous`` unchanged when the pass fails.
        """
        previous = request.previous.model_dump(exclude={"covers_through_turn"})
        messages = [
            {"role": "system", "content": request.instructions() + "\n" + LOCAL_GUIDANCE},
            {"role": "user", "content": "Previous summary (JSON):\n" + json.dumps(previous)
             + "\n\nTurns that just left the live window:\n" + _transcript(request.turns)},
        ]
        completion, started = await self._run("structured", messages, LOCAL_SUMMARY_SCHEMA)
        if completion is None:
            return request.previous
        if completion.stopped:
            self._failed("structured", started, f"generation {completion.stopped}", completion)
            return request.previous
        try:
            summary = EpisodeSummary.model_validate(json.loads(completion.text))
        except (ValueError, ValidationError) as exc:  # a reply cut at max_tokens is not valid JSON
            self._failed("structured", started, f"{type(exc).__name__}: {str(exc)[:120]}", completion)
            return request.previous
        self.passes.append(PassStats("structured", completion.prompt_tokens, completion.completion_tokens,
                                     time.monotonic() - started, "ok"))
        return summary

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        """Free-text pass for the ``rolling`` baseline (pipecat's summarization prompt, as ``llm`` uses).

        Returns:
            The new summary text, or ``previous`` unchanged when the pass fails.
        """
        messages = [
            {"role": "system", "content": TEXT_SUMMARY_INSTRUCTIONS},
            {"role": "user", "content": f"Previous summary:\n{previous or '(none yet)'}\n\n"
             f"Conversation history:\n{_transcript(turns)}"},
        ]
        return await self.generate_text("text", messages) or previous

    async def generate_json(
        self, kind: str, messages: list[dict[str, str]], schema: dict[str, Any], max_tokens: int | None = None
    ) -> str:
        """One pass constrained to ``schema`` (llama.cpp's JSON grammar), counted in :attr:`passes` as ``kind``.

        Raises:
            LocalModelError: The pass failed, timed out, was cut or came back empty (also counted in
                :attr:`failures`): a reader must know, unlike a summary pass that keeps the old summary.
        """
        completion, started = await self._run(kind, messages, schema, max_tokens)
        if completion is None:
            raise LocalModelError(f"local model: {kind} pass failed ({self.passes[-1].outcome})")
        if completion.stopped or not completion.text.strip():
            self._failed(kind, started, f"generation {completion.stopped or 'empty'}", completion)
            raise LocalModelError(f"local model: {kind} pass {completion.stopped or 'empty'}")
        self.passes.append(PassStats(kind, completion.prompt_tokens, completion.completion_tokens,
                                     time.monotonic() - started, "ok"))
        return completion.text

    async def generate_text(self, kind: str, messages: list[dict[str, str]], max_tokens: int | None = None) -> str:
        """One free-text pass over ``messages`` (chat format), counted in :attr:`passes` as ``kind``.

        pipecat's own summarizer calls it through :class:`~voice_agent.services.local_llm.LocalModelLLM`.

        Args:
            kind: Names the pass in :attr:`passes` (``text``, ``pipecat``).
            messages: System and user messages.
            max_tokens: Output budget, at most ``config.max_tokens``; None: ``config.max_tokens``.

        Returns:
            The reply, stripped; "" when the pass failed, timed out or came back empty (counted in :attr:`failures`).
        """
        completion, started = await self._run(kind, messages, None, max_tokens)
        if completion is None:
            return ""
        if completion.stopped or not completion.text.strip():
            self._failed(kind, started, f"generation {completion.stopped or 'empty'}", completion)
            return ""
        self.passes.append(PassStats(kind, completion.prompt_tokens, completion.completion_tokens,
                                     time.monotonic() - started, "ok"))
        return completion.text.strip()
