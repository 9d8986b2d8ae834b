"""Pass safety: force a summary pass at every turn and check that no identifier argument changes.

A trace is the transcript of one simulated call (every caller and agent utterance,
tool call with arguments, and tool result), written by :func:`record_trace`. The
harness replays it twice per policy, teacher-forced (both runs follow the trace's
own history):

* forced: at the start of every turn a summary pass runs. In ``window`` mode it
  folds every turn that left the raw window (the last K turns stay raw, DESIGN rule 3);
  in ``all`` mode, the maximal stress test, everything before the current turn is
  summarized and only the current turn stays raw;
* raw: no pass ever runs, so the whole call stays raw.

At every inference point of the trace (after the caller's words, and after each
batch of tool results) the domain's reference brain, which sees only the assembled
context, proposes its reply under both; the identifier arguments of the tool calls
it would make are diffed. Any difference is a defect: a ``mismatch`` (same tool,
different identifier), a ``missing`` call (only the raw run makes it) or an
``extra`` one (only the forced run makes it).

Only :func:`record_trace` runs the pipecat pipeline; the harness is pure core.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from voice_agent.agent.brain import BrainReply
from voice_agent.call.factory import build_session
from voice_agent.core.call_state import CallState
from voice_agent.core.policy import ContextPolicy, PolicyTracker, ScheduledPass
from voice_agent.core.tool_gate import ToolGate
from voice_agent.core.tool_spec import ParamKind
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry
from voice_agent.domains.base import Domain
from voice_agent.harness.scenarios import Scenario
from voice_agent.harness.simulation.fault_summarizer import FaultInjectingSummarizer, flat_tracked
from voice_agent.policies import PolicyName
from voice_agent.policies.base import Policy
from voice_agent.settings import load_settings, with_overrides

TRACE_FORMAT = "voice-agent-trace/1"
ForcedPassMode = Literal["window", "all"]


# -- traces ------------------------------------------------------------------------------------------------------------


def entry_to_json(entry: TranscriptEntry) -> dict[str, Any]:
    """One transcript entry as a trace line."""
    return {
        "index": entry.index, "turn": entry.turn, "kind": entry.kind.value, "text": entry.text,
        "tool": entry.tool_name, "tool_call_id": entry.tool_call_id,
        "arguments": dict(entry.arguments) if entry.arguments is not None else None,
        "result": entry.result, "outcome": entry.outcome.value if entry.outcome else None,
        "interrupted": entry.interrupted,
    }


def trace_of_state(
    state: CallState, *, scenario: Scenario, domain: str, policy: str, retention: float, seed: int,
    tracked_facts: Mapping[str, Sequence[str]],
) -> dict[str, Any]:
    """The JSON trace of a finished call.

    Args:
        state: The call's lanes (its transcript is dumped, with its drop log).
        scenario: The scenario the call played.
        domain: The domain name (``billing``), so the harness can rebuild its tools and brain.
        policy: The policy the call ran under.
        retention: R of the call's summarizer.
        seed: The call's seed.
        tracked_facts: Fact key -> the exact forms followed (the scenario's facts).
    """
    return {
        "format": TRACE_FORMAT,
        "scenario": scenario.id,
        "domain": domain,
        "reference_date": state.reference_date.isoformat(),
        "policy": policy,
        "retention": retention,
        "seed": seed,
        "keep": state.policy.keep,
        "every": state.policy.every,
        "tracked_facts": {k: list(v) for k, v in tracked_facts.items()},
        "fact_kinds": {f.key: f.kind for f in scenario.facts},
        "entries": [entry_to_json(e) for e in state.transcript.entries],
        "drop_log": [
            {"turn": e.turn, "facts_in": sorted(e.keys_in), "facts_out": sorted(e.keys_out)}
            for e in state.drop_log.events
        ],
    }


async def record_trace_async(
    scenario: Scenario, *, policy: PolicyName = PolicyName.LANES, retention: float = 0.9, seed: int = 0,
    keep: int = 6, every: int = 5, domain_factory: Callable[[], Domain] | None = None,
) -> dict[str, Any]:
    """Plays ``scenario`` once through the pipecat pipeline (text modality) and returns its trace.

    Args:
        scenario: The scripted call.
        policy: The memory policy of the run.
        retention: R of the fault-injecting summarizer.
        seed: The run's seed.
        keep: K.
        every: S.
        domain_factory: Builds the domain; the billing domain by default.
    """
    from voice_agent.core.drop_log import facts_present
    from voice_agent.domains.billing import billing_domain
    from voice_agent.harness.simulation.runner import SimulationPlan, caller_lines, fault_tracked
    from voice_agent.harness.simulation.text_call import run_text_call
    from voice_agent.settings import load_settings, with_overrides

    factory = domain_factory or billing_domain
    # The trace replays through trackers of its own (cadence-driven): record it under the cadence too.
    settings = with_overrides(load_settings(), policy={"keep": keep, "every": every, "trigger": "cadence"})
    plan = SimulationPlan(scenario, [], factory, [policy], settings, runs=1, retention=retention, seed=seed)
    parts = plan.call(scenario, policy, 0)
    await run_text_call(parts.session, parts.llm, caller_lines(scenario))
    trace = trace_of_state(
        parts.session.state, scenario=scenario, domain=parts.session.domain.name, policy=policy.value,
        retention=retention, seed=seed, tracked_facts={f.key: f.forms for f in plan.facts},
    )
    # The scenario's facts through each pass, followed here (the call itself follows only its own lanes).
    tracked = fault_tracked(plan.facts)
    trace["drop_log"] = [
        {"turn": p.turn, "facts_in": sorted(facts_present(p.text_in, tracked)),
         "facts_out": sorted(facts_present(p.text_out, tracked))}
        for p in parts.session.summary_passes
    ]
    return trace


def record_trace(scenario: Scenario, **options: Any) -> dict[str, Any]:
    """Synchronous :func:`record_trace_async` (runs its own event loop)."""
    import asyncio

    return asyncio.run(record_trace_async(scenario, **options))


def load_traces(path: Path | str) -> list[dict[str, Any]]:
    """Reads a trace file: one trace, a list of traces, or ``{"traces": [...]}`` / ``{"traces": {name: trace}}``.

    Raises:
        ValueError: The file holds no trace.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and "traces" in data:
        data = data["traces"]
        if isinstance(data, dict):
            data = list(data.values())
    traces = data if isinstance(data, list) else [data]
    if not traces or not all(isinstance(t, dict) and isinstance(t.get("entries"), list) for t in traces):
        raise ValueError(f"{path}: not a trace (expected an object with 'entries', as `voice-agent simulate --trace` "
                         "writes)")
    return traces


# -- trackers ----------------------------------------------------------------------------------------------------------


@dataclass
class ForcedPassTracker(PolicyTracker):
    """A tracker that runs a summary pass at the start of every turn.

    Attributes:
        mode: ``window``: fold every turn older than the raw window; ``all``: fold every earlier turn.
    """

    mode: ForcedPassMode = "window"

    def on_turn_start(self, turn: int, context_tokens: int | None = None) -> ScheduledPass | None:
        """The pass due at the start of ``turn``: always, when there is anything new to fold."""
        last = turn - 1 if self.mode == "all" else self.policy.summarizable_through(turn)
        if last <= self.summarized_through:
            return None
        scheduled = ScheduledPass(turn=turn, first=self.summarized_through + 1, last=last)
        self.summarized_through = last
        return scheduled

    def raw_from(self, turn: int) -> int:
        """In ``all`` mode only unsummarized turns stay raw; otherwise at least the last K."""
        if self.mode == "all":
            return self.summarized_through + 1
        return super().raw_from(turn)


@dataclass
class NoPassTracker(PolicyTracker):
    """A tracker that never runs a pass: the whole call stays raw (what the forced run is compared with)."""

    def on_turn_start(self, turn: int, context_tokens: int | None = None) -> ScheduledPass | None:
        """Never a pass."""
        return None

    def raw_from(self, turn: int) -> int:
        """Every turn is raw."""
        return 1


# -- the harness -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """One identifier argument that differs between the forced and the raw run.

    Attributes:
        policy: The policy.
        seed: The summarizer's seed.
        turn: The turn of the inference point.
        point: The inference point's position in the trace (entry index it follows).
        tool: The tool.
        argument: The identifier argument.
        forced: Its value in the forced run (None: the call or the argument is absent).
        raw: Its value in the raw run (None: likewise).
        kind: ``mismatch``, ``missing`` or ``extra``.
        trace: The trace's scenario.
    """

    policy: str
    seed: int
    turn: int
    point: int
    tool: str
    argument: str
    forced: str | None
    raw: str | None
    kind: str
    trace: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


@dataclass
class _Run:
    state: CallState
    policy: Policy
    brain: Any


@dataclass
class SafetyResult:
    """One policy's result over a trace.

    Attributes:
        policy: The policy.
        inference_points: Points compared (per seed, summed).
        calls_compared: Tool calls with identifier arguments proposed by the raw run.
        mismatches: Every difference found.
        passes: Summary passes run in the forced runs.
    """

    policy: str
    inference_points: int = 0
    calls_compared: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    passes: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "policy": self.policy, "inference_points": self.inference_points, "calls_compared": self.calls_compared,
            "passes": self.passes, "defects": len(self.mismatches),
            "mismatches": [m.to_json() for m in self.mismatches],
        }


def domain_for(name: str) -> Domain:
    """The domain a trace was recorded in.

    Raises:
        ValueError: Unknown domain.
    """
    if name == "billing":
        from voice_agent.domains.billing import billing_domain

        return billing_domain()
    raise ValueError(f"unknown domain {name!r} in trace; known: billing")


def _entry(data: Mapping[str, Any]) -> TranscriptEntry:
    outcome = data.get("outcome")
    return TranscriptEntry(
        index=int(data.get("index", 0)), turn=int(data["turn"]), kind=EntryKind(data["kind"]),
        text=str(data.get("text") or ""), tool_name=data.get("tool"), tool_call_id=data.get("tool_call_id"),
        arguments=data.get("arguments"), result=data.get("result"),
        outcome=ToolOutcome(outcome) if outcome else None, interrupted=bool(data.get("interrupted", False)),
    )


def _apply(run: _Run, gate: ToolGate, entry: TranscriptEntry, calls: dict[str, TranscriptEntry]) -> None:
    """Appends one trace entry to a run's lanes (harvesting completed tool results, as live)."""
    state = run.state
    if entry.kind is EntryKind.AGENT:
        state.transcript.append_agent(max(entry.turn, state.transcript.last_turn, 1), entry.text,
                                      interrupted=entry.interrupted)
    elif entry.kind is EntryKind.TOOL_CALL:
        state.transcript.append_tool_call(max(state.turn, 1), entry.tool_name or "", entry.tool_call_id or "",
                                          entry.arguments or {})
        calls[entry.tool_call_id or ""] = entry
    elif entry.kind is EntryKind.TOOL_RESULT:
        outcome = entry.outcome or ToolOutcome.COMPLETED
        state.transcript.append_tool_result(max(state.turn, 1), entry.tool_name or "", entry.tool_call_id or "",
                                            entry.result, outcome)
        call = calls.get(entry.tool_call_id or "")
        if outcome is ToolOutcome.COMPLETED and call is not None:
            gate.harvest(state, entry.tool_name or "", call.arguments or {}, entry.result)


def _id_calls(reply: BrainReply, domain: Domain) -> list[tuple[str, dict[str, str | None]]]:
    """(tool, identifier argument -> value) for each tool call of a reply that has identifier parameters."""
    out = []
    for call in reply.tool_calls:
        spec = domain.tool(call.name)
        params = spec.params_of(ParamKind.IDENTIFIER) if spec else []
        if params:
            values = {p.name: (str(call.arguments[p.name]) if call.arguments.get(p.name) not in (None, "") else None)
                      for p in params}
            out.append((call.name, values))
    return out


def diff_replies(
    forced: BrainReply, raw: BrainReply, domain: Domain, *, policy: str, seed: int, turn: int, point: int
) -> tuple[int, list[Mismatch]]:
    """Diffs the identifier arguments of two replies; returns (calls compared, mismatches)."""
    left = _id_calls(forced, domain)
    right = _id_calls(raw, domain)
    found: list[Mismatch] = []
    used: set[int] = set()
    for tool, want in right:
        match = next((i for i, (t, _) in enumerate(left) if t == tool and i not in used), None)
        if match is None:
            found += [Mismatch(policy, seed, turn, point, tool, a, None, v, "missing")
                      for a, v in want.items() if v is not None]
            continue
        used.add(match)
        got = left[match][1]
        found += [Mismatch(policy, seed, turn, point, tool, a, got.get(a), v, "mismatch")
                  for a, v in want.items() if got.get(a) != v]
    for i, (tool, got) in enumerate(left):
        if i not in used:
            found += [Mismatch(policy, seed, turn, point, tool, a, v, None, "extra")
                      for a, v in got.items() if v is not None]
    return len(right), found


async def check_trace(
    trace: Mapping[str, Any], policy: PolicyName, *, mode: ForcedPassMode = "window", retention: float | None = None,
    seed: int | None = None, domain: Domain | None = None,
) -> SafetyResult:
    """Runs the harness on one trace under one policy and one seed.

    Args:
        trace: The trace (see :func:`trace_of_state`).
        policy: The policy whose passes are tested.
        mode: ``window`` (keep the last K turns raw) or ``all`` (summarize everything before the current turn).
        retention: R of the summarizer (default: the trace's).
        seed: The summarizer's seed (default: the trace's).
        domain: The domain (default: rebuilt from the trace's ``domain``).
    """
    dom = domain or domain_for(str(trace.get("domain", "billing")))
    r = float(trace.get("retention", 0.9)) if retention is None else retention
    s = int(trace.get("seed", 0)) if seed is None else seed
    reference = dt.date.fromisoformat(str(trace["reference_date"]))
    ctx_policy = ContextPolicy(int(trace.get("keep", 6)), int(trace.get("every", 5)))
    tracked = flat_tracked({k: tuple(v) for k, v in dict(trace.get("tracked_facts", {})).items()})
    tools = [t.name for t in dom.tools]

    # The forced and raw trackers below decide every pass: the cadence trigger is the one that asks them.
    settings = with_overrides(load_settings(), policy={"name": policy.value, "trigger": "cadence",
                                                       "keep": ctx_policy.keep, "every": ctx_policy.every},
                              call={"reference_date": reference})

    def make_run(tracker: PolicyTracker) -> tuple[_Run, ToolGate]:
        # Built by the call factory like any call; only the pass trigger is the harness's own.
        session = build_session(settings, str(trace.get("scenario", "trace")), dom,
                                FaultInjectingSummarizer(r, tracked, s))
        session.state.tracker = tracker
        return _Run(session.state, session.policy, dom.brain()), session.gate

    forced, gate_c = make_run(ForcedPassTracker(ctx_policy, mode=mode))
    reference_run, gate_u = make_run(NoPassTracker(ctx_policy))
    result = SafetyResult(policy.value)
    entries = [_entry(e) for e in trace["entries"]]
    calls_c: dict[str, TranscriptEntry] = {}
    calls_u: dict[str, TranscriptEntry] = {}
    for i, entry in enumerate(entries):
        following = entries[i + 1] if i + 1 < len(entries) else None
        if entry.kind is EntryKind.CALLER:
            for run in (forced, reference_run):
                if entry.turn > run.state.turn:
                    run.state.turn = entry.turn - 1
                    run.state.start_turn(entry.text)
                    await run.policy.on_turn_start(run.state)
                else:
                    run.state.add_caller_text(entry.text)
            point = following is None or following.kind is not EntryKind.CALLER or following.turn != entry.turn
        else:
            _apply(forced, gate_c, entry, calls_c)
            _apply(reference_run, gate_u, entry, calls_u)
            point = entry.kind is EntryKind.TOOL_RESULT and (
                following is None or following.kind is not EntryKind.TOOL_RESULT)
        if not point:
            continue
        replies = [
            run.brain.respond(run.policy.build(run.state).messages, tools) for run in (forced, reference_run)
        ]
        compared, found = diff_replies(replies[0], replies[1], dom, policy=policy.value, seed=s, turn=entry.turn,
                                       point=entry.index)
        result.inference_points += 1
        result.calls_compared += compared
        result.mismatches += found
    result.passes = len(forced.state.drop_log.events)
    return result


async def pass_safety(
    traces: Sequence[Mapping[str, Any]], policies: Sequence[PolicyName], *, mode: ForcedPassMode = "window",
    retention: float | None = None, seed: int | None = None, runs: int = 1,
) -> dict[str, Any]:
    """The harness over several traces, policies and seeds; returns the JSON report.

    Args:
        traces: Traces of simulated calls.
        policies: Policies to test.
        mode: ``window`` or ``all`` (see :class:`ForcedPassTracker`).
        retention: R of the summarizer (default: each trace's).
        seed: First seed (default: each trace's); seeds ``seed .. seed + runs - 1`` are run.
        runs: Seeds per trace and policy.
    """
    if runs < 1:
        raise ValueError(f"--runs must be at least 1, got {runs}")
    out: dict[str, Any] = {"mode": mode, "retention": retention, "runs": runs, "traces": [], "policies": {}}
    totals: dict[str, SafetyResult] = {p.value: SafetyResult(p.value) for p in policies}
    for trace in traces:
        domain = domain_for(str(trace.get("domain", "billing")))
        first = int(trace.get("seed", 0)) if seed is None else seed
        out["traces"].append(str(trace.get("scenario", "trace")))
        for policy in policies:
            for k in range(runs):
                res = await check_trace(trace, policy, mode=mode, retention=retention, seed=first + k, domain=domain)
                total = totals[policy.value]
                total.inference_points += res.inference_points
                total.calls_compared += res.calls_compared
                total.passes += res.passes
                total.mismatches += [dataclasses.replace(m, trace=out["traces"][-1]) for m in res.mismatches]
    for name, total in totals.items():
        out["policies"][name] = total.to_json()
    return out
