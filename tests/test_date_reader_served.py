"""The model reader in a served call: the caller hears the holding line while it reads, and what it finds
can only add caution (a day the rules would run becomes a question)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pipecat.frames.frames import Frame, TTSSpeakFrame

from processors.tool_layer import register_guarded_tools
from voice_agent.call.session import CallSession
from voice_agent.core.dates.reading import ModelDateReader
from voice_agent.domains.billing import billing_domain
from voice_agent.services.date_reader import make_date_reader
from voice_agent.settings import CallConfig, Settings, SettingsError, with_overrides
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TODAY = dt.date(2026, 11, 18)


@dataclass
class FakeService:
    """Just what the tool layer uses of an LLM service: handler registration, its calls-started event and frame
    pushing."""

    handlers: dict[str, Callable[[Any], Awaitable[None]]] = field(default_factory=dict)
    events: dict[str, Callable[..., Awaitable[None]]] = field(default_factory=dict)
    pushed: list[Frame] = field(default_factory=list)

    def register_function(self, name: str, handler: Callable[[Any], Awaitable[None]]) -> None:
        self.handlers[name] = handler

    def add_event_handler(self, event: str, handler: Callable[..., Awaitable[None]]) -> None:
        self.events[event] = handler

    async def push_frame(self, frame: Frame) -> None:
        self.pushed.append(frame)


@dataclass
class Params:
    function_name: str
    tool_call_id: str
    arguments: dict[str, Any]
    llm: FakeService
    results: list[Any] = field(default_factory=list)

    async def result_callback(self, result: Any, *, properties: Any = None) -> None:
        self.results.append(result)


def session_with(reply: str) -> CallSession:
    async def complete(instructions: str, user: str, schema: dict[str, Any]) -> str:
        return reply

    session = CallSession(billing_domain(), Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer(),
                          date_reader=ModelDateReader(complete))
    session.state.ledger.record_from_tool("account", "ACC-4729-18", 1, "lookup_account", "account_id")
    session.state.start_turn("the 26th is my mum's op so that one's a write-off really")
    session.state.record_agent("When would suit for a callback?")
    session.state.start_turn("the 26th then, sure")
    return session


async def call_tool(session: CallSession) -> tuple[FakeService, Params]:
    service = FakeService()
    register_guarded_tools(service, session)  # type: ignore[arg-type]
    params = Params("schedule_callback", "c1", {"account_id": "ACC-4729-18", "date": "2026-11-26"}, service)
    await service.handlers["schedule_callback"](params)
    return service, params


async def test_the_caller_hears_the_holding_line_and_the_models_reading_turns_a_run_into_a_question() -> None:
    unavailable = json.dumps({"statements": [{"turn": 1, "quote": "the 26th is my mum's op", "about": "callback",
                                              "polarity": "unavailable", "when": ["the 26th"]}]})
    session = session_with(unavailable)
    service, params = await call_tool(session)
    spoken = [f.text for f in service.pushed if isinstance(f, TTSSpeakFrame)]
    assert spoken == [session.settings.dates.holding_line]
    (result,) = params.results
    assert result["status"] == "confirm" and "the 26th is my mum's op" in result["say"]
    assert session.date_readings[0].ok and session.domain.extra["backend"].callbacks == []


async def test_a_reading_that_finds_nothing_leaves_the_rules_decision_alone() -> None:
    session = session_with(json.dumps({"statements": []}))
    _, params = await call_tool(session)
    (result,) = params.results
    assert [c["date"] for c in session.domain.extra["backend"].callbacks] in ([], ["2026-11-26"])
    assert session.date_readings[0].ok and result.get("verdict") != "refuse"


async def test_a_model_that_returns_garbage_is_a_failed_reading_and_the_call_goes_on() -> None:
    session = session_with("I think the caller is free")
    _, params = await call_tool(session)
    (result,) = params.results
    assert not session.date_readings[0].ok and isinstance(result, dict)


def test_dates_reader_llm_needs_a_hosted_llm() -> None:
    settings = with_overrides(Settings(), dates={"reader": "llm"})
    with pytest.raises(SettingsError, match="hosted"):
        make_date_reader(settings, None)
    assert make_date_reader(Settings()) is None  # rules: no model


async def test_the_reading_goes_through_the_real_openai_service_with_the_schema(fake_openai: Any) -> None:
    from tests.fakes.openai_server import json_reply, openai_settings
    from voice_agent.core.dates.reading import READING_SCHEMA
    from voice_agent.services.factory import make_llm

    fake_openai.reply = json_reply(json.dumps({"statements": [
        {"turn": 1, "quote": "the 26th is my mum's op", "about": "callback", "polarity": "unavailable",
         "when": ["the 26th"]}]}))
    settings = with_overrides(openai_settings(fake_openai.base_url), dates={"reader": "llm"})
    reader = make_date_reader(settings, make_llm(settings, billing_domain()))
    assert reader is not None
    session = session_with("")
    reading = await reader.read(session.state.transcript.entries, TODAY)
    assert reading.ok and [s.quote for s in reading.statements] == ["the 26th is my mum's op"]
    body = fake_openai.requests[0]
    assert body["response_format"]["json_schema"]["schema"] == READING_SCHEMA
    assert "[turn 1] CALLER: the 26th is my mum's op" in json.dumps(body["messages"])
