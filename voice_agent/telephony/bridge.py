"""Guards between a provider's WebSocket and pipecat: inbound validation and outbound backpressure.

:class:`GuardedSerializer` wraps the provider's pipecat serializer and checks every inbound
message first (size, JSON, event type, stream id, base64 payload and its length). A bad message
is dropped with a logged reason and counted; past ``max_violations`` the call is closed. ``stop``
ends the call and ``mark`` acknowledgements are recorded. pipecat's own serializers raise on bad
base64, which would end the receive loop with a generic error; here it is one dropped message.

:class:`GuardedWebSocket` wraps the FastAPI WebSocket the transport writes to: a send that
cannot complete within ``send_timeout`` (the client stopped reading and the buffers are full)
closes the call instead of stalling its pipeline.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from loguru import logger
from pipecat.frames.frames import Frame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.serializers.base_serializer import FrameSerializer

from voice_agent.telephony.providers import KNOWN_EVENTS, StreamStart

MAX_MEDIA_BYTES = 8000
"""Largest decoded media payload accepted (1 s of 8 kHz µ-law; providers send 20 ms)."""

_LOGGED_PER_KIND = 5
"""Violations of one kind logged individually per call; the rest are counted and summarised."""

Closer = Callable[[str], Coroutine[Any, Any, None]]
"""Ends the call with a reason."""


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
        self._closing = False

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
        """Checks one inbound message; returns the provider serializer's frame or None (dropped)."""
        try:
            message = self._check(data)
        except ProtocolViolation as exc:
            await self._violation(str(exc))
            return None
        event = message["event"]
        if event == "media":
            self.media_messages += 1
            try:
                frame: Frame | None = await self._inner.deserialize(data)
            except Exception as exc:  # pipecat's serializer must not end the receive loop
                await self._violation(f"media not decodable ({type(exc).__name__})")
                return None
            return frame
        if event == "dtmf":
            digit = (message.get("dtmf") or {}).get("digit") if isinstance(message.get("dtmf"), dict) else None
            if isinstance(digit, str):
                self.dtmf.append(digit[:1])
            return await self._inner.deserialize(data)
        if event in ("mark", "playedStream"):
            mark = message.get("mark") or {}
            name = mark.get("name") if isinstance(mark, dict) else message.get("name")
            self.marks.append(str(name)[:64])
        elif event == "stop":
            self.stopped = True
            await self._close("caller hung up (stop)")
        elif event in ("connected", "start"):
            await self._violation(f"unexpected {event!r} after the stream started")
        elif event == "error":
            await self._violation("provider reported an error")
        return None

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
        stream = message.get("streamSid", message.get("stream_id", message.get("streamId")))
        if stream is not None and stream != self._start.stream_id:
            raise ProtocolViolation("message for another stream")
        if event == "media":
            media = message.get("media")
            payload = media.get("payload") if isinstance(media, dict) else None
            if not isinstance(payload, str) or not payload:
                raise ProtocolViolation("media without a payload")
            track = media.get("track") if isinstance(media, dict) else None
            if track not in (None, "inbound", "inbound_track"):
                raise ProtocolViolation(f"media on track {str(track)[:16]!r}")
            try:
                audio = base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                raise ProtocolViolation("media payload is not valid base64") from None
            if not audio or len(audio) > MAX_MEDIA_BYTES:
                raise ProtocolViolation(f"media payload of {len(audio)} bytes (1..{MAX_MEDIA_BYTES})")
        return message

    async def _violation(self, reason: str) -> None:
        kind = reason.split(" (")[0]
        self.violations[kind] += 1
        if self.violations[kind] <= _LOGGED_PER_KIND:
            logger.warning("call {}: dropped inbound message: {}", self._call_id, reason)
        elif self.violations[kind] == _LOGGED_PER_KIND + 1:
            logger.warning("call {}: further '{}' messages are dropped without logging", self._call_id, kind)
        if self.violation_count > self._max_violations:
            await self._close(f"too many protocol violations ({self.violation_count})")

    async def _close(self, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        await self._close_call(reason)


class GuardedWebSocket:
    """The call's FastAPI WebSocket with a deadline on every send.

    Everything else is delegated. A send that takes longer than ``send_timeout`` seconds means the
    client is not reading: the call is closed (reason logged) and later sends are dropped.

    Args:
        websocket: The accepted FastAPI/Starlette WebSocket.
        close_call: Ends the call with a reason.
        send_timeout: Seconds a single send may block.
        call_id: Names the call in logs.
    """

    def __init__(self, websocket: Any, close_call: Closer, *, send_timeout: float = 5.0, call_id: str = "call") -> None:
        self._ws = websocket
        self._close_call = close_call
        self._timeout = send_timeout
        self._call_id = call_id
        self.stalled = False
        self.sent_messages = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

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
                self._close_call(f"slow client (send blocked {self._timeout:.1f} s)")
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
