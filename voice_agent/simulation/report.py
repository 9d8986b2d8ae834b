"""Turns finished calls into the per-policy report ``voice-agent simulate`` prints and writes."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from voice_agent.session import CallSession


@dataclass(frozen=True)
class TrackedFact:
    """A scenario fact whose presence is measured.

    Attributes:
        key: The fact's key.
        value: The caller's wording.
        forms: Every exact form that counts as present (wording, canonical form).
        kind: ``identifier``, ``date_constraint`` or ``other``.
        stated_turn: Turn the caller stated it.
        needed_turn: Turn that needs it (None: not measured).
        argument: Tool argument the value fills, used to tell a re-ask from a first ask.
    """

    key: str
    value: str
    forms: tuple[str, ...]
    kind: str
    stated_turn: int
    needed_turn: int | None
    argument: str | None = None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def reasks_in(session: CallSession, facts: Sequence[TrackedFact]) -> int:
    """Questions for a value the caller had already given (a first ask is not a re-ask)."""
    count = 0
    for record in session.turns:
        for argument in record.reasks:
            if any(f.argument == argument and f.stated_turn < record.turn for f in facts):
                count += 1
    return count


def policy_report(policy: str, sessions: Sequence[CallSession], facts: Sequence[TrackedFact]) -> dict[str, Any]:
    """Aggregates the runs of one policy.

    ``present_at_need`` is the fraction of runs whose assembled context held the exact
    value on the turn that needed it.
    """
    runs = len(sessions)
    fact_rows = []
    for fact in facts:
        if fact.needed_turn is None:
            continue
        hits = 0
        for session in sessions:
            record = next((r for r in session.turns if r.turn == fact.needed_turn), None)
            hits += bool(record and record.facts_present.get(fact.key))
        fact_rows.append({
            "key": fact.key, "kind": fact.kind, "stated_turn": fact.stated_turn, "needed_turn": fact.needed_turn,
            "present_at_need": hits / runs if runs else 0.0,
        })
    tokens = [r.total_tokens for s in sessions for r in s.turns if r.requests]
    latencies = [r.first_response_ms for s in sessions for r in s.turns if r.first_response_ms is not None]
    reasks = [reasks_in(s, facts) for s in sessions]
    drops = [e for s in sessions for e in s.state.drop_log.events]
    offered = sum(len(e.keys_in) for e in drops)
    return {
        "policy": policy,
        "runs": runs,
        "facts": fact_rows,
        "reasks": sum(reasks),
        "reasks_per_call": sum(reasks) / runs if runs else 0.0,
        "tokens_per_request": statistics.mean(tokens) if tokens else 0.0,
        "guard_rejections": sum(len(r.rejections) for s in sessions for r in s.turns),
        "unledgered_executed": sum(r.unledgered_executed for s in sessions for r in s.turns),
        "executed_calls": sum(len(r.executed) for s in sessions for r in s.turns),
        "output_blocks": sum(len(r.output_blocks) for s in sessions for r in s.turns),
        "latency_ms": {"p50": _percentile(latencies, 0.5), "p95": _percentile(latencies, 0.95)},
        "measured_retention": (sum(len(e.keys_in & e.keys_out) for e in drops) / offered) if offered else None,
    }
