"""The cache-aware layout as the provider receives it: pipecat's real OpenAI service in our pipeline, its network
faked on 127.0.0.1, every request body read as sent.

Between two summary passes each request must start with everything the one before it sent up to its tail (the
provider's prompt cache serves that part); a pass may rewrite the prefix only after the part no pass changes; and
every fact the call has is in every request verbatim. The assembler's own tests show this on its messages; here the
context stage, the dialect, pipecat's aggregators and the SDK stand between them and the wire, and a request the
pipeline re-renders differently from the one before (a reply, a tool call, a role) breaks the cache as surely.
"""

from __future__ import annotations

import datetime as dt
import json
from itertools import pairwise
from typing import Any

import pytest
from aiohttp import web

from tests.fakes.openai_server import FakeOpenAIServer, chunk, openai_settings, sse_reply
from voice_agent.call.factory import build_call
from voice_agent.core.assembler import AssembledContext, known_facts_lines
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.settings import with_overrides

LINES = [
    CallerLine(1, "Hi, my account number is ACC-4729-18."),
    CallerLine(2, "Can you pull up my October invoice?"),
    CallerLine(3, "I'm travelling until the 14th, so please don't call me before then."),
    CallerLine(4, "Is paperless billing free?"),
    CallerLine(5, "And can I pay by card?"),
    CallerLine(6, "What about the router lights?"),
    CallerLine(7, "Does voicemail come with every plan?"),
    CallerLine(8, "Thanks, that's all."),
]


def scripted_model() -> Any:
    """Looks the account up when the caller gives its number (a tool call, then words), else answers in words."""
    looked_up = False

    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        nonlocal looked_up
        last = body["messages"][-1]
        users = [m for m in body["messages"] if m["role"] == "user"]
        if "ACC-" in str(users[-1]["content"] if users else "") and not looked_up and last["role"] != "tool":
            looked_up = True
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "lookup_account", "arguments": json.dumps({"account_id": "ACC-4729-18"})}}
            return await sse_reply([chunk({"role": "assistant", "tool_calls": [call]}),
                                    chunk({}, "tool_calls")])(request, body)
        words = f"Noted, that is request {len(body['messages'])}."
        return await sse_reply([chunk({"role": "assistant", "content": words}), chunk({}, "stop")])(request, body)

    return reply


def _wire(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True)


async def test_between_passes_each_request_on_the_wire_extends_the_one_before_but_its_tail(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_openai.reply = scripted_model()
    # A pass every two turns, so the call has both kinds of step.
    settings = with_overrides(openai_settings(fake_openai.base_url),
                              policy={"name": "lanes", "keep": 2, "every": 2, "trigger": "cadence"},
                              call={"reference_date": dt.date(2026, 11, 30)})
    parts = build_call(settings, "wire")
    session = parts.session
    assemble = session.assemble
    # Per request: (messages the lanes built, stable_count, fixed_count, passes so far, the facts' lines then).
    built: list[tuple[int, int, int, int, list[str]]] = []

    def recorded() -> AssembledContext:
        context = assemble()
        lines, noted = known_facts_lines(session.state)
        built.append((len(context.messages), context.stable_count, context.fixed_count,
                      len(session.state.drop_log.events), lines + noted))
        return context

    monkeypatch.setattr(session, "assemble", recorded)
    await run_text_call(session, parts.llm, LINES)

    bodies = [[_wire(m) for m in body["messages"]] for body in fake_openai.requests]
    assert len(bodies) == len(built) >= len(LINES) + 1  # one request per line, one more after the tool result
    passes = [b[3] for b in built]
    assert passes[-1] >= 2 and any(a == b for a, b in pairwise(passes))
    appended = 0
    for (before, after), (b_built, a_built) in zip(pairwise(bodies), pairwise(built), strict=True):
        offset = len(before) - b_built[0]  # what pipecat puts before the lanes (its system instruction)
        assert offset >= 0
        keep = offset + (b_built[1] if a_built[3] == b_built[3] else b_built[2])
        assert after[:keep] == before[:keep], f"request {bodies.index(after)} rewrote what the cache holds"
        appended += a_built[3] == b_built[3]
    assert appended >= 4
    # Every fact the call has is in every request verbatim (in KNOWN FACTS, or its value in a message above).
    for body, (*_, lines) in zip(fake_openai.requests, built, strict=True):
        text = "\n".join(str(m.get("content") or "") + json.dumps(m.get("tool_calls") or "")
                         for m in body["messages"])
        for line in lines:
            value = line.split(": ", 1)[1].strip('"')
            assert line in text or value.split(" (UNVERIFIED")[0] in text, line
    assert any("ACC-4729-18" in line for line in built[-1][4])
