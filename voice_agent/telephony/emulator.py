"""A caller that speaks Twilio Media Streams the way Twilio does, for tests, demos and load tests.

It posts the voice webhook (signed with ``X-Twilio-Signature`` when given the auth token), reads
the TwiML, opens the stream URL and sends ``connected`` then ``start`` (stream and call ids,
``customParameters`` from the TwiML ``<Parameter>`` elements, the token among them). From then on
it streams 20 ms base64 µ-law 8 kHz ``media`` frames continuously, paced in real time (``speed``
times faster if asked), silence when the caller is quiet and synthesised speech for each scripted
line. It waits for the agent's reply by watching the received audio (first voiced frame after the
caller stopped, then a stretch of silence and the end of playback), echoes ``mark`` messages once
the audio before them has played, counts ``clear`` messages, sends ``dtmf`` on request, and ends
with ``stop``. When the server closes the stream before the lines are done, it follows the TwiML
as Twilio does: the ``<Connect action>`` URL (or a ``<Redirect>``, after any ``<Pause>``) is
requested with the same ``CallSid``, and a new stream carries the call on. When the server updates
the call with new TwiML (the REST call update that :mod:`voice_agent.telephony.rest_emulator` fakes),
it does as Twilio does: the stream stops and the new TwiML plays; a ``<Dial>`` ends the emulated call
as transferred to its target. The agent's audio is recorded to a WAV file, transcribed per turn, and
the call is written out as JSON and text.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import secrets
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree

import aiohttp
import numpy as np
from loguru import logger
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from voice_agent.audio.codec import (
    FRAME_MS,
    PHONE_RATE,
    Int16Array,
    pcm16_to_ulaw,
    resample,
    rms_dbfs,
    ulaw_to_pcm16,
    write_wav,
)
from voice_agent.audio.stack import Synthesizer, Transcriber, synthesize_at
from voice_agent.telephony.twilio import SIGNATURE_HEADER, compute_signature

CHUNK_BYTES = PHONE_RATE * FRAME_MS // 1000
"""160 µ-law bytes: one 20 ms media frame."""

SILENCE = b"\xff" * CHUNK_BYTES
"""20 ms of µ-law silence."""

_MAX_REDIRECTS = 5
"""Most ``<Redirect>`` answers followed in a row."""

_ID = re.compile(r"\b[A-Z]{2,}(?:-[A-Z0-9]+)+\b")
_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def speakable(text: str) -> str:
    """How a caller reads identifiers aloud: ``ACC-4729-18`` -> ``A C C, four, seven, two, nine, one, eight``.

    Letters are spelled, digits said one by one with a short pause after each (recognisers drop a
    digit from a fast run of them far more often).
    """

    def spell(match: re.Match[str]) -> str:
        groups = match.group(0).split("-")
        letters = " ".join(c for c in groups[0])
        rest = [", ".join(_DIGITS[int(c)] if c.isdigit() else c for c in g) for g in groups[1:]]
        return ", ".join([letters, *rest])

    return _ID.sub(spell, text)


@dataclass
class EmulatorConfig:
    """How the emulated caller behaves.

    Attributes:
        speed: Media pacing relative to real time (1.0 is what a phone does; more for tests).
        silence_secs: Wall-clock stretch without voiced agent audio that ends a reply.
        reply_timeout_secs: How long to wait for the agent to start replying.
        lead_secs: Silence streamed before the first line.
        voiced_dbfs: Received 20 ms blocks louder than this count as the agent speaking.
        auth_token: Signs the webhook as Twilio does (the server's TWILIO_AUTH_TOKEN).
        account_sid: Account id sent in the webhook and ``start``.
        from_number: Caller number.
        to_number: Called number.
        ws_token: Token to send when dialing a ``ws://`` URL directly (no webhook).
    """

    speed: float = 1.0
    silence_secs: float = 0.8
    reply_timeout_secs: float = 20.0
    lead_secs: float = 0.4
    voiced_dbfs: float = -42.0
    auth_token: str | None = None
    account_sid: str = "AC" + "0" * 32
    from_number: str = "+15550100001"
    to_number: str = "+15550100002"
    ws_token: str | None = None


@dataclass
class TurnResult:
    """One scripted caller line and the agent's answer as heard.

    Attributes:
        index: Line number from 0.
        text: The scripted line.
        spoken: What was synthesised (identifiers spelled out).
        caller_secs: Length of the caller's speech.
        latency_ms: End of the caller's speech to the first voiced agent audio (None: no reply).
        agent_secs: Length of the agent audio received for this turn.
        agent_text: What the agent said, transcribed (empty without a transcriber).
    """

    index: int
    text: str
    spoken: str
    caller_secs: float = 0.0
    latency_ms: float | None = None
    agent_secs: float = 0.0
    agent_text: str = ""


@dataclass
class CallResult:
    """The outcome of one emulated call.

    Attributes:
        status: ``completed``, ``refused`` (webhook said no), ``closed`` (the server closed the stream),
            ``transferred`` (the server updated the call with a ``<Dial>``) or ``error``.
        call_sid: The call id sent to the server.
        stream_sid: The stream id sent to the server.
        message: The refusal text or the error.
        close_code: WebSocket close code when the server closed the stream.
        close_reason: Its reason.
        turns: Per-line results.
        marks_echoed: Marks acknowledged.
        clears: ``clear`` messages received (barge-ins).
        media_sent: Media frames sent.
        media_received: Media frames received.
        wav_path: Where the agent's audio was written.
        transcript_path: Where the transcript JSON was written.
        legs: Streams the call ran on (more than one: the server closed a stream and the TwiML brought the
            call back, as Twilio follows ``<Connect action>`` or a ``<Redirect>``).
        resume_gaps_ms: Per resume, what the caller heard as the gap: from the moment the stream dropped to
            the first voiced audio of the next stream.
        repeated: Lines said again on the next stream because the stream dropped before any reply to them.
        transfer_target: Where a ``<Dial>`` the server updated the call with sent it (the transfer target).
    """

    status: str
    call_sid: str
    stream_sid: str
    message: str = ""
    close_code: int | None = None
    close_reason: str = ""
    turns: list[TurnResult] = field(default_factory=list)
    marks_echoed: int = 0
    clears: int = 0
    media_sent: int = 0
    media_received: int = 0
    wav_path: str | None = None
    transcript_path: str | None = None
    legs: int = 0
    resume_gaps_ms: list[float] = field(default_factory=list)
    repeated: list[int] = field(default_factory=list)
    transfer_target: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)

    def render(self) -> str:
        """The call as text, line by line."""
        out = [f"call {self.call_sid}: {self.status}" + (f" ({self.message})" if self.message else "")]
        for turn in self.turns:
            latency = f"{turn.latency_ms:.0f} ms" if turn.latency_ms is not None else "no reply"
            out.append(f"CALLER: {turn.text}")
            out.append(f"AGENT ({latency}, {turn.agent_secs:.1f} s): {turn.agent_text or '(not transcribed)'}")
        if self.close_code is not None:
            out.append(f"[stream closed by server: {self.close_code} {self.close_reason}]")
        if self.transfer_target is not None:
            out.append(f"[transferred to {self.transfer_target}]")
        if self.legs > 1:
            gaps = ", ".join(f"{g:.0f} ms" for g in self.resume_gaps_ms)
            out.append(f"[resumed {self.legs - 1} time(s); gap as heard: {gaps}]")
        return "\n".join(out)


class CallRefused(Exception):
    """The webhook answered without a stream (busy, rejected, or an HTTP error)."""


@dataclass(frozen=True)
class Instructions:
    """What a TwiML answer tells the call to do, as this emulator follows it.

    Attributes:
        stream_url: ``<Connect><Stream url>``: the stream to open (None: no stream).
        parameters: The stream's ``<Parameter>`` elements.
        action_url: ``<Connect action>``: requested when the stream ends (Twilio's standard parameters).
        redirect_url: A ``<Redirect>`` after the stream (or instead of one): requested next.
        pause_secs: ``<Pause length>`` before a redirect.
        said: Text of ``<Say>`` elements.
        dial: What ``<Dial>`` calls: its ``<Number>``, ``<Sip>`` (without the URI's headers) or its own text.
    """

    stream_url: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    action_url: str | None = None
    redirect_url: str | None = None
    pause_secs: float = 0.0
    said: str = ""
    dial: str | None = None

    @property
    def after_stream(self) -> str | None:
        """Where Twilio goes when the stream ends: the action URL, else the next verb's redirect."""
        return self.action_url or self.redirect_url


def read_twiml(body: str) -> Instructions:
    """Reads the verbs this emulator follows from a TwiML document.

    Raises:
        CallRefused: The body is not TwiML.
    """
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise CallRefused(f"webhook answered something that is not TwiML: {exc}") from exc
    connect = root.find("./Connect")
    stream = root.find("./Connect/Stream")
    redirect = root.find("./Redirect")
    pause = root.find("./Pause")
    said = " ".join(e.text or "" for e in root.iter() if e.tag in ("Say", "Speak")).strip()
    dial = root.find("./Dial")
    dialled = None
    if dial is not None:
        inner = next((e for e in dial if e.tag in ("Number", "Sip", "Client")), None)
        dialled = ((inner.text if inner is not None else dial.text) or "").strip().partition("?")[0] or None
    return Instructions(
        stream_url=str(stream.get("url")) if stream is not None and stream.get("url") else None,
        parameters={p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")} if stream is not None
        else {},
        action_url=connect.get("action") if connect is not None else None,
        redirect_url=(redirect.text or "").strip() or None if redirect is not None else None,
        pause_secs=float(pause.get("length", "1")) if pause is not None else 0.0,
        said=said,
        dial=dialled,
    )


async def request_twiml(url: str, config: EmulatorConfig, call_sid: str, status: str = "ringing") -> Instructions:
    """Posts Twilio's standard call parameters to ``url`` (the voice webhook, an action or redirect URL).

    Raises:
        CallRefused: HTTP error or not TwiML.
    """
    form = {
        "AccountSid": config.account_sid, "ApiVersion": "2010-04-01", "CallSid": call_sid, "CallStatus": status,
        "Direction": "inbound", "From": config.from_number, "To": config.to_number,
    }
    headers = {}
    if config.auth_token:
        headers[SIGNATURE_HEADER] = compute_signature(config.auth_token, url, list(form.items()))
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.post(url, data=form, headers=headers) as reply:
        body = await reply.text()
        if reply.status != 200:
            raise CallRefused(f"webhook answered HTTP {reply.status}: {body[:80]}")
    return read_twiml(body)


async def post_webhook(url: str, config: EmulatorConfig, call_sid: str) -> tuple[str, dict[str, str]]:
    """Posts Twilio's voice webhook and reads the TwiML: (stream URL, custom parameters).

    Raises:
        CallRefused: HTTP error, or TwiML without ``<Connect><Stream>`` (the spoken text is the message).
    """
    plan = await request_twiml(url, config, call_sid)
    if plan.stream_url is None:
        raise CallRefused(plan.said or "webhook answered without a stream")
    return plan.stream_url, plan.parameters


class TwilioCallerEmulator:
    """Plays scripted caller lines into a bridge over Twilio Media Streams.

    Args:
        voice: Synthesises the caller's lines.
        ears: Transcribes the agent's replies (None: not transcribed).
        config: Behaviour.
        record_dir: Where the agent's WAV and the transcript go (nothing written when None).
    """

    def __init__(
        self, voice: Synthesizer, ears: Transcriber | None = None, config: EmulatorConfig | None = None,
        record_dir: Path | str | None = None,
    ) -> None:
        self.voice = voice
        self.ears = ears
        self.config = config or EmulatorConfig()
        self.record_dir = Path(record_dir) if record_dir is not None else None
        self.call_sid = "CA" + secrets.token_hex(16)
        self.stream_sid = "MZ" + secrets.token_hex(16)
        self._ws: ClientConnection | None = None
        self._send_lock = asyncio.Lock()
        self._outgoing: deque[bytes] = deque()
        self._drained = asyncio.Event()
        self._sequence = 0
        self._started_at = 0.0
        self._received: list[Int16Array] = []
        self._turn_audio: list[Int16Array] = []
        self._turn_audios: list[Int16Array] = []
        self._last_voiced = 0.0
        self._first_voiced_after: float | None = None
        self._play_until = 0.0
        self._closed: tuple[int | None, str] | None = None
        self._closed_at = 0.0
        self._dropped_at: float | None = None
        self._leg_voiced: float | None = None
        self._result: CallResult | None = None
        self._updated: Instructions | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- public ----------------------------------------------------------------------------------------------------

    async def dial(
        self, url: str, lines: Sequence[str], *, hangup_after: int | None = None, max_legs: int = 4
    ) -> CallResult:
        """Calls ``url`` (the webhook, or a ``ws://`` stream URL) and plays ``lines``.

        When the server closes the stream before the lines are done, the call follows the TwiML as
        Twilio does: it requests the ``<Connect action>`` URL (or the ``<Redirect>`` after the stream)
        with the same ``CallSid``, and if the answer connects a stream again the call goes on there:
        it listens to the agent's first words, then says again the line whose reply it never heard
        and carries on with the rest.

        Args:
            url: ``http(s)://host/voice`` to go through the webhook as Twilio does, or ``ws(s)://host/ws``.
            lines: The caller's lines, in order.
            hangup_after: Hang up (close the socket without ``stop``) in the middle of this line's audio.
            max_legs: Most streams one call runs on.

        Returns:
            The call's result (also written to ``record_dir``).
        """
        result = CallResult("completed", self.call_sid, self.stream_sid)
        self._result = result
        target, status, first = url, "ringing", 0
        while True:
            try:
                plan = await self._follow(target, status)
            except (CallRefused, aiohttp.ClientError, TimeoutError) as exc:
                if result.legs == 0:
                    result.status, result.message = "refused", str(exc)
                    return result
                result.message = f"after the stream ended: {exc}"
                break
            if plan.stream_url is None:  # the TwiML ended the call after a stream (a hang-up)
                result.message = plan.said or result.message
                break
            if result.legs > 0:
                self._new_stream()
            result.legs += 1
            first = await self._run_stream(plan, lines, first, result, hangup_after)
            if self._updated is not None:  # the server moved the call: Twilio plays the new TwiML, not the action
                result.message = self._updated.said
                if self._updated.dial is not None:
                    result.status, result.transfer_target = "transferred", self._updated.dial
                break
            dropped = self._closed is not None and hangup_after is None and first < len(lines)
            if not dropped or plan.after_stream is None or result.legs >= max_legs:
                break
            self._dropped_at = self._closed_at
            target, status = plan.after_stream, "in-progress"
        if self._closed is not None and result.status == "completed" and hangup_after is None and not self._updated:
            result.status = "closed"
            result.close_code, result.close_reason = self._closed
        await self._finish(result)
        return result

    async def _run_stream(
        self, plan: Instructions, lines: Sequence[str], first: int, result: CallResult, hangup_after: int | None
    ) -> int:
        """One stream of the call, from line ``first``; returns the first line still to say."""
        assert plan.stream_url is not None
        next_line = first
        try:
            # Twilio's media streams are not compressed: no permessage-deflate, as on a real call (compressing
            # fifty 160-byte frames a second per call costs both ends CPU a real call never spends).
            async with connect(plan.stream_url, max_size=2**20, open_timeout=10, close_timeout=2,
                               compression=None) as ws:
                self._ws = ws
                await self._open_stream(plan.parameters)
                receiver = asyncio.create_task(self._receive())
                pump = asyncio.create_task(self._pump())
                try:
                    next_line = await self._play(lines, result, hangup_after, first)
                finally:
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                        await pump
                    if self._closed is None and hangup_after is None:
                        with contextlib.suppress(ConnectionClosed):
                            await self._send({"event": "stop", "sequenceNumber": self._next_seq(),
                                              "streamSid": self.stream_sid,
                                              "stop": {"accountSid": self.config.account_sid,
                                                       "callSid": self.call_sid}})
                    if hangup_after is not None:
                        ws.transport.abort()  # a phone dropping: no stop, no close handshake
                    else:
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(ws.close(), 3)
                    receiver.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                        await receiver
        except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
            # InvalidHandshake: the worker that took the connection died before it answered the upgrade (kill -9);
            # Twilio then goes on to the action URL as for any stream that ends.
            if self._closed is None:
                self._closed, self._closed_at = (None, f"{type(exc).__name__}: {exc}"), time.monotonic()
            if result.status == "completed" and plan.after_stream is None:
                result.status, result.message = "error", f"{type(exc).__name__}: {exc}"
        return next_line

    async def _follow(self, url: str, status: str) -> Instructions:
        """The instructions at ``url``, following ``<Pause>`` + ``<Redirect>`` answers (a worker passing it on)."""
        scheme = urlsplit(url).scheme
        if scheme in ("ws", "wss"):
            params = {"token": self.config.ws_token} if self.config.ws_token else {}
            return Instructions(stream_url=url, parameters=params)
        for _ in range(_MAX_REDIRECTS):
            plan = await request_twiml(url, self.config, self.call_sid, status)
            if plan.stream_url is not None or plan.redirect_url is None:
                if plan.stream_url is None and status == "ringing":
                    raise CallRefused(plan.said or "webhook answered without a stream")
                return plan
            await asyncio.sleep(plan.pause_secs / self.config.speed)
            url = plan.redirect_url
        raise CallRefused(f"more than {_MAX_REDIRECTS} redirects")

    def _new_stream(self) -> None:
        """A fresh stream of the same call: a new stream id, the playback state reset."""
        self.stream_sid = "MZ" + secrets.token_hex(16)
        self._closed = None
        self._outgoing.clear()
        self._drained = asyncio.Event()
        self._play_until = time.monotonic()
        self._first_voiced_after = None
        self._leg_voiced = None

    def update(self, twiml: str) -> None:
        """The call was updated with ``twiml`` (Twilio's REST call update): as Twilio does, the stream stops
        (``stop``, then the socket closes) and the new TwiML plays.

        Raises:
            CallRefused: ``twiml`` is not TwiML.
        """
        self._updated = read_twiml(twiml)
        task = asyncio.get_running_loop().create_task(self._stop_stream())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stop_stream(self) -> None:
        ws = self._ws
        if ws is None or self._closed is not None:
            return
        with contextlib.suppress(ConnectionClosed):
            await self._send({"event": "stop", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid,
                              "stop": {"accountSid": self.config.account_sid, "callSid": self.call_sid}})
        self._closed, self._closed_at = (1000, "call updated"), time.monotonic()
        self._drained.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), 3)

    async def send_dtmf(self, digits: str) -> None:
        """Sends keypad presses as Twilio ``dtmf`` events."""
        for digit in digits:
            await self._send({"event": "dtmf", "streamSid": self.stream_sid, "sequenceNumber": self._next_seq(),
                              "dtmf": {"track": "inbound_track", "digit": digit}})

    async def send_raw(self, message: str | bytes) -> None:
        """Sends any message as is (for protocol tests)."""
        async with self._send_lock:
            if self._ws is not None:
                await self._ws.send(message)

    # --- handshake -------------------------------------------------------------------------------------------------

    async def _open_stream(self, params: dict[str, str]) -> None:
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send({
            "event": "start", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid,
            "start": {
                "accountSid": self.config.account_sid, "streamSid": self.stream_sid, "callSid": self.call_sid,
                "tracks": ["inbound"], "customParameters": params,
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": PHONE_RATE, "channels": 1},
            },
        })
        self._started_at = time.monotonic()

    def _next_seq(self) -> str:
        self._sequence += 1
        return str(self._sequence)

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            if self._ws is not None:
                await self._ws.send(json.dumps(message))

    # --- audio out -------------------------------------------------------------------------------------------------

    async def _pump(self) -> None:
        """Streams one 20 ms frame per tick, speech when queued, silence otherwise."""
        interval = FRAME_MS / 1000 / self.config.speed
        chunk_index = 0
        next_at = time.monotonic()
        while self._closed is None:
            chunk = self._outgoing.popleft() if self._outgoing else SILENCE
            if not self._outgoing:
                self._drained.set()
            chunk_index += 1
            try:
                await self._send({
                    "event": "media", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid,
                    "media": {"track": "inbound", "chunk": str(chunk_index), "timestamp": str(chunk_index * FRAME_MS),
                              "payload": base64.b64encode(chunk).decode("ascii")},
                })
            except ConnectionClosed as exc:
                self._mark_closed(exc)
                return
            if self._result is not None:
                self._result.media_sent += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -1.0:
                next_at = time.monotonic()  # fell far behind (loaded machine): do not burst

    async def _say(self, samples: Int16Array) -> float:
        """Queues speech and waits until it has all been sent; returns its length in seconds."""
        ulaw = pcm16_to_ulaw(samples)
        padded = ulaw + SILENCE[: (-len(ulaw)) % CHUNK_BYTES]
        self._drained.clear()
        self._outgoing.extend(padded[i : i + CHUNK_BYTES] for i in range(0, len(padded), CHUNK_BYTES))
        while not self._drained.is_set() and self._closed is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), 0.25)
        return len(samples) / PHONE_RATE

    # --- audio in --------------------------------------------------------------------------------------------------

    async def _receive(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                try:
                    message = json.loads(raw)
                except (json.JSONDecodeError, TypeError):
                    continue
                event = message.get("event")
                if event == "media":
                    self._on_media(message)
                elif event == "mark":
                    name = (message.get("mark") or {}).get("name", "")
                    asyncio.get_running_loop().create_task(self._echo_mark(str(name)))
                elif event == "clear":
                    self._outgoing_clear()
        except ConnectionClosed as exc:
            self._mark_closed(exc)

    def _mark_closed(self, exc: ConnectionClosed) -> None:
        if self._closed is None:
            rcvd = exc.rcvd
            self._closed = (rcvd.code if rcvd else None, rcvd.reason if rcvd else "")
            self._closed_at = time.monotonic()
        self._drained.set()

    def _on_media(self, message: dict[str, Any]) -> None:
        payload = (message.get("media") or {}).get("payload", "")
        try:
            samples = ulaw_to_pcm16(base64.b64decode(payload))
        except (ValueError, TypeError):
            return
        now = time.monotonic()
        if self._result is not None:
            self._result.media_received += 1
        self._received.append(samples)
        self._turn_audio.append(samples)
        self._play_until = max(self._play_until, now) + len(samples) / PHONE_RATE / self.config.speed
        for start in range(0, len(samples), CHUNK_BYTES):
            if rms_dbfs(samples[start : start + CHUNK_BYTES]) > self.config.voiced_dbfs:
                self._last_voiced = now
                if self._first_voiced_after is None:
                    self._first_voiced_after = now
                if self._leg_voiced is None:
                    self._leg_voiced = now
                    if self._dropped_at is not None and self._result is not None:
                        # What the caller heard: the line dropped, then nothing until the agent spoke again.
                        self._result.resume_gaps_ms.append((now - self._dropped_at) * 1000)
                        self._dropped_at = None
                break

    def _outgoing_clear(self) -> None:
        # The server stopped its own playback (the caller barged in): our playback clock resets.
        if self._result is not None:
            self._result.clears += 1
        self._play_until = time.monotonic()

    async def _echo_mark(self, name: str) -> None:
        await asyncio.sleep(max(0.0, self._play_until - time.monotonic()))
        with contextlib.suppress(ConnectionClosed):
            await self._send({"event": "mark", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid,
                              "mark": {"name": name}})
        if self._result is not None:
            self._result.marks_echoed += 1

    # --- conversation ----------------------------------------------------------------------------------------------

    async def _play(self, lines: Sequence[str], result: CallResult, hangup_after: int | None, first: int = 0) -> int:
        """Says ``lines[first:]``, each followed by the agent's reply; returns the first line still to say.

        On a stream after the first, the caller first listens to the agent (the resumed call's opening line).
        A line whose reply never started when the stream dropped is returned: it is said again on the next one.
        """
        if result.legs > 1:
            started = time.monotonic()
            self._first_voiced_after = None
            if await self._wait_first_voice(started) is not None:
                await self._wait_quiet()
        await asyncio.sleep(self.config.lead_secs / self.config.speed)
        for index in range(first, len(lines)):
            if self._closed is not None:
                return index
            line = lines[index]
            spoken = speakable(line)
            turn = TurnResult(index, line, spoken)
            if index < len(result.turns):  # said before, on a stream that dropped before any reply
                result.turns[index] = turn
                result.repeated.append(index)
            else:
                result.turns.append(turn)
            samples = await synthesize_at(self.voice, spoken, PHONE_RATE)
            if hangup_after == index:
                half = samples[: len(samples) // 2]
                await self._say(half)
                await asyncio.sleep(0.2)
                return index
            self._turn_audio = []
            turn.caller_secs = await self._say(samples)
            speech_end = time.monotonic()
            self._first_voiced_after = None
            self._turn_audio = []
            replied = await self._wait_first_voice(speech_end)
            if replied is None and self._closed is not None:
                return index
            if replied is not None:
                turn.latency_ms = (replied - speech_end) * 1000
                await self._wait_quiet()
            audio = np.concatenate(self._turn_audio) if self._turn_audio else np.zeros(0, np.int16)
            turn.agent_secs = len(audio) / PHONE_RATE
            self._turn_audios.append(audio)
        return len(lines)

    async def _wait_first_voice(self, since: float) -> float | None:
        deadline = since + self.config.reply_timeout_secs
        while time.monotonic() < deadline and self._closed is None:
            if self._first_voiced_after is not None:
                return self._first_voiced_after
            await asyncio.sleep(0.005)
        return None

    async def _wait_quiet(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self._closed is None:
            now = time.monotonic()
            if now - self._last_voiced >= self.config.silence_secs and now >= self._play_until:
                return
            await asyncio.sleep(0.02)

    # --- results ---------------------------------------------------------------------------------------------------

    async def _finish(self, result: CallResult) -> None:
        audios, self._turn_audios = self._turn_audios, []
        if self.ears is not None:
            for turn, audio in zip(result.turns, audios, strict=False):
                if audio.size:
                    wide = await asyncio.to_thread(resample, audio, PHONE_RATE, 16000)
                    try:
                        turn.agent_text = await asyncio.to_thread(self.ears, wide)
                    except Exception as exc:  # a transcription failure must not lose the call record
                        logger.warning("emulator: transcription failed: {}", exc)
        if self.record_dir is None:
            return
        self.record_dir.mkdir(parents=True, exist_ok=True)
        stem = self.record_dir / self.call_sid
        received = np.concatenate(self._received) if self._received else np.zeros(0, np.int16)
        result.wav_path = str(write_wav(stem.with_suffix(".agent.wav"), received, PHONE_RATE))
        result.transcript_path = str(stem.with_suffix(".json"))
        Path(result.transcript_path).write_text(json.dumps(result.to_json(), indent=2), encoding="utf-8")
        stem.with_suffix(".txt").write_text(result.render() + "\n", encoding="utf-8")
