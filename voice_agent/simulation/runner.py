"""Runs a scenario N times per policy through the pipeline and builds the report."""

from __future__ import annotations

import asyncio
import datetime as dt
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.services.llm_service import LLMService

from processors.speculative_retrieval import SpeculativeRetrieval
from voice_agent.domains.base import Domain
from voice_agent.policies import PolicyName
from voice_agent.retrieval.index import shared_index
from voice_agent.scenarios import Scenario
from voice_agent.session import CallSession, SessionConfig, TurnRecord
from voice_agent.simulation.report import RunOutcome, TrackedFact, outcome_of, policy_report
from voice_agent.simulation.text_call import CallerLine, run_text_call

CHUNK = 25
"""Runs per task handed to a worker process: small enough for a smooth progress bar."""


def scenario_facts(scenario: Scenario) -> list[TrackedFact]:
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
        domain_factory: Builds the scenario's domain (a module-level function, so worker processes can call it).
        policies: Policies to compare, side by side.
        runs: Runs per policy (run r uses seed ``seed + r``).
        retention: Per-pass retention of the fault-injecting summarizer.
        seed: First seed.
        keep: K.
        every: S.
        words_per_second: Pace of interim transcripts (0: as fast as possible).
        llm_factory: Builds the LLM service for a run (picklable); None uses the reference agent.
        knowledge: Run speculative retrieval over ``config/knowledge`` (the index loads once per process).
    """

    scenario: Scenario
    domain_factory: Callable[[], Domain]
    policies: Sequence[PolicyName]
    runs: int = 1
    retention: float = 0.9
    seed: int = 0
    keep: int = 6
    every: int = 5
    words_per_second: float = 0.0
    llm_factory: Callable[[Domain], LLMService[Any]] | None = None
    knowledge: bool = False
    facts: list[TrackedFact] = field(init=False)

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"--runs must be at least 1, got {self.runs}")
        if not 0.0 <= self.retention <= 1.0:
            raise ValueError(f"--retention must lie in [0, 1], got {self.retention}")
        self.facts = scenario_facts(self.scenario)

    def session(self, domain: Domain, policy: PolicyName, run: int) -> CallSession:
        """A fresh session for one run."""
        config = SessionConfig(
            policy=policy, keep=self.keep, every=self.every, retention=self.retention, seed=self.seed + run,
            reference_date=self.scenario.reference_date or dt.date.today(),
        )
        tracked = {f.key: f.forms for f in self.facts}
        return CallSession(domain, config, tracked, call_id=f"{self.scenario.id}-{policy.value}-{run}")


TurnHook = Callable[[PolicyName, int, CallSession, TurnRecord], None]


async def run_once(
    plan: SimulationPlan, policy: PolicyName, run: int, on_turn: TurnHook | None = None
) -> RunOutcome:
    """Plays the scenario once under ``policy`` with seed ``plan.seed + run``.

    Every run gets a fresh domain: its backend records credits and disputes, and one run's
    effects must not leak into the next.
    """
    domain = plan.domain_factory()
    session = plan.session(domain, policy, run)

    def turn_hook(record: TurnRecord) -> None:
        if on_turn is not None:
            on_turn(policy, run, session, record)

    llm = plan.llm_factory(domain) if plan.llm_factory is not None else None
    before_user = [SpeculativeRetrieval(session, shared_index())] if plan.knowledge else []
    await run_text_call(session, caller_lines(plan.scenario), words_per_second=plan.words_per_second,
                        on_turn=turn_hook, llm=llm, before_user=before_user)
    return outcome_of(session, plan.facts)


def _run_chunk(plan: SimulationPlan, policy: PolicyName, runs: list[int]) -> list[RunOutcome]:
    """Worker-process entry: a few runs, each in a fresh pipeline."""
    logger.remove()
    logger.add(sys.stderr, level="ERROR")

    async def chunk() -> list[RunOutcome]:
        return [await run_once(plan, policy, run) for run in runs]

    return asyncio.run(chunk())


def run_plan(
    plan: SimulationPlan,
    *,
    jobs: int = 1,
    on_turn: TurnHook | None = None,
    on_runs: Callable[[PolicyName, int], None] | None = None,
) -> dict[str, Any]:
    """Runs every policy ``plan.runs`` times; returns the JSON report.

    Run 0 of each policy runs in this process (``on_turn`` sees its turns); the rest are
    spread over ``jobs`` worker processes in small chunks.
    """
    report: dict[str, Any] = {
        "scenario": plan.scenario.id, "retention": plan.retention, "seed": plan.seed, "runs": plan.runs,
        "keep": plan.keep, "every": plan.every, "fact_kinds": {f.key: f.kind for f in plan.facts}, "policies": {},
    }
    outcomes: dict[PolicyName, list[RunOutcome]] = {p: [] for p in plan.policies}
    for policy in plan.policies:
        outcomes[policy].append(asyncio.run(run_once(plan, policy, 0, on_turn)))
        if on_runs is not None:
            on_runs(policy, 1)
    later = list(range(1, plan.runs))
    rest = [(p, later[i : i + CHUNK]) for p in plan.policies for i in range(0, len(later), CHUNK)]
    if jobs <= 1:
        for policy, runs in rest:
            outcomes[policy].extend(_run_chunk(plan, policy, runs))
            if on_runs is not None:
                on_runs(policy, len(runs))
    elif rest:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_run_chunk, plan, policy, runs): (policy, len(runs)) for policy, runs in rest}
            for future in as_completed(futures):
                policy, count = futures[future]
                outcomes[policy].extend(future.result())
                if on_runs is not None:
                    on_runs(policy, count)
    for policy in plan.policies:
        report["policies"][policy.value] = policy_report(policy.value, outcomes[policy], plan.facts)
    return report
