"""A response with several tool calls is answered once, after its last result, whatever order they return in.

pipecat runs the model after a result when no sibling call is in progress, and a sibling that has started but not
yet announced itself is not counted: the model answered with one result and the other call still running, and again
when it returned, the second answer landing in the caller's next turn (seen as a turn with no answer on a paraphrased
refund call).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from pipecat.frames.frames import FunctionCallFromLLM, FunctionCallResultProperties

from processors.tool_layer import CallGroups
from tests.fakes.toy_domain import TOY, lookup_account
from voice_agent.call.session import CallSession
from voice_agent.core.call_state import CallState
from voice_agent.core.transcript import EntryKind
from voice_agent.domains.base import ToolHandler
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.services.fake_llm import FakeLLM, FakeReply, FakeToolCall
from voice_agent.settings import Settings
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TWO_LOOKUPS = FakeReply(tool_calls=(FakeToolCall("lookup_account", {"account_id": "ACC-1000-01"}),
                                    FakeToolCall("lookup_account", {"account_id": "ACC-1000-02"})))
LINES = ["My accounts are ACC-1000-01 and ACC-1000-02.", "Thanks, that's all."]


async def play(llm: FakeLLM, session: CallSession) -> None:
    await run_text_call(session, llm, [CallerLine(i + 1, text) for i, text in enumerate(LINES)])


def inferences_per_turn(llm: FakeLLM) -> list[int]:
    """How many inferences each caller line got (a new one starts when the last turn message is the caller's)."""
    counts: list[int] = []
    for messages in llm.received:
        last = [m for m in messages if m.get("role") in ("user", "assistant", "tool")][-1]
        if last.get("role") == "tool":
            counts[-1] += 1
        else:
            counts.append(1)
    return counts


async def slow_second(arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
    """The toy lookup, the second account slower: the first result lands before the second call says it runs."""
    if arguments["account_id"] == "ACC-1000-02":
        await asyncio.sleep(0.2)
    return await lookup_account(arguments, state)


@pytest.mark.parametrize("handler", [lookup_account, slow_second], ids=["instant", "second-slower"])
async def test_two_calls_in_one_response_get_one_answer(handler: ToolHandler) -> None:
    domain = dataclasses.replace(TOY, handlers={**TOY.handlers, "lookup_account": handler})
    llm = FakeLLM({1: [TWO_LOOKUPS, FakeReply(text="Found both.")], 2: [FakeReply(text="Goodbye.")]},
                  default=FakeReply(text="An answer no one asked for."))
    session = CallSession(domain, Settings(), ExtractiveSummarizer())
    await play(llm, session)
    agent = [(e.turn, e.text) for e in session.state.transcript if e.kind is EntryKind.AGENT]
    assert inferences_per_turn(llm) == [2, 1]
    assert agent == [(1, "Found both."), (2, "Goodbye.")]
    # The answer was written with both results in hand, not one and a call still running.
    tool_results = [str(m.get("content")) for m in llm.received[1] if m.get("role") == "tool"]
    assert len(tool_results) == 2 and all("IN_PROGRESS" not in r for r in tool_results), tool_results


async def test_siblings_out_hold_the_answer_back_whichever_returns_first_or_is_cancelled() -> None:
    groups = CallGroups()
    calls = [FunctionCallFromLLM(function_name="t", tool_call_id=i, arguments={}, context=None) for i in "abc"]
    await groups.started(FakeLLM({}), calls)
    assert groups.properties("c") == FunctionCallResultProperties(run_llm=False)  # a and b still out
    groups.settle("a")  # cancelled: it returns nothing
    given = FunctionCallResultProperties(is_final=True)
    assert groups.properties("b", given) is given  # the last one: pipecat decides
    assert groups.properties("z") is None  # a call it never saw start
