"""Per-turn spans carry lane sizes, tokens, guard verdicts and drops; caller values are redacted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.fakes.toy_domain import TOY
from voice_agent import telemetry
from voice_agent.session import CallSession, SessionConfig
from voice_agent.simulation.text_call import CallerLine, run_text_call

_exporter = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _exporter.clear()
    yield _exporter
    telemetry.set_include_pii(False)


async def run_call(keep: int = 6) -> CallSession:
    session = CallSession(TOY, SessionConfig(reference_date=dt.date(2026, 11, 30), keep=keep, every=2),
                          {"account": ["ACC-1000-01"]})
    lines = [CallerLine(1, "my account is ACC-1000-01"), *[CallerLine(t, "chit chat") for t in range(2, 6)],
             CallerLine(6, "credit me please")]
    await run_text_call(session, lines)
    return session


async def test_one_span_per_turn_with_lanes_tokens_verdicts_and_drops(spans: InMemorySpanExporter) -> None:
    await run_call(keep=1)
    finished = [s for s in spans.get_finished_spans() if s.name == "voice_agent.turn"]
    assert [s.attributes["turn.number"] for s in finished if s.attributes] == [1, 2, 3, 4, 5, 6]
    last = finished[-1].attributes or {}
    assert last["lanes.ledger.entries"] == 1 and last["tokens.known_facts"] > 0 and last["tokens.total"] > 0
    assert "id:account_id:ok" in list(last["guard.verdicts"])  # type: ignore[arg-type]
    drops = [s.attributes for s in finished if s.attributes and "summary.facts_in" in s.attributes]
    assert drops and all("summary.facts_dropped" in d for d in drops)


async def test_caller_values_are_redacted_unless_allowed(spans: InMemorySpanExporter) -> None:
    await run_call()
    first = spans.get_finished_spans()[0].attributes or {}
    assert first["turn.caller_text"] == telemetry.REDACTED and first["ledger.values"] == telemetry.REDACTED
    assert "ACC-1000-01" not in str(dict(first))
    spans.clear()
    telemetry.set_include_pii(True)
    await run_call()
    first = spans.get_finished_spans()[0].attributes or {}
    assert first["turn.caller_text"] == "my account is ACC-1000-01"
