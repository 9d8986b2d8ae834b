"""The bridge's app: :class:`VoiceBridge`, its routes, and the state every call of this worker shares.

- ``POST /voice``: the provider's voice webhook (:mod:`voice_agent.telephony.webhooks`). The body is
  streamed and cut at ``webhook_max_bytes`` (413) before anything else; requests are then verified
  with the provider's signature when its credential is set (always in production). Without one (development
  mode) webhooks are rate-limited per client and overall (429). The answer connects the call to ``/ws`` with a
  one-time stream token (a reservation, :mod:`voice_agent.telephony.registry`), or, at capacity or while
  draining, says sorry and hangs up; with a call store, a returning call resumes on its next leg.
- ``WS /ws``: the media stream's entry: the accept gate, the handshake (within a deadline, with a valid token),
  the claim of the reservation (in a fleet, any worker's) and the leg; then the call is run by the
  :class:`~voice_agent.telephony.call_runner.CallRunner`.
- ``GET /healthz``, ``GET /readyz``, ``GET /calls`` (with ``calls_token`` only), ``/transfer`` (Plivo's
  transfer XML by its one-time key).
- The worker's background duties: fleet and store heartbeats of its live calls, the call records' retention.
  The drain itself is :mod:`voice_agent.telephony.drain`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from loguru import logger
from redis.exceptions import RedisError
from starlette.websockets import WebSocketDisconnect

from voice_agent.call.factory import CallFactory
from voice_agent.core.dates.extract import extract_constraints
from voice_agent.retrieval.index import shared_index
from voice_agent.services.reference_llm import ReferenceLLMService
from voice_agent.store.base import StoredCall, StoreError, UnreadableCall
from voice_agent.telephony.accept_gate import AcceptGate
from voice_agent.telephony.bridge import EndReason
from voice_agent.telephony.call_runner import CallRunner, LiveCall, close_socket
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.drain import drain_calls
from voice_agent.telephony.fleet import FleetReservation, FleetUnavailable
from voice_agent.telephony.journal import prune_records
from voice_agent.telephony.persistence import CallPersistence
from voice_agent.telephony.providers import (
    HandshakeError,
    StreamStart,
    busy_instruction,
    hangup_instruction,
    parse_start,
    retry_instruction,
    stream_instruction,
)
from voice_agent.telephony.registry import CallRegistry, RegisteredCall
from voice_agent.telephony.transfer import missing_credentials
from voice_agent.telephony.webhooks import (
    CREDENTIAL_VARIABLES,
    RefusalLog,
    WebhookBodyError,
    WebhookRateLimiter,
    read_capped_body,
    webhook_verifier,
)

_MAX_PRESTART_MESSAGES = 8

READYZ_STORE_TIMEOUT_SECS = 1.0
"""Longest ``/readyz`` waits for the fleet's store before it answers that the store is unreachable."""

PRUNE_INTERVAL_SECS = 86400.0
"""How often old call records are deleted."""


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
        self._live: dict[str, LiveCall] = {}
        self._streams = 0
        self.gate: AcceptGate | None = None
        self.verifier = webhook_verifier(config.provider, config.credentials, config.signature_tolerance_secs)
        self.unsigned_limiter = WebhookRateLimiter(config.unsigned_per_client, config.unsigned_overall)
        self.webhook_log = RefusalLog()
        self.persistence = CallPersistence(config.store) if config.store is not None else None
        self.runner = CallRunner(config, call_factory, self.persistence)
        if self.verifier is None:
            logger.warning("webhooks: {} is not set, {} webhook signatures are not checked (development mode: "
                           "unsigned webhooks are rate-limited; --production requires signatures)",
                           CREDENTIAL_VARIABLES[config.provider], config.provider.value)
        self._log_transfer_setting()
        self.app = self._build_app()

    @property
    def resumes(self) -> int:
        """Calls resumed on this worker from their stored state."""
        return self.runner.resumes

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
        xml = self.runner.transfer_xml.pop(request.query_params.get("key", ""), None)
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

    async def _fleet_reserve(self, record: RegisteredCall) -> bool:
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

    async def _claim(self, token: str | None, provider_call_id: str) -> RegisteredCall | str:
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
            running: dict[str, LiveCall] = {}
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

    async def _give_up(self, call: LiveCall, reason: str) -> None:
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

    def live_calls(self) -> int:
        """Streams open on this worker now: calls running, and streams still in their handshake."""
        return self._streams

    async def _ws(self, websocket: WebSocket) -> None:
        # Counted for the accept gate from here, not from the call's start: a burst of streams is accepted faster
        # than each one's handshake and leg are opened, and a gate counting only started calls let a whole burst in.
        self._streams += 1
        try:
            if self.gate is not None:
                self.gate.stream_started()  # no await between the count and the decision: a burst is seen one by one
            await self._stream(websocket)
        finally:
            self._streams -= 1

    async def _stream(self, websocket: WebSocket) -> None:
        await websocket.accept()
        if self.draining:
            await close_socket(websocket, 1013, "server is draining, call again")
            return
        try:
            start, prestart = await self._handshake(websocket)
        except HandshakeError as exc:
            logger.warning("stream refused: {}", exc)
            await close_socket(websocket, 1008, str(exc)[:120])
            return
        except WebSocketDisconnect:
            logger.info("stream closed by the client before it started")
            return
        token = start.parameters.get("token") or websocket.query_params.get("token")
        claimed = await self._claim(token, start.call_id)
        if isinstance(claimed, str):
            logger.warning("stream refused: {}", claimed)
            await close_socket(websocket, 1008, claimed)
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
            await close_socket(websocket, 1008, reason)
            return
        previous = self._live.get(claimed.call_id)
        if previous is not None and not previous.done.is_set():
            # The provider came back with the leg's key while that leg still runs here (half-open): it is over.
            await self._give_up(previous, "a later leg took the call over")
        live = LiveCall(claimed)
        self._live[claimed.call_id] = live
        self.calls_started += 1
        try:
            await self.runner.run(websocket, start, live)
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
            reference = parts.session.reference_date
            # The date engine serves every call (the guards read the caller's dates); the reference agent only
            # the calls it answers.
            extract_constraints("Call me after the 14th, not before the 1st of December.", reference)
            if isinstance(parts.llm, ReferenceLLMService):
                brain = parts.session.domain.brain()
                for text in ("Hello, is this the right line?", "It's about the October one; call me after the 14th."):
                    brain.respond([{"role": "system", "content": f"Today is {reference.isoformat()}."},
                                   {"role": "user", "content": text}], [t.name for t in parts.session.domain.tools])
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
        return await drain_calls(self._live, self.config, self.persistence, limit)

    # --- call records ----------------------------------------------------------------------------------------------

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

    async def run_on_record_threads(self, work: Callable[..., Any], *args: Any) -> Any:
        """Runs blocking disk work of the call records on their threads (:meth:`CallRunner.run_on_record_threads`)."""
        return await self.runner.run_on_record_threads(work, *args)

    def close(self) -> None:
        """Lets the record threads finish what they were given, then stops them (after the drain)."""
        self.runner.close()
