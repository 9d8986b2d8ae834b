"""The load test's baseline: the plain pipecat bridge answers a Twilio call on loopback, with none of our processors."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.harness.evaluation.plain_bridge import serve_plain
from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator

from .test_telephony_cli import free_port

LINES = ["Hi, is this the billing line?", "My account number is ACC-4729-18."]


async def test_the_plain_bridge_answers_each_line_of_a_call() -> None:
    port = free_port()
    ready = asyncio.Event()
    stack = AudioStack.named("fake").with_script(LINES)
    server = asyncio.create_task(serve_plain(stack, "127.0.0.1", port, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 60)
        emulator = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(speed=4.0, silence_secs=0.3))
        for _ in range(100):  # the socket is listening; uvicorn may still be starting
            result = await emulator.dial(f"http://127.0.0.1:{port}/voice", LINES)
            if result.status != "refused":
                break
            await asyncio.sleep(0.05)
        assert result.status == "completed", result.render()
        assert [t.latency_ms is not None and t.agent_secs > 0.2 for t in result.turns] == [True, True]
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


def test_the_plain_pipeline_holds_none_of_our_processors() -> None:
    import processors
    import voice_agent
    from voice_agent.harness.evaluation.plain_bridge import build_plain_worker
    from voice_agent.telephony.providers import HangupCredentials, Provider, make_serializer, parse_start

    start = parse_start({"event": "start", "start": {"streamSid": "MZ" + "0" * 32, "callSid": "CA" + "0" * 32,
                                                     "accountSid": "AC" + "0" * 32, "customParameters": {}}},
                        Provider.TWILIO)
    audio = AudioStack.named("fake").with_script(LINES).build()
    worker = build_plain_worker(object(), make_serializer(start, HangupCredentials()), audio)
    found = list(walk(worker._pipeline))
    assert len(found) >= 7  # transport in and out, VAD/STT, the aggregators, the LLM, the TTS
    roots = (Path(processors.__file__).parent, Path(voice_agent.__file__).parent / "telephony")
    ours = [type(p).__name__ for p in found if any(Path(inspect.getfile(type(p))).is_relative_to(r) for r in roots)]
    assert ours == [], ours
    names = {type(p).__name__ for p in found}
    for name in ("ContextAssembly", "OutputGuard", "LLMWatchdog", "TurnLog", "SpokenIdNormalizer",
                 "SpeculativeRetrieval", "GuardedSerializer"):
        assert name not in names


def walk(processor: Any) -> Iterator[Any]:
    """Every processor in a pipeline, nested pipelines opened."""
    inner = getattr(processor, "processors", None)
    if inner and inner is not None and not (len(inner) == 1 and inner[0] is processor):
        for each in inner:
            if each is not processor:
                yield from walk(each)
    else:
        yield processor


async def test_a_binary_handshake_message_is_refused_with_1008_and_the_bridge_goes_on() -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    port = free_port()
    ready = asyncio.Event()
    stack = AudioStack.named("fake").with_script(LINES[:1])
    server = asyncio.create_task(serve_plain(stack, "127.0.0.1", port, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 60)
        for _ in range(100):
            try:
                ws = await connect(f"ws://127.0.0.1:{port}/ws")
                break
            except OSError:
                await asyncio.sleep(0.05)
        await ws.send(b"\x00\x01binary")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1008
        emulator = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(speed=8.0, silence_secs=0.2))
        result = await emulator.dial(f"http://127.0.0.1:{port}/voice", LINES[:1])
        assert result.status == "completed", result.render()
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
