"""Per-turn OpenTelemetry spans, with caller values marked as PII and redacted by default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

if TYPE_CHECKING:
    from voice_agent.session import CallSession, TurnRecord

TRACER_NAME = "voice_agent"
REDACTED = "[redacted]"

PII_KEYS = frozenset({"turn.caller_text", "turn.agent_text", "ledger.values"})
"""Attribute keys whose values are caller PII: redacted in spans and logs unless explicitly allowed."""

_include_pii = False


def set_include_pii(include: bool) -> None:
    """Allows (or forbids, the default) caller values in span attributes."""
    global _include_pii
    _include_pii = include


def redact(attributes: Mapping[str, Any], include_pii: bool | None = None) -> dict[str, Any]:
    """``attributes`` with every PII key's value replaced, unless PII is allowed."""
    allow = _include_pii if include_pii is None else include_pii
    return {k: (v if allow or k not in PII_KEYS else REDACTED) for k, v in attributes.items()}


def turn_attributes(session: CallSession, record: TurnRecord) -> dict[str, Any]:
    """Everything a turn span carries: lane sizes, tokens per lane, guard verdicts, drop log."""
    state = session.state
    attrs: dict[str, Any] = {
        "call.id": session.call_id,
        "call.policy": session.config.policy.value,
        "turn.number": record.turn,
        "turn.requests": record.requests,
        "turn.caller_text": record.caller,
        "turn.agent_text": " | ".join(record.agent),
        "turn.interrupted": record.interrupted,
        "lanes.transcript.entries": len(state.transcript),
        "lanes.ledger.entries": len(state.ledger),
        "lanes.slots.filled": len(state.slots.filled()),
        "lanes.summary.chars": len(state.summary.render()),
        "ledger.values": sorted(state.ledger.values()),
        "tokens.total": record.total_tokens,
        "guard.verdicts": [f"{v['guard']}:{v['argument']}:{v['verdict']}" for v in record.guard_verdicts],
        "guard.rejections": len(record.rejections),
        "output_guard.blocks": list(record.output_blocks),
        "agent.reasks": list(record.reasks),
    }
    if record.first_response_ms is not None:
        attrs["turn.first_response_ms"] = round(record.first_response_ms, 3)
    for lane, tokens in record.lane_tokens.items():
        attrs[f"tokens.{lane}"] = tokens
    if record.drop is not None:
        attrs.update(record.drop.span_attributes())
    for key, value in record.retrieval.items():
        attrs[f"retrieval.{key}"] = value
    return attrs


def emit_turn_span(session: CallSession, record: TurnRecord) -> None:
    """Emits one ``turn`` span with redacted attributes (a no-op without an SDK provider)."""
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span("voice_agent.turn") as span:
        for key, value in redact(turn_attributes(session, record)).items():
            if isinstance(value, list):
                value = [str(v) for v in value]
            span.set_attribute(key, value)
