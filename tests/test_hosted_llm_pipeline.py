"""A real pipecat OpenAILLMService inside our pipeline, its network boundary faked on 127.0.0.1.

It proves that the model receives the assembled context (KNOWN FACTS from the ledger,
hard constraints last) and that its tool calls run behind the guards.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from aiohttp import web

from tests.fakes.openai_server import FakeOpenAIServer, chunk, openai_settings, sse_reply
from voice_agent.call.factory import build_call
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.settings import with_overrides


def scripted_model() -> Any:
    """Calls lookup_account when the caller gives an account number, else answers in words."""
    calls = 0

    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        nonlocal calls
        users = [m for m in body["messages"] if m["role"] == "user"]
        said = str(users[-1]["content"]) if users else ""
        if "ACC-" in said and calls == 0:
            calls += 1
            arguments = json.dumps({"account_id": "ACC-4729-18"})
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "lookup_account", "arguments": arguments}}
            return await sse_reply([chunk({"role": "assistant", "tool_calls": [call]}),
                                    chunk({}, "tool_calls")])(request, body)
        return await sse_reply([chunk({"role": "assistant", "content": "Thanks, noted."}),
                                chunk({}, "stop")])(request, body)

    return reply


async def test_openai_service_sees_the_assembled_lanes(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply = scripted_model()
    # The cadence schedule this test reads (turn 1 folded at turn 4), whatever trigger the settings file chooses.
    settings = with_overrides(openai_settings(fake_openai.base_url),
                              policy={"keep": 2, "every": 2, "trigger": "cadence"},
                              call={"reference_date": dt.date(2026, 11, 30)})
    parts = build_call(settings, "hosted")  # the real OpenAILLMService and the configured summarizer
    session = parts.session
    lines = [CallerLine(1, "Hi, my account number is ACC-4729-18."), CallerLine(2, "One thing."),
             CallerLine(3, "Another thing."), CallerLine(4, "And a third."), CallerLine(5, "Thanks.")]
    await run_text_call(session, parts.llm, lines)
    assert session.state.ledger.get("account", "ACC-4729-18") is not None
    last = fake_openai.requests[-1]["messages"]
    texts = [str(m.get("content") or "") for m in last]
    facts = next(t for t in texts if t.startswith("KNOWN FACTS"))
    assert "- account: ACC-4729-18\n" in facts + "\n"
    assert texts[-1].startswith("HARD CONSTRAINTS")
    # The raw turn that stated the number has left the window; the summary names the role:
    # only the ledger still holds the value.
    assert [t for t in texts if "ACC-4729-18" in t] == [facts]
    assert [t["function"]["name"] for t in fake_openai.requests[0]["tools"]][:2] == ["lookup_account", "list_invoices"]
