"""The call's own per-turn span: lane sizes, tokens per lane, guard verdicts, the drop log.

This is operational telemetry of the product (what an operator watches), built from the
call's lanes and its guards' and policy's logs; caller values are marked PII and
redacted unless ``telemetry.include_pii`` is set.
"""

from __future__ import annotations

from typing import Any

from voice_agent.call.session import CallSession
from voice_agent.core.transcript import EntryKind
from voice_agent.telemetry import emit_span


def turn_attributes(session: CallSession, turn: int) -> dict[str, Any]:
    """Everything the span of ``turn`` carries."""
    state = session.state
    entries = state.transcript.in_turns(turn, turn)
    events = [e for e in session.guard_events if e.turn == turn]
    attrs: dict[str, Any] = {
        "call.id": session.call_id,
        "call.policy": session.settings.policy.name,
        "turn.number": turn,
        "turn.requests": session.requests_by_turn.get(turn, 0),
        "turn.caller_text": " ".join(e.text for e in entries if e.kind is EntryKind.CALLER),
        "turn.agent_text": " | ".join(e.text for e in entries if e.kind is EntryKind.AGENT),
        "turn.interrupted": any(e.interrupted for e in entries if e.kind is EntryKind.AGENT),
        "lanes.transcript.entries": len(state.transcript),
        "lanes.ledger.entries": len(state.ledger),
        "lanes.slots.filled": len(state.slots.filled()),
        "lanes.summary.chars": len(state.summary.render()),
        "ledger.values": sorted(state.ledger.values()),
        "guard.verdicts": [f"{v['guard']}:{v['argument']}:{v['verdict']}" for e in events for v in e.verdicts],
        "guard.rejections": sum(1 for e in events if e.rejection is not None),
        "output_guard.blocks": [check for t, check in session.output_blocks if t == turn],
        # Each failed LLM attempt of the turn as kind:action (the watchdog's log; the detail stays in logs).
        "llm.failures": [f"{f.kind.value}:{f.action.value}" for f in session.llm_failures if f.turn == turn],
    }
    context = session.last_context
    if context is not None:
        attrs["tokens.total"] = context.total_tokens
        for lane, tokens in context.lane_tokens.items():
            attrs[f"tokens.{lane}"] = tokens
    for summary_pass in session.summary_passes:
        if summary_pass.landed == turn:  # a background pass reports on the turn it landed in
            attrs.update(summary_pass.event.span_attributes())
    for key, value in session.retrieval_by_turn.get(turn, {}).items():
        attrs[f"retrieval.{key}"] = value
    return attrs


def emit_turn_span(session: CallSession, turn: int) -> None:
    """Emits the ``voice_agent.turn`` span of ``turn`` (redacted; a no-op until telemetry is installed)."""
    emit_span("voice_agent.turn", turn_attributes(session, turn))
