"""Runs a scenario N times per policy through the pipeline and builds the report."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from voice_agent.domains.base import Domain
from voice_agent.policies import PolicyName
from voice_agent.scenarios import Scenario
from voice_agent.session import CallSession, SessionConfig, TurnRecord
from voice_agent.simulation.report import TrackedFact, policy_report
from voice_agent.simulation.text_call import CallerLine, run_text_call


def tracked_facts(scenario: Scenario) -> list[TrackedFact]:
    """The scenario's facts with exchange turns and the tool argument each value fills."""
    out = []
    for fact in scenario.facts:
        fills = [name for a in scenario.actions for name, v in a.args.items() if str(v) == fact.canonical]
        argument = fills[0] if fact.canonical and fills else fact.key
        out.append(TrackedFact(
            key=fact.key, value=fact.value, forms=tuple(dict.fromkeys(v for v in (fact.value, fact.canonical) if v)),
            kind=fact.kind, stated_turn=scenario.fact_stated_turn(fact),
            needed_turn=scenario.fact_needed_turn(fact), argument=argument,
        ))
    return out


def caller_lines(scenario: Scenario) -> list[CallerLine]:
    """The scenario's caller turns as scripted lines (``send_after`` marks a barge-in)."""
    lines = []
    for index, turn in enumerate(scenario.turns):
        if turn.speaker != "caller":
            continue
        send_after: Any = getattr(turn, "send_after", None) or (turn.model_extra or {}).get("send_after")
        delay = float(send_after.get("delay_ms", 0)) / 1000 if isinstance(send_after, dict) else None
        lines.append(CallerLine(index // 2 + 1, turn.text, barge_in_after=delay))
    return lines


@dataclass
class SimulationPlan:
    """What ``voice-agent simulate`` runs.

    Attributes:
        scenario: The scripted call.
        domain: Its domain.
        policies: Policies to compare, side by side.
        runs: Runs per policy (run r uses seed ``seed + r``).
        retention: Per-pass retention of the fault-injecting summarizer.
        seed: First seed.
        keep: K.
        every: S.
        words_per_second: Pace of interim transcripts (0: as fast as possible).
    """

    scenario: Scenario
    domain: Domain
    policies: Sequence[PolicyName]
    runs: int = 1
    retention: float = 0.9
    seed: int = 0
    keep: int = 6
    every: int = 5
    words_per_second: float = 0.0
    facts: list[TrackedFact] = field(init=False)

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"--runs must be at least 1, got {self.runs}")
        if not 0.0 <= self.retention <= 1.0:
            raise ValueError(f"--retention must lie in [0, 1], got {self.retention}")
        self.facts = tracked_facts(self.scenario)

    def session(self, policy: PolicyName, run: int) -> CallSession:
        """A fresh session for one run."""
        config = SessionConfig(
            policy=policy, keep=self.keep, every=self.every, retention=self.retention, seed=self.seed + run,
            reference_date=self.scenario.reference_date or dt.date.today(),
        )
        tracked = {f.key: f.forms for f in self.facts}
        return CallSession(self.domain, config, tracked, call_id=f"{self.scenario.id}-{policy.value}-{run}")


async def run_plan(
    plan: SimulationPlan,
    *,
    on_turn: Callable[[PolicyName, int, CallSession, TurnRecord], None] | None = None,
    on_run: Callable[[PolicyName, int], None] | None = None,
) -> dict[str, Any]:
    """Runs every policy ``plan.runs`` times; returns the JSON report."""
    lines = caller_lines(plan.scenario)
    report: dict[str, Any] = {
        "scenario": plan.scenario.id, "retention": plan.retention, "seed": plan.seed, "runs": plan.runs,
        "keep": plan.keep, "every": plan.every, "policies": {},
    }
    for policy in plan.policies:
        sessions = []
        for run in range(plan.runs):
            session = plan.session(policy, run)

            def turn_hook(record: TurnRecord, p: PolicyName = policy, r: int = run, s: CallSession = session) -> None:
                if on_turn is not None:
                    on_turn(p, r, s, record)

            await run_text_call(session, lines, words_per_second=plan.words_per_second, on_turn=turn_hook)
            sessions.append(session)
            if on_run is not None:
                on_run(policy, run)
        report["policies"][policy.value] = policy_report(policy.value, sessions, plan.facts)
    return report
