"""Every LLM fault is answered: an invented tool, arguments that are not JSON, an empty answer, the same refused
call again and again. The caller hears a line, the call goes on, the record counts an error, and no loop runs up
a bill (tool calls per turn are capped)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from tests.fakes.openai_server import FakeOpenAIServer, chunk, sse_reply
from tests.test_llm_watchdog import FAST, LINES, agent_entries, hosted_call, play, toy_session
from voice_agent.core.llm_recovery import FailureKind, RecoveryLines
from voice_agent.core.transcript import EntryKind
from voice_agent.domains.billing import billing_domain
from voice_agent.services.fake_llm import FakeReply, FakeToolCall
from voice_agent.settings import LLMConfig

TOOL_LOOP = RecoveryLines().tool_loop


def kinds(session: Any) -> list[str]:
    return [f.kind.value for f in session.llm_failures]


async def test_an_invented_tool_gets_an_answer_and_a_loop_of_them_is_stopped_with_a_line() -> None:
    session = toy_session(LLMConfig(first_token_timeout_secs=0.5, total_timeout_secs=2.0,
                                    max_tool_calls_per_turn=4))
    invent = FakeReply(tool_calls=(FakeToolCall("make_coffee", {"sugar": 2}),))
    recorder, llm = await play(session, {1: [invent] * 50, 2: [FakeReply(text="How else can I help?")]},
                               ["hello", "are you there"])
    results = [e for e in session.state.transcript if e.kind is EntryKind.TOOL_RESULT]
    assert "No tool named make_coffee" in str(results[0].result)
    assert len(llm.received) <= 4 + 2  # four answered calls, then stopped; the next turn is answered as usual
    assert agent_entries(session)[0] == TOOL_LOOP and agent_entries(session)[-1] == "How else can I help?"
    assert kinds(session) == [FailureKind.TOOL_LOOP.value]
    assert any("tool_loop" in e for e in recorder.turns[0].errors)


async def test_the_same_refused_call_is_stopped_after_two_refusals() -> None:
    session = toy_session()
    wrong = FakeReply(tool_calls=(FakeToolCall("lookup_order", {"order_id": "ORD-NOPE99"}),))
    _, llm = await play(session, {1: [wrong] * 30}, ["where is my order"])
    calls = [e for e in session.state.transcript if e.kind is EntryKind.TOOL_CALL]
    assert len(calls) == 3 and len(llm.received) == 3  # refused, refused, stopped: the model is not asked again
    assert agent_entries(session) == [TOOL_LOOP] and kinds(session) == [FailureKind.TOOL_LOOP.value]


async def test_an_empty_answer_is_retried_then_apologised_for() -> None:
    session = toy_session()
    empty = FakeReply(text="")
    recorder, _ = await play(session, {1: [empty, empty]}, ["hello"])
    assert agent_entries(session) == [LINES.apology]
    assert kinds(session) == [FailureKind.EMPTY.value, FailureKind.EMPTY.value]
    assert len(recorder.turns[0].errors) >= 2


async def test_an_empty_answer_then_a_real_one_is_a_recovered_turn() -> None:
    session = toy_session(FAST)
    _, _ = await play(session, {1: [FakeReply(text=""), FakeReply(text="Hello, how can I help?")]}, ["hello"])
    assert agent_entries(session) == ["Hello, how can I help?"] and kinds(session) == [FailureKind.EMPTY.value]


def malformed_then_text(server: FakeOpenAIServer) -> Any:
    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if len(server.requests) == 1:  # a tool call whose arguments are not JSON: pipecat drops it
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "lookup_account", "arguments": '{"account_id": "ACC-47'}}
            return await sse_reply([chunk({"role": "assistant", "tool_calls": [call]}),
                                    chunk({}, finish_reason="tool_calls")])(request, body)
        return await sse_reply([chunk({"role": "assistant", "content": "Could you repeat the account number?"}),
                                chunk({}, finish_reason="stop")])(request, body)

    return reply


async def test_openai_sending_arguments_that_are_not_json_is_retried_not_silent(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = malformed_then_text(fake_openai)
    session, recorder, _ = await hosted_call(fake_openai, ["my account is ACC 4729 18"])
    assert agent_entries(session) == ["Could you repeat the account number?"]
    assert kinds(session) == [FailureKind.EMPTY.value] and len(fake_openai.requests) == 2
    assert recorder.turns[0].errors


def cut_then_whole(server: FakeOpenAIServer, done: bool) -> Any:
    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if len(server.requests) == 1:  # half a sentence, then the stream ends with no finish reason
            return await sse_reply([chunk({"role": "assistant", "content": "Your balance is"}),
                                    chunk({"content": " forty"})], done=done)(request, body)
        return await sse_reply([chunk({"role": "assistant", "content": "Your balance is forty-two pounds."}),
                                chunk({}, finish_reason="stop")])(request, body)

    return reply


@pytest.mark.parametrize("done", [False, True], ids=["no-done", "done-without-finish"])
async def test_a_stream_cut_mid_answer_is_retried_not_taken_for_the_answer(fake_openai: FakeOpenAIServer,
                                                                           done: bool) -> None:
    fake_openai.reply = cut_then_whole(fake_openai, done)
    session, recorder, _ = await hosted_call(fake_openai, ["what is my balance"])
    assert agent_entries(session) == ["Your balance is forty-two pounds."]
    assert kinds(session) == [FailureKind.CUT_STREAM.value] and len(fake_openai.requests) == 2
    assert any("no finish reason" in e for e in recorder.turns[0].errors)


async def test_a_stream_cut_every_time_ends_in_the_apology(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = sse_reply([chunk({"role": "assistant", "content": "Let me"})], done=False)
    session, _, _ = await hosted_call(fake_openai, ["hello"])
    assert agent_entries(session) == [LINES.apology]
    assert kinds(session) == [FailureKind.CUT_STREAM.value] * 2


def test_the_caps_come_from_the_settings() -> None:
    from voice_agent.call.factory import build_call
    from voice_agent.settings import Settings, with_overrides

    settings = with_overrides(Settings(), llm={"max_tool_calls_per_turn": 3, "max_repeated_refusals": 1})
    config = build_call(settings, "caps", domain_factory=billing_domain).session.settings.llm
    assert (config.max_tool_calls_per_turn, config.max_repeated_refusals) == (3, 1)
