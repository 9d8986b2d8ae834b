"""A fake OpenAI-compatible server and fixtures: the network boundary, faked on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from voice_agent.settings import API_KEY_ENV, Settings, load_settings

REPO_ROOT = Path(__file__).resolve().parents[2]

Reply = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]
"""Builds the response to one request (the aiohttp request and its parsed JSON body)."""


def completion(content: str, model: str = "fake-model") -> dict[str, Any]:
    """A non-streaming ``chat.completion`` body."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a stream."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


@dataclass
class FakeOpenAIServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint on 127.0.0.1.

    Attributes:
        reply: Builds the response for each request body; tests swap it per case.
        requests: Every request body received, in order.
    """

    reply: Reply | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def base_url(self) -> str:
        """The ``base_url`` to hand to the OpenAI client."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        assert self.reply is not None, "test did not set a reply"
        return await self.reply(request, body)

    async def start(self) -> None:
        """Binds an ephemeral port and starts serving."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Stops serving, first releasing any reply that waits on ``closing``."""
        self.closing.set()
        if self._runner is not None:
            await self._runner.cleanup()


def json_reply(content: str) -> Reply:
    """Replies with a plain JSON completion whose message is ``content``."""

    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return web.json_response(completion(content, body.get("model", "fake-model")))

    return reply


def sse_reply(chunks: list[dict[str, Any]], done: bool = True) -> Reply:
    """Replies with an SSE stream of ``chunks`` followed by ``[DONE]`` (unless ``done`` is false: a cut stream)."""

    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for part in chunks:
            await response.write(f"data: {json.dumps(part)}\n\n".encode())
        if done:
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    return reply


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the variables they set, never the developer's shell, and the repo's config/."""
    monkeypatch.chdir(REPO_ROOT)
    for name in list(os.environ):
        if name.upper().startswith("VOICE_AGENT_") or name in API_KEY_ENV.values():
            monkeypatch.delenv(name)


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAIServer]:
    """A running fake server, stopped after the test."""
    server = FakeOpenAIServer()
    await server.start()
    yield server
    await server.stop()


def openai_settings(base_url: str) -> Settings:
    """Settings for the real OpenAI service pointed at ``base_url`` (through the real loader)."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
        mp.setenv("VOICE_AGENT_LLM__MODEL", "fake-model")
        mp.setenv("VOICE_AGENT_LLM__BASE_URL", base_url)
        mp.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
        return load_settings()
    finally:
        mp.undo()
