"""Guards between a provider's WebSocket and pipecat: inbound validation and outbound backpressure.

:class:`GuardedSerializer` wraps the provider's pipecat serializer and checks every inbound
message first: size, JSON, event type, stream id, and the shape of each known event (``media``
payload, track and base64 length, ``dtmf`` digit, ``mark``/``playedStream`` name, ``stop`` body).
pipecat's serializers dereference those fields without checking them (``"dtmf": "x"`` raises
AttributeError), and any exception there ends the transport's receive loop, i.e. the call. Here a
bad message is dropped with a logged reason and counted; past ``max_violations`` the call is
closed as a protocol violation. ``stop`` ends the call and ``mark`` acknowledgements are recorded.

:class:`GuardedWebSocket` wraps the FastAPI WebSocket the transport writes to: a send that
cannot complete within ``send_timeout`` (the client stopped reading and the buffers are full)
closes the call instead of stalling its pipeline; the close code follows why the call ended
(:data:`CLOSE_CODES`), and a disconnect's code is kept so a frame over the size cap is told apart
from a hang-up. :class:`PolicyWebSocketProtocol` makes uvicorn close such frames with 1008.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from enum import StrEnum
from typing import Any

from loguru import logger
from pipecat.frames.frames import Frame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.serializers.base_serializer import FrameSerializer
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import CloseCode
from websockets.server import ServerProtocol

from voice_agent.telephony.providers import KNOWN_EVENTS, StreamStart

MAX_MEDIA_BYTES = 8000
"""Largest decoded media payload accepted (1 s of 8 kHz µ-law; providers send 20 ms)."""

_LOGGED_PER_KIND = 5
"""Violations of one kind logged individually per call; the rest are counted and summarised."""

DTMF_DIGITS = frozenset("0123456789*#")
"""Keys a ``dtmf`` event may carry."""

_STREAM_KEYS = ("streamSid", "stream_id", "streamId")
_CALL_KEYS = ("callSid", "call_control_id", "callId")
_MAX_NAME = 256


class EndReason(StrEnum):
    """Why a call ended, as the call record names it (the free-text reason says more)."""

    HUNG_UP = "hung up"
    IDLE = "idle"
    TIME_LIMIT = "time limit"
    SERVER_ERROR = "server error"
    DRAINED = "drained"
    VIOLATION = "violation"
    SLOW_CLIENT = "slow client"
    ENDED = "ended"
    HANDED_OVER = "handed over"
    """A drain saved the call and closed its stream so the provider brings it back to another worker."""
    TRANSFERRED = "transferred"
    """The provider moved the call to the transfer target (``transfer_to_human``); the bot's stream ends."""
    STREAM_LOST = "stream lost"
    """No media from the provider for a lease (a half-open connection), or a later leg took the call: the
    stream is given up and the provider may bring the call back."""


CLOSE_CODES: dict[EndReason, int] = {
    EndReason.HUNG_UP: 1000,
    EndReason.IDLE: 1000,
    EndReason.TIME_LIMIT: 1000,
    EndReason.ENDED: 1000,
    EndReason.TRANSFERRED: 1000,
    EndReason.DRAINED: 1001,
    EndReason.HANDED_OVER: 1012,
    EndReason.STREAM_LOST: 1001,
    EndReason.VIOLATION: 1008,
    EndReason.SLOW_CLIENT: 1008,
    EndReason.SERVER_ERROR: 1011,
}
"""The WebSocket close code the server sends for each way a call ends."""

FRAME_TOO_LARGE = "frame too large"
"""Close reason (code 1008) of a frame over uvicorn's ``ws_max_size``."""

Closer = Callable[[str, EndReason], Coroutine[Any, Any, None]]
"""Ends the call with a reason and its kind."""


class ProtocolViolation(Exception):
    """An inbound message broke the provider's protocol (the reason is the message)."""


class GuardedSerializer(FrameSerializer):
    """Validates inbound messages before the provider's serializer sees them.

    Args:
        inner: pipecat's serializer for the provider.
        start: The call's ``start`` message (provider and stream id to hold messages to).
        close_call: Ends the call with a reason (stop received, too many violations).
        max_message_bytes: Larger messages are dropped.
        max_violations: More dropped messages than this close the call.
        call_id: Names the call in logs.
    """

    def __init__(
        self,
        inner: FrameSerializer,
        start: StreamStart,
        close_call: Closer,
        *,
        max_message_bytes: int = 16384,
        max_violations: int = 50,
        call_id: str = "call",
    ) -> None:
        super().__init__()
        self._inner = inner
        self._start = start
        self._close_call = close_call
        self._max_bytes = max_message_bytes
        self._max_violations = max_violations
        self._call_id = call_id
        self._known = KNOWN_EVENTS[start.provider]
        self.violations: Counter[str] = Counter()
        self.marks: list[str] = []
        self.media_messages = 0
        self.dtmf: list[str] = []
        self.stopped = False
        self.last_inbound = time.monotonic()
        """When the provider last sent anything (a live stream sends media every 20 ms, silence included)."""
        self._closing = False
        self._media_frame = _media_decoder(inner)

    def suspend_hang_up(self, suspended: bool) -> None:
        """Keeps pipecat's serializer from hanging the call up when the stream ends (or lets it again).

        A transfer moves the phone call away from this stream: the stream's end must not end the call.
        """
        if hasattr(self._inner, "_hangup_attempted"):  # pipecat's serializers hang up once, unless this is set
            self._inner._hangup_attempted = suspended

    @property
    def violation_count(self) -> int:
        """Messages dropped so far."""
        return sum(self.violations.values())

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]  # pipecat's own signature
        """Sets up the provider's serializer."""
        await self._inner.setup(setup)

    async def serialize(self, frame: Frame) -> str | bytes | None:
        """Outbound frames go to the provider's serializer unchanged."""
        result: str | bytes | None = await self._inner.serialize(frame)
        return result

    async def deserialize(self, data: str | bytes) -> Frame | None:
        """Checks one inbound message; returns the provider serializer's frame or None (dropped).

        Never raises: whatever a client sends, the transport's receive loop (the call) goes on.
        """
        self.last_inbound = time.monotonic()
        try:
            return await self._deserialize(data)
        except Exception as exc:  # a gap in the checks below must still cost one message, not the call
            logger.opt(exception=exc).error("call {}: inbound message not handled", self._call_id)
            await self._violation(f"message not decodable ({type(exc).__name__})")
            return None

    async def _deserialize(self, data: str | bytes) -> Frame | None:
        try:
            message = self._check(data)
        except ProtocolViolation as exc:
            await self._violation(str(exc))
            return None
        event = message["event"]
        if event == "media":
            self.media_messages += 1
            if self._media_frame is not None:
                # The payload was decoded by the check: the frame is made from it, not from a second parse.
                return await self._media_frame(message["media"]["audio"])
            return await self._decode(event, data)
        if event == "dtmf":
            self.dtmf.append(message["dtmf"]["digit"])
            return await self._decode(event, data)
        if event == "mark":
            self.marks.append(message["mark"]["name"][:64])
        elif event == "playedStream":
            self.marks.append(message["name"][:64])
        elif event == "stop":
            self.stopped = True
            await self._close("caller hung up (stop)", EndReason.HUNG_UP)
        elif event in ("connected", "start"):
            await self._violation(f"unexpected {event!r} after the stream started")
        elif event == "error":
            await self._violation("provider reported an error")
        return None

    async def _decode(self, event: str, data: str | bytes) -> Frame | None:
        try:
            frame: Frame | None = await self._inner.deserialize(data)
        except Exception as exc:  # pipecat's serializer must not end the receive loop
            await self._violation(f"{event} not decodable ({type(exc).__name__})")
            return None
        return frame

    def _check(self, data: str | bytes) -> dict[str, Any]:
        size = len(data)
        if size > self._max_bytes:
            raise ProtocolViolation(f"oversized message ({size} bytes > {self._max_bytes})")
        if isinstance(data, bytes):
            raise ProtocolViolation("binary message (the protocol is JSON text)")
        try:
            message = json.loads(data)
        except (json.JSONDecodeError, RecursionError):
            raise ProtocolViolation("malformed JSON") from None
        if not isinstance(message, dict):
            raise ProtocolViolation("JSON message is not an object")
        event = message.get("event")
        if not isinstance(event, str):
            raise ProtocolViolation("message without an event type")
        if event not in self._known:
            raise ProtocolViolation(f"unknown event type {event[:32]!r}")
        for key in _STREAM_KEYS:  # a loop, not any(<generator>): this runs for every 20 ms frame
            if key in message and message[key] != self._start.stream_id:
                raise ProtocolViolation("message for another stream")
        if event == "media":
            self._check_media(message)
        elif event == "dtmf":
            dtmf = message.get("dtmf")
            digit = dtmf.get("digit") if isinstance(dtmf, dict) else None
            if not isinstance(digit, str) or digit not in DTMF_DIGITS:
                raise ProtocolViolation("malformed dtmf (needs dtmf.digit: one of 0-9, * or #)")
        elif event == "mark":
            mark = message.get("mark")
            name = mark.get("name") if isinstance(mark, dict) else None
            if not isinstance(name, str) or len(name) > _MAX_NAME:
                raise ProtocolViolation("malformed mark (needs mark.name: a string)")
        elif event == "playedStream":
            name = message.get("name")
            if not isinstance(name, str) or len(name) > _MAX_NAME:
                raise ProtocolViolation("malformed playedStream (needs name: a string)")
        elif event == "stop":
            body = message.get("stop")
            if body is not None and not isinstance(body, dict):
                raise ProtocolViolation("malformed stop (stop must be an object)")
            if isinstance(body, dict) and any(k in body and body[k] != self._start.call_id for k in _CALL_KEYS):
                raise ProtocolViolation("stop for another call")
        return message

    @staticmethod
    def _check_media(message: dict[str, Any]) -> None:
        media = message.get("media")
        if not isinstance(media, dict):
            raise ProtocolViolation("media without a payload")
        payload = media.get("payload")
        if not isinstance(payload, str) or not payload:
            raise ProtocolViolation("media without a payload")
        track = media.get("track")
        if track not in (None, "inbound", "inbound_track"):
            raise ProtocolViolation(f"media on track {str(track)[:16]!r}")
        try:
            audio = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolViolation("media payload is not valid base64") from None
        if not audio or len(audio) > MAX_MEDIA_BYTES:
            raise ProtocolViolation(f"media payload of {len(audio)} bytes (1..{MAX_MEDIA_BYTES})")
        media["audio"] = audio

    async def _violation(self, reason: str) -> None:
        kind = reason.split(" (")[0]
        self.violations[kind] += 1
        if self.violations[kind] <= _LOGGED_PER_KIND:
            logger.warning("call {}: dropped inbound message: {}", self._call_id, reason)
        elif self.violations[kind] == _LOGGED_PER_KIND + 1:
            logger.warning("call {}: further '{}' messages are dropped without logging", self._call_id, kind)
        if self.violation_count > self._max_violations:
            await self._close(f"too many protocol violations ({self.violation_count})", EndReason.VIOLATION)

    async def _close(self, reason: str, end: EndReason) -> None:
        if self._closing:
            return
        self._closing = True
        await self._close_call(reason, end)


MediaDecoder = Callable[[bytes], Coroutine[Any, Any, Frame | None]]
"""Decoded µ-law payload -> the pipeline's audio frame (None: nothing to hear)."""


def _media_decoder(inner: FrameSerializer) -> MediaDecoder | None:
    """For pipecat's Twilio serializer: its ``media`` handling from an already decoded payload, else None.

    pipecat's ``deserialize`` parses the JSON and the base64 payload again, which the checks above have
    just done: per 20 ms frame that was a third of the serializer's time (``scripts/loadtest.py
    --profile``). The frame is made as pipecat 1.14 makes it (µ-law to PCM, its inbound resampler, the
    pipeline's rate); any other serializer, or one without those attributes, keeps its own path.
    """
    from pipecat.frames.frames import InputAudioRawFrame
    from pipecat.serializers.twilio import TwilioFrameSerializer

    if type(inner) is not TwilioFrameSerializer or not all(
        hasattr(inner, name) for name in ("_twilio_sample_rate", "_sample_rate", "_input_resampler")
    ):
        return None
    from pipecat.audio.utils import ulaw_to_pcm

    state: Any = inner

    async def decode(audio: bytes) -> Frame | None:
        rate = state._sample_rate
        pcm = await ulaw_to_pcm(audio, state._twilio_sample_rate, rate, state._input_resampler)
        if not pcm:
            return None
        return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=rate)

    return decode


class GuardedWebSocket:
    """The call's FastAPI WebSocket with a deadline on every send.

    Everything else is delegated. A send that takes longer than ``send_timeout`` seconds means the
    client is not reading: the call is closed (reason logged) and later sends are dropped. A close
    without a code (pipecat's transport closes that way) uses ``close_code()``; the code and reason
    of the client's disconnect are kept in ``disconnect``.

    Args:
        websocket: The accepted FastAPI/Starlette WebSocket.
        close_call: Ends the call with a reason.
        send_timeout: Seconds a single send may block.
        call_id: Names the call in logs.
        close_code: The (code, reason) to close with, asked at close time.
    """

    def __init__(
        self, websocket: Any, close_call: Closer, *, send_timeout: float = 5.0, call_id: str = "call",
        close_code: Callable[[], tuple[int, str]] | None = None,
    ) -> None:
        self._ws = websocket
        self._close_call = close_call
        self._timeout = send_timeout
        self._call_id = call_id
        self._close_code = close_code
        self.stalled = False
        self.sent_messages = 0
        self.disconnect: tuple[int, str] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

    async def receive(self) -> Any:
        """The next ASGI message; a disconnect's code and reason are kept."""
        message = await self._ws.receive()
        if message.get("type") == "websocket.disconnect" and self.disconnect is None:
            self.disconnect = (int(message.get("code") or 1005), str(message.get("reason") or ""))
        return message

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        """Closes with ``code``, or with the code for why the call ended."""
        if code is None:
            code, reason = self._close_code() if self._close_code is not None else (1000, reason)
        await self._ws.close(code=code, reason=reason)

    async def send_text(self, data: str) -> None:
        """Sends text within the deadline, or closes the call."""
        await self._send(self._ws.send_text(data))

    async def send_bytes(self, data: bytes) -> None:
        """Sends bytes within the deadline, or closes the call."""
        await self._send(self._ws.send_bytes(data))

    async def _send(self, sending: Awaitable[None]) -> None:
        if self.stalled:
            if asyncio.iscoroutine(sending):
                sending.close()
            return
        try:
            await asyncio.wait_for(sending, self._timeout)
            self.sent_messages += 1
        except TimeoutError:
            self.stalled = True
            logger.warning("call {}: slow client, a send blocked for {:.1f} s; closing the call", self._call_id,
                           self._timeout)
            task = asyncio.get_running_loop().create_task(
                self._close_call(f"slow client (send blocked {self._timeout:.1f} s)", EndReason.SLOW_CLIENT)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


class _PolicyServerProtocol(ServerProtocol):
    """websockets' server protocol, failing an oversized frame with 1008 instead of 1009."""

    def fail(self, code: CloseCode | int, reason: str = "") -> None:
        """Fails the connection; a frame over the size cap as a policy violation."""
        if code == CloseCode.MESSAGE_TOO_BIG:
            code, reason = CloseCode.POLICY_VIOLATION, f"{FRAME_TOO_LARGE}: {reason}"[:120]
        super().fail(code, reason)


class PolicyWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol whose frame size cap closes with 1008 (policy violation).

    The cap (``ws_max_size``) is enforced on the frame header, before the payload is buffered;
    the close reason starts with :data:`FRAME_TOO_LARGE`, which the app sees in the disconnect.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conn = getattr(self, "conn", None)
        if type(conn) is ServerProtocol:  # another uvicorn layout: keep its behaviour (1009)
            conn.__class__ = _PolicyServerProtocol
