"""The load test's baseline: the plain pipecat bridge answers a Twilio call on loopback, with none of our processors."""

from __future__ import annotations

import asyncio
import contextlib

from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.evaluation.plain_bridge import serve_plain
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
    import inspect

    from voice_agent.evaluation import plain_bridge

    source = inspect.getsource(plain_bridge.run_plain_call)
    for ours in ("ContextAssembly", "OutputGuard", "LLMWatchdog", "TurnLog", "SpokenIdNormalizer",
                 "SpeculativeRetrieval", "GuardedSerializer", "CallRecorder", "CallSession"):
        assert ours not in source
