"""The call's per-turn span (voice_agent.call.telemetry) through a real text call.

One span per completed turn carries lane sizes, tokens per lane, guard verdicts and the
in-call drop log (ledger and slot key names, never values); caller values are redacted
unless telemetry allows PII.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.fakes.toy_domain import TOY
from voice_agent import telemetry
from voice_agent.call.session import CallSession
from voice_agent.call.telemetry import turn_attributes
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.services.reference_llm import ReferenceLLMService
from voice_agent.settings import CallConfig, PolicyConfig, Settings, TelemetryConfig
from voice_agent.summarizers.extractive import ExtractiveSummarizer

ACCOUNT = "ACC-1000-01"
LINES = [CallerLine(1, f"my account is {ACCOUNT}"), *[CallerLine(t, "chit chat") for t in range(2, 6)],
         CallerLine(6, "credit me please")]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.install_telemetry(TelemetryConfig(exporter="console"), span_exporter=exporter)
    yield exporter
    # `none` shuts the test's install down and puts include_pii back to False.
    telemetry.install_telemetry(TelemetryConfig())


def allow_pii() -> InMemorySpanExporter:
    """Reinstalls with PII allowed (a fresh exporter: reinstalling shuts the previous one down)."""
    exporter = InMemorySpanExporter()
    telemetry.install_telemetry(TelemetryConfig(exporter="console", include_pii=True), span_exporter=exporter)
    return exporter


async def run_call(keep: int = 6) -> CallSession:
    settings = Settings(policy=PolicyConfig(keep=keep, every=2), call=CallConfig(reference_date=dt.date(2026, 11, 30)))
    session = CallSession(TOY, settings, ExtractiveSummarizer())
    await run_text_call(session, ReferenceLLMService(TOY.brain()), LINES)
    return session


def turn_spans(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [dict(s.attributes or {}) for s in exporter.get_finished_spans() if s.name == "voice_agent.turn"]


async def test_one_span_per_turn_with_lanes_tokens_verdicts_and_drops(spans: InMemorySpanExporter) -> None:
    session = await run_call(keep=1)
    finished = turn_spans(spans)
    assert [s["turn.number"] for s in finished] == [1, 2, 3, 4, 5, 6]
    assert all(s["call.policy"] == "lanes" and s["turn.requests"] >= 1 for s in finished)
    first, last = finished[0], finished[-1]
    # Turn 1 looked the account up (two requests: before and after the tool result).
    assert first["turn.requests"] == 2 and "id:account_id:ok" in list(first["guard.verdicts"])
    assert last["lanes.ledger.entries"] == 1 and last["lanes.slots.filled"] == 1
    assert last["tokens.known_facts"] > 0 and last["tokens.total"] >= last["tokens.known_facts"]
    assert "id:account_id:ok" in list(last["guard.verdicts"]) and last["guard.rejections"] == 0
    assert last["lanes.summary.chars"] > 0
    # The drop log rides on the span of the turn whose start ran the pass.
    drops = [s for s in finished if "summary.facts_in" in s]
    assert [d["summary.pass_turn"] for d in drops] == [p.turn for p in session.summary_passes]
    assert drops and all(d["turn.number"] == d["summary.pass_turn"] for d in drops)
    assert all("summary.facts_out" in d and "summary.facts_dropped" in d for d in drops)
    # It follows ledger and slot keys by name. The summary names the ledger role instead of the
    # value (role scrub), so the account goes in and is accounted as dropped from the summary text.
    offered = next(d for d in drops if list(d["summary.facts_in"]))
    assert {"ledger:account", "slot:account_id"} <= set(offered["summary.facts_in"])
    assert "ledger:account" in list(offered["summary.facts_dropped"])
    assert all(ACCOUNT not in str(d) for d in drops)


async def test_span_attributes_come_from_the_call_logs(spans: InMemorySpanExporter) -> None:
    # What is exported is exactly turn_attributes of that turn, redacted.
    session = await run_call(keep=1)
    last = turn_spans(spans)[-1]  # turn 6 is the call's last, so the call's logs still read as they did then
    expected = {k: [str(x) for x in v] if isinstance(v, list) else v
                for k, v in telemetry.redact(turn_attributes(session, 6)).items() if v is not None}
    assert {k: list(v) if isinstance(v, tuple) else v for k, v in last.items()} == expected
    assert last["turn.caller_text"] == telemetry.REDACTED


async def test_caller_values_are_redacted_unless_allowed(spans: InMemorySpanExporter) -> None:
    await run_call()
    first = turn_spans(spans)[0]
    assert first["turn.caller_text"] == telemetry.REDACTED and first["ledger.values"] == telemetry.REDACTED
    assert first["turn.agent_text"] == telemetry.REDACTED
    assert ACCOUNT not in str(first)
    with_pii = allow_pii()
    await run_call()
    first = turn_spans(with_pii)[0]
    assert first["turn.caller_text"] == f"my account is {ACCOUNT}"
    assert list(first["ledger.values"]) == [ACCOUNT]
