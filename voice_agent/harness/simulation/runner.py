"""Runs a scenario N times per policy, scripted and paraphrased, through the pipeline; builds the report.

Every run is a call built by the one call factory from the settings, with the
simulation's own instrument put in explicitly: the seeded fault model over the
extractive summarizer (:mod:`voice_agent.harness.simulation.fault_summarizer`). A recorder
observes each call from outside and the report is built from its records.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.services.llm_service import LLMService

from processors.speculative_retrieval import SpeculativeRetrieval
from voice_agent.call.factory import CallParts, build_call
from voice_agent.domains.base import Domain
from voice_agent.harness.scenarios import Scenario
from voice_agent.harness.simulation.fault_summarizer import FaultInjectingSummarizer, flat_tracked
from voice_agent.harness.simulation.report import (
    RunOutcome,
    TrackedFact,
    lanes_minus_rolling,
    outcome_of,
    policy_report,
)
from voice_agent.harness.simulation.text_call import CallerLine, CallFailed, TurnTimeout, run_text_call
from voice_agent.policies import PolicyName
from voice_agent.policies.base import PolicySummarizer
from voice_agent.recording.record import CallRecorder, TurnRecord
from voice_agent.retrieval.index import shared_index
from voice_agent.retrieval.speculative import BUDGETED_SPECULATION
from voice_agent.services.fake_llm import FakeLLM, script_from_record
from voice_agent.settings import Settings, with_overrides

CHUNK = 25
"""Runs per task handed to a worker process: small enough for a smooth progress bar."""

SCRIPTED = "scripted"
PARAPHRASED = "paraphrased"


def scenario_facts(scenario: Scenario) -> list[TrackedFact]:
    """The scenario's facts with exchange turns (the recorder's ground truth)."""
    return [
        TrackedFact(
            key=fact.key, value=fact.value,
            forms=tuple(dict.fromkeys(v for v in (fact.value, fact.canonical) if v)),
            kind=fact.kind, stated_turn=scenario.fact_stated_turn(fact),
            needed_turn=scenario.fact_needed_turn(fact), ask_cues=tuple(fact.ask_cues),
            rejected_option=fact.rejected_option,
        )
        for fact in scenario.facts
    ]


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


def fault_tracked(facts: Sequence[TrackedFact]) -> dict[str, str]:
    """The facts' forms for the fault model, each followed apart (:func:`flat_tracked`)."""
    return flat_tracked({f.key: f.forms for f in facts})


@dataclass
class SimulationPlan:
    """What ``voice-agent simulate`` runs.

    Attributes:
        scenario: The scripted call.
        variants: Paraphrased versions of it (same facts, other words); run ``r`` of the paraphrased
            side plays variant ``r % len(variants)``.
        domain_factory: Builds the scenario's domain (a module-level function, so worker processes can call it).
        policies: Policies to compare, side by side.
        settings: The settings every call is built from (policy, K and S are set per run from here).
        runs: Runs per policy and side (run r uses seed ``seed + r``).
        retention: Per-pass retention R of the simulation's fault model; None runs the configured
            summarizer instead (``settings.summarizer``).
        seed: First seed.
        words_per_second: Pace of interim transcripts (0: as fast as possible).
        llm_factory: Builds the LLM service for a run (picklable); None uses the one the settings name.
        knowledge: Run speculative retrieval over ``config/knowledge`` (the index loads once per process).
        turn_timeout: Seconds the agent may take to finish a turn before the run is stopped as failed.
        slow_answer_secs: A turn whose first agent words take longer than this counts as a failure (the
            recorder's own clock, whatever the call's watchdog logged).
        scripted_llm: Play each call against a FakeLLM replaying the script's recorded actions and agent
            lines (no brain): how the lanes and guards hold when the model's calls are fixed.
        summarizer_factory: (script played, run) -> the run's summarizer, instead of the fault model or the
            configured one (e.g. a real model at a per-run seed); run in this process (not picklable).
    """

    scenario: Scenario
    variants: Sequence[Scenario]
    domain_factory: Callable[[], Domain]
    policies: Sequence[PolicyName]
    settings: Settings
    runs: int = 1
    retention: float | None = 0.9
    seed: int = 0
    words_per_second: float = 0.0
    llm_factory: Callable[[Domain], LLMService[Any]] | None = None
    knowledge: bool = False
    turn_timeout: float = 15.0
    slow_answer_secs: float = 5.0
    scripted_llm: bool = False
    summarizer_factory: Callable[[Scenario, int], PolicySummarizer] | None = None
    facts: list[TrackedFact] = field(init=False)

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"--runs must be at least 1, got {self.runs}")
        if self.retention is not None and not 0.0 <= self.retention <= 1.0:
            raise ValueError(f"--retention must lie in [0, 1], got {self.retention}")
        self.facts = scenario_facts(self.scenario)

    @property
    def sides(self) -> list[str]:
        """``scripted``, and ``paraphrased`` when there are variants."""
        return [SCRIPTED, PARAPHRASED] if self.variants else [SCRIPTED]

    def script(self, side: str, run: int) -> Scenario:
        """The call played by ``run`` on ``side``."""
        if side == PARAPHRASED:
            return self.variants[run % len(self.variants)]
        return self.scenario

    def call(self, script: Scenario, policy: PolicyName, run: int) -> CallParts:
        """A fresh call for one run, built by the call factory."""
        settings = with_overrides(
            self.settings, policy={"name": policy.value},
            call={"reference_date": script.reference_date or self.settings.call.reference_date},
        )
        summarizer = None
        if self.summarizer_factory is not None:
            make, played = self.summarizer_factory, script

            def summarizer(_call_id: str, _domain: Domain) -> PolicySummarizer:
                return make(played, run)

        elif self.retention is not None:
            tracked = fault_tracked(scenario_facts(script))
            retention, seed = self.retention, self.seed + run

            def summarizer(_call_id: str, _domain: Domain) -> PolicySummarizer:
                return FaultInjectingSummarizer(retention, tracked, seed)

        llm_factory = self.llm_factory
        if self.scripted_llm:
            replies = script_from_record(script, self.scenario if script is not self.scenario else None)

            def llm_factory(_domain: Domain) -> LLMService[Any]:
                return FakeLLM(replies)

        return build_call(settings, f"{script.id}-{policy.value}-{run}", domain_factory=self.domain_factory,
                          llm_factory=llm_factory, summarizer_factory=summarizer)


TurnHook = Callable[[PolicyName, int, CallParts, TurnRecord], None]


async def run_once(
    plan: SimulationPlan, policy: PolicyName, run: int, side: str = SCRIPTED, on_turn: TurnHook | None = None
) -> RunOutcome:
    """Plays the scenario (or a paraphrase of it) once under ``policy`` with seed ``plan.seed + run``.

    Every run gets a fresh call and domain: its backend records credits and disputes, and
    one run's effects must not leak into the next. A run whose pipeline reports an error,
    or whose agent does not answer, is recorded as failed; the report says so.
    """
    script = plan.script(side, run)
    parts = plan.call(script, policy, run)
    facts = scenario_facts(script)
    recorder = CallRecorder(parts.session, [f.watched() for f in facts], slow_answer_ms=plan.slow_answer_secs * 1000)

    def turn_hook(_turn: int) -> None:
        record = recorder.current
        if on_turn is not None and record is not None:
            on_turn(policy, run, parts, record)

    before_user = ([SpeculativeRetrieval(parts.session.call_id, shared_index(), BUDGETED_SPECULATION)]
                   if plan.knowledge else [])
    failure = None
    applied = 0
    try:
        call = await run_text_call(parts.session, parts.llm, caller_lines(script), recorder=recorder,
                                   words_per_second=plan.words_per_second, on_turn=turn_hook,
                                   before_user=before_user, turn_timeout=plan.turn_timeout)
        applied = len(call.summaries_applied)
    except (CallFailed, TurnTimeout) as exc:
        failure = str(exc)
    expected = [(a.tool, a.args) for a in script.actions]
    outcome = outcome_of(recorder, facts, failure, expected, run)
    outcome.summaries_applied = applied
    return outcome


def _run_chunk(plan: SimulationPlan, policy: PolicyName, side: str, runs: list[int]) -> list[RunOutcome]:
    """Worker-process entry: a few runs, each in a fresh pipeline."""
    logger.remove()
    logger.add(sys.stderr, level="ERROR")

    async def chunk() -> list[RunOutcome]:
        return [await run_once(plan, policy, run, side) for run in runs]

    return asyncio.run(chunk())


def run_plan(
    plan: SimulationPlan,
    *,
    jobs: int = 1,
    on_turn: TurnHook | None = None,
    on_runs: Callable[[str, PolicyName, int], None] | None = None,
) -> dict[str, Any]:
    """Runs every policy ``plan.runs`` times on each side; returns the JSON report.

    Run 0 of each policy's scripted side runs in this process (``on_turn`` sees its turns); the
    rest are spread over ``jobs`` worker processes in small chunks. When run 0 fails (an LLM
    that errors or hangs), nothing more is run: the report says why.
    """
    summarizer = (f"fault model (R={plan.retention:g}) over the extractive summarizer"
                  if plan.retention is not None else f"configured ({plan.settings.summarizer.kind})")
    report: dict[str, Any] = {
        "scenario": plan.scenario.id, "retention": plan.retention, "summarizer": summarizer, "seed": plan.seed,
        "runs": plan.runs, "keep": plan.settings.policy.keep, "every": plan.settings.policy.every,
        "variants": [v.id for v in plan.variants], "fact_kinds": {f.key: f.kind for f in plan.facts},
        "sides": {side: {} for side in plan.sides}, "failed_runs": 0,
    }
    outcomes: dict[tuple[str, PolicyName], list[RunOutcome]] = {
        (side, p): [] for side in plan.sides for p in plan.policies
    }
    for policy in plan.policies:
        first = asyncio.run(run_once(plan, policy, 0, SCRIPTED, on_turn))
        outcomes[(SCRIPTED, policy)].append(first)
        if on_runs is not None:
            on_runs(SCRIPTED, policy, 1)
    tasks = []
    if not any(o[0].failure for o in outcomes.values() if o):
        for side in plan.sides:
            runs = list(range(1, plan.runs)) if side == SCRIPTED else list(range(plan.runs))
            tasks += [(side, p, runs[i : i + CHUNK]) for p in plan.policies for i in range(0, len(runs), CHUNK)]
    if jobs <= 1:
        for side, policy, runs in tasks:
            outcomes[(side, policy)].extend(_run_chunk(plan, policy, side, runs))
            if on_runs is not None:
                on_runs(side, policy, len(runs))
    elif tasks:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_run_chunk, plan, policy, side, runs): (side, policy, len(runs))
                       for side, policy, runs in tasks}
            for future in as_completed(futures):
                side, policy, count = futures[future]
                outcomes[(side, policy)].extend(future.result())
                if on_runs is not None:
                    on_runs(side, policy, count)
    for (side, policy), done in outcomes.items():
        facts = plan.facts
        report["sides"][side][policy.value] = policy_report(policy.value, done, facts)
        report["failed_runs"] += sum(1 for o in done if o.failure)
    report["policies"] = report["sides"][SCRIPTED]
    lanes, rolling = PolicyName.LANES.value, PolicyName.ROLLING.value
    report["lanes_minus_rolling"] = {
        side: lanes_minus_rolling(by_policy[lanes], by_policy[rolling], plan.facts)
        for side, by_policy in report["sides"].items() if lanes in by_policy and rolling in by_policy
    }
    return report
