"""Turns finished calls into the per-policy report ``voice-agent simulate`` prints and writes."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from voice_agent.harness.stats import percentile
from voice_agent.recording.record import CallRecorder, WatchedFact
from voice_agent.retrieval.speculative import SEARCH_BUDGET_PER_TURN

ACTION_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dispute": ("open_dispute", ("invoice_id", "order_id", "category")),
    "credit": ("issue_credit", ("invoice_id", "order_id", "amount")),
    "callback": ("schedule_callback", ("date",)),
}
"""What an action must get right to count: (tool, the arguments compared), per kind of action the caller wants
done. The right dispute (invoice, order, category), the right credit (invoice, order, amount; in order), the
callback booked on the right day. Identifiers the policy must keep are compared as the script has them."""


def _action_list(
    calls: Sequence[tuple[str, Mapping[str, Any]]], tool: str, keys: Sequence[str]
) -> list[tuple[str, ...]]:
    def norm(value: Any) -> str:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{float(value):.2f}"
        return "" if value is None else str(value).strip().upper()

    return [tuple(norm(args.get(k)) for k in keys) for name, args in calls if name == tool]


def actions_correct(
    expected: Sequence[tuple[str, Mapping[str, Any]]], done: Sequence[tuple[str, Mapping[str, Any]]]
) -> dict[str, bool]:
    """Per kind of action the script expects (:data:`ACTION_KEYS`): whether the call did exactly those, in order.

    A kind the script does not expect is not scored; one done twice, or with another invoice, order, amount,
    category or day, is wrong.
    """
    out = {}
    for kind, (tool, keys) in ACTION_KEYS.items():
        want = _action_list(expected, tool, keys)
        if want:
            out[kind] = _action_list(done, tool, keys) == want
    return out


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
        ask_cues: Words of an agent question asking for it again.
        rejected_option: What the caller ruled out, when the fact is an exclusion.
    """

    key: str
    value: str
    forms: tuple[str, ...]
    kind: str
    stated_turn: int
    needed_turn: int | None
    ask_cues: tuple[str, ...] = ()
    rejected_option: str | None = None

    def watched(self) -> WatchedFact:
        """The fact as a recorder follows it."""
        return WatchedFact(self.key, self.forms, self.stated_turn, self.needed_turn, self.ask_cues,
                           self.rejected_option)


@dataclass
class RunOutcome:
    """What one finished call contributes to the report (small and picklable).

    Attributes:
        present_at_need: Fact key -> its value was in what the model received on the turn that needed it.
        captured: Fact key -> its value entered the policy's memory (KNOWN FACTS or the summary, not the
            raw turns) on some request between the turn it was said and the turn that needed it.
        reasks: Questions for a value the caller had already given.
        rejected_offers: Offers (or bookings) of an option the caller had ruled out.
        tokens: Estimated tokens of each turn's first request, as the model received it.
        latencies_ms: Time to the first agent words, per turn.
        guard_rejections: Tool calls the guards refused.
        unledgered_executed: Executed identifier arguments neither the caller nor an earlier tool result gave.
        executed_calls: Tool calls that ran.
        output_blocks: Utterances the output guard replaced.
        facts_offered: Watched facts that reached a summary pass, summed over passes.
        facts_kept: Of those, the ones that came out verbatim.
        drop_log: Every summary pass: its turn and the watched fact keys in and out (names, never values).
        retrieval: Per turn that retrieved: hit or miss, critical-path ms, chunk ids and scores, staleness.
        failure: Why the call did not finish (an error the pipeline reported, a turn with no answer).
        errors: Every error the pipeline reported.
        summaries_applied: Under ``pipecat``: summaries pipecat applied to the context (a pass whose result
            came too late for it is dropped by pipecat and not counted).
        run: The run's number (its seed is the plan's first seed plus it): runs of two policies pair on it.
        actions: Kind of action (:data:`ACTION_KEYS`) -> the call did it right.
    """

    present_at_need: dict[str, bool] = field(default_factory=dict)
    captured: dict[str, bool] = field(default_factory=dict)
    reasks: int = 0
    rejected_offers: int = 0
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
    failure: str | None = None
    errors: list[str] = field(default_factory=list)
    summaries_applied: int = 0
    run: int = -1
    actions: dict[str, bool] = field(default_factory=dict)


def outcome_of(
    recorder: CallRecorder, facts: Sequence[TrackedFact], failure: str | None = None,
    expected_actions: Sequence[tuple[str, Mapping[str, Any]]] = (), run: int = -1,
) -> RunOutcome:
    """Reduces a recorded call to its :class:`RunOutcome` (``expected_actions``: the script's tool calls)."""
    records = recorder.turns
    turns = {r.turn: r for r in records}
    present, captured = {}, {}
    for fact in facts:
        if fact.needed_turn is None:
            continue
        record = turns.get(fact.needed_turn)
        present[fact.key] = bool(record and record.facts_present.get(fact.key))
        if fact.needed_turn <= fact.stated_turn:
            continue  # needed on the turn it is said: nothing to capture, the raw turn holds it
        captured[fact.key] = any(
            r.facts_in_memory.get(fact.key) for r in records if fact.stated_turn < r.turn <= fact.needed_turn
        )
    passes = [r.summary_pass for r in records if r.summary_pass is not None]
    return RunOutcome(
        present_at_need=present,
        captured=captured,
        reasks=sum(len(r.reasks) for r in records),
        rejected_offers=sum(len(r.rejected_offers) for r in records),
        tokens=[r.tokens for r in records if r.requests],
        latencies_ms=[r.first_response_ms for r in records if r.first_response_ms is not None],
        guard_rejections=sum(len(r.rejections) for r in records),
        unledgered_executed=sum(len(r.unledgered) for r in records),
        executed_calls=sum(len(r.executed) for r in records),
        output_blocks=sum(len(r.output_blocks) for r in records),
        facts_offered=sum(len(p["facts_in"]) for p in passes),
        facts_kept=sum(len(set(p["facts_in"]) & set(p["facts_out"])) for p in passes),
        drop_log=passes,
        retrieval=[{"turn": r.turn, **r.retrieval} for r in records if r.retrieval],
        failure=failure or (recorder.errors[0] if recorder.errors else None),
        errors=list(recorder.errors),
        run=run,
        actions=actions_correct(expected_actions, recorder.done),
    )


def policy_report(policy: str, outcomes: Sequence[RunOutcome], facts: Sequence[TrackedFact]) -> dict[str, Any]:
    """Aggregates the runs of one policy.

    ``present_at_need`` is the fraction of runs whose assembled context held the exact
    value on the turn that needed it.
    """
    runs = len(outcomes)
    fact_rows = []
    for f in facts:
        if f.needed_turn is None:
            continue
        present = sum(o.present_at_need.get(f.key, False) for o in outcomes)
        applies = f.needed_turn > f.stated_turn  # a fact needed on the turn it is said is never captured
        captured = [o for o in outcomes if o.captured.get(f.key)]
        fact_rows.append({
            "key": f.key, "kind": f.kind, "stated_turn": f.stated_turn, "needed_turn": f.needed_turn,
            "present_at_need": present / runs if runs else 0.0,
            "captured": len(captured) / runs if runs and applies else None,
            "kept_once_captured": (sum(o.present_at_need.get(f.key, False) for o in captured) / len(captured)
                                   if captured else None),
        })
    tokens = [t for o in outcomes for t in o.tokens]
    kinds = dict.fromkeys(k for o in outcomes for k in o.actions)
    actions = {k: sum(o.actions.get(k, False) for o in outcomes) / runs for k in kinds} if runs else {}
    latencies = [t for o in outcomes for t in o.latencies_ms]
    offered = sum(o.facts_offered for o in outcomes)
    reasks = sum(o.reasks for o in outcomes)
    failures = [o.failure for o in outcomes if o.failure]
    return {
        "policy": policy,
        "runs": runs,
        "facts": fact_rows,
        "reasks": reasks,
        "reasks_per_call": reasks / runs if runs else 0.0,
        "rejected_offers": sum(o.rejected_offers for o in outcomes),
        "tokens_per_request": statistics.mean(tokens) if tokens else 0.0,
        "guard_rejections": sum(o.guard_rejections for o in outcomes),
        "unledgered_executed": sum(o.unledgered_executed for o in outcomes),
        "executed_calls": sum(o.executed_calls for o in outcomes),
        "output_blocks": sum(o.output_blocks for o in outcomes),
        "failed_runs": len(failures),
        "first_failure": failures[0] if failures else None,
        "latency_ms": {"p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95)},
        "measured_retention": sum(o.facts_kept for o in outcomes) / offered if offered else None,
        "drop_log": [{"run": run, **event} for run, o in enumerate(outcomes) for event in o.drop_log],
        "retrieval": _retrieval_summary(outcomes),
        "actions_correct": actions,
        "present_by_run": {o.run: sorted(k for k, v in o.present_at_need.items() if v) for o in outcomes},
    }


def lanes_minus_rolling(
    lanes: Mapping[str, Any], rolling: Mapping[str, Any], facts: Sequence[TrackedFact]
) -> dict[str, Any]:
    """Two policies' reports of the same runs (same scripts, seeds and fault model), compared run by run.

    ``by_fact``: presence at need under lanes minus under rolling, in points; ``worst``: the lowest of those;
    ``lost``: (run, fact) pairs present under rolling and missing under lanes in the same run (the property
    says 0); ``gained``: the other way round.
    """
    keys = [f.key for f in facts if f.needed_turn is not None]
    by_fact = {}
    for key in keys:
        row = {"lanes": next((x["present_at_need"] for x in lanes["facts"] if x["key"] == key), 0.0),
               "rolling": next((x["present_at_need"] for x in rolling["facts"] if x["key"] == key), 0.0)}
        by_fact[key] = round(100 * (row["lanes"] - row["rolling"]), 1)
    lost, gained = [], 0
    l_runs, r_runs = lanes["present_by_run"], rolling["present_by_run"]
    for run in sorted(set(l_runs) & set(r_runs), key=int):
        on_lanes, on_rolling = set(l_runs[run]), set(r_runs[run])
        lost += [{"run": int(run), "fact": key} for key in sorted(on_rolling - on_lanes)]
        gained += len(on_lanes - on_rolling)
    worst = min(by_fact.items(), key=lambda kv: kv[1]) if by_fact else None
    return {"by_fact": by_fact, "worst": {"fact": worst[0], "points": worst[1]} if worst else None,
            "lost": lost, "gained": gained}


def _retrieval_summary(outcomes: Sequence[RunOutcome]) -> dict[str, Any] | None:
    """Hit rate and critical-path time over turns that injected knowledge, plus run 0's turns."""
    summary = retrieval_summary([t for o in outcomes for t in o.retrieval])
    if summary is None:
        return None
    return {**summary, "first_run": outcomes[0].retrieval if outcomes else []}


def retrieval_summary(turns: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Aggregates per-turn retrieval records (:meth:`TurnRetrieval.to_dict`); None when no turn retrieved.

    ``hit_rate`` is over the turns that injected chunks; ``searches_per_turn`` (speculative and critical-path
    searches) is over every turn that retrieved, and ``over_budget`` says it is above
    :data:`~voice_agent.retrieval.speculative.SEARCH_BUDGET_PER_TURN`.
    """
    turns = [t for t in turns if "critical_path_ms" in t]  # a failed retrieval records only its status
    if not turns:
        return None
    injected = [t for t in turns if t.get("chunk_ids")]
    hits = [t for t in injected if t.get("status") == "hit"]
    searches = [int(t.get("searches", t.get("speculative_retrievals", 0) + (t.get("status") == "miss")))
                for t in turns]
    per_turn = sum(searches) / len(turns)
    return {
        "turns": len(turns),
        "turns_with_chunks": len(injected),
        "hit_rate": len(hits) / len(injected) if injected else None,
        "critical_path_ms": {
            "p50": percentile([float(t["critical_path_ms"]) for t in turns], 0.5),
            "p95": percentile([float(t["critical_path_ms"]) for t in turns], 0.95),
        },
        "interims_per_turn": sum(int(t.get("interims", 0)) for t in turns) / len(turns),
        "searches_per_turn": per_turn,
        "search_budget": SEARCH_BUDGET_PER_TURN,
        "over_budget": per_turn > SEARCH_BUDGET_PER_TURN,
    }
