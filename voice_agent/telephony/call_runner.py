"""The per-call runner: one call's pipeline from its stream's start to its end, and what the call leaves behind.

:class:`CallRunner` builds the call's parts (a resumed leg's state restored from the store), wires its pipeline
over the guarded stream, saves it to the store turn by turn, writes its journal and record file (on threads of
their own), gives it its line to the provider for transfers (Plivo's by a one-time key), and records how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import urlencode, urlsplit, urlunsplit

from fastapi import WebSocket
from loguru import logger
from pipecat.frames.frames import EndFrame, LLMRunFrame, TTSSpeakFrame
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
from pipecat.workers.runner import WorkerRunner
from starlette.websockets import WebSocketState

from processors.speculative_retrieval import SpeculativeRetrieval
from processors.spoken_ids import SpokenIdNormalizer, recognizer_prompt
from voice_agent.audio.manifest import AudioModelError
from voice_agent.call.factory import CallFactory, CallParts
from voice_agent.call.pipeline import AUDIO_TURN_STOP_TIMEOUT, build_call_pipeline
from voice_agent.call.session import CallSession
from voice_agent.core.resume import resume_line, unanswered
from voice_agent.recording.record import CallRecorder
from voice_agent.recording.tap import RecorderTap
from voice_agent.retrieval.index import shared_index
from voice_agent.retrieval.speculative import BUDGETED_SPECULATION
from voice_agent.telephony.bridge import (
    CLOSE_CODES,
    FRAME_TOO_LARGE,
    EndReason,
    GuardedSerializer,
    GuardedWebSocket,
)
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.journal import CallJournal, ensure_record_dir, write_private
from voice_agent.telephony.persistence import CallPersistence, StoreEffectLog
from voice_agent.telephony.providers import Provider, StreamStart, make_serializer
from voice_agent.telephony.registry import RegisteredCall, end_as, resumable
from voice_agent.telephony.transfer import ProviderTransfer, plivo_xml

PIPELINE_IN_RATE = 16000
"""The pipeline hears 16 kHz (the serializer resamples the 8 kHz stream)."""

PIPELINE_OUT_RATE = 8000
"""TTS renders straight at the phone rate."""

TURN_SAVE_WAIT_SECS = 1.0
"""Longest the agent's answer waits for the save of the caller's line; a slower store saves on in the background."""
TRANSFER_KEY_SECS = 120.0
"""How long after its call's stream ends Plivo may still fetch a transfer's XML by its one-time key."""

FRESH_START_LINE = ("Sorry, we got cut off, and I've lost track of our conversation. "
                    "Could you tell me again how I can help?")
"""A resumed leg whose stored state did not load: the caller was mid-call, so the agent speaks first, honestly."""

RECORD_THREADS = 4
"""Threads for the call records' disk work: the fsyncs of several calls wait on the disk at once."""


@dataclass
class LiveCall:
    """One call running on this worker: its record and the parts a drain or a heartbeat reaches."""

    record: RegisteredCall
    worker: PipelineWorker | None = None
    recorder: CallRecorder | None = None
    journal: CallJournal | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    completed_turn: int = 0
    """The last turn the agent finished answering (a drain hands the call over between turns)."""
    serializer: GuardedSerializer | None = None
    close: Callable[[str, EndReason], Awaitable[None]] | None = None
    transfer: ProviderTransfer | None = None


async def _save_awhile(persistence: CallPersistence, session: CallSession, record: RegisteredCall, what: str) -> None:
    """Saves the call, waiting at most :data:`TURN_SAVE_WAIT_SECS`: a store that hangs must not silence the call,
    so past that the save goes on in the background and the call goes on."""
    saving = asyncio.ensure_future(persistence.save(session, leg=record.leg, provider_call_id=record.provider_call_id))
    try:
        await asyncio.wait_for(asyncio.shield(saving), TURN_SAVE_WAIT_SECS)
    except TimeoutError:
        logger.warning("call {}: the store is slow; {} goes on before its save ends", record.call_id, what)


def _close_code(record: RegisteredCall) -> tuple[int, str]:
    """The WebSocket close code and reason for how the call ended."""
    try:
        code = CLOSE_CODES[EndReason(record.end)]
    except ValueError:
        code = 1000
    reason = (record.reason or "call ended").encode("utf-8")[:120].decode("utf-8", "ignore")
    return code, reason


async def close_socket(websocket: WebSocket, code: int, reason: str) -> None:
    """Closes the socket if it is still open (never raises)."""
    with contextlib.suppress(Exception):
        connected = WebSocketState.CONNECTED
        if websocket.application_state == connected and websocket.client_state == connected:
            # Bounded: a client that stopped reading cannot hold the handler open.
            await asyncio.wait_for(websocket.close(code=code, reason=reason), 2.0)


class CallRunner:
    """Runs each call's pipeline, from its stream's start to its records, and keeps the call records' threads.

    Args:
        config: Server settings.
        call_factory: Builds each call's session and LLM.
        persistence: The call store's saves (None: calls live in memory only).
    """

    def __init__(self, config: ServerConfig, call_factory: CallFactory, persistence: CallPersistence | None) -> None:
        self.config = config
        self.factory = call_factory
        self.persistence = persistence
        self.resumes = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        # The call records' disk work (fsyncs, the end's record file) has threads of its own: on asyncio's
        # default pool a slow disk would queue the calls' audio models (STT, TTS) behind it.
        self._record_threads = ThreadPoolExecutor(max_workers=RECORD_THREADS, thread_name_prefix="call-records")
        self.transfer_xml: dict[str, str] = {}
        """Plivo: the transfer XML of each call being moved, by the one-time key in its ``aleg_url``."""

    async def run(self, websocket: WebSocket, start: StreamStart, live: LiveCall) -> None:
        """Runs the call whose stream has started until it ends, then records it and closes the stream."""
        record = live.record
        call_id = record.call_id
        logger.info("call {}: stream {} started", call_id, start.provider.value)
        try:
            parts, audio = await asyncio.to_thread(self._build_parts, call_id, record)
        except Exception as exc:  # one call's set-up failure must not touch the server
            record.reason = f"set-up failed: {exc}" if isinstance(exc, AudioModelError) else (
                f"set-up failed ({type(exc).__name__})"
            )
            logger.exception("call {}: set-up failed", call_id)
            record.end = EndReason.SERVER_ERROR
            # The call is over: the store must not bring it back (a failure that repeats would loop), and
            # its fleet slot is free again.
            if self.persistence is not None:
                await self.persistence.end(call_id, EndReason.SERVER_ERROR.value, leg=record.leg)
            if self.config.fleet is not None:
                await self.config.fleet.release(call_id, EndReason.SERVER_ERROR.value)
            await self._finish(record, None)
            await close_socket(websocket, 1011, "call set-up failed")
            return
        record.session = parts.session
        record.extra.update(parts.extra)
        record.extra["config"] = parts.session.describe()
        live.journal = self._open_journal(record)
        live.completed_turn = parts.session.turn
        if live.journal is not None and record.resumed_at_turn is not None:
            live.journal.written = int(record.extra.get("restored_entries", 0))  # earlier legs' journals hold those
        # Read before the opening enters the transcript: the apology is an agent line, not an answer.
        answer_cut_line = record.resumed_at_turn is not None and unanswered(parts.session.state)
        opening = self._resume_opening(record, parts.session)
        if self.persistence is not None:
            # Saved at once: the store knows the call (and this leg owns it) before the first turn ends.
            await _save_awhile(self.persistence, parts.session, record, "the call's start")

        async def close_call(reason: str, end: EndReason) -> None:
            end_as(record, reason, end)
            logger.info("call {}: closing ({})", call_id, reason)
            if live.worker is not None and not live.worker.has_finished():
                task = asyncio.get_running_loop().create_task(live.worker.cancel(reason=reason))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        self._connect_transfer(websocket, record, live, parts.session, close_call)
        serializer: GuardedSerializer | None = None
        try:
            serializer = GuardedSerializer(
                make_serializer(start, self.config.credentials), start, close_call,
                max_message_bytes=self.config.max_message_bytes, max_violations=self.config.max_violations,
                call_id=call_id,
            )
            live.serializer, live.close = serializer, close_call
            guarded_ws = GuardedWebSocket(websocket, close_call, send_timeout=self.config.send_timeout_secs,
                                          call_id=call_id, close_code=lambda: _close_code(record))
            worker = self._build_worker(guarded_ws, serializer, parts, audio, close_call, live)
            if opening is not None:
                # Entered in the transcript when queued (_resume_opening); kept out of the turn log's "as heard"
                # text, which would enter it a second time.
                await worker.queue_frame(TTSSpeakFrame(opening, append_to_context=False))
                if answer_cut_line:
                    # The caller's last line was saved but never answered (the worker died mid-answer).
                    await worker.queue_frame(LLMRunFrame())
            runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
            await runner.add_workers(worker)
            await runner.run()
            end_as(record, "ended", EndReason.ENDED)
        except Exception as exc:  # isolate: log, record, close this call only
            end_as(record, f"pipeline error ({type(exc).__name__})", EndReason.SERVER_ERROR)
            logger.exception("call {}: pipeline failed", call_id)
        finally:
            with contextlib.suppress(Exception):
                parts.session.close()
            if live.transfer is not None:
                # A provider that accepted the transfer may have ended the stream before it answered us.
                await live.transfer.settled()
                if live.transfer.plivo_url:
                    # Plivo fetches the XML after it accepted the transfer (and our stream has ended): the key
                    # stays valid a while, then goes (one fetch still uses it up).
                    asyncio.get_running_loop().call_later(TRANSFER_KEY_SECS, self.transfer_xml.pop,
                                                          live.transfer.plivo_url.rpartition("key=")[2], None)
            if serializer is not None:
                for kind, count in serializer.violations.items():
                    record.violations[kind] = record.violations.get(kind, 0) + count
                record.marks = len(serializer.marks)
                record.dtmf = list(serializer.dtmf)
            await self._persist_end(record, parts.session)
            if self.config.fleet is not None and not resumable(record):
                # A call that may come back keeps its slot (its lease lapses if it does not), so the resume
                # is not refused as busy and an old leg's release cannot free the new leg's slot.
                await self.config.fleet.release(call_id, record.end or "ended")
            try:
                await self._finish(record, parts.session, live.recorder, live.journal)
            finally:  # a handler cancelled while its records reach the disk still closes the stream
                await close_socket(websocket, *_close_code(record))

    def _connect_transfer(
        self, websocket: WebSocket, record: RegisteredCall, live: LiveCall, session: CallSession,
        close_call: Callable[[str, EndReason], Awaitable[None]],
    ) -> None:
        """Gives the call's domain its line to the provider, so ``transfer_to_human`` moves the phone call.

        Every served call gets one: without a transfer target it moves nothing and the tool says so (the agent
        offers a callback). Once the provider accepted, the call is recorded as transferred and its stream ends.
        """
        settings = self.config.transfer

        async def transferred(target: str) -> None:
            record.transfer = {"target": target, "status": "transferred"}
            # Whatever the stream did once the provider took the call (Twilio stops it), the transfer is why it ended.
            record.end, record.reason = EndReason.TRANSFERRED.value, f"transferred to {target}"
            if live.journal is not None:
                live.journal.write("event", event="transferred", target=target, turn=session.turn)
            await close_call(record.reason, EndReason.TRANSFERRED)

        def failed(error: str) -> None:
            target = settings.target or ""
            record.transfer = {"target": target, "status": "failed", "error": error}
            if live.journal is not None:
                live.journal.write("event", event="transfer failed", target=target, error=error, turn=session.turn)
            if live.recorder is not None:
                live.recorder.error(f"transfer to {target} failed: {error}")

        def moving(on: bool) -> None:
            if live.serializer is not None:
                live.serializer.suspend_hang_up(on)

        plivo_url = None
        if self.config.provider is Provider.PLIVO and settings.target is not None:
            key = secrets.token_urlsafe(16)
            self.transfer_xml[key] = plivo_xml(settings.target, record.call_id)
            base = self.config.public_url or str(websocket.base_url).replace("ws", "http", 1)
            parts = urlsplit(base)
            plivo_url = urlunsplit((parts.scheme, parts.netloc, "/transfer", urlencode({"key": key}), ""))
        transfer = ProviderTransfer(self.config.provider, self.config.credentials, settings,
                                    record.provider_call_id or "", record.call_id, plivo_url=plivo_url,
                                    transferred=transferred, failed=failed, moving=moving)
        if session.domain.use_transfer(transfer):
            live.transfer = transfer

    def _open_journal(self, record: RegisteredCall) -> CallJournal | None:
        """The call's append-only record file, with its opening line (None without a transcript directory)."""
        if self.config.transcript_dir is None:
            return None
        try:
            journal = CallJournal.open(Path(self.config.transcript_dir), record.call_id, record.leg)
        except OSError as exc:
            logger.error("call {}: no record file ({}); the call goes on", record.call_id, exc)
            return None
        journal.write("call", call_id=record.call_id, provider=record.provider.value,
                      provider_call_id=record.provider_call_id, started=record.started,
                      config=record.extra.get("config"), leg=record.leg, resumed_at_turn=record.resumed_at_turn)
        return journal

    def _build_parts(self, call_id: str, record: RegisteredCall) -> tuple[CallParts, Any]:
        parts = self.factory(call_id)
        if self.persistence is not None:
            # Every leg of the call shares its mutating calls' records: none runs twice (voice_agent.core.effects).
            parts.session.effects = StoreEffectLog(self.persistence.store, call_id, record.leg)
        if record.leg > 1 and self.persistence is not None:
            restored = self.persistence.restore(parts.session)
            if restored.problem is None:
                record.resumed_at_turn = restored.turn
                # The restored entries are in earlier legs' journals; the open tool calls' cancellations are new.
                record.extra["restored_entries"] = len(parts.session.state.transcript) - len(restored.left_open)
            else:
                record.extra["resume_problem"] = restored.problem
        # A scripted recogniser goes on from the caller's next line (the earlier ones were heard by earlier legs).
        audio = self.config.stack.build(prompt=recognizer_prompt(parts.id_shapes, parts.topic),
                                        script_from=parts.session.turn)
        return parts, audio

    def _resume_opening(self, record: RegisteredCall, session: CallSession) -> str | None:
        """A resumed call's first line (entered in the transcript as said), or None for a new call."""
        if record.resumed_at_turn is None:
            if record.leg > 1 or "resume_problem" in record.extra:  # the caller was mid-call: the agent speaks
                session.record_agent(FRESH_START_LINE)
                return FRESH_START_LINE
            return None
        self.resumes += 1
        topics = session.domain.extra.get("resume_topics") or {}
        line = resume_line(session.state, topics if isinstance(topics, dict) else {})
        session.record_agent(line)
        return line

    async def _persist_end(self, record: RegisteredCall, session: CallSession) -> None:
        """At the end of a stream: a call that may come back keeps its state live, any other is marked ended.

        It may come back when the stream ended without the caller hanging up: a drain handed it over,
        or the connection dropped without a ``stop``. Done before the socket closes, so the provider's
        next request (``<Connect action>``) finds the verdict.
        """
        if self.persistence is None:
            return
        if resumable(record):
            await self.persistence.save(session, leg=record.leg, provider_call_id=record.provider_call_id)
            await self.persistence.close_leg(record.call_id, record.leg)
        else:
            await self.persistence.end(record.call_id, record.end or EndReason.ENDED.value, leg=record.leg)
        self.persistence.forget(record.call_id, record.leg)

    def _build_worker(
        self, guarded_ws: GuardedWebSocket, serializer: GuardedSerializer, parts: CallParts, audio: Any,
        close_call: Callable[[str, EndReason], Awaitable[None]], live: LiveCall,
    ) -> PipelineWorker:
        from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport

        transport = FastAPIWebsocketTransport(
            cast(Any, guarded_ws),
            FastAPIWebsocketParams(
                audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False, serializer=serializer,
                session_timeout=self.config.max_call_secs, allowed_origins=[],
            ),
        )

        async def on_disconnected(_transport: Any, _ws: Any) -> None:
            code, why = guarded_ws.disconnect or (1005, "")
            if serializer.stopped:
                await close_call("caller hung up (stop)", EndReason.HUNG_UP)
            elif code == 1008 and why.startswith(FRAME_TOO_LARGE):  # uvicorn's frame cap (PolicyWebSocketProtocol)
                await close_call(f"{FRAME_TOO_LARGE} (over {self.config.ws_max_size} bytes)", EndReason.VIOLATION)
            else:
                await close_call("client disconnected", EndReason.HUNG_UP)

        async def on_timeout(_transport: Any, _ws: Any) -> None:
            end_as(live.record, f"call exceeded {self.config.max_call_secs} s", EndReason.TIME_LIMIT)
            if live.worker is not None:
                await live.worker.queue_frame(EndFrame())

        async def on_idle(_worker: Any) -> None:
            end_as(live.record, f"idle (nothing said either way for {self.config.idle_timeout_secs:g} s)",
                    EndReason.IDLE)

        transport.add_event_handler("on_client_disconnected", on_disconnected)
        transport.add_event_handler("on_session_timeout", on_timeout)
        session = parts.session
        llm = parts.llm
        call = build_call_pipeline(
            session, llm,
            before_user=[
                transport.input(), *audio.before_user, SpokenIdNormalizer(parts.id_shapes, name="spoken-ids"),
                # Speculation runs on the stack's interims (Whisper's partial decodes, pocketsphinx's hypotheses),
                # budgeted to new content words; with none (--no-interims) every retrieval is at the final.
                *([SpeculativeRetrieval(session.call_id, shared_index(), BUDGETED_SPECULATION, name="retrieval")]
                  if self.config.knowledge else []),
            ],
            tts=[audio.tts, transport.output()],
            user_params=LLMUserAggregatorParams(user_turn_strategies=audio.turn_strategies,
                                                user_turn_stop_timeout=AUDIO_TURN_STOP_TIMEOUT),
        )
        # The operator's per-turn record (latency, tools run, what was heard), fed from outside the call by event
        # handlers of the LLM and the output guard: an observer would cost every frame of every processor.
        recorder = CallRecorder(session)
        live.recorder = recorder
        tap = RecorderTap(recorder, call.llm, call.output_guard)
        journal = live.journal
        if journal is not None:
            # The record file follows the transcript lane entry by entry (a resumed leg's own new entries are
            # written now), and is forced to disk per turn.
            transcript = session.state.transcript
            journal.follow(transcript)

            async def on_turn_completed(_processor: Any, turn: int) -> None:
                journal.turn_completed(turn, transcript, fsync=False)
                # One slow disk must not stall the event loop every call shares.
                await self.run_on_record_threads(journal.fsync)

            call.turn_log.add_event_handler("on_turn_completed", on_turn_completed)
        persistence = self.persistence
        record = live.record

        saves: set[asyncio.Future[bool]] = set()

        async def on_turn_saved(_processor: Any, turn: int) -> None:
            live.completed_turn = max(live.completed_turn, turn)
            if persistence is not None:
                # In the background (a call's saves still run one at a time, in order): a slow store must not
                # hold up the turn log, and with it the call's next turn.
                saving = asyncio.ensure_future(
                    persistence.save(session, leg=record.leg, provider_call_id=record.provider_call_id))
                saves.add(saving)
                saving.add_done_callback(saves.discard)

        call.turn_log.add_event_handler("on_turn_completed", on_turn_saved)
        if persistence is not None:
            async def on_turn_opened(turn: int) -> None:
                # The caller's line is durable before the agent answers it: a crash mid-answer cannot lose it.
                await _save_awhile(persistence, session, record, f"turn {turn}")

            session.turn_opened_hooks.append(on_turn_opened)
        worker = PipelineWorker(
            call.pipeline,
            params=PipelineParams(audio_in_sample_rate=PIPELINE_IN_RATE, audio_out_sample_rate=PIPELINE_OUT_RATE),
            enable_rtvi=False, idle_timeout_secs=self.config.idle_timeout_secs, cancel_runner_on_idle_timeout=False,
            enable_turn_tracking=False, check_dangling_tasks=False, conversation_id=live.record.call_id,
        )
        worker.add_event_handler("on_idle_timeout", on_idle)
        tap.attach(worker)
        live.worker = worker
        return worker

    async def _finish(
        self, record: RegisteredCall, session: CallSession | None, recorder: CallRecorder | None = None,
        journal: CallJournal | None = None,
    ) -> None:
        record.state = "ended"
        record.ended = time.time()
        end_as(record, "ended", EndReason.ENDED)
        if session is not None:
            record.transcript = [e.render() for e in session.state.transcript]
        if recorder is not None:
            recorder.close_turn()
            record.turns = [
                {"turn": t.turn, "caller": t.caller, "agent": " ".join(t.agent), "executed": list(t.executed),
                 "first_response_ms": t.first_response_ms, "interrupted": t.interrupted, "errors": list(t.errors),
                 "retrieval": dict(t.retrieval)}
                for t in recorder.turns
            ]
        record.session = None
        logger.info("call {}: ended ({}); {} transcript entries", record.call_id, record.reason, len(record.transcript))
        summary = {**record.summary(), "turns": record.turns}
        handle = None
        if journal is not None:
            if session is not None:
                # Following, every entry is written already; this catches a call whose pipeline never started.
                journal.sync(session.state.transcript)
            handle = journal.end(summary)  # here, on the loop: a later write (a drain's event) is a no-op
        if journal is None and self.config.transcript_dir is None:
            return
        # The two fsyncs and the record file wait for the disk: off the loop, which this process's other
        # calls share.
        await self.run_on_record_threads(self._write_out, record.call_id, summary, record.transcript, journal, handle)

    async def run_on_record_threads(self, work: Callable[..., Any], *args: Any) -> Any:
        """Runs blocking disk work of the call records on their own threads, and returns its result.

        A caller cancelled while it waits does not cancel the work: a record already queued is still written.
        Work that comes after :meth:`close` (a call uvicorn gave up on at shutdown, ending late) runs on
        asyncio's own pool, which ``asyncio.run`` finishes before the process exits.
        """
        try:
            future = self._record_threads.submit(functools.partial(work, *args))
        except RuntimeError:  # the pool was shut down
            return await asyncio.shield(asyncio.ensure_future(asyncio.to_thread(work, *args)))
        return await asyncio.shield(asyncio.wrap_future(future))

    def close(self) -> None:
        """Lets the record threads finish what they were given, then stops them (after the drain)."""
        self._record_threads.shutdown(wait=True)

    def _write_out(self, call_id: str, summary: dict[str, Any], transcript: list[str],
                   journal: CallJournal | None, handle: IO[str] | None) -> None:
        """Settles the ended journal and writes the call's record file (blocking)."""
        if journal is not None:
            journal.settle(handle)
        if self.config.transcript_dir is not None:
            try:
                path = ensure_record_dir(Path(self.config.transcript_dir)) / f"{call_id}.json"
                write_private(path, json.dumps({**summary, "transcript": transcript}, indent=2, default=str))
            except OSError as exc:
                logger.error("call {}: transcript not written: {}", call_id, exc)
