"""The service factory, and the real OpenAILLMService against a fake OpenAI-compatible server.

The server is a real HTTP server on 127.0.0.1 speaking the chat-completions wire format
(SSE streaming and plain JSON), so the network boundary is exercised end to end with
no network access and no API key.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    FunctionCallInProgressFrame,
    FunctionCallResultFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.anthropic.llm import AnthropicLLMService
from pipecat.services.google.llm import GoogleLLMService
from pipecat.services.llm_service import FunctionCallParams, LLMService
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.tests.utils import SleepFrame

from tests.fakes.openai_server import (
    FakeOpenAIServer,
    chunk,
    json_reply,
    openai_settings,
    sse_reply,
)
from tests.fakes.pipecat_run import run_test
from tests.fakes.toy_domain import TOY
from voice_agent.services.factory import make_llm, make_summarizer
from voice_agent.services.reference_llm import ReferenceLLMService
from voice_agent.settings import SettingsError, load_settings, with_overrides
from voice_agent.summarizers.extractive import ExtractiveSummarizer
from voice_agent.summarizers.llm import LLMSummarizer

# --- factory -----------------------------------------------------------------------------------


def test_reference_vendor_builds_reference_llm() -> None:
    llm = make_llm(load_settings(), TOY)
    assert isinstance(llm, ReferenceLLMService)


@pytest.mark.parametrize(
    ("vendor", "env", "cls", "model"),
    [
        ("openai", "OPENAI_API_KEY", OpenAILLMService, "gpt-4.1-mini"),
        ("anthropic", "ANTHROPIC_API_KEY", AnthropicLLMService, "claude-test"),
        ("google", "GOOGLE_API_KEY", GoogleLLMService, "gemini-test"),
    ],
)
def test_hosted_vendors_build_the_real_pipecat_services(
    monkeypatch: pytest.MonkeyPatch, vendor: str, env: str, cls: type, model: str
) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", vendor)
    monkeypatch.setenv("VOICE_AGENT_LLM__MODEL", model)
    monkeypatch.setenv(env, "fake-key-for-tests")
    llm = make_llm(load_settings(), TOY)
    assert type(llm) is cls
    assert llm._settings.model == model


def test_openai_uses_base_url_for_local_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    llm = make_llm(openai_settings("http://127.0.0.1:9/v1"), TOY)
    assert isinstance(llm, OpenAILLMService)
    assert str(llm._client.base_url).rstrip("/") == "http://127.0.0.1:9/v1"


def test_openai_without_model_keeps_pipecat_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "fake")
    llm = make_llm(load_settings(), TOY)
    untouched: LLMService[Any] = OpenAILLMService(api_key="x")
    assert llm._settings.model == untouched._settings.model
    assert type(llm) is OpenAILLMService


def test_make_summarizer_extractive_by_default() -> None:
    summarizer = make_summarizer(load_settings())
    assert isinstance(summarizer, ExtractiveSummarizer)
    assert (summarizer.config.max_lines, summarizer.config.max_words) == (12, 30)
    tuned = make_summarizer(with_overrides(load_settings(), summarizer={"max_lines": 3, "max_words": 7}))
    assert isinstance(tuned, ExtractiveSummarizer)
    assert (tuned.config.max_lines, tuned.config.max_words) == (3, 7)


def test_make_summarizer_llm_uses_given_or_settings_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_SUMMARIZER__KIND", "llm")
    monkeypatch.setenv("VOICE_AGENT_SUMMARIZER__TIMEOUT_SECS", "3.5")
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "fake")
    settings = load_settings()
    conversation_llm = make_llm(settings, TOY)
    shared = make_summarizer(settings, llm=conversation_llm)
    assert isinstance(shared, LLMSummarizer)
    assert shared.llm is conversation_llm
    assert shared.config is settings.summarizer and shared.config.timeout_secs == 3.5
    dedicated = make_summarizer(settings)
    assert isinstance(dedicated, LLMSummarizer)
    assert isinstance(dedicated.llm, OpenAILLMService)
    assert dedicated.llm is not conversation_llm


def test_make_summarizer_llm_refuses_the_reference_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings().model_copy(
        update={"summarizer": load_settings().summarizer.model_copy(update={"kind": "llm"})}
    )
    with pytest.raises(SettingsError) as excinfo:
        make_summarizer(settings, llm=make_llm(settings, TOY))
    assert "\n" not in str(excinfo.value)
    assert "summarizer.kind=extractive" in str(excinfo.value)


# --- the real OpenAILLMService over HTTP -------------------------------------------------------------


async def test_openai_service_streams_text_and_a_tool_call(fake_openai: FakeOpenAIServer) -> None:
    tool_args = {"account_id": "ACC-1000-01"}
    args_text = json.dumps(tool_args)
    fake_openai.reply = sse_reply(
        [
            chunk({"role": "assistant", "content": "Let me "}),
            chunk({"content": "check that."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup_account", "arguments": args_text[:10]},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args_text[10:]}}]}),
            chunk({}, finish_reason="tool_calls"),
        ]
    )

    llm = make_llm(openai_settings(fake_openai.base_url), TOY)
    assert isinstance(llm, OpenAILLMService)
    seen: list[FunctionCallParams] = []

    async def lookup_account(params: FunctionCallParams) -> None:
        seen.append(params)
        await params.result_callback({"account_id": params.arguments["account_id"], "name": "Ada"})

    llm.register_function("lookup_account", lookup_account)
    tools = ToolsSchema(
        standard_tools=[
            FunctionSchema(
                name="lookup_account",
                description="Look up an account.",
                properties={"account_id": {"type": "string"}},
                required=["account_id"],
            )
        ]
    )
    context = LLMContext([{"role": "user", "content": "My account is ACC-1000-01."}], tools=tools)

    down, _up = await run_test(
        llm,
        frames_to_send=[LLMContextFrame(context=context), SleepFrame(sleep=0.3)],
    )

    text = "".join(f.text for f in down if isinstance(f, LLMTextFrame))
    assert text == "Let me check that."
    in_progress = [f for f in down if isinstance(f, FunctionCallInProgressFrame)]
    assert [(f.function_name, f.tool_call_id, dict(f.arguments)) for f in in_progress] == [
        ("lookup_account", "call_1", tool_args)
    ]
    results = [f for f in down if isinstance(f, FunctionCallResultFrame)]
    assert [f.result for f in results] == [{"account_id": "ACC-1000-01", "name": "Ada"}]
    assert [p.arguments for p in seen] == [tool_args]
    kinds = [type(f) for f in down]
    assert kinds.index(LLMFullResponseStartFrame) < kinds.index(LLMTextFrame) < kinds.index(LLMFullResponseEndFrame)

    # What went over the wire: our model, a stream, the caller's words and the tool schema.
    (request,) = fake_openai.requests
    assert request["model"] == "fake-model"
    assert request["stream"] is True
    assert request["messages"][-1] == {"role": "user", "content": "My account is ACC-1000-01."}
    assert [t["function"]["name"] for t in request["tools"]] == ["lookup_account"]


async def test_openai_run_inference_returns_the_message(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = json_reply("plain answer")
    llm = make_llm(openai_settings(fake_openai.base_url), TOY)
    answer = await asyncio.wait_for(
        llm.run_inference(LLMContext([{"role": "user", "content": "hi"}]), system_instruction="Be brief."),
        timeout=5,
    )
    assert answer == "plain answer"
    (request,) = fake_openai.requests
    assert request["stream"] is False
    assert request["messages"][0] == {"role": "system", "content": "Be brief."}


def test_simulate_against_a_local_server_that_is_not_there_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from typer.testing import CliRunner

    from voice_agent.cli import app, unreachable

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
    monkeypatch.setenv("VOICE_AGENT_LLM__BASE_URL", f"http://127.0.0.1:{port}/v1")
    result = CliRunner().invoke(app, ["simulate", "--runs", "1", "--policy", "lanes"])
    assert result.exit_code != 0 and "nothing answers" in result.output and "start the local server" in result.output
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert unreachable(f"http://127.0.0.1:{listening.getsockname()[1]}/v1") is None
