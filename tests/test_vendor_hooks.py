"""Vendor hooks: the lane role, tool-call content, OpenAI's ``prompt_cache_key`` and Anthropic's breakpoint.

The request-level tests run pipecat's real OpenAI and Anthropic services through our pipeline, their
network faked on 127.0.0.1, and read the request bodies the SDKs sent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pipecat.processors.aggregators.llm_context import LLMSpecificMessage
from pipecat.services.anthropic.llm import AnthropicLLMService
from pipecat.services.openai.llm import OpenAILLMService

from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer, chunk, openai_settings, sse_reply
from voice_agent.call.factory import build_call
from voice_agent.core.assembler import CONSTRAINTS_REMINDER, AssembledContext
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.services.vendor_hooks import MessageDialect, is_openai_api, message_dialect
from voice_agent.settings import SettingsError, load_settings, with_overrides

LINES = [CallerLine(1, "Hi, is paperless billing free?"), CallerLine(2, "And can I pay by card?")]
CALL = {"call": {"reference_date": dt.date(2026, 11, 30)}}
TOOL_CALL = {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


# -- the dialect, message by message ---------------------------------------------------------------------------------


def test_the_lane_role_and_the_tool_call_content_are_rewritten_on_copies() -> None:
    lane = {"role": "developer", "content": "KNOWN FACTS"}
    messages = [lane, {"role": "user", "content": "hi"}, TOOL_CALL]
    out = MessageDialect(lane_role="system", tool_call_content="").apply(messages, 0)
    assert [m["role"] for m in out] == ["system", "user", "assistant"]
    assert out[2]["content"] == "" and out[2]["tool_calls"] == TOOL_CALL["tool_calls"]
    assert lane["role"] == "developer" and TOOL_CALL["content"] is None  # the lanes' own dicts are untouched
    assert MessageDialect().apply(messages, 0) == messages


def test_one_breakpoint_on_the_last_stable_message() -> None:
    messages = [{"role": "developer", "content": "FACTS"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "developer", "content": "HARD CONSTRAINTS"}]
    out = MessageDialect(cache_breakpoint=True).apply(messages, 3)
    assert out[2] == {"role": "assistant",
                      "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}
    assert [m for i, m in enumerate(out) if i != 2] == [m for i, m in enumerate(messages) if i != 2]
    assert MessageDialect(cache_breakpoint=True).apply(messages, 0) == messages  # no stable prefix: none


def test_a_second_breakpoint_ends_the_part_no_pass_changes() -> None:
    rules = {"role": "developer", "content": "HARD CONSTRAINTS (never break these):\n- x"}
    messages = [rules, {"role": "developer", "content": "KNOWN FACTS"}, {"role": "user", "content": "hi"},
                {"role": "developer", "content": "HARD CONSTRAINTS: recall"}]
    out = MessageDialect(cache_breakpoint=True).apply(messages, 3, fixed=1)
    marked = [i for i, m in enumerate(out) if isinstance(m["content"], list)]
    assert marked == [0, 2] and out[0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # No stable part past it: the one breakpoint is the stable prefix's own.
    assert [i for i, m in enumerate(MessageDialect(cache_breakpoint=True).apply(messages, 1, fixed=1))
            if isinstance(m["content"], list)] == [0]


def test_a_tool_result_carries_the_breakpoint_as_anthropics_own_block() -> None:
    result = {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'}
    out = MessageDialect(cache_breakpoint=True).apply([{"role": "user", "content": "hi"}, TOOL_CALL, result], 3)
    assert out[:2] == [{"role": "user", "content": "hi"}, TOOL_CALL]
    assert isinstance(out[2], LLMSpecificMessage) and out[2].llm == "anthropic"
    assert out[2].message == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                                           "content": '{"ok": true}',
                                                           "cache_control": {"type": "ephemeral"}}]}


def test_a_tool_call_message_passes_the_breakpoint_to_the_message_before() -> None:
    out = MessageDialect(cache_breakpoint=True).apply([{"role": "user", "content": "hi"}, TOOL_CALL], 2)
    assert out[0]["content"][-1]["cache_control"] == {"type": "ephemeral"} and out[1] == TOOL_CALL


def test_an_unknown_lane_role_is_refused() -> None:
    with pytest.raises(ValueError, match="lane_role must be one of developer, system, user"):
        MessageDialect(lane_role="assistant")


# -- the automatic choice ---------------------------------------------------------------------------------------------


def test_the_dialect_follows_the_service() -> None:
    assert is_openai_api(None) and is_openai_api("https://api.openai.com/v1") and not is_openai_api(
        "http://127.0.0.1:8000/v1")
    openai = OpenAILLMService(api_key="sk-test")
    local = OpenAILLMService(api_key="k", base_url="http://127.0.0.1:8000/v1")
    anthropic = AnthropicLLMService(api_key="k")
    cached = AnthropicLLMService(api_key="k", settings=AnthropicLLMService.Settings(enable_prompt_caching=True))
    assert message_dialect(openai) == MessageDialect("developer", "", False)
    assert message_dialect(local) == MessageDialect("system", "", False)
    assert message_dialect(local, "user").lane_role == "user"  # llm.lane_role wins
    assert message_dialect(anthropic) == MessageDialect("developer", None, True)
    assert not message_dialect(cached).cache_breakpoint  # pipecat's own breakpoints are the user's choice


def test_lane_role_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__LANE_ROLE", "assistant")
    with pytest.raises(SettingsError, match=r"llm\.lane_role='assistant' .* is invalid: Input should be "
                                            r"'developer', 'system' or 'user'"):
        load_settings()
    monkeypatch.setenv("VOICE_AGENT_LLM__LANE_ROLE", "system")
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with pytest.raises(SettingsError, match="lane_role=system is for OpenAI-compatible servers"):
        load_settings()
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert load_settings().llm.lane_role == "system"


# -- OpenAI: prompt_cache_key -----------------------------------------------------------------------------------------


def _answers(fake: FakeOpenAIServer) -> None:
    fake.reply = sse_reply([chunk({"role": "assistant", "content": "Yes, it is free."}), chunk({}, "stop")])


async def test_openai_requests_carry_the_calls_prompt_cache_key(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _answers(fake_openai)
    # OpenAI's own API (llm.base_url unset), its address faked through the SDK's own variable.
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    parts = build_call(with_overrides(load_settings(), **CALL), "call-7f3a")
    await run_text_call(parts.session, parts.llm, LINES)
    assert [r.get("prompt_cache_key") for r in fake_openai.requests] == ["call-7f3a", "call-7f3a"]


async def test_an_openai_compatible_server_gets_no_cache_key_and_system_lanes(fake_openai: FakeOpenAIServer) -> None:
    _answers(fake_openai)
    parts = build_call(with_overrides(openai_settings(fake_openai.base_url), **CALL), "call-1")
    await run_text_call(parts.session, parts.llm, LINES)
    assert all("prompt_cache_key" not in r for r in fake_openai.requests)
    roles = [m["role"] for m in fake_openai.requests[-1]["messages"]]
    assert "developer" not in roles and roles[-1] == "system"  # HARD CONSTRAINTS, a lane


async def test_the_lane_role_setting_reaches_the_wire(fake_openai: FakeOpenAIServer) -> None:
    _answers(fake_openai)
    # A server whose chat template allows a system message only first: llm.lane_role = "user" overrides the fallback.
    settings = with_overrides(openai_settings(fake_openai.base_url), llm={"lane_role": "user"}, **CALL)
    parts = build_call(settings, "call-u")
    await run_text_call(parts.session, parts.llm, LINES)
    for body in fake_openai.requests:
        roles = [m["role"] for m in body["messages"]]
        lanes = [m["role"] for m in body["messages"] if str(m.get("content") or "").startswith("HARD CONSTRAINTS")]
        assert "developer" not in roles and roles.count("system") <= 1 and roles[0] == "system"  # the prompt only
        assert lanes == ["user", "user"]  # stated in full after the prompt, recalled at the end


# -- Anthropic: one breakpoint at the end of the stable prefix --------------------------------------------------------


@pytest.fixture
async def fake_anthropic(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAnthropicServer]:
    server = FakeAnthropicServer()
    await server.start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)  # the SDK's own variable
    yield server
    await server.stop()


def _breakpoints(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where ``cache_control`` stands in a request: ("system" | "tools" | "messages", index, block index)."""
    found = [("system", 0, i) for i, b in enumerate(body.get("system") or []) if isinstance(b, dict)
             and "cache_control" in b]
    found += [("tools", i, 0) for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    for i, message in enumerate(body["messages"]):
        content = message["content"] if isinstance(message["content"], list) else []
        found += [("messages", i, j) for j, b in enumerate(content) if "cache_control" in b]
    return found


async def test_the_anthropic_breakpoints_land_on_the_constraints_and_the_last_stable_message_only(
    fake_anthropic: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
    parts = build_call(with_overrides(load_settings(), **CALL), "call-a")
    session = parts.session
    assemble = session.assemble
    stable: list[str] = []

    def with_stable_prefix() -> AssembledContext:
        context = assemble()  # the lanes' own layout: the stable prefix, then the tail
        stable.append(str(context.messages[context.stable_count - 1]["content"]))
        return context

    monkeypatch.setattr(session, "assemble", with_stable_prefix)
    await run_text_call(session, parts.llm, LINES)
    assert len(fake_anthropic.requests) == 2
    for body, last_stable in zip(fake_anthropic.requests, stable, strict=True):
        # Two, and pipecat's own (the system prompt, the last two user messages) is off: the end of the part no pass
        # changes (the hard constraints, the first message) and the end of the stable prefix.
        [(where_fixed, *at_fixed), (where, index, block)] = _breakpoints(body)
        assert where_fixed == where == "messages" and at_fixed == [0, 0]
        assert body["messages"][0]["content"][0]["text"].startswith("HARD CONSTRAINTS (never break these):")
        marked = body["messages"][index]["content"][block]
        assert marked == {"type": "text", "text": last_stable, "cache_control": {"type": "ephemeral"}}
        # The volatile tail follows it: the line that recalls the constraints, merged into the same user message by
        # pipecat.
        tail = body["messages"][index]["content"][block + 1:]
        assert [b["text"] for b in tail][-1] == CONSTRAINTS_REMINDER
    assert stable == [LINES[0].text, LINES[1].text]
