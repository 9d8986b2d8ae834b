"""The caller-span extractor in a call on the real pipecat OpenAILLMService, its network faked on 127.0.0.1.

The conversation and the extractor both go through the one service: the conversation streams, the extractor's
reading is pipecat's out-of-band ``run_inference`` with a JSON schema. The fake server tells them apart by the
``response_format`` only the reading sends.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from tests.fakes.openai_server import FakeOpenAIServer, chunk, json_reply, openai_settings, sse_reply
from voice_agent.call.factory import build_call
from voice_agent.core.assembler import known_facts_lines
from voice_agent.core.provenance import CallerSpan
from voice_agent.domains.billing.brain import BillingReferenceBrain
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.settings import Settings, with_overrides


@pytest.fixture(autouse=True)
def extractor_as_shipped(no_caller_spans: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extractor as the settings ship it (the suite turns it off for every other test)."""
    monkeypatch.delenv("VOICE_AGENT_CALLER_SPANS__EXTRACTOR")


TODAY = dt.date(2026, 11, 30)
# Wordings written for this test: a wish and an attempt that the offline cue rules do not read.
WISH = "Honestly the neatest thing for me is that the sum just rolls into next month's bill."
WISH_QUOTE = "the sum just rolls into next month's bill"
ATTEMPT = "The website chat was a dead end for me on Monday."
ATTEMPT_QUOTE = "The website chat was a dead end"
LINES = [CallerLine(1, "Hi, it's about account ACC-4729-18."), CallerLine(2, WISH), CallerLine(3, ATTEMPT),
         CallerLine(4, "Okay, that's it.")]

Extraction = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]


def model(extraction: Extraction) -> Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]:
    """The conversation answers in words; the extractor's reading (a request with a JSON schema) gets ``extraction``."""

    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if "response_format" in body:
            return await extraction(request, body)
        return await sse_reply([chunk({"role": "assistant", "content": "Thanks, noted."}), chunk({}, "stop")])(
            request, body)

    return reply


def spans(*found: tuple[str, int, str]) -> str:
    return json.dumps({"spans": [{"slot": s, "turn": t, "quote": q} for s, t, q in found]})


def settings_for(server: FakeOpenAIServer, **caller_spans: Any) -> Settings:
    return with_overrides(openai_settings(server.base_url), call={"reference_date": TODAY},
                          caller_spans=caller_spans)


def extractions(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if "response_format" in r]


def conversation(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if "response_format" not in r]


def test_the_wordings_are_ones_no_offline_cue_rule_reads() -> None:
    brain = BillingReferenceBrain()
    for said in (WISH, ATTEMPT):
        messages = [{"role": "system", "content": f"Today is {TODAY.isoformat()}."}, {"role": "user", "content": said}]
        assert not [c for c in brain.respond(messages, ["update_case"]).tool_calls if c.name == "update_case"]


async def test_a_wording_no_cue_rule_reads_fills_the_slot_from_a_verbatim_quote_and_a_made_up_one_is_dropped(
    fake_openai: FakeOpenAIServer,
) -> None:
    async def extraction(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        said = body["messages"][-1]["content"]
        found: list[tuple[str, int, str]] = []
        if "[turn 2]" in said:
            found.append(("requested_resolution", 2, WISH_QUOTE))
        if "[turn 3]" in said:
            found += [("already_attempted", 3, ATTEMPT_QUOTE),
                      ("already_attempted", 3, "I already tried the online chat")]  # made up: never said
        return await json_reply(spans(*found))(request, body)

    fake_openai.reply = model(extraction)
    parts = build_call(settings_for(fake_openai), "spans")
    session = parts.session
    assert session.describe()["caller_spans"] == "llm"  # on by default with a hosted LLM

    async def settled(_turn: int) -> None:  # the driver waits before the next line; the turn never did
        await session.settle_caller_spans()

    await run_text_call(session, parts.llm, LINES, on_turn=settled)
    slots = session.state.slots
    wish, attempt = slots.get("requested_resolution"), slots.get("already_attempted")
    assert wish is not None and wish.provenance == CallerSpan(2, WISH_QUOTE)
    assert attempt is not None and attempt.value == [ATTEMPT_QUOTE]
    assert attempt.provenance == CallerSpan(3, ATTEMPT_QUOTE)
    assert session.caller_spans is not None
    counts = session.caller_spans.counts
    assert (counts.quotes, counts.dropped, counts.written) == (3, 1, 2)
    # Each reading asked for the schema and read only the caller's new line.
    first = extractions(fake_openai)[1]
    assert first["response_format"]["json_schema"]["schema"]["properties"]["spans"]["items"]["properties"]["slot"][
        "enum"] == ["requested_resolution", "already_attempted", "timing_constraints"]
    assert "[turn 2] CALLER: " + WISH in first["messages"][-1]["content"]
    assert "[turn 1]" not in first["messages"][-1]["content"]
    # KNOWN FACTS lists the caller's words, verbatim. On the next request, new since the last pass, a line whose
    # exact value a message above already holds (here the caller's own line, still a recent turn) is not sent twice
    # (the assembler's tail rule): the request holds every line either under KNOWN FACTS or above it, verbatim.
    lines, _ = known_facts_lines(session.state)
    for line in (f'requested_resolution (turn 2): "{WISH_QUOTE}"', f'already_attempted (turn 3): "{ATTEMPT_QUOTE}"'):
        assert f"- {line}" in lines
    last = conversation(fake_openai)[-1]["messages"]
    facts = "\n".join(str(m["content"]) for m in last if str(m.get("content") or "").startswith("KNOWN FACTS"))
    above = "\n".join(str(m.get("content") or "") for m in last if m.get("role") == "user")
    for quote in (WISH_QUOTE, ATTEMPT_QUOTE):
        assert quote in facts or quote in above
    assert "I already tried the online chat" not in json.dumps(last)


async def test_a_model_that_hangs_leaves_every_turn_alone(fake_openai: FakeOpenAIServer) -> None:
    answered: list[bool] = []

    async def hangs(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        await fake_openai.closing.wait()  # released when the server stops, long after the call
        answered.append(True)
        return await json_reply(spans())(request, body)

    fake_openai.reply = model(hangs)
    parts = build_call(settings_for(fake_openai, timeout_secs=60.0), "hangs")
    session = parts.session
    ended: list[float] = []

    async def mark(_turn: int) -> None:
        ended.append(time.monotonic())

    started = time.monotonic()
    # A turn that waited for the hanging reading would outlast the driver's 10 s: every turn answered instead.
    await run_text_call(session, parts.llm, LINES, on_turn=mark, turn_timeout=10.0)
    assert len(ended) == len(LINES) and ended[-1] - started < 10.0
    assert extractions(fake_openai) and not answered and session.llm_failures == []
    assert session.caller_spans is not None and session.caller_spans.counts.readings == 0  # none landed
    assert session.state.slots.get("requested_resolution") is None


async def test_a_model_that_errs_changes_nothing_and_the_call_goes_on(fake_openai: FakeOpenAIServer) -> None:
    async def errs(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=500)

    fake_openai.reply = model(errs)
    parts = build_call(settings_for(fake_openai), "errs")
    session = parts.session

    async def settled(_turn: int) -> None:
        await session.settle_caller_spans()

    await run_text_call(session, parts.llm, LINES, on_turn=settled)
    assert session.caller_spans is not None
    counts = session.caller_spans.counts
    assert counts.failed == 3 and counts.written == 0  # turns 1-3 landed; turn 4's reading ended with the call
    assert session.state.slots.get("requested_resolution") is None and session.llm_failures == []
    assert len([e for e in session.state.transcript.entries if e.kind.value == "agent"]) == len(LINES)
