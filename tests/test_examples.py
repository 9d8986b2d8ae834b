"""The examples under ``examples/``, driven through pipecat's ``run_test`` with the scripted FakeLLM.

Each example builds its pipeline with a function the test calls with a fake LLM and a loopback transport;
the caller's lines arrive as text turns (as pipecat's eval harness sends them). The assertions say what
happened, in order: what the model was given, which tool ran with which identifier, what was refused.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest
from pipecat.frames.frames import Frame, LLMMessagesAppendFrame
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
from pipecat.processors.filters.identity_filter import IdentityFilter
from pipecat.tests.utils import SleepFrame

from tests.fakes.pipecat_run import run_test
from tests.fakes.transport import LoopbackTransport
from voice_agent import FakeLLM, FakeReply, FakeToolCall

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
TURN_SECS = 1.0
"""Time given to each scripted turn (the fake answers at once; guards and tools take milliseconds)."""


def load(relative: str) -> ModuleType:
    """Imports an example by its path (``before/bot.py`` and ``after/bot.py`` are both ``bot``)."""
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location("example_" + relative.replace("/", "_")[:-3], path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def call_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call of these tests: a fixed today (Monday 30 November 2026), the offline summarizer."""
    monkeypatch.setenv("VOICE_AGENT_CALL__REFERENCE_DATE", "2026-11-30")
    monkeypatch.setenv("VOICE_AGENT_SUMMARIZER__KIND", "extractive")


async def play(module: ModuleType, llm: FakeLLM, lines: Sequence[str]) -> None:
    """Builds the example's pipeline around ``llm`` and says ``lines``, one turn each."""
    pipeline = module.build_pipeline(LoopbackTransport(), llm, IdentityFilter(), IdentityFilter(),
                                     LLMUserAggregatorParams())
    frames: list[Frame] = []
    for line in lines:
        frames += [LLMMessagesAppendFrame([{"role": "user", "content": line}], run_llm=True), SleepFrame(TURN_SECS)]
    await run_test(pipeline, frames_to_send=frames)


def tool_results(llm: FakeLLM) -> list[tuple[str, dict[str, Any]]]:
    """Every tool result the model was shown, in the order it first saw each: (tool name, result)."""
    names: dict[str, str] = {}
    seen: dict[str, dict[str, Any]] = {}
    for messages in llm.received:
        for message in messages:
            for call in message.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
            if message.get("role") == "tool" and message["tool_call_id"] not in seen:
                seen[message["tool_call_id"]] = json.loads(message["content"])
    return [(names[call_id], result) for call_id, result in seen.items()]


CALLBACK_SCRIPT = {
    1: [FakeReply(tool_calls=(FakeToolCall("lookup_order", {"order_id": "ORD-7K4M2P"}),)),
        FakeReply("That drill is delayed. When can we call you back?")],
    # The model books the callback with the order number one character off: another customer's order.
    2: [FakeReply(tool_calls=(FakeToolCall("schedule_callback", {"order_id": "ORD-7K4M2B", "day": "2026-12-03"}),)),
        FakeReply(tool_calls=(FakeToolCall("schedule_callback", {"order_id": "ORD-7K4M2P", "day": "2026-12-03"}),)),
        FakeReply("Booked for Thursday.")],
}
CALLBACK_LINES = ["Hi, my order ORD-7K4M2P is late.", "Thursday the 3rd please."]


async def test_after_the_guard_refuses_a_mutated_order_number_and_books_the_one_the_caller_said() -> None:
    bot = load("after/bot.py")
    llm = FakeLLM(CALLBACK_SCRIPT)
    await play(bot, llm, CALLBACK_LINES)
    results = tool_results(llm)
    assert [name for name, _ in results] == ["lookup_order", "schedule_callback", "schedule_callback"]
    assert results[0][1]["order_id"] == "ORD-7K4M2P"  # the tool ran with the number the caller said
    assert results[1][1]["status"] == "rejected" and results[1][1]["guard"] == "id"
    assert results[2][1] == {"status": "booked", "order_id": "ORD-7K4M2P", "day": "2026-12-03"}
    assert bot.CALLBACKS == [{"order_id": "ORD-7K4M2P", "day": "2026-12-03"}]  # the other customer's: never


async def test_before_the_same_mutated_order_number_books_another_customers_callback() -> None:
    # The contrast the after bot exists for: the plain bot runs whatever the model wrote.
    bot = load("before/bot.py")
    await play(bot, FakeLLM(CALLBACK_SCRIPT), CALLBACK_LINES)
    assert bot.CALLBACKS[0] == {"order_id": "ORD-7K4M2B", "day": "2026-12-03"}


async def test_after_the_bots_prompt_with_braces_and_its_tools_reach_the_model_on_every_request() -> None:
    bot = load("after/bot.py")
    llm = FakeLLM(CALLBACK_SCRIPT)
    await play(bot, llm, CALLBACK_LINES)
    assert len(llm.received) == 5
    for messages, tools in zip(llm.received, llm.received_tools, strict=True):
        assert messages[0] == {"role": "system", "content": bot.SYSTEM_PROMPT}  # verbatim, braces and all
        assert tools == ["lookup_order", "schedule_callback"]
    assert '{"order": <order number>' in bot.SYSTEM_PROMPT
    # The lanes are on every request after the lookup: the order number as the tool returned it.
    facts = [m["content"] for m in llm.received[-1] if str(m.get("content", "")).startswith("KNOWN FACTS")]
    # The facts as of the last summary pass sit in the cached prefix, the ones learnt since in the tail.
    assert 1 <= len(facts) <= 2 and "ORD-7K4M2P" in facts[-1]


async def test_after_a_callback_on_a_day_the_caller_ruled_out_never_runs() -> None:
    bot = load("after/bot.py")
    script = {
        1: [FakeReply(tool_calls=(FakeToolCall("lookup_order", {"order_id": "ORD-7K4M2P"}),)),
            FakeReply("It is delayed. When can we call you back?")],
        2: [FakeReply("Noted.")],
        3: [FakeReply(tool_calls=(FakeToolCall("schedule_callback", {"order_id": "ORD-7K4M2P", "day": "2026-12-03"}),)),
            FakeReply("Sorry, I will pick another day.")],
    }
    lines = ["My order ORD-7K4M2P is late.", "I'm away until the 10th of December, so not before then.",
             "Just book whatever you think."]
    llm = FakeLLM(script)
    await play(bot, llm, lines)
    results = tool_results(llm)
    assert [name for name, _ in results] == ["lookup_order", "schedule_callback"]
    assert results[1][1]["guard"] == "date" and results[1][1]["status"] in ("rejected", "confirm")
    assert bot.CALLBACKS == []


PHONE_SCRIPT = {
    1: [FakeReply(tool_calls=(FakeToolCall("find_booking", {"booking": "FX-2041"}),)),
        FakeReply("Found your dishwasher repair. Which day suits you?")],
    2: [FakeReply(tool_calls=(FakeToolCall("book_visit", {"booking": "FX-2014", "day": "2026-12-03"}),)),
        FakeReply(tool_calls=(FakeToolCall("book_visit", {"booking": "FX-2041", "day": "2026-12-03"}),)),
        FakeReply("Booked for Thursday.")],
}


async def test_phone_bot_keeps_the_booking_reference_and_refuses_a_mutated_one() -> None:
    bot = load("phone_bot.py")
    llm = FakeLLM(PHONE_SCRIPT, system_instruction=bot.PROMPT)
    await play(bot, llm, ["Hello, my booking is FX-2041.", "Thursday the 3rd please."])
    results = tool_results(llm)
    assert [name for name, _ in results] == ["find_booking", "book_visit", "book_visit"]
    assert results[0][1]["booking"] == "FX-2041"
    assert results[1][1]["status"] == "rejected" and results[1][1]["guard"] == "id"
    assert bot.VISITS == [{"booking": "FX-2041", "day": "2026-12-03"}]
    assert set(llm.instructions) == {bot.PROMPT}  # the service's own prompt, untouched
    assert all(tools == ["find_booking", "book_visit"] for tools in llm.received_tools)
