"""The telephony bridge: a FastAPI app that answers provider webhooks and runs one pipeline per call.

- ``POST /voice``: the provider's voice webhook. Twilio requests are checked against
  ``X-Twilio-Signature`` when an auth token is configured (always in production). The answer
  connects the call to ``/ws`` with a one-time stream token, or, at capacity or while draining,
  says sorry and hangs up.
- ``WS /ws``: the media stream. The handshake must arrive within a deadline and carry a valid
  token (Twilio ``customParameters`` or a ``token`` query parameter); every later message is
  validated (:mod:`voice_agent.telephony.bridge`). Each call gets its own session, services and
  pipeline; whatever happens to one call is caught and recorded, never propagated.
- ``GET /healthz`` (alive), ``GET /readyz`` (503 while warming up, draining or full), ``GET /calls``
  (per-call metadata, no transcript text).
- SIGTERM/SIGINT: stop taking calls, let active calls finish (up to a deadline), then exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import signal
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from loguru import logger
from pipecat.frames.frames import EndFrame
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.workers.runner import WorkerRunner
from starlette.websockets import WebSocketDisconnect, WebSocketState

from processors.speculative_retrieval import SpeculativeRetrieval
from processors.spoken_ids import SpokenIdNormalizer, recognizer_prompt
from voice_agent.audio.manifest import AudioModelError
from voice_agent.audio.stack import AudioStack
from voice_agent.call_factory import CallFactory, CallParts
from voice_agent.pipeline import AUDIO_TURN_STOP_TIMEOUT, build_call_pipeline
from voice_agent.recording.observer import RecorderObserver
from voice_agent.recording.record import CallRecorder
from voice_agent.retrieval.index import shared_index
from voice_agent.session import CallSession
from voice_agent.telephony.bridge import GuardedSerializer, GuardedWebSocket
from voice_agent.telephony.providers import (
    HandshakeError,
    HangupCredentials,
    Provider,
    StreamStart,
    busy_instruction,
    make_serializer,
    parse_start,
    stream_instruction,
)
from voice_agent.telephony.twilio import SIGNATURE_HEADER, validate_signature

PIPELINE_IN_RATE = 16000
"""The pipeline hears 16 kHz (the serializer resamples the 8 kHz stream)."""

PIPELINE_OUT_RATE = 8000
"""TTS renders straight at the phone rate."""

MAX_WEBHOOK_BYTES = 65536
"""Largest webhook body read."""

_MAX_PRESTART_MESSAGES = 8
_KEEP_ENDED = 200


class ConfigError(ValueError):
    """The server configuration cannot work (one-line message)."""


@dataclass
class ServerConfig:
    """How the bridge runs.

    Attributes:
        host: Interface to bind.
        port: Port to bind (0: any free port).
        provider: Which provider's webhooks and streams this server speaks.
        public_url: The public base URL (``https://agent.example.com``) for stream URLs and signatures;
            taken from each request when unset.
        production: Refuse unsigned webhooks (needs the provider's auth token) and require ``public_url``.
        credentials: Provider REST credentials (signatures, optional hang-up).
        max_calls: Concurrent calls (reserved by a webhook or streaming); more are turned away.
        token_ttl_secs: How long a stream token issued by the webhook stays valid.
        handshake_timeout_secs: Deadline for the stream's ``start`` message.
        max_message_bytes: Larger inbound messages are dropped.
        ws_max_size: Larger WebSocket frames make the server close the connection (1009).
        max_violations: Dropped messages after which a call is closed.
        send_timeout_secs: A send that blocks longer closes the call (slow client).
        max_call_secs: Calls are ended after this long.
        idle_timeout_secs: A call with no speech either way for this long is cancelled.
        drain_timeout_secs: On SIGTERM, how long active calls may take to finish.
        transcript_dir: Where each call's transcript is written at its end (kept in memory when None).
        stack: The audio services.
        socket_send_buffer: SO_SNDBUF for call sockets (smaller: slow clients are detected sooner).
    """

    host: str = "127.0.0.1"
    port: int = 8765
    provider: Provider = Provider.TWILIO
    public_url: str | None = None
    production: bool = False
    credentials: HangupCredentials = field(default_factory=HangupCredentials)
    max_calls: int = 4
    token_ttl_secs: float = 30.0
    handshake_timeout_secs: float = 5.0
    max_message_bytes: int = 16384
    ws_max_size: int = 65536
    max_violations: int = 50
    send_timeout_secs: float = 5.0
    max_call_secs: int = 3600
    idle_timeout_secs: float | None = 120.0
    drain_timeout_secs: float = 30.0
    transcript_dir: Path | None = None
    stack: AudioStack = field(default_factory=AudioStack)
    socket_send_buffer: int | None = None
    knowledge: bool = True

    def validate(self) -> None:
        """Checks the combination of settings.

        Raises:
            ConfigError: One line saying what to set.
        """
        if self.max_calls < 1:
            raise ConfigError("--max-calls must be at least 1")
        if self.production:
            if not self.public_url:
                raise ConfigError("production mode needs --public-url (the https URL the provider calls)")
            if self.provider is Provider.TWILIO and not self.credentials.twilio_auth_token:
                raise ConfigError("production mode needs TWILIO_AUTH_TOKEN to validate webhook signatures")


@dataclass
class CallRecord:
    """One call's entry in the registry, kept after the call ends (transcript included).

    Attributes:
        call_id: Our id (``call-<n>-<random>``).
        provider: The provider.
        token: The one-time stream token.
        state: ``reserved``, ``active`` or ``ended``.
        created: When the webhook reserved it (monotonic).
        expires: When an unclaimed reservation lapses (monotonic).
        provider_call_id: The provider's call id.
        started: When the stream started (wall clock, epoch seconds).
        ended: When the call ended (wall clock).
        reason: Why the call ended.
        violations: Dropped inbound messages by kind.
        marks: Mark acknowledgements received.
        dtmf: Keys pressed.
        session: The live session while the call runs.
        transcript: The transcript, rendered, once the call has ended.
        turns: Per-turn summaries once the call has ended.
        extra: What the call factory kept with the call.
    """

    call_id: str
    provider: Provider
    token: str
    state: str = "reserved"
    created: float = field(default_factory=time.monotonic)
    expires: float = 0.0
    provider_call_id: str | None = None
    started: float | None = None
    ended: float | None = None
    reason: str = ""
    violations: dict[str, int] = field(default_factory=dict)
    marks: int = 0
    dtmf: list[str] = field(default_factory=list)
    session: CallSession | None = None
    transcript: list[str] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def transcript_lines(self) -> list[str]:
        """The transcript so far (live while the call runs)."""
        if self.session is not None:
            return [e.render() for e in self.session.state.transcript]
        return list(self.transcript)

    def summary(self) -> dict[str, Any]:
        """Metadata only: no caller words, no identifiers."""
        return {
            "call_id": self.call_id, "provider": self.provider.value, "state": self.state,
            "started": self.started, "ended": self.ended, "reason": self.reason,
            "violations": dict(self.violations), "marks": self.marks, "dtmf_count": len(self.dtmf),
            "transcript_entries": len(self.transcript_lines()), "config": self.extra.get("config"),
        }


class CallRegistry:
    """Reservations, active calls and recently ended calls.

    Args:
        max_calls: Reserved plus active calls allowed at once.
        token_ttl: Seconds a reservation waits for its stream.
    """

    def __init__(self, max_calls: int, token_ttl: float) -> None:
        self.max_calls = max_calls
        self.token_ttl = token_ttl
        self._records: OrderedDict[str, CallRecord] = OrderedDict()
        self._by_token: dict[str, str] = {}
        self._counter = itertools.count(1)
        self.refused = 0

    def _expire(self) -> None:
        now = time.monotonic()
        for record in list(self._records.values()):
            if record.state == "reserved" and record.expires < now:
                record.state = "ended"
                record.reason = "stream never connected (token expired)"
                record.ended = time.time()
                self._by_token.pop(record.token, None)
        ended = [k for k, r in self._records.items() if r.state == "ended"]
        for key in ended[: max(0, len(ended) - _KEEP_ENDED)]:
            self._records.pop(key, None)

    @property
    def busy(self) -> int:
        """Reserved plus active calls."""
        self._expire()
        return sum(1 for r in self._records.values() if r.state in ("reserved", "active"))

    @property
    def active(self) -> list[CallRecord]:
        """Calls whose stream is running."""
        return [r for r in self._records.values() if r.state == "active"]

    def reserve(self, provider: Provider, provider_call_id: str | None) -> CallRecord | None:
        """A new reservation with a fresh token, or None when the server is full."""
        if self.busy >= self.max_calls:
            self.refused += 1
            return None
        token = secrets.token_urlsafe(24)
        call_id = f"call-{next(self._counter)}-{secrets.token_hex(3)}"
        record = CallRecord(call_id, provider, token, expires=time.monotonic() + self.token_ttl,
                            provider_call_id=provider_call_id)
        self._records[call_id] = record
        self._by_token[token] = call_id
        return record

    def claim(self, token: str | None, provider_call_id: str) -> CallRecord | str:
        """The reservation a stream's token names, now active; or why it is refused."""
        self._expire()
        if not token:
            return "missing stream token"
        call_id = self._by_token.pop(token, None)
        record = self._records.get(call_id) if call_id else None
        if record is None or record.state != "reserved":
            return "invalid or expired stream token"
        if record.provider_call_id and record.provider_call_id != provider_call_id:
            record.state, record.reason, record.ended = "ended", "stream token used for another call", time.time()
            return "stream token belongs to another call"
        record.state = "active"
        record.provider_call_id = provider_call_id
        record.started = time.time()
        return record

    def get(self, call_id: str) -> CallRecord | None:
        """A call by id (recent ended calls included)."""
        return self._records.get(call_id)

    def all(self) -> list[CallRecord]:
        """Every record held, oldest first."""
        self._expire()
        return list(self._records.values())


@dataclass
class _LiveCall:
    record: CallRecord
    worker: PipelineWorker | None = None
    recorder: CallRecorder | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class VoiceBridge:
    """The app and its state: config, call registry, live calls, drain flag.

    Args:
        config: Server settings.
        call_factory: Builds each call's session and LLM.
    """

    def __init__(self, config: ServerConfig, call_factory: CallFactory) -> None:
        config.validate()
        self.config = config
        self.factory = call_factory
        self.registry = CallRegistry(config.max_calls, config.token_ttl_secs)
        self.draining = False
        self.ready = False
        self.calls_started = 0
        self._live: dict[str, _LiveCall] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unsigned_logged = False
        self.app = self._build_app()

    # --- app -------------------------------------------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="voice-agent telephony bridge", docs_url=None, redoc_url=None, openapi_url=None)
        app.add_api_route("/healthz", self._healthz, methods=["GET"])
        app.add_api_route("/readyz", self._readyz, methods=["GET"])
        app.add_api_route("/calls", self._calls, methods=["GET"])
        app.add_api_route("/voice", self._voice, methods=["POST"])
        app.add_api_websocket_route("/ws", self._ws)
        return app

    async def _healthz(self) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def _readyz(self) -> JSONResponse:
        busy = self.registry.busy
        state = "draining" if self.draining else "warming" if not self.ready else (
            "full" if busy >= self.config.max_calls else "ready"
        )
        body = {"status": state, "calls": busy, "max_calls": self.config.max_calls}
        return JSONResponse(body, status_code=200 if state == "ready" else 503)

    async def _calls(self) -> JSONResponse:
        return JSONResponse({"calls": [r.summary() for r in self.registry.all()], "refused": self.registry.refused})

    def _public_url(self, request: Request) -> str:
        if self.config.public_url:
            base = self.config.public_url.rstrip("/")
            query = f"?{request.url.query}" if request.url.query else ""
            return f"{base}{request.url.path}{query}"
        return str(request.url)

    def _stream_url(self, request: Request) -> str:
        base = self.config.public_url or str(request.base_url)
        parts = urlsplit(base)
        scheme = "wss" if parts.scheme in ("https", "wss") else "ws"
        return urlunsplit((scheme, parts.netloc, "/ws", "", ""))

    async def _voice(self, request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_WEBHOOK_BYTES:
            return Response("request too large", status_code=413)
        try:
            params = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            return Response("bad request", status_code=400)
        provider = self.config.provider
        if provider is Provider.TWILIO:
            token = self.config.credentials.twilio_auth_token
            if token:
                signature = request.headers.get(SIGNATURE_HEADER)
                if not validate_signature(token, self._public_url(request), params, signature):
                    logger.warning("webhook: rejected a request with a {} Twilio signature",
                                   "missing" if not signature else "invalid")
                    return Response("invalid signature", status_code=403)
            elif self.config.production:
                return Response("signature validation not configured", status_code=403)
            elif not self._unsigned_logged:
                self._unsigned_logged = True
                logger.warning("webhook: TWILIO_AUTH_TOKEN is not set, signatures are not checked (development mode)")
        fields = dict(params)
        provider_call_id = fields.get("CallSid") or fields.get("CallControlId") or fields.get("CallUUID")
        record = None if self.draining else self.registry.reserve(provider, provider_call_id)
        if record is None:
            logger.info("webhook: call turned away ({})", "draining" if self.draining else "at capacity")
            text, media = busy_instruction(provider)
            return Response(text, media_type=media)
        text, media = stream_instruction(provider, self._stream_url(request),
                                         {"token": record.token, "call_id": record.call_id})
        logger.info("webhook: call {} reserved", record.call_id)
        return Response(text, media_type=media)

    # --- media stream ----------------------------------------------------------------------------------------------

    async def _ws(self, websocket: WebSocket) -> None:
        await websocket.accept()
        if self.draining:
            await _close(websocket, 1013, "server is draining, call again")
            return
        try:
            start, prestart = await self._handshake(websocket)
        except HandshakeError as exc:
            logger.warning("stream refused: {}", exc)
            await _close(websocket, 1008, str(exc)[:120])
            return
        except WebSocketDisconnect:
            logger.info("stream closed by the client before it started")
            return
        token = start.parameters.get("token") or websocket.query_params.get("token")
        claimed = self.registry.claim(token, start.call_id)
        if isinstance(claimed, str):
            logger.warning("stream refused: {}", claimed)
            await _close(websocket, 1008, claimed)
            return
        for kind, count in prestart.items():
            claimed.violations[kind] = claimed.violations.get(kind, 0) + count
        live = _LiveCall(claimed)
        self._live[claimed.call_id] = live
        self.calls_started += 1
        try:
            await self._run_call(websocket, start, live)
        finally:
            live.done.set()
            self._live.pop(claimed.call_id, None)

    async def _handshake(self, websocket: WebSocket) -> tuple[StreamStart, dict[str, int]]:
        deadline = time.monotonic() + self.config.handshake_timeout_secs
        dropped: dict[str, int] = {}
        for _ in range(_MAX_PRESTART_MESSAGES):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                message = await asyncio.wait_for(websocket.receive(), remaining)
            except TimeoutError:
                break
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(int(message.get("code") or 1000))
            text = message.get("text")
            if not isinstance(text, str):
                kind = "binary message before start"
            elif len(text) > self.config.max_message_bytes:
                kind = "oversized message before start"
            else:
                try:
                    data = json.loads(text)
                except json.JSONDecodeError:
                    data = None
                event = data.get("event") if isinstance(data, dict) else None
                if event == "start" and isinstance(data, dict):
                    return parse_start(data, self.config.provider), dropped
                if event == "connected":
                    continue
                kind = (
                    "malformed JSON before start" if data is None
                    else "media before start" if event == "media"
                    else "unknown event before start"
                )
            dropped[kind] = dropped.get(kind, 0) + 1
            logger.warning("stream: dropped a message before start: {}", kind)
        raise HandshakeError(f"no valid start message within {self.config.handshake_timeout_secs:.0f} s")

    async def _run_call(self, websocket: WebSocket, start: StreamStart, live: _LiveCall) -> None:
        record = live.record
        call_id = record.call_id
        logger.info("call {}: stream {} started", call_id, start.provider.value)
        try:
            parts, audio = await asyncio.to_thread(self._build_parts, call_id)
        except Exception as exc:  # one call's set-up failure must not touch the server
            record.reason = f"set-up failed: {exc}" if isinstance(exc, AudioModelError) else (
                f"set-up failed ({type(exc).__name__})"
            )
            logger.exception("call {}: set-up failed", call_id)
            self._finish(record, None)
            await _close(websocket, 1011, "call set-up failed")
            return
        record.session = parts.session
        record.extra.update(parts.extra)
        record.extra["config"] = parts.session.describe()

        async def close_call(reason: str) -> None:
            if not record.reason:
                record.reason = reason
            logger.info("call {}: closing ({})", call_id, reason)
            if live.worker is not None and not live.worker.has_finished():
                task = asyncio.get_running_loop().create_task(live.worker.cancel(reason=reason))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        serializer: GuardedSerializer | None = None
        try:
            serializer = GuardedSerializer(
                make_serializer(start, self.config.credentials), start, close_call,
                max_message_bytes=self.config.max_message_bytes, max_violations=self.config.max_violations,
                call_id=call_id,
            )
            guarded_ws = GuardedWebSocket(websocket, close_call, send_timeout=self.config.send_timeout_secs,
                                          call_id=call_id)
            worker = self._build_worker(guarded_ws, serializer, parts, audio, close_call, live)
            runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
            await runner.add_workers(worker)
            await runner.run()
            if not record.reason:
                record.reason = "ended"
        except Exception as exc:  # isolate: log, record, close this call only
            record.reason = record.reason or f"pipeline error ({type(exc).__name__})"
            logger.exception("call {}: pipeline failed", call_id)
        finally:
            with contextlib.suppress(Exception):
                parts.session.close()
            if serializer is not None:
                for kind, count in serializer.violations.items():
                    record.violations[kind] = record.violations.get(kind, 0) + count
                record.marks = len(serializer.marks)
                record.dtmf = list(serializer.dtmf)
            self._finish(record, parts.session, live.recorder)
            await _close(websocket, 1000, "call ended")

    def _build_parts(self, call_id: str) -> tuple[CallParts, Any]:
        parts = self.factory(call_id)
        audio = self.config.stack.build(prompt=recognizer_prompt(parts.id_shapes, parts.topic))
        return parts, audio

    def _build_worker(
        self, guarded_ws: GuardedWebSocket, serializer: GuardedSerializer, parts: CallParts, audio: Any,
        close_call: Callable[[str], Awaitable[None]], live: _LiveCall,
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
            await close_call("caller hung up" if serializer.stopped else "client disconnected")

        async def on_timeout(_transport: Any, _ws: Any) -> None:
            live.record.reason = live.record.reason or f"call exceeded {self.config.max_call_secs} s"
            if live.worker is not None:
                await live.worker.queue_frame(EndFrame())

        transport.add_event_handler("on_client_disconnected", on_disconnected)
        transport.add_event_handler("on_session_timeout", on_timeout)
        session = parts.session
        llm = parts.llm
        call = build_call_pipeline(
            session, llm,
            before_user=[
                transport.input(), *audio.before_user, SpokenIdNormalizer(parts.id_shapes, name="spoken-ids"),
                # Whisper gives no interims: retrieval then simply runs at the final transcript.
                *([SpeculativeRetrieval(session, shared_index(), name="retrieval")] if self.config.knowledge else []),
            ],
            tts=[audio.tts, transport.output()],
            user_turn_strategies=audio.turn_strategies, user_turn_stop_timeout=AUDIO_TURN_STOP_TIMEOUT,
        )
        # The operator's per-turn record (latency, tools run, what was heard), observed from outside the call.
        recorder = CallRecorder(session)
        live.recorder = recorder
        worker = PipelineWorker(
            call.pipeline,
            params=PipelineParams(audio_in_sample_rate=PIPELINE_IN_RATE, audio_out_sample_rate=PIPELINE_OUT_RATE),
            enable_rtvi=False, idle_timeout_secs=self.config.idle_timeout_secs, cancel_runner_on_idle_timeout=False,
            enable_turn_tracking=False, check_dangling_tasks=False, conversation_id=live.record.call_id,
            observers=[RecorderObserver(recorder, call.llm, call.output_guard)],
        )
        live.worker = worker
        return worker

    def _finish(self, record: CallRecord, session: CallSession | None, recorder: CallRecorder | None = None) -> None:
        record.state = "ended"
        record.ended = time.time()
        if session is not None:
            record.transcript = [e.render() for e in session.state.transcript]
        if recorder is not None:
            recorder.close_turn()
            record.turns = [
                {"turn": t.turn, "caller": t.caller, "agent": " ".join(t.agent), "executed": list(t.executed),
                 "first_response_ms": t.first_response_ms, "interrupted": t.interrupted, "errors": list(t.errors)}
                for t in recorder.turns
            ]
        record.session = None
        logger.info("call {}: ended ({}); {} transcript entries", record.call_id, record.reason, len(record.transcript))
        if self.config.transcript_dir is not None:
            try:
                path = Path(self.config.transcript_dir) / f"{record.call_id}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({**record.summary(), "transcript": record.transcript, "turns": record.turns},
                                           indent=2, default=str), encoding="utf-8")
            except OSError as exc:
                logger.error("call {}: transcript not written: {}", record.call_id, exc)

    def warm_up(self) -> None:
        """Loads the audio models and runs the domain's first-use work (blocking; before taking calls).

        The first reply of a fresh process otherwise pays for lazy imports and the date
        parser's language data (seconds on a busy machine), inside a caller's turn.
        """
        self.config.stack.warm_up()
        if self.config.knowledge:
            shared_index()  # a first run embeds the knowledge base (seconds); later runs read the cache
        try:
            parts = self.factory("warm-up")
            brain = parts.session.domain.make_brain()
            today = parts.session.config.reference_date.isoformat()
            for text in ("Hello, is this the right line?", "It's about the October one; call me after the 14th."):
                brain.respond([{"role": "system", "content": f"Today is {today}."}, {"role": "user", "content": text}],
                              [t.name for t in parts.session.domain.tools])
        except Exception as exc:  # warm-up is an optimisation; a failure here shows up in the first call
            logger.warning("warm-up of the call path failed: {}", exc)
        self.ready = True

    # --- draining --------------------------------------------------------------------------------------------------

    async def drain(self, timeout: float | None = None) -> int:
        """Stops taking calls, waits for active calls to end, then cancels what is left.

        Returns:
            The number of calls that had to be cancelled.
        """
        self.draining = True
        limit = self.config.drain_timeout_secs if timeout is None else timeout
        live = list(self._live.values())
        logger.info("draining: {} active call(s), waiting up to {:.0f} s", len(live), limit)
        if live:
            await asyncio.wait([asyncio.ensure_future(c.done.wait()) for c in live], timeout=limit)
        left = [c for c in self._live.values() if not c.done.is_set()]
        for call in left:
            call.record.reason = call.record.reason or "server shutdown (drain timeout)"
            if call.worker is not None:
                await call.worker.cancel(reason="server shutdown")
        if left:
            await asyncio.wait([asyncio.ensure_future(c.done.wait()) for c in left], timeout=10)
        logger.info("draining done; {} call(s) cancelled", len(left))
        return len(left)


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    """Closes the socket if it is still open (never raises)."""
    with contextlib.suppress(Exception):
        connected = WebSocketState.CONNECTED
        if websocket.application_state == connected and websocket.client_state == connected:
            # Bounded: a client that stopped reading cannot hold the handler open.
            await asyncio.wait_for(websocket.close(code=code, reason=reason), 2.0)


def bind_socket(host: str, port: int, send_buffer: int | None = None) -> socket.socket:
    """A listening TCP socket; accepted sockets inherit ``send_buffer`` (SO_SNDBUF) on Linux."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn that drains calls on the first SIGTERM/SIGINT and exits at once on the second."""

    def __init__(self, config: uvicorn.Config, bridge: VoiceBridge) -> None:
        super().__init__(config)
        self.bridge = bridge
        self._drain_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serves until drained."""
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First signal: drain; second: exit now."""
        if self._drain_task is not None or self._loop is None:
            self.should_exit = True
            self.force_exit = sig == signal.SIGINT
            return
        logger.info("signal {}: draining calls before exit", signal.Signals(sig).name)
        self._loop.call_soon_threadsafe(self.begin_drain)

    def begin_drain(self) -> None:
        """Starts draining; the server exits once drained."""
        if self._drain_task is None:
            self._drain_task = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self.bridge.drain()
        finally:
            self.should_exit = True


def uvicorn_config(bridge: VoiceBridge) -> uvicorn.Config:
    """uvicorn settings for the bridge (frame size cap, quiet logs, no lifespan)."""
    return uvicorn.Config(
        bridge.app, ws_max_size=bridge.config.ws_max_size, lifespan="off", log_level="warning",
        ws="websockets-sansio", timeout_graceful_shutdown=5, access_log=False,
    )


async def serve(config: ServerConfig, call_factory: CallFactory, *, ready: asyncio.Event | None = None) -> None:
    """Runs the bridge until SIGTERM/SIGINT has drained it.

    Raises:
        ConfigError: Bad configuration.
        AudioModelError: A model of the audio stack is missing.
    """
    bridge = VoiceBridge(config, call_factory)
    await asyncio.to_thread(bridge.warm_up)
    sock = bind_socket(config.host, config.port, config.socket_send_buffer)
    server = DrainingServer(uvicorn_config(bridge), bridge)
    logger.info("bridge listening on {}:{} ({}, {} calls max)", config.host, sock.getsockname()[1],
                config.provider.value, config.max_calls)
    if ready is not None:
        ready.set()
    await server.serve(sockets=[sock])


@contextlib.asynccontextmanager
async def running_bridge(config: ServerConfig, call_factory: CallFactory) -> AsyncIterator[tuple[VoiceBridge, str]]:
    """Runs the bridge in this event loop on ``config.host`` (port 0: any free port), for tests and tools.

    Yields:
        (bridge, base URL such as ``http://127.0.0.1:40123``).
    """
    bridge = VoiceBridge(config, call_factory)
    await asyncio.to_thread(bridge.warm_up)
    sock = bind_socket(config.host, config.port, config.socket_send_buffer)
    port = sock.getsockname()[1]
    server = DrainingServer(uvicorn_config(bridge), bridge)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(200):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        if task.done():
            task.result()
        yield bridge, f"http://{config.host}:{port}"
    finally:
        if not bridge.draining:
            await bridge.drain(timeout=5)
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
        sock.close()
