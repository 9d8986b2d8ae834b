"""The telephony bridge: a FastAPI app that answers provider webhooks and runs one pipeline per call.

- ``POST /voice``: the provider's voice webhook (:mod:`voice_agent.telephony.webhooks`). The body is
  streamed and cut at ``webhook_max_bytes`` (413) before anything else; requests are then verified
  with the provider's signature when its credential is set (always in production): Twilio
  ``X-Twilio-Signature`` (``TWILIO_AUTH_TOKEN``), Telnyx Ed25519 (``TELNYX_PUBLIC_KEY``), Plivo V3
  (``PLIVO_AUTH_TOKEN``). Without one (development mode) webhooks are rate-limited per client and
  overall (429). The answer connects the call to ``/ws`` with a one-time stream token (a short
  reservation, see :class:`CallRegistry`), or, at capacity or while draining, says sorry and hangs up.
- ``WS /ws``: the media stream. The handshake must arrive within a deadline and carry a valid
  token (Twilio ``customParameters`` or a ``token`` query parameter); every later message is
  validated (:mod:`voice_agent.telephony.bridge`). Each call gets its own session, services and
  pipeline; whatever happens to one call is caught and recorded, never propagated.
  Each call's record file (:mod:`voice_agent.telephony.journal`) is appended to as the call happens.
- ``GET /healthz`` (alive), ``GET /readyz`` (503 while warming up, draining or full), ``GET /calls``
  (per-call metadata, no transcript text; only with ``calls_token``, as a bearer token, else 404).
- With a call store (``store``): each call's state is saved after every turn; the webhook answer brings the
  provider back to ``/voice`` when a stream ends without a hang-up, and the call resumes (here or on
  another worker of the same store); SIGTERM hands active calls over that way. With ``fleet`` (Redis),
  stream tokens, the call cap and the call registry are shared by every worker.
- SIGTERM/SIGINT: stop taking calls, let active calls finish (up to ``drain_timeout_secs``); a call
  still running then hears a goodbye line and ends, recorded as drained. Then exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import json
import secrets
import signal
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from loguru import logger
from pipecat.frames.frames import EndFrame, LLMRunFrame, TTSSpeakFrame
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
from pipecat.workers.runner import WorkerRunner
from redis.exceptions import RedisError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from processors.speculative_retrieval import SpeculativeRetrieval
from processors.spoken_ids import SpokenIdNormalizer, recognizer_prompt
from voice_agent.audio.manifest import AudioModelError
from voice_agent.audio.stack import AudioStack
from voice_agent.call_factory import CallFactory, CallParts
from voice_agent.core.resume import resume_line, unanswered
from voice_agent.pipeline import AUDIO_TURN_STOP_TIMEOUT, build_call_pipeline
from voice_agent.recording.record import CallRecorder
from voice_agent.recording.tap import RecorderTap
from voice_agent.retrieval.index import shared_index
from voice_agent.retrieval.speculative import BUDGETED_SPECULATION
from voice_agent.session import CallSession
from voice_agent.settings import TransferConfig
from voice_agent.store.base import CallStore, StoredCall, StoreError, UnreadableCall
from voice_agent.telephony.accept_gate import AcceptGate
from voice_agent.telephony.bridge import (
    CLOSE_CODES,
    FRAME_TOO_LARGE,
    EndReason,
    GuardedSerializer,
    GuardedWebSocket,
    PolicyWebSocketProtocol,
)
from voice_agent.telephony.fleet import Fleet, FleetReservation, FleetUnavailable
from voice_agent.telephony.heap import DEFAULT_YOUNG_THRESHOLD, check_young_threshold, settle_heap
from voice_agent.telephony.journal import (
    CallJournal,
    ensure_record_dir,
    prune_records,
    write_private,
)
from voice_agent.telephony.local_fleet import LocalFleet
from voice_agent.telephony.persistence import CallPersistence, StoreEffectLog
from voice_agent.telephony.providers import (
    HandshakeError,
    HangupCredentials,
    Provider,
    StreamStart,
    busy_instruction,
    hangup_instruction,
    make_serializer,
    parse_start,
    retry_instruction,
    stream_instruction,
)
from voice_agent.telephony.signatures import DEFAULT_TOLERANCE_SECS
from voice_agent.telephony.transfer import ProviderTransfer, missing_credentials, plivo_xml
from voice_agent.telephony.webhooks import (
    CREDENTIAL_VARIABLES,
    UNSIGNED_OVERALL,
    UNSIGNED_PER_CLIENT,
    RateLimit,
    RefusalLog,
    WebhookBodyError,
    WebhookRateLimiter,
    read_capped_body,
    webhook_verifier,
)

PIPELINE_IN_RATE = 16000
"""The pipeline hears 16 kHz (the serializer resamples the 8 kHz stream)."""

PIPELINE_OUT_RATE = 8000
"""TTS renders straight at the phone rate."""

MAX_WEBHOOK_BYTES = 65536
"""Largest webhook body read."""

_MAX_PRESTART_MESSAGES = 8
_KEEP_ENDED = 200

READYZ_STORE_TIMEOUT_SECS = 1.0
TURN_SAVE_WAIT_SECS = 1.0
"""Longest the agent's answer waits for the save of the caller's line; a slower store saves on in the background."""
TRANSFER_KEY_SECS = 120.0
"""How long after its call's stream ends Plivo may still fetch a transfer's XML by its one-time key."""
"""Longest the agent's answer waits for the save of the caller's line; a slower store saves on in the background."""
# A resumed leg whose stored state did not load: the caller was mid-call, so the agent speaks first, honestly.
FRESH_START_LINE = ("Sorry, we got cut off, and I've lost track of our conversation. "
                    "Could you tell me again how I can help?")
GOODBYE_LINE = "I'm sorry, this line has to close now. Please call back in a few minutes. Goodbye."
"""What a call still running at the end of the drain limit hears before it is ended."""

MIN_CALLS_TOKEN = 16
"""Shortest ``VOICE_AGENT_CALLS_TOKEN`` accepted."""

PRUNE_INTERVAL_SECS = 86400.0
"""How often old call records are deleted."""

HANDOVER_TURN_WAIT_SECS = 8.0
"""A drain lets a call finish the turn in progress for this long before handing it over."""

RECORD_THREADS = 4
"""Threads for the call records' disk work: the fsyncs of several calls wait on the disk at once."""


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
        production: Refuse unsigned webhooks (needs the provider's webhook credential: ``TWILIO_AUTH_TOKEN``,
            ``TELNYX_PUBLIC_KEY`` or ``PLIVO_AUTH_TOKEN``) and require ``public_url``.
        credentials: Provider credentials (webhook signatures, optional hang-up).
        max_calls: Concurrent calls (reserved by a webhook or streaming); more are turned away. A
            reservation's slot can be taken over (see :class:`CallRegistry`), a streaming call's cannot.
        token_ttl_secs: How long a webhook reservation (and its stream token) waits for the stream.
        reservation_grace_secs: How long a reservation is safe from being taken over by a newer webhook.
        leg_lease_secs: With a store: how long a leg holds its call without renewing (renewed every third of
            it). A call whose worker died resumes on a next leg once this lapses; until then the provider's
            webhook for it is sent round again.
        stream_silence_secs: With a store: a stream that sends nothing for this long is taken for a half-open
            connection and its leg given up (providers send media every 20 ms, silence included; generous,
            so a stalled event loop on a busy machine is not mistaken for a lost stream).
        webhook_max_bytes: Larger webhook bodies are refused (413) without being read further.
        webhook_read_timeout_secs: A webhook body that takes longer to arrive is refused (408).
        signature_tolerance_secs: Telnyx: largest distance between the signed timestamp and now.
        unsigned_per_client: Development mode (no credential): each client address's webhook rate limit.
        unsigned_overall: Development mode: the webhook rate limit of all clients together.
        handshake_timeout_secs: Deadline for the stream's ``start`` message.
        max_message_bytes: Larger inbound messages are dropped.
        ws_max_size: Larger WebSocket frames make the server close the connection (1008, a violation).
        max_violations: Dropped messages after which a call is closed (1008).
        send_timeout_secs: A send that blocks longer closes the call (slow client).
        max_call_secs: Calls are ended after this long.
        idle_timeout_secs: A call with no speech either way for this long is cancelled.
        drain_timeout_secs: On SIGTERM, how long active calls may take to finish; calls still running
            then hear ``goodbye_line`` and are ended (recorded as drained).
        goodbye_line: What a call cut by the drain limit hears.
        goodbye_timeout_secs: Longest wait for the goodbye to play before the call is cancelled.
        transcript_dir: Where each call's record is written: ``<call_id>.jsonl`` while it runs (append-only),
            ``<call_id>.json`` at its end (kept in memory only when None).
        transcript_retention_days: Records older than this are deleted at start-up and daily (None: kept).
        calls_token: Bearer token for ``GET /calls``; None turns the listing off (404).
        stack: The audio services.
        socket_send_buffer: SO_SNDBUF for call sockets (smaller: slow clients are detected sooner).
        store: The call store (``store`` settings): each call's state is saved after every turn, a stream that
            ends without a hang-up brings the provider back to ``/voice`` (``<Connect action>``) and the call
            resumes, on this worker or another one on the same store; SIGTERM hands active calls over that
            way instead of waiting for them. None: calls live in memory only.
        fleet: Several workers on one Redis: stream tokens any worker accepts, a fleet-wide call cap and a
            shared call registry (:mod:`voice_agent.telephony.fleet`). None: this worker alone.
        hand_over: On SIGTERM, save each active call and close its stream so the provider brings it back to
            another worker of the same store, instead of letting it finish here. Only right when another
            worker will answer (a fleet, or several workers behind ``voice-agent balance``); None: on in a
            fleet, off otherwise, since a lone worker's hand-over would send the call back to itself.
        transfer: The ``transfer`` settings: where ``transfer_to_human`` moves a call (``target``), where its
            handoff card goes (``card_url``), how long the provider may take. Without a target (or the
            provider's REST credentials) nothing is moved and the agent offers a callback.
        gc_young_threshold: Net allocations between the garbage collector's young collections once warmed up,
            with what start-up left alive frozen out of every collection (:mod:`voice_agent.telephony.heap`):
            full collections pause every call of the process. 0: CPython's collector as it is.
        group_size: In a worker of ``serve --workers N`` on the local fleet: N. The worker then takes new
            connections on the shared socket only while it is the least loaded of the workers accepting, or
            while a worker is missing, until it carries its share (:mod:`voice_agent.telephony.accept_gate`).
            0: it always accepts.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    provider: Provider = Provider.TWILIO
    public_url: str | None = None
    production: bool = False
    credentials: HangupCredentials = field(default_factory=HangupCredentials)
    max_calls: int = 4
    token_ttl_secs: float = 10.0
    leg_lease_secs: float = 6.0
    stream_silence_secs: float = 30.0
    group_size: int = 0
    reservation_grace_secs: float = 3.0
    webhook_max_bytes: int = MAX_WEBHOOK_BYTES
    webhook_read_timeout_secs: float = 10.0
    signature_tolerance_secs: float = DEFAULT_TOLERANCE_SECS
    unsigned_per_client: RateLimit = UNSIGNED_PER_CLIENT
    unsigned_overall: RateLimit = UNSIGNED_OVERALL
    handshake_timeout_secs: float = 5.0
    max_message_bytes: int = 16384
    ws_max_size: int = 65536
    max_violations: int = 50
    send_timeout_secs: float = 5.0
    max_call_secs: int = 3600
    idle_timeout_secs: float | None = 120.0
    drain_timeout_secs: float = 300.0
    goodbye_line: str = GOODBYE_LINE
    goodbye_timeout_secs: float = 15.0
    transcript_dir: Path | None = None
    transcript_retention_days: float | None = 30.0
    calls_token: str | None = None
    stack: AudioStack = field(default_factory=AudioStack)
    socket_send_buffer: int | None = None
    knowledge: bool = True
    store: CallStore | None = None
    fleet: Fleet | None = None
    hand_over: bool | None = None
    gc_young_threshold: int = DEFAULT_YOUNG_THRESHOLD
    transfer: TransferConfig = field(default_factory=TransferConfig)

    @property
    def hands_over(self) -> bool:
        """Whether a drain hands calls over through the store: asked for, or by default in a fleet."""
        if self.store is None:
            return False
        return self.fleet is not None if self.hand_over is None else self.hand_over

    def validate(self) -> None:
        """Checks the combination of settings.

        Raises:
            ConfigError: One line saying what to set.
        """
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be between 0 and 65535, got {self.port}")
        if self.max_calls < 1:
            raise ConfigError("--max-calls must be at least 1")
        if self.drain_timeout_secs < 0:
            raise ConfigError(f"--drain-timeout must be 0 or more seconds, got {self.drain_timeout_secs:g}")
        if self.transcript_retention_days is not None and self.transcript_retention_days <= 0:
            raise ConfigError("--transcript-retention-days must be a positive number of days (0 keeps records forever)")
        if self.calls_token is not None and len(self.calls_token) < MIN_CALLS_TOKEN:
            raise ConfigError(f"VOICE_AGENT_CALLS_TOKEN must be at least {MIN_CALLS_TOKEN} characters "
                              "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        if self.webhook_max_bytes < 1024:
            raise ConfigError("webhook_max_bytes must be at least 1024")
        try:
            check_young_threshold(self.gc_young_threshold)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            verifier = webhook_verifier(self.provider, self.credentials, self.signature_tolerance_secs)
        except ValueError as exc:  # a malformed TELNYX_PUBLIC_KEY
            raise ConfigError(str(exc)) from None
        if self.production:
            if not self.public_url:
                raise ConfigError("production mode needs --public-url (the https URL the provider calls)")
            if verifier is None:
                raise ConfigError(f"production mode needs {CREDENTIAL_VARIABLES[self.provider]} to verify "
                                  f"{self.provider.value} webhook signatures")


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
        reason: Why the call ended, in words.
        end: How it ended: hung up, idle, time limit, server error, drained, handed over, violation, slow client
            or ended (:class:`~voice_agent.telephony.bridge.EndReason`).
        violations: Dropped inbound messages by kind.
        marks: Mark acknowledgements received.
        dtmf: Keys pressed.
        session: The live session while the call runs.
        transcript: The transcript, rendered, once the call has ended.
        turns: Per-turn summaries once the call has ended.
        extra: What the call factory kept with the call.
        leg: Which worker leg of the call this is (1, then +1 each time it resumes).
        resumed_at_turn: The stored turn a resumed leg carried on from (None: a new call).
        address: Where its unsigned webhook came from (development mode), else None.
        resume_key: The secret in this leg's action URL: the provider's request to resume the call after this
            leg must carry it (a replayed webhook of the call, or of an earlier leg, does not).
        returning_key: The previous leg's key the provider came back with ("" for a new call).
        transfer: The call's transfer, once asked for: ``target`` and ``status`` (``transferred`` or
            ``failed``, with the ``error``).
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
    end: str = ""
    violations: dict[str, int] = field(default_factory=dict)
    marks: int = 0
    dtmf: list[str] = field(default_factory=list)
    session: CallSession | None = None
    transcript: list[str] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    leg: int = 1
    resumed_at_turn: int | None = None
    address: str | None = None
    resume_key: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    returning_key: str = ""
    transfer: dict[str, str] = field(default_factory=dict)

    def transcript_lines(self) -> list[str]:
        """The transcript so far (live while the call runs)."""
        if self.session is not None:
            return [e.render() for e in self.session.state.transcript]
        return list(self.transcript)

    def summary(self) -> dict[str, Any]:
        """Metadata only: no caller words, no identifiers."""
        return {
            "call_id": self.call_id, "provider": self.provider.value, "state": self.state,
            "started": self.started, "ended": self.ended, "reason": self.reason, "end": self.end,
            "violations": dict(self.violations), "marks": self.marks, "dtmf_count": len(self.dtmf),
            "transcript_entries": len(self.transcript_lines()), "config": self.extra.get("config"),
            "leg": self.leg, "resumed_at_turn": self.resumed_at_turn, "transfer": dict(self.transfer) or None,
        }


class CallRegistry:
    """Reservations, active calls and recently ended calls.

    The slot rule (a webhook needs no caller, a stream does, so the two do not count alike):

    - ``max_calls`` slots, each held by a streaming call or by a reservation (a webhook answered with
      a stream token). A streaming call keeps its slot until it ends.
    - A reservation is short: it lapses after ``token_ttl`` seconds (10 by default) if no stream
      claims its token.
    - One provider call, one reservation: a repeated webhook with the same provider call id
      (``CallSid``, ``CallControlId``, ``CallUUID``) gets the same record back (same call id, same
      token, same deadline), never a second slot. A call id that already streamed is not served again.
    - When every slot is taken, a new webhook takes over the oldest reservation that has waited longer
      than ``grace`` seconds (a real caller's stream connects within a second or two); that
      reservation's token stops working. Only when every slot is streaming, or every reservation is
      younger than ``grace``, is the caller told the line is busy.

    So webhooks alone (unsigned ones in development mode, replayed signed ones) can hold a slot for
    ``grace`` seconds at most against a newer caller, and never a streaming call's.

    Args:
        max_calls: Reserved plus active calls allowed at once.
        token_ttl: Seconds a reservation waits for its stream.
        grace: Seconds a reservation is safe from being taken over by a newer webhook.
    """

    def __init__(self, max_calls: int, token_ttl: float, grace: float = 3.0) -> None:
        self.max_calls = max_calls
        self.token_ttl = token_ttl
        self.grace = grace
        self._records: OrderedDict[str, CallRecord] = OrderedDict()
        self._by_token: dict[str, str] = {}
        self._counter = itertools.count(1)
        self.refused = 0
        self.evicted = 0

    def _expire(self) -> None:
        now = time.monotonic()
        for record in list(self._records.values()):
            if record.state == "reserved" and record.expires < now:
                record.state = "ended"
                record.reason = "stream never connected (token expired)"
                record.ended = time.time()
                self._by_token.pop(record.token, None)
        ended = [k for k, r in self._records.items() if r.state == "ended"]
        excess = len(ended) - _KEEP_ENDED
        if excess > 0:
            # Reservations that never streamed go first: a flood of webhooks cannot push real calls out.
            never = [k for k in ended if self._records[k].started is None]
            streamed = [k for k in ended if self._records[k].started is not None]
            for key in (never + streamed)[:excess]:
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

    def reserve(
        self, provider: Provider, provider_call_id: str | None, resume: tuple[str, int] | None = None,
        address: str | None = None, returned: bool = False,
    ) -> CallRecord | None:
        """The call's reservation (an existing one for a repeated webhook), or None when it gets none.

        See the class docstring for the rule.

        Args:
            provider: The provider.
            provider_call_id: The provider's call id.
            resume: (call id, leg) of a stored call the provider brought back: the reservation keeps the
                call's id and is its next leg, even if this worker ran an earlier leg of it.
            address: Where an unsigned webhook came from (development mode), for the fair share; None when
                webhooks are signed.
            returned: The provider came back with the previous leg's key (its stream has ended for sure).
        """
        self._expire()
        if provider_call_id:
            for known in list(self._records.values()):
                if known.provider is not provider or known.provider_call_id != provider_call_id:
                    continue
                if known.state == "reserved" and (resume is None or known.leg == resume[1]):
                    return known
                if known.state == "reserved":
                    # This worker's reservation for an earlier leg, whose stream another worker took: stale.
                    self.cancel(known, "superseded by the call's next leg")
                    continue
                if resume is not None and (known.state == "ended" or _resumable(known) or returned):
                    # An earlier leg ran here; the new leg replaces it, also while the old one is still
                    # closing (its stream dropped, the provider came straight back), or still looks alive
                    # (half-open) when the provider came back with its key.
                    self._records.pop(known.call_id, None)
                    continue
                if known.started is not None:  # streaming or streamed: one slot per call, once
                    self.refused += 1
                    return None
        if self.busy >= self.max_calls:
            now = time.monotonic()
            stale = next((r for r in self._records.values()
                          if r.state == "reserved" and now - r.created >= self.grace), None)
            if stale is None and address is not None:
                stale = self._over_fair_share(address)
            if stale is None:
                self.refused += 1
                return None
            stale.state, stale.ended = "ended", time.time()
            stale.reason = ("reservation taken over by a newer call (stream never connected)" if stale.address is None
                            or now - stale.created >= self.grace else
                            "reservation given up to another address (its address held more than its share)")
            self._by_token.pop(stale.token, None)
            self.evicted += 1
        token = secrets.token_urlsafe(24)
        call_id = resume[0] if resume is not None else f"call-{next(self._counter)}-{secrets.token_hex(3)}"
        record = CallRecord(call_id, provider, token, expires=time.monotonic() + self.token_ttl,
                            provider_call_id=provider_call_id, leg=resume[1] if resume is not None else 1,
                            address=address)
        self._records[call_id] = record
        self._by_token[token] = call_id
        return record

    def _over_fair_share(self, address: str) -> CallRecord | None:
        """The newest reservation of the address holding the most, when it holds more than ``address`` would.

        Unsigned webhooks cost nothing to send: without this, one address at its rate limit keeps every slot
        reserved with fresh (grace-protected) reservations and real callers hear the busy line.
        """
        held: dict[str, list[CallRecord]] = {}
        for record in self._records.values():
            if record.state == "reserved" and record.address is not None:
                held.setdefault(record.address, []).append(record)
        if not held:
            return None
        heaviest = max(held, key=lambda a: len(held[a]))
        if len(held[heaviest]) <= len(held.get(address, [])) + 1:
            return None
        return held[heaviest][-1]

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

    def cancel(self, record: CallRecord, reason: str) -> None:
        """Drops a reservation that cannot stand (the fleet is full): its token stops working."""
        record.state, record.reason, record.ended = "ended", reason, time.time()
        self._by_token.pop(record.token, None)

    @property
    def reserved(self) -> list[CallRecord]:
        """Reservations whose stream has not connected here (yet)."""
        self._expire()
        return [r for r in self._records.values() if r.state == "reserved"]

    def adopt(self, reservation: FleetReservation, token: str, provider_call_id: str) -> CallRecord | str:
        """A stream whose token another worker of the fleet issued: the call is now active here, or why not."""
        if reservation.provider_call_id and reservation.provider_call_id != provider_call_id:
            return "stream token belongs to another call"
        self._expire()
        self._records.pop(reservation.call_id, None)  # an earlier leg of this call may have run here
        record = CallRecord(reservation.call_id, Provider(reservation.provider), token, state="active",
                            provider_call_id=provider_call_id, started=time.time(), leg=reservation.leg,
                            resume_key=reservation.resume_key or secrets.token_urlsafe(16),
                            returning_key=reservation.returning_key)
        if reservation.resume_problem:
            record.extra["resume_problem"] = reservation.resume_problem
        self._records[record.call_id] = record
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
    journal: CallJournal | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    completed_turn: int = 0
    """The last turn the agent finished answering (a drain hands the call over between turns)."""
    serializer: GuardedSerializer | None = None
    close: Callable[[str, EndReason], Awaitable[None]] | None = None
    transfer: ProviderTransfer | None = None


def _end_as(record: CallRecord, reason: str, end: EndReason) -> None:
    """Records why the call ended; the first cause wins."""
    if not record.reason:
        record.reason = reason
    if not record.end:
        record.end = end.value


async def _save_awhile(persistence: CallPersistence, session: CallSession, record: CallRecord, what: str) -> None:
    """Saves the call, waiting at most :data:`TURN_SAVE_WAIT_SECS`: a store that hangs must not silence the call,
    so past that the save goes on in the background and the call goes on."""
    saving = asyncio.ensure_future(persistence.save(session, leg=record.leg, provider_call_id=record.provider_call_id))
    try:
        await asyncio.wait_for(asyncio.shield(saving), TURN_SAVE_WAIT_SECS)
    except TimeoutError:
        logger.warning("call {}: the store is slow; {} goes on before its save ends", record.call_id, what)


def _resumable(record: CallRecord) -> bool:
    """Whether the stream ended without the caller hanging up, so the provider may bring the call back."""
    return record.end in (EndReason.HANDED_OVER.value, EndReason.STREAM_LOST.value) or (
        record.end == EndReason.HUNG_UP.value and record.reason == "client disconnected")


def _close_code(record: CallRecord) -> tuple[int, str]:
    """The WebSocket close code and reason for how the call ended."""
    try:
        code = CLOSE_CODES[EndReason(record.end)]
    except ValueError:
        code = 1000
    reason = (record.reason or "call ended").encode("utf-8")[:120].decode("utf-8", "ignore")
    return code, reason


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
        self.registry = CallRegistry(config.max_calls, config.token_ttl_secs, config.reservation_grace_secs)
        self.draining = False
        self.ready = False
        self.calls_started = 0
        self._live: dict[str, _LiveCall] = {}
        self._streams = 0
        self.gate: AcceptGate | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.verifier = webhook_verifier(config.provider, config.credentials, config.signature_tolerance_secs)
        self.unsigned_limiter = WebhookRateLimiter(config.unsigned_per_client, config.unsigned_overall)
        self.webhook_log = RefusalLog()
        self.persistence = CallPersistence(config.store) if config.store is not None else None
        self.resumes = 0
        # The call records' disk work (fsyncs, the end's record file) has threads of its own: on asyncio's
        # default pool a slow disk would queue the calls' audio models (STT, TTS) behind it.
        self._record_threads = ThreadPoolExecutor(max_workers=RECORD_THREADS, thread_name_prefix="call-records")
        if self.verifier is None:
            logger.warning("webhooks: {} is not set, {} webhook signatures are not checked (development mode: "
                           "unsigned webhooks are rate-limited; --production requires signatures)",
                           CREDENTIAL_VARIABLES[config.provider], config.provider.value)
        self._transfer_xml: dict[str, str] = {}
        """Plivo: the transfer XML of each call being moved, by the one-time key in its ``aleg_url``."""
        self._log_transfer_setting()
        self.app = self._build_app()

    def _log_transfer_setting(self) -> None:
        """One line at start-up when ``transfer_to_human`` cannot move calls (the agent offers a callback)."""
        transfer, provider = self.config.transfer, self.config.provider
        missing = missing_credentials(provider, self.config.credentials)
        if transfer.target is None:
            logger.warning("transfer: no transfer target; transfer_to_human moves no call and the agent offers a "
                           "callback (set [transfer] target or VOICE_AGENT_TRANSFER__TARGET)")
        elif missing is not None:
            logger.warning("transfer: without {}, transfer_to_human cannot move {} calls to {}; the agent offers a "
                           "callback", missing, provider.value, transfer.target)
        else:
            logger.info("transfer: transfer_to_human moves calls to {}", transfer.target)

    # --- app -------------------------------------------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="voice-agent telephony bridge", docs_url=None, redoc_url=None, openapi_url=None)
        app.add_api_route("/healthz", self._healthz, methods=["GET"])
        app.add_api_route("/readyz", self._readyz, methods=["GET"])
        app.add_api_route("/calls", self._calls, methods=["GET"])
        app.add_api_route("/voice", self._voice, methods=["POST"])
        app.add_api_route("/transfer", self._transfer_answer, methods=["GET", "POST"])
        app.add_api_websocket_route("/ws", self._ws)
        return app

    async def _transfer_answer(self, request: Request) -> Response:
        """Plivo's ``aleg_url`` of a call being moved: its transfer XML, once, for the one-time key."""
        xml = self._transfer_xml.pop(request.query_params.get("key", ""), None)
        if xml is None:
            return Response("unknown transfer", status_code=404)
        return Response(xml, media_type="application/xml")

    async def _healthz(self) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def _readyz(self) -> JSONResponse:
        busy = self.registry.busy
        state = "draining" if self.draining else "warming" if not self.ready else (
            "full" if busy >= self.config.max_calls else "ready"
        )
        body: dict[str, Any] = {"status": state, "calls": busy, "max_calls": self.config.max_calls}
        if state == "ready" and self.config.fleet is not None:
            try:
                await asyncio.wait_for(self.config.fleet.busy(), READYZ_STORE_TIMEOUT_SECS)
            except (RedisError, FleetUnavailable, TimeoutError) as exc:
                # Every new call would be turned away (its token cannot be published): not ready.
                body["status"], body["error"] = "store unreachable", f"fleet: {exc or 'no answer'}"
                return JSONResponse(body, status_code=503)
        return JSONResponse(body, status_code=200 if state == "ready" else 503)

    async def _calls(self, request: Request) -> JSONResponse:
        # Off unless a token is configured: call metadata is nobody else's business.
        token = self.config.calls_token
        if not token:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), token.encode()):
            return JSONResponse({"detail": "a bearer token is required"}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        body: dict[str, Any] = {"calls": [r.summary() for r in self.registry.all()], "refused": self.registry.refused}
        if self.config.fleet is not None:
            try:
                body["fleet"] = {"busy": await self.config.fleet.busy(), "calls": await self.config.fleet.calls()}
            except (RedisError, FleetUnavailable) as exc:
                body["fleet"] = {"error": str(exc)}
        return JSONResponse(body)

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
        """The voice webhook: rate limit (unsigned only), capped read, signature, then a reservation.

        Nothing is parsed or verified before the body is known to fit ``webhook_max_bytes``; refusals
        that leave the body unread close the connection, so the rest of it is never received.
        """
        provider = self.config.provider
        address: str | None = None
        if self.verifier is None:
            if self.config.production:  # validate() refuses this; kept as the last line of defence
                return Response("signature validation not configured", status_code=403)
            client = request.client.host if request.client else "unknown"
            address = client
            if not self.unsigned_limiter.allow(client):
                self.webhook_log.note("rate limited (unsigned)")
                return Response("too many requests", status_code=429,
                                headers={"Retry-After": "1", "Connection": "close"})
        try:
            body = await read_capped_body(request, self.config.webhook_max_bytes,
                                          self.config.webhook_read_timeout_secs)
        except WebhookBodyError as exc:
            self.webhook_log.note(str(exc))
            return Response(str(exc), status_code=exc.status, headers={"Connection": "close"})
        try:
            params = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200)
        except (UnicodeDecodeError, ValueError):
            return Response("bad request", status_code=400)
        if self.verifier is not None:
            problem = self.verifier.problem(self._public_url(request), request.headers, body, params)
            if problem is not None:
                self.webhook_log.note(f"{problem} ({provider.value})")
                return Response("invalid signature", status_code=403)
        fields = dict(params)
        provider_call_id = fields.get("CallSid") or fields.get("CallControlId") or fields.get("CallUUID")
        if not provider_call_id or len(provider_call_id) > 128 or not provider_call_id.isprintable():
            self.webhook_log.note("no valid call id")
            return Response("missing or invalid call id (CallSid, CallControlId or CallUUID)", status_code=400)
        resume: tuple[str, int] | None = None
        returning = ""
        unreadable: str | None = None
        if self.persistence is not None:
            found = await self.persistence.find(provider_call_id)
            stored = found if isinstance(found, StoredCall) else None
            if isinstance(found, UnreadableCall):
                unreadable = str(found)
            elif isinstance(found, StoreError) and request.query_params.get("resume"):
                # The provider brings back a call the store cannot be read for: it starts fresh, greeted.
                unreadable = f"the store could not be read ({found})"
            if stored is not None and stored.status == "ended":
                # The provider came back after a stream that ended with the call (<Connect action>): hang up.
                logger.info("webhook: call {} has ended ({}); hanging up", stored.call_id, stored.end or "ended")
                text, media = hangup_instruction(provider)
                return Response(text, media_type=media)
            given = request.query_params.get("resume", "")
            if stored is not None and stored.resume_key and not secrets.compare_digest(
                    given.encode(), stored.resume_key.encode()):
                # Only the provider returning from the call's latest leg knows its key: this is a replay of the
                # call's first webhook or of an earlier leg's return. It gets a hang-up (its own request only).
                logger.warning("webhook: call {} asked to resume without its latest leg's key; refused",
                               stored.call_id)
                self.webhook_log.note("resume without the latest leg's key")
                text, media = hangup_instruction(provider)
                return Response(text, media_type=media)
            if stored is not None and stored.held(time.time()) and not stored.resume_key:
                # A call stored without a key (an older worker's) is held by its lease: sent round until it
                # lapses. (With the key, only the provider could ask: the leg's stream has ended.)
                logger.warning("webhook: call {} is live on leg {}; no new leg while it holds the call",
                               stored.call_id, stored.leg)
                self.webhook_log.note("webhook for a call live on another leg")
                text, media = retry_instruction(provider, self._action_url(request, given), pause_secs=2)
                return Response(text, media_type=media)
            if stored is not None:
                resume = (stored.call_id, stored.leg + 1)
                returning = given
        if resume is not None and self.draining:
            # A resume that reached a draining worker: not turned away, sent round again (the balancer
            # sends the next request to a worker that is ready).
            logger.info("webhook: call {} asked to resume here while draining; redirecting", resume[0])
            text, media = retry_instruction(provider, self._action_url(request, request.query_params.get("resume")))
            return Response(text, media_type=media)
        if not self.draining and self.registry.busy >= self.config.max_calls:
            await self._forget_streams_taken_elsewhere()
        record = None if self.draining else self.registry.reserve(provider, provider_call_id, resume, address,
                                                                           returned=bool(returning))
        if record is not None:
            # Before the fleet publishes the reservation: the worker the stream reaches needs them.
            record.returning_key = returning
            if unreadable is not None:
                record.extra["resume_problem"] = unreadable
        if record is not None and self.config.fleet is not None and not await self._fleet_reserve(record):
            record = None
        if record is None:
            logger.info("webhook: call turned away ({})",
                        "draining" if self.draining else "at capacity, or that call id has already streamed")
            text, media = busy_instruction(provider)
            return Response(text, media_type=media)
        action = self._action_url(request, record.resume_key) if self.persistence is not None else None
        text, media = stream_instruction(provider, self._stream_url(request),
                                         {"token": record.token, "call_id": record.call_id}, action)
        logger.info("webhook: call {} reserved{}", record.call_id,
                    f" (resume, leg {record.leg})" if resume is not None else "")
        return Response(text, media_type=media)

    async def _forget_streams_taken_elsewhere(self) -> None:
        """Frees this worker's reservations whose stream another worker of the fleet took.

        A webhook and its stream often reach different workers; the reservation here would otherwise hold a
        slot until its token lapsed, and a full worker would turn callers away with its calls running next door.
        """
        fleet = self.config.fleet
        reserved = self.registry.reserved
        if fleet is None or not reserved:
            return
        try:
            entries = await fleet.calls()
        except (FleetUnavailable, RedisError) as exc:
            logger.error("fleet: cannot see which streams other workers took: {}", exc)
            return
        for record in reserved:
            entry = entries.get(record.call_id)
            if entry is not None and entry.get("state") != "reserved":
                self.registry.cancel(record, f"stream taken by {entry.get('worker', 'another worker')}")

    async def _fleet_reserve(self, record: CallRecord) -> bool:
        """Takes the call's fleet slot and publishes its token; a full fleet (or a Redis failure) refuses it."""
        assert self.config.fleet is not None
        reservation = FleetReservation(record.call_id, record.provider.value, record.provider_call_id, record.leg,
                                       record.resume_key, record.returning_key,
                                       str(record.extra.get("resume_problem", "")))
        try:
            taken = await self.config.fleet.reserve(reservation, record.token, self.config.token_ttl_secs)
        except RedisError as exc:
            logger.error("fleet: reservation failed, the call is turned away: {}", exc)
            taken = False
        if not taken:
            self.registry.cancel(record, "the fleet is at capacity")
            self.registry.refused += 1
        return taken

    async def _claim(self, token: str | None, provider_call_id: str) -> CallRecord | str:
        """The call a stream's token names, from this worker's reservations or, in a fleet, any worker's."""
        fleet = self.config.fleet
        if fleet is None or not token:
            return self.registry.claim(token, provider_call_id)
        try:
            reservation = await fleet.claim(token)  # taken fleet-wide, so no other worker can take it too
        except FleetUnavailable as exc:
            # Redis is down: a token this worker issued itself still works; another worker's cannot be checked.
            logger.error("fleet: {}; trying this worker's own reservations", exc)
            return self.registry.claim(token, provider_call_id)
        if reservation is None:
            self.registry.claim(token, provider_call_id)  # a local copy of a lapsed token goes as well
            return "invalid or expired stream token"
        local = self.registry.claim(token, provider_call_id)
        if not isinstance(local, str) or local == "stream token belongs to another call":
            return local
        return self.registry.adopt(reservation, token, provider_call_id)

    async def fleet_heartbeat(self) -> None:
        """Renews the fleet slots of this worker's streaming calls (runs until cancelled)."""
        fleet = self.config.fleet
        if fleet is None:
            return
        while True:
            await fleet.hold([c.record.call_id for c in self._live.values() if not c.done.is_set()])
            await asyncio.sleep(fleet.lease_secs / 3)

    async def lease_heartbeat(self) -> None:
        """Renews the store leases of this worker's streaming calls (runs until cancelled)."""
        persistence = self.persistence
        if persistence is None:
            return
        lease = self.config.leg_lease_secs
        while True:
            await asyncio.sleep(lease / 3)
            now = time.monotonic()
            running: dict[str, _LiveCall] = {}
            for call in list(self._live.values()):
                if call.done.is_set():
                    continue
                quiet = now - call.serializer.last_inbound if call.serializer is not None else 0.0
                if quiet > self.config.stream_silence_secs:
                    # A provider's stream sends media every 20 ms, silence included: this one is half-open. Its
                    # lease is not renewed, so the provider's return (with the leg's key) resumes the call.
                    await self._give_up(call, f"no media from the provider for {quiet:.0f} s (connection lost)")
                    continue
                running[call.record.call_id] = call
            lost = await persistence.renew([(c.record.call_id, c.record.leg) for c in running.values()], lease)
            for call_id in lost:
                if running[call_id].record.end:  # ended meanwhile (a hang-up marks the call ended in the store)
                    continue
                # This worker stalled past its lease (frozen, cut off) and a later leg runs the call now.
                await self._give_up(running[call_id], "a later leg took the call over")

    async def _give_up(self, call: _LiveCall, reason: str) -> None:
        """Ends this worker's leg of a call without ending the call (the provider may bring it back)."""
        logger.warning("call {}: leg {} given up: {}", call.record.call_id, call.record.leg, reason)
        if call.close is not None:
            await call.close(reason, EndReason.STREAM_LOST)

    def _action_url(self, request: Request, resume_key: str | None) -> str:
        """Where the provider comes back when the stream ends without a hang-up: this webhook, with the leg's key."""
        base = self.config.public_url or str(request.base_url)
        parts = urlsplit(base)
        query = urlencode({"resume": resume_key}) if resume_key else ""
        return urlunsplit((parts.scheme, parts.netloc, "/voice", query, ""))

    # --- media stream ----------------------------------------------------------------------------------------------

    async def _ws(self, websocket: WebSocket) -> None:
        # Counted for the accept gate from here, not from the call's start: a burst of streams is accepted faster
        # than each one's handshake and leg are opened, and a gate counting only started calls let a whole burst in.
        self._streams += 1
        try:
            if self.gate is not None:
                await self.gate.check()
            await self._stream(websocket)
        finally:
            self._streams -= 1

    async def _stream(self, websocket: WebSocket) -> None:
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
        claimed = await self._claim(token, start.call_id)
        if isinstance(claimed, str):
            logger.warning("stream refused: {}", claimed)
            await _close(websocket, 1008, claimed)
            return
        for kind, count in prestart.items():
            claimed.violations[kind] = claimed.violations.get(kind, 0) + count
        if self.persistence is not None and await self.persistence.open_leg(
                claimed.call_id, claimed.leg,
                # An unreadable stored call under the same provider call id must not block the fresh start.
                provider_call_id=None if "resume_problem" in claimed.extra else claimed.provider_call_id,
                lease_secs=self.config.leg_lease_secs, resume_key=claimed.resume_key,
                returning_key=claimed.returning_key) is False:
            # Two webhooks raced for the next leg, or a replay: only one leg runs a call.
            reason = "the call is live on another leg"
            logger.warning("stream refused: call {} leg {}: {}", claimed.call_id, claimed.leg, reason)
            self.registry.cancel(claimed, reason)
            if self.config.fleet is not None:
                await self.config.fleet.release(claimed.call_id, "refused")
            await _close(websocket, 1008, reason)
            return
        previous = self._live.get(claimed.call_id)
        if previous is not None and not previous.done.is_set():
            # The provider came back with the leg's key while that leg still runs here (half-open): it is over.
            await self._give_up(previous, "a later leg took the call over")
        live = _LiveCall(claimed)
        self._live[claimed.call_id] = live
        self.calls_started += 1
        try:
            await self._run_call(websocket, start, live)
        finally:
            live.done.set()
            if self._live.get(claimed.call_id) is live:  # legs share the call id: leave a newer leg's entry alone
                del self._live[claimed.call_id]

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
            await _close(websocket, 1011, "call set-up failed")
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
            _end_as(record, reason, end)
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
            _end_as(record, "ended", EndReason.ENDED)
        except Exception as exc:  # isolate: log, record, close this call only
            _end_as(record, f"pipeline error ({type(exc).__name__})", EndReason.SERVER_ERROR)
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
                    asyncio.get_running_loop().call_later(TRANSFER_KEY_SECS, self._transfer_xml.pop,
                                                          live.transfer.plivo_url.rpartition("key=")[2], None)
            if serializer is not None:
                for kind, count in serializer.violations.items():
                    record.violations[kind] = record.violations.get(kind, 0) + count
                record.marks = len(serializer.marks)
                record.dtmf = list(serializer.dtmf)
            await self._persist_end(record, parts.session)
            if self.config.fleet is not None and not _resumable(record):
                # A call that may come back keeps its slot (its lease lapses if it does not), so the resume
                # is not refused as busy and an old leg's release cannot free the new leg's slot.
                await self.config.fleet.release(call_id, record.end or "ended")
            try:
                await self._finish(record, parts.session, live.recorder, live.journal)
            finally:  # a handler cancelled while its records reach the disk still closes the stream
                await _close(websocket, *_close_code(record))

    def _connect_transfer(
        self, websocket: WebSocket, record: CallRecord, live: _LiveCall, session: CallSession,
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
            self._transfer_xml[key] = plivo_xml(settings.target, record.call_id)
            base = self.config.public_url or str(websocket.base_url).replace("ws", "http", 1)
            parts = urlsplit(base)
            plivo_url = urlunsplit((parts.scheme, parts.netloc, "/transfer", urlencode({"key": key}), ""))
        transfer = ProviderTransfer(self.config.provider, self.config.credentials, settings,
                                    record.provider_call_id or "", record.call_id, plivo_url=plivo_url,
                                    transferred=transferred, failed=failed, moving=moving)
        if session.domain.use_transfer(transfer):
            live.transfer = transfer

    def _open_journal(self, record: CallRecord) -> CallJournal | None:
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

    def _build_parts(self, call_id: str, record: CallRecord) -> tuple[CallParts, Any]:
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

    def _resume_opening(self, record: CallRecord, session: CallSession) -> str | None:
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

    async def _persist_end(self, record: CallRecord, session: CallSession) -> None:
        """At the end of a stream: a call that may come back keeps its state live, any other is marked ended.

        It may come back when the stream ended without the caller hanging up: a drain handed it over,
        or the connection dropped without a ``stop``. Done before the socket closes, so the provider's
        next request (``<Connect action>``) finds the verdict.
        """
        if self.persistence is None:
            return
        if _resumable(record):
            await self.persistence.save(session, leg=record.leg, provider_call_id=record.provider_call_id)
            await self.persistence.close_leg(record.call_id, record.leg)
        else:
            await self.persistence.end(record.call_id, record.end or EndReason.ENDED.value, leg=record.leg)
        self.persistence.forget(record.call_id, record.leg)

    def _build_worker(
        self, guarded_ws: GuardedWebSocket, serializer: GuardedSerializer, parts: CallParts, audio: Any,
        close_call: Callable[[str, EndReason], Awaitable[None]], live: _LiveCall,
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
            _end_as(live.record, f"call exceeded {self.config.max_call_secs} s", EndReason.TIME_LIMIT)
            if live.worker is not None:
                await live.worker.queue_frame(EndFrame())

        async def on_idle(_worker: Any) -> None:
            _end_as(live.record, f"idle (nothing said either way for {self.config.idle_timeout_secs:g} s)",
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
        self, record: CallRecord, session: CallSession | None, recorder: CallRecorder | None = None,
        journal: CallJournal | None = None,
    ) -> None:
        record.state = "ended"
        record.ended = time.time()
        _end_as(record, "ended", EndReason.ENDED)
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
            brain = parts.session.domain.brain()
            today = parts.session.config.reference_date.isoformat()
            for text in ("Hello, is this the right line?", "It's about the October one; call me after the 14th."):
                brain.respond([{"role": "system", "content": f"Today is {today}."}, {"role": "user", "content": text}],
                              [t.name for t in parts.session.domain.tools])
        except Exception as exc:  # warm-up is an optimisation; a failure here shows up in the first call
            logger.warning("warm-up of the call path failed: {}", exc)
        self.ready = True

    # --- draining --------------------------------------------------------------------------------------------------

    async def drain(self, timeout: float | None = None) -> int:
        """Stops taking calls and waits for active calls to end; calls still running when the limit
        is reached hear the goodbye line, then end (recorded as drained).

        Returns:
            The number of calls the limit cut short.
        """
        self.draining = True
        limit = self.config.drain_timeout_secs if timeout is None else timeout
        live = list(self._live.values())
        if self.persistence is not None and self.config.hands_over and live:
            handed = await self._hand_over(live)
            logger.info("draining: {} call(s) handed over through the call store", handed)
            live = list(self._live.values())
        logger.info("draining: {} active call(s), waiting up to {:.0f} s", len(live), limit)
        await _wait_done(live, limit)
        left = [c for c in self._live.values() if not c.done.is_set()]
        if left:
            logger.warning("drain limit ({:.0f} s) reached: saying goodbye to {} call(s)", limit, len(left))
            await asyncio.gather(*(self._say_goodbye(c) for c in left))
        logger.info("draining done; {} call(s) cut short", len(left))
        return len(left)

    def live_calls(self) -> int:
        """Streams open on this worker now: calls running, and streams still in their handshake."""
        return self._streams

    async def _hand_over(self, calls: list[_LiveCall]) -> int:
        """Saves each call and closes its stream (1012) so the provider brings it back to another worker.

        A call in the middle of a turn is given up to ``HANDOVER_TURN_WAIT_SECS`` to finish the agent's
        answer first, so the caller does not lose half a sentence.

        Returns:
            The number of calls handed over.
        """

        async def one(call: _LiveCall) -> bool:
            deadline = time.monotonic() + HANDOVER_TURN_WAIT_SECS
            session = call.record.session
            while (session is not None and session.turn > call.completed_turn and not call.done.is_set()
                   and time.monotonic() < deadline):
                await asyncio.sleep(0.02)
            worker = call.worker
            if call.done.is_set() or worker is None or worker.has_finished() or session is None:
                return False
            if self.persistence is None or not await self.persistence.save(
                session, leg=call.record.leg, provider_call_id=call.record.provider_call_id
            ):
                return False  # not saved (the store failed): the call finishes here instead of being lost
            _end_as(call.record, "handed over to another worker (drain)", EndReason.HANDED_OVER)
            if call.journal is not None:
                call.journal.write("event", event="handed over", turn=session.turn if session else None)
            await worker.cancel(reason="handed over")
            await _wait_done([call], 10)
            return True

        results = await asyncio.gather(*(one(c) for c in calls))
        return sum(results)

    async def _say_goodbye(self, call: _LiveCall) -> None:
        """Queues the goodbye line and the end of the call behind it; cancels the call if it does not end."""
        _end_as(call.record, "server shutdown (drain timeout)", EndReason.DRAINED)
        worker = call.worker
        if worker is not None and not worker.has_finished():
            if call.journal is not None:
                call.journal.write("event", event="goodbye", text=self.config.goodbye_line)
            # Frames queued in order: the TTS speaks the line, the output plays it out in real time, and only
            # then does the EndFrame stop the transport and close the socket (1001).
            await worker.queue_frames([TTSSpeakFrame(self.config.goodbye_line), EndFrame()])
            await _wait_done([call], self.config.goodbye_timeout_secs)
            if not call.done.is_set() and not worker.has_finished():
                logger.warning("call {}: goodbye did not finish in {:.0f} s, cancelling", call.record.call_id,
                               self.config.goodbye_timeout_secs)
                await worker.cancel(reason="server shutdown")
        await _wait_done([call], 10)

    async def housekeeping(self) -> None:
        """Deletes call records past the retention period now and then daily (runs until cancelled)."""
        directory, days = self.config.transcript_dir, self.config.transcript_retention_days
        if directory is None or days is None:
            return
        while True:
            try:
                await self.run_on_record_threads(prune_records, Path(directory), days)
            except OSError as exc:
                logger.error("transcripts: retention pass failed: {}", exc)
            await asyncio.sleep(PRUNE_INTERVAL_SECS)


async def _wait_done(calls: list[_LiveCall], timeout: float) -> None:
    """Waits up to ``timeout`` seconds for ``calls`` to end."""
    waiters = [asyncio.ensure_future(c.done.wait()) for c in calls if not c.done.is_set()]
    if not waiters:
        return
    try:
        await asyncio.wait(waiters, timeout=timeout)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    """Closes the socket if it is still open (never raises)."""
    with contextlib.suppress(Exception):
        connected = WebSocketState.CONNECTED
        if websocket.application_state == connected and websocket.client_state == connected:
            # Bounded: a client that stopped reading cannot hold the handler open.
            await asyncio.wait_for(websocket.close(code=code, reason=reason), 2.0)


def bind_socket(host: str, port: int, send_buffer: int | None = None) -> socket.socket:
    """A listening TCP socket; accepted sockets inherit ``send_buffer`` (SO_SNDBUF) on Linux.

    Never ``SO_REUSEPORT``: a port another process listens on is refused, and no later process can take
    a share of this one's connections (``serve --workers`` forks its workers onto this one socket).
    """
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
        self._listening: socket.socket | None = None  # kept to accept on again after a pause (a worker's gate)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serves until drained (old call records are deleted meanwhile, daily)."""
        self._loop = asyncio.get_running_loop()
        housekeeping = self._loop.create_task(self.bridge.housekeeping())
        heartbeat = self._loop.create_task(self.bridge.fleet_heartbeat())
        leases = self._loop.create_task(self.bridge.lease_heartbeat())
        tasks = [housekeeping, heartbeat, leases]
        fleet, group = self.bridge.config.fleet, self.bridge.config.group_size
        if group > 1 and isinstance(fleet, LocalFleet) and sockets:
            # uvicorn gets a copy of the socket: pausing closes that copy, and resuming accepts on a new one.
            self._listening = sockets[0]
            sockets = [self._listening.dup()]
            self.bridge.gate = AcceptGate(fleet, group, self.bridge.live_calls, self)
            tasks.append(self._loop.create_task(self._gate_when_started(self.bridge.gate)))
        try:
            await super().serve(sockets)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _gate_when_started(self, gate: AcceptGate) -> None:
        while not self.started:
            await asyncio.sleep(0.05)
        self.pause_accepting()  # uvicorn's server accepts every connection waiting at once: one at a time instead
        await self.resume_accepting()
        await gate.run()

    def pause_accepting(self) -> None:
        """Stops taking new connections on the shared socket (the other workers take them; calls go on)."""
        for server in self.servers:
            server.close()  # closes this worker's copy of the socket, not the others' nor the kept one

    async def resume_accepting(self) -> None:
        """Takes new connections on the shared socket again."""
        if self._listening is None or self.should_exit or self.bridge.draining:
            return
        config = self.config

        def protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop)

        # One connection per wake-up (asyncio accepts up to its backlog argument at once): the workers woken
        # together take turns, and a burst is not all taken by one before its gate has seen the first.
        self.pause_accepting()  # never two listeners: one nobody closes would accept for good
        copy = self._listening.dup()
        server = await asyncio.get_running_loop().create_server(protocol, sock=copy, backlog=1)
        copy.listen(config.backlog)  # the kernel's queue, shared by the workers, stays as long as it was
        self.servers = [server]

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
        ws=PolicyWebSocketProtocol, timeout_graceful_shutdown=5, access_log=False,
        # The client address is the socket's: a forged X-Forwarded-For from loopback must not dodge the
        # per-address rate limit and fair share of unsigned webhooks.
        proxy_headers=False,
    )


def listen(config: ServerConfig) -> socket.socket:
    """The bridge's listening socket.

    Raises:
        ConfigError: The address cannot be bound (port in use, no such interface), in one line.
    """
    try:
        return bind_socket(config.host, config.port, config.socket_send_buffer)
    except (OSError, OverflowError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        hint = " (another process is listening there; pick another --port)" if isinstance(exc, OSError) and (
            exc.errno == errno.EADDRINUSE) else ""
        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {why}{hint}") from None


async def serve(config: ServerConfig, call_factory: CallFactory, *, ready: asyncio.Event | None = None,
                sock: socket.socket | None = None) -> None:
    """Runs the bridge until SIGTERM/SIGINT has drained it.

    Args:
        config: The bridge's settings.
        call_factory: Builds each call's parts.
        ready: Set once warmed up, as the bridge starts accepting.
        sock: A listening socket to accept on once warmed up (a ``serve --workers`` worker inherits its
            supervisor's); None: bind ``config``'s address now.

    Raises:
        ConfigError: Bad configuration.
        AudioModelError: A model of the audio stack is missing.
    """
    config.validate()
    if config.transcript_dir is not None:
        try:
            ensure_record_dir(Path(config.transcript_dir))
        except OSError as exc:
            raise ConfigError(f"--transcripts {config.transcript_dir}: {exc.strerror or exc}") from None
    if sock is None:
        sock = listen(config)  # a port in use fails now, before anything else starts or the models load
    try:
        bridge = VoiceBridge(config, call_factory)
        await asyncio.to_thread(bridge.warm_up)
    except BaseException:
        sock.close()
        raise
    server = DrainingServer(uvicorn_config(bridge), bridge)
    heap = settle_heap(config.gc_young_threshold)
    logger.info("bridge listening on {}:{} ({}, {} calls max; gc thresholds {}, {} start-up objects frozen)",
                config.host, sock.getsockname()[1], config.provider.value, config.max_calls,
                heap.thresholds, heap.frozen)
    if ready is not None:
        ready.set()
    try:
        await server.serve(sockets=[sock])
    finally:
        await asyncio.to_thread(bridge.close)


@contextlib.asynccontextmanager
async def running_bridge(config: ServerConfig, call_factory: CallFactory) -> AsyncIterator[tuple[VoiceBridge, str]]:
    """Runs the bridge in this event loop on ``config.host`` (port 0: any free port), for tests and tools.

    Yields:
        (bridge, base URL such as ``http://127.0.0.1:40123``).
    """
    bridge = VoiceBridge(config, call_factory)
    await asyncio.to_thread(bridge.warm_up)
    settle_heap(config.gc_young_threshold)  # the collector as serve runs it (a test gets it back: conftest)
    sock = listen(config)
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
        await asyncio.to_thread(bridge.close)
