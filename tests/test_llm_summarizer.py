"""LLMSummarizer through the real OpenAILLMService.run_inference against a fake local server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from aiohttp import web
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.utils.context.llm_context_summarization import DEFAULT_SUMMARIZATION_PROMPT

from tests.fakes.openai_server import FakeOpenAIServer, Reply, json_reply, openai_settings
from tests.fakes.toy_domain import TOY
from voice_agent.core.summary import Commitment, EpisodeSummary, RejectedItem, SummaryRequest
from voice_agent.core.transcript import EntryKind, TranscriptEntry
from voice_agent.services.factory import make_llm
from voice_agent.settings import SummarizerConfig
from voice_agent.summarizers.llm import EPISODE_SUMMARY_SCHEMA, LLMSummarizer

PREVIOUS = EpisodeSummary(
    established=["caller is the account holder"],
    rejected=[RejectedItem(item="paper invoices", reason="caller travels")],
    commitments=[Commitment(text="I will email the receipt", turn=2)],
)
TURNS = (
    TranscriptEntry(index=0, turn=6, kind=EntryKind.CALLER, text="The disputed invoice is the March one."),
    TranscriptEntry(index=1, turn=6, kind=EntryKind.AGENT, text="Understood, the March invoice."),
)
NEW = EpisodeSummary(
    established=["caller is the account holder", "the disputed_invoice is from March"],
    rejected=[RejectedItem(item="paper invoices", reason="caller travels")],
    decided=["open a dispute on the disputed_invoice"],
    pending=["confirm the refund amount"],
    commitments=[Commitment(text="I will email the receipt", turn=2)],
    covers_through_turn=6,
)


def request() -> SummaryRequest:
    return SummaryRequest(
        previous=PREVIOUS,
        turns=TURNS,
        ledger_roles=("disputed_invoice", "account"),
        slot_names=("refund_amount",),
        pass_turn=7,
    )


def summarizer(server: FakeOpenAIServer, timeout_secs: float = 5.0) -> LLMSummarizer:
    llm = make_llm(openai_settings(server.base_url), TOY)
    assert isinstance(llm, OpenAILLMService)
    return LLMSummarizer(llm, SummarizerConfig(timeout_secs=timeout_secs, max_tokens=300))


def hang(server: FakeOpenAIServer) -> Reply:
    """A reply that never comes (until the server shuts down)."""

    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        await server.closing.wait()
        return web.json_response({})

    return reply


def test_schema_is_strict_everywhere() -> None:
    def objects(node: Any) -> list[dict[str, Any]]:
        found = []
        if isinstance(node, dict):
            if node.get("type") == "object":
                found.append(node)
            for value in node.values():
                found += objects(value)
        elif isinstance(node, list):
            for value in node:
                found += objects(value)
        return found

    found = objects(EPISODE_SUMMARY_SCHEMA)
    assert len(found) == 3  # the summary, a rejected item, a commitment
    for obj in found:
        assert sorted(obj["required"]) == sorted(obj["properties"])
        assert obj["additionalProperties"] is False
    assert "$ref" not in json.dumps(EPISODE_SUMMARY_SCHEMA)
    assert "$defs" not in EPISODE_SUMMARY_SCHEMA


async def test_valid_json_becomes_the_new_summary(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = json_reply(NEW.model_dump_json())
    s = summarizer(fake_openai)
    assert await s.summarize(request()) == NEW
    assert s.failures == 0

    (sent,) = fake_openai.requests
    assert sent["stream"] is False
    assert sent["max_completion_tokens"] == 300
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": EPISODE_SUMMARY_SCHEMA, "strict": True},
    }
    system, user = sent["messages"]
    assert system == {"role": "system", "content": request().instructions()}
    assert "disputed_invoice" in system["content"]
    assert PREVIOUS.model_dump_json() in user["content"]
    assert "CALLER: The disputed invoice is the March one." in user["content"]


@pytest.mark.parametrize(
    "content",
    [
        "Sure! Here is the summary: established...",  # not JSON
        '{"established": "not a list"}',  # JSON, wrong shape
        "",  # empty
    ],
)
async def test_invalid_reply_keeps_the_previous_summary(fake_openai: FakeOpenAIServer, content: str) -> None:
    fake_openai.reply = json_reply(content)
    s = summarizer(fake_openai)
    assert await s.summarize(request()) == PREVIOUS
    assert s.failures == 1


async def test_vendor_error_keeps_the_previous_summary(fake_openai: FakeOpenAIServer) -> None:
    async def bad_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        # 400 is not retried by the OpenAI client, so the failure is immediate.
        return web.json_response({"error": {"message": "bad schema", "type": "invalid_request_error"}}, status=400)

    fake_openai.reply = bad_request
    s = summarizer(fake_openai)
    assert await s.summarize(request()) == PREVIOUS
    assert s.failures == 1


async def test_timeout_keeps_the_previous_summary_within_the_timeout(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = hang(fake_openai)
    s = summarizer(fake_openai, timeout_secs=0.3)
    started = time.monotonic()
    assert await s.summarize(request()) == PREVIOUS
    assert time.monotonic() - started < 4.0  # the configured 0.3 s, not the 5 s otherwise: a bound no load comes near
    assert s.failures == 1
    assert len(fake_openai.requests) == 1


async def test_text_summary_uses_pipecat_style_instructions(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = json_reply("  The caller disputes the March invoice.\n")
    s = summarizer(fake_openai)
    text = await s.summarize_text("Caller is the account holder.", TURNS)
    assert text == "The caller disputes the March invoice."
    (sent,) = fake_openai.requests
    assert "response_format" not in sent
    system, user = sent["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith(DEFAULT_SUMMARIZATION_PROMPT)
    assert "Caller is the account holder." in user["content"]
    assert "AGENT: Understood, the March invoice." in user["content"]


async def test_text_summary_timeout_keeps_previous_text(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = hang(fake_openai)
    s = summarizer(fake_openai, timeout_secs=0.3)
    started = time.monotonic()
    assert await s.summarize_text("old summary", TURNS) == "old summary"
    assert time.monotonic() - started < 4.0  # the configured 0.3 s, not the 5 s otherwise: a bound no load comes near


async def test_a_failed_pass_does_not_poison_the_next(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = json_reply("not json")
    s = summarizer(fake_openai)
    kept = await s.summarize(request())
    fake_openai.reply = json_reply(NEW.model_dump_json())
    assert await s.summarize(request()) == NEW
    assert kept == PREVIOUS
    assert s.failures == 1
