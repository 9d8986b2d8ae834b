"""Turns finished calls into the per-policy report ``voice-agent simulate`` prints and writes."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from voice_agent.session import CallSession
from voice_agent.stats import percentile


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


@dataclass
class RunOutcome:
    """What one finished call contributes to the report (small and picklable).

    Attributes:
        present_at_need: Fact key -> whether its value was in the context on the turn that needed it.
        reasks: Questions for a value the caller had already given.
        tokens: Estimated tokens of each turn's first request.
        latencies_ms: Time to the first agent words, per turn.
        guard_rejections: Tool calls the guards refused.
        unledgered_executed: Executed calls with an identifier from nowhere.
        executed_calls: Tool calls that ran.
        output_blocks: Utterances the output guard replaced.
        facts_offered: Tracked facts that reached a summary pass, summed over passes.
        facts_kept: Of those, the ones that came out verbatim.
        drop_log: Every summary pass: its turn and the fact keys in and out (names, never values).
        retrieval: Per turn that retrieved: hit or miss, critical-path ms, chunk ids and scores, staleness.
    """

    present_at_need: dict[str, bool] = field(default_factory=dict)
    reasks: int = 0
    tokens: list[int] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    guard_rejections: int = 0
    unledgered_executed: int = 0
    executed_calls: int = 0
    output_blocks: int = 0
    facts_offered: int = 0
    facts_kept: int = 0
    drop_log: list[dict[str, Any]] = field(default_factory=list)
    retrieval: list[dict[str, Any]] = field(default_factory=list)


def outcome_of(session: CallSession, facts: Sequence[TrackedFact]) -> RunOutcome:
    """Reduces a finished call to its :class:`RunOutcome`."""
    turns = {r.turn: r for r in session.turns}
    present = {}
    for fact in facts:
        if fact.needed_turn is not None:
            record = turns.get(fact.needed_turn)
            present[fact.key] = bool(record and record.facts_present.get(fact.key))
    reasks = sum(
        1 for r in session.turns for argument in r.reasks
        if any(f.argument == argument and f.stated_turn < r.turn for f in facts)
    )
    drops = session.state.drop_log.events
    return RunOutcome(
        present_at_need=present,
        reasks=reasks,
        tokens=[r.total_tokens for r in session.turns if r.requests],
        latencies_ms=[r.first_response_ms for r in session.turns if r.first_response_ms is not None],
        guard_rejections=sum(len(r.rejections) for r in session.turns),
        unledgered_executed=sum(r.unledgered_executed for r in session.turns),
        executed_calls=sum(len(r.executed) for r in session.turns),
        output_blocks=sum(len(r.output_blocks) for r in session.turns),
        facts_offered=sum(len(e.keys_in) for e in drops),
        facts_kept=sum(len(e.keys_in & e.keys_out) for e in drops),
        drop_log=[{"turn": e.turn, "facts_in": sorted(e.keys_in), "facts_out": sorted(e.keys_out)} for e in drops],
        retrieval=[{"turn": r.turn, **r.retrieval} for r in session.turns if r.retrieval],
    )


def policy_report(policy: str, outcomes: Sequence[RunOutcome], facts: Sequence[TrackedFact]) -> dict[str, Any]:
    """Aggregates the runs of one policy.

    ``present_at_need`` is the fraction of runs whose assembled context held the exact
    value on the turn that needed it.
    """
    runs = len(outcomes)
    fact_rows = [
        {
            "key": f.key, "kind": f.kind, "stated_turn": f.stated_turn, "needed_turn": f.needed_turn,
            "present_at_need": sum(o.present_at_need.get(f.key, False) for o in outcomes) / runs if runs else 0.0,
        }
        for f in facts if f.needed_turn is not None
    ]
    tokens = [t for o in outcomes for t in o.tokens]
    latencies = [t for o in outcomes for t in o.latencies_ms]
    offered = sum(o.facts_offered for o in outcomes)
    reasks = sum(o.reasks for o in outcomes)
    return {
        "policy": policy,
        "runs": runs,
        "facts": fact_rows,
        "reasks": reasks,
        "reasks_per_call": reasks / runs if runs else 0.0,
        "tokens_per_request": statistics.mean(tokens) if tokens else 0.0,
        "guard_rejections": sum(o.guard_rejections for o in outcomes),
        "unledgered_executed": sum(o.unledgered_executed for o in outcomes),
        "executed_calls": sum(o.executed_calls for o in outcomes),
        "output_blocks": sum(o.output_blocks for o in outcomes),
        "latency_ms": {"p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95)},
        "measured_retention": sum(o.facts_kept for o in outcomes) / offered if offered else None,
        "drop_log": [{"run": run, **event} for run, o in enumerate(outcomes) for event in o.drop_log],
        "retrieval": _retrieval_summary(outcomes),
    }


def _retrieval_summary(outcomes: Sequence[RunOutcome]) -> dict[str, Any] | None:
    """Hit rate and critical-path time over turns that injected knowledge, plus run 0's turns."""
    turns = [t for o in outcomes for t in o.retrieval]
    if not turns:
        return None
    injected = [t for t in turns if t.get("chunk_ids")]
    hits = [t for t in injected if t.get("status") == "hit"]
    return {
        "turns": len(turns),
        "turns_with_chunks": len(injected),
        "hit_rate": len(hits) / len(injected) if injected else None,
        "critical_path_ms": {
            "p50": percentile([float(t["critical_path_ms"]) for t in turns], 0.5),
            "p95": percentile([float(t["critical_path_ms"]) for t in turns], 0.95),
        },
        "first_run": outcomes[0].retrieval if outcomes else [],
    }
