"""A fake Anthropic Messages API on 127.0.0.1: records each request body, streams one short text answer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    message: dict[str, Any] = {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
    return [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]


@dataclass
class FakeAnthropicServer:
    """``POST /v1/messages`` (streaming) on an ephemeral port; point ``ANTHROPIC_BASE_URL`` at :attr:`base_url`.

    Attributes:
        answer: The text every request is answered with.
        requests: Every request body received, in order.
    """

    answer: str = "Happy to help with that."
    requests: list[dict[str, Any]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def base_url(self) -> str:
        """The SDK's base URL (it adds ``/v1/messages``)."""
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for name, data in _events(self.answer):
            await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        await response.write_eof()
        return response

    async def start(self) -> None:
        """Binds an ephemeral port and starts serving."""
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Stops serving."""
        if self._runner is not None:
            await self._runner.cleanup()
