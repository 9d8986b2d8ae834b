"""``voice-agent eval triggers``: when a pass runs, measured. Every trigger under ``lanes`` and ``rolling``, same calls.

Triggers: the fixed cadence (S = 5 and any other S asked for), pipecat's built-in threshold rule at its
defaults (20 unsummarized messages or 8000 tokens, keep the last 4 messages) and the ``reference`` trigger
(:mod:`voice_agent.core.pass_trigger`). Corpora:

* ``scenarios``: every scripted scenario under ``config/scenarios/`` and each of its paraphrases, played through
  the real pipeline against the reference agent (:mod:`voice_agent.harness.simulation.runner`), ``runs`` seeds each;
* ``sgd``: the public SGD call records (``../shared/data/sgd-calls-public.jsonl``, CC BY-SA 4.0, see its README),
  replayed through the context core (:mod:`voice_agent.harness.evaluation.replay`); they have no agent, so no re-asks;
* ``long``: every scenario stretched to 110 exchanges with side topics that come and go
  (:mod:`voice_agent.harness.evaluation.long_calls`), facts stated early and needed late.

Every summary is the simulation's seeded fault model (R = 0.9) over the extractive summarizer, so the table
runs in minutes and every trigger meets the same faults for the same seed. What is measured comes from the
existing instruments (the call recorder, the replay's presence check), never from the trigger.

``lost/gained`` count (call, seed, fact) present at need under the same policy with cadence S = 5 and absent
under this trigger, and the reverse. Another schedule meets the fault model's draws in another order, so a few
facts swap by chance; the "no fact lost" rule is ``gained >= lost`` on every corpus (no net loss).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voice_agent.datafiles import SGD_CALLS, require_shared_data, shared_data_path
from voice_agent.harness.stats import percentile
from voice_agent.policies import PolicyName

POLICIES = (PolicyName.LANES, PolicyName.ROLLING)
CORPORA = ("scenarios", "sgd", "long")
BASELINE = "cadence S=5"
PIPECAT = "threshold (pipecat)"
SGD_FILE = shared_data_path(SGD_CALLS)
LONG_SEEDS = (1, 2)
"""Each scenario is stretched twice, with different side topics."""


@dataclass(frozen=True)
class TriggerSpec:
    """One trigger as the table names it, and the policy settings that select it."""

    name: str
    trigger: str
    every: int = 5
    floor: int | None = None
    batch: int | None = None
    keep: int | None = None

    def overrides(self) -> dict[str, Any]:
        """The ``[policy]`` settings of this trigger (None: the settings' default)."""
        return {"trigger": self.trigger, "every": self.every, "floor": self.floor, "batch": self.batch,
                "keep": self.keep}


def trigger_specs(everies: Sequence[int] = (5,)) -> list[TriggerSpec]:
    """Cadence at each S in ``everies`` (S = 5 always first, the baseline), pipecat's threshold, reference."""
    cadences = [5, *(s for s in dict.fromkeys(everies) if s != 5)]
    return [*(TriggerSpec(f"cadence S={s}", "cadence", s) for s in cadences),
            TriggerSpec(PIPECAT, "threshold"), TriggerSpec("reference", "reference")]


@dataclass
class CallResult:
    """One call under one policy and trigger (small and picklable).

    Attributes:
        corpus: ``scenarios``, ``sgd`` or ``long``.
        call: The script's id, with the seed (``billing_dispute~p1#0``).
        policy: ``lanes`` or ``rolling``.
        trigger: The trigger's table name.
        present: Fact (or, for SGD, action argument) -> present in the context at need.
        tokens: Estimated tokens of each turn's first request.
        passes: Summary passes the call ran (each one a model call).
        reasks: Questions for a value already given (None: the corpus has no agent).
        rejected_offers: Ruled-out options offered again (None: no agent).
        failure: Why the call did not finish, if it did not.
    """

    corpus: str
    call: str
    policy: str
    trigger: str
    present: dict[str, bool] = field(default_factory=dict)
    tokens: list[int] = field(default_factory=list)
    passes: int = 0
    reasks: int | None = None
    rejected_offers: int | None = None
    failure: str | None = None


def _settings(spec: TriggerSpec) -> Any:
    from voice_agent.settings import Settings, with_overrides

    # Defaults, not the checkout's settings file: the table compares triggers, not one deployment.
    return with_overrides(Settings(), policy=spec.overrides())


def _play(corpus: str, script: Any, spec: TriggerSpec, policy: PolicyName, run: int, retention: float) -> CallResult:
    """Plays one scripted call through the pipeline (worker-process entry)."""
    from loguru import logger

    from voice_agent.domains.billing import billing_domain
    from voice_agent.harness.simulation.runner import SimulationPlan, run_once

    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    plan = SimulationPlan(script, [], billing_domain, [policy], _settings(spec), 1, retention, 0)
    outcome = asyncio.run(run_once(plan, policy, run))
    return CallResult(corpus, f"{script.id}#{run}", policy.value, spec.name, dict(outcome.present_at_need),
                      list(outcome.tokens), len(outcome.drop_log), outcome.reasks, outcome.rejected_offers,
                      outcome.failure)


def _replay_sgd(path: Path, spec: TriggerSpec, retention: float) -> list[CallResult]:
    """Replays the SGD records under both policies with ``spec`` (worker-process entry)."""
    from loguru import logger

    from voice_agent.harness.evaluation.replay import ReplayConfig, evaluate_file

    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    config = ReplayConfig(policies=POLICIES, retention=retention, keep=spec.keep or 6, every=spec.every,
                          perturb=False, settings=_settings(spec))
    result = evaluate_file(path, config)
    out = []
    for rep in result.replays:
        for policy in POLICIES:
            present = {f"{r.action}:{r.argument}": r.present.get(policy.value, False)
                       for r in rep.arguments if r.fact is not None}
            tokens = [t for _, t in sorted(rep.tokens.get(policy.value, {}).items())]
            out.append(CallResult("sgd", rep.call, policy.value, spec.name, present, tokens,
                                  len(rep.drops.get(policy.value, []))))
    return out


def scripts(runs: int) -> dict[str, list[tuple[Any, int]]]:
    """Corpus -> (script, seed) pairs: every scenario and paraphrase, and the long calls built from them."""
    from voice_agent.harness import paraphrases
    from voice_agent.harness.evaluation.long_calls import long_call
    from voice_agent.harness.scenarios import SCENARIO_DIR, load_scenario

    played: list[tuple[Any, int]] = []
    long: list[tuple[Any, int]] = []
    for path in sorted(Path(SCENARIO_DIR).glob("*.yaml")):
        scenario = load_scenario(path.stem)
        variants = paraphrases.variants(scenario) if paraphrases.available(scenario.id) else []
        for script in (scenario, *variants):
            played += [(script, run) for run in range(runs)]
        long += [(long_call(scenario, seed), run) for seed in LONG_SEEDS for run in range(runs)]
    return {"scenarios": played, "long": long}


def run_table(
    specs: Sequence[TriggerSpec], *, runs: int = 2, retention: float = 0.9, jobs: int = 1,
    corpora: Sequence[str] = CORPORA, sgd_file: Path = SGD_FILE,
    on_done: Callable[[int, int], None] | None = None, played: dict[str, list[tuple[Any, int]]] | None = None,
) -> list[CallResult]:
    """Plays every corpus under every trigger and policy; returns one result per call.

    Args:
        specs: The triggers (the first should be the baseline, cadence S = 5).
        runs: Seeds per script (the fault model's seed).
        retention: R of the fault model.
        jobs: Worker processes.
        corpora: Which corpora to play.
        sgd_file: The SGD call records.
        on_done: Progress callback (tasks done, tasks in all).
        played: Corpus -> (script, seed) pairs to play instead of :func:`scripts` (tests, one scenario).
    """
    unknown = sorted(set(corpora) - set(CORPORA))
    if unknown:
        raise ValueError(f"unknown corpus {unknown[0]!r}; corpora are {', '.join(CORPORA)}")
    played = played if played is not None else scripts(runs)
    tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    for spec in specs:
        for corpus in ("scenarios", "long"):
            if corpus in corpora and corpus in played:
                tasks += [(_play, (corpus, script, spec, policy, run, retention))
                          for script, run in played[corpus] for policy in POLICIES]
        if "sgd" in corpora:
            require_shared_data(sgd_file, "the public SGD calls", "--corpora scenarios,long")
            tasks.append((_replay_sgd, (sgd_file, spec, retention)))
    results: list[CallResult] = []

    def take(done: Any) -> None:
        results.extend(done if isinstance(done, list) else [done])

    if jobs <= 1:
        for i, (fn, args) in enumerate(tasks):
            take(fn(*args))
            if on_done is not None:
                on_done(i + 1, len(tasks))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(fn, *args) for fn, args in tasks]
            for i, future in enumerate(futures):
                take(future.result())
                if on_done is not None:
                    on_done(i + 1, len(tasks))
    return results


def lost_facts(results: Sequence[CallResult], baseline: str = BASELINE) -> dict[tuple[str, str, str], int]:
    """(corpus, policy, trigger) -> facts present at need under ``baseline`` and absent under the trigger.

    Paired by call, seed and fact, under the same policy: the same call, the same seed, another trigger.
    """
    return {key: len(found) for key, found in fact_changes(results, baseline)[0].items()}


def fact_changes(
    results: Sequence[CallResult], baseline: str = BASELINE
) -> tuple[dict[tuple[str, str, str], list[str]], dict[tuple[str, str, str], list[str]]]:
    """(lost, gained) per (corpus, policy, trigger): ``call:fact`` present under ``baseline`` only, or here only.

    A different schedule meets the fault model's draws in another order, so some facts swap by chance; a
    trigger that loses facts loses more than it gains (net = gained - lost < 0).
    """
    base = {(r.corpus, r.call, r.policy): r.present for r in results if r.trigger == baseline}
    lost: dict[tuple[str, str, str], list[str]] = {}
    gained: dict[tuple[str, str, str], list[str]] = {}
    for r in results:
        before = base.get((r.corpus, r.call, r.policy), {})
        key = (r.corpus, r.policy, r.trigger)
        lost.setdefault(key, []).extend(f"{r.call}:{f}" for f, kept in before.items() if kept and not r.present.get(f))
        gained.setdefault(key, []).extend(f"{r.call}:{f}" for f, kept in r.present.items()
                                          if kept and not before.get(f))
    return lost, gained


def table_rows(results: Sequence[CallResult], baseline: str = BASELINE) -> list[dict[str, Any]]:
    """One row per corpus, policy and trigger, in play order."""
    lost, gained = fact_changes(results, baseline)
    groups: dict[tuple[str, str, str], list[CallResult]] = {}
    for r in results:
        groups.setdefault((r.corpus, r.policy, r.trigger), []).append(r)
    rows: list[dict[str, Any]] = []
    for (corpus, policy, trigger), calls in groups.items():
        tokens = [t for c in calls for t in c.tokens]
        facts = [kept for c in calls for kept in c.present.values()]
        agent = [c for c in calls if c.reasks is not None]
        rows.append({
            "corpus": corpus, "policy": policy, "trigger": trigger, "calls": len(calls),
            "tokens_mean": statistics.mean(tokens) if tokens else 0.0,
            "tokens_p95": percentile([float(t) for t in tokens], 0.95) or 0.0,
            "tokens_last": statistics.mean(c.tokens[-1] for c in calls if c.tokens) if tokens else 0.0,
            "present": sum(facts) / len(facts) if facts else None, "facts": len(facts),
            "lost": len(lost.get((corpus, policy, trigger), [])),
            "gained": len(gained.get((corpus, policy, trigger), [])),
            "lost_facts": lost.get((corpus, policy, trigger), []),
            "reasks_per_call": sum(c.reasks or 0 for c in agent) / len(agent) if agent else None,
            "rejected_offers": sum(c.rejected_offers or 0 for c in agent) if agent else None,
            "passes_per_call": statistics.mean(c.passes for c in calls),
            "failed": sum(1 for c in calls if c.failure),
        })
    order = {name: i for i, name in enumerate(dict.fromkeys(r.trigger for r in results))}
    rows.sort(key=lambda r: (CORPORA.index(r["corpus"]), r["policy"] != "lanes", order[r["trigger"]]))
    return rows


def verdicts(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per ``lanes`` trigger: no fact lost on any corpus, and tokens per request at or under pipecat's built-in.

    No fact lost: on every corpus, as many facts present at need as under cadence S = 5 on the same calls and
    seeds (net = gained - lost >= 0). pipecat's built-in summarizer is ``rolling`` under the threshold trigger:
    one free-text summary, its rule.
    """
    pipecat = {r["corpus"]: r["tokens_mean"] for r in rows if r["policy"] == "rolling" and r["trigger"] == PIPECAT}
    out = []
    for trigger in dict.fromkeys(r["trigger"] for r in rows if r["policy"] == "lanes"):
        mine = [r for r in rows if r["policy"] == "lanes" and r["trigger"] == trigger]
        no_loss = all(r.get("gained", 0) - r["lost"] >= 0 for r in mine)
        cheaper = all(r["tokens_mean"] <= pipecat.get(r["corpus"], float("inf")) for r in mine)
        out.append({"trigger": trigger, "no_fact_lost": no_loss, "tokens_at_or_under_pipecat": cheaper,
                    "meets_goal": no_loss and cheaper,
                    "passes_per_call": statistics.mean(r["passes_per_call"] for r in mine) if mine else 0.0})
    return out


def render(rows: Sequence[dict[str, Any]]) -> str:
    """The table as fixed-width text (pasted as is into the README and notes)."""
    head = (f"{'corpus':<9} {'policy':<7} {'trigger':<19} {'calls':>5} {'tok mean':>8} {'tok p95':>7} "
            f"{'tok last':>8} {'present at need':>15} {'lost/gained':>11} {'re-asks/call':>12} {'rejected again':>14} "
            f"{'passes/call':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        present = f"{r['present'] * 100:.1f} % of {r['facts']}" if r["present"] is not None else "-"
        reasks = f"{r['reasks_per_call']:.2f}" if r["reasks_per_call"] is not None else "-"
        rejected = str(r["rejected_offers"]) if r["rejected_offers"] is not None else "-"
        swaps = f"{r['lost']}/{r['gained']}"
        lines.append(
            f"{r['corpus']:<9} {r['policy']:<7} {r['trigger']:<19} {r['calls']:>5} {r['tokens_mean']:>8.0f} "
            f"{r['tokens_p95']:>7.0f} {r['tokens_last']:>8.0f} {present:>15} {swaps:>11} {reasks:>12} "
            f"{rejected:>14} {r['passes_per_call']:>11.1f}" + (f"  ({r['failed']} failed)" if r["failed"] else "")
        )
    return "\n".join(lines)


def render_verdicts(found: Sequence[dict[str, Any]]) -> str:
    """One line per ``lanes`` trigger: does it meet the goal (no fact lost, tokens at or under pipecat's)."""
    lines = ["goal, lanes: no fact lost (as many facts present at need as cadence S=5 on the same calls: gained >= "
             "lost) and mean tokens per request at or under pipecat's built-in (rolling + threshold), every corpus"]
    for v in found:
        lines.append(f"  {v['trigger']:<19} no fact lost: {'yes' if v['no_fact_lost'] else 'NO':<3}  "
                     f"tokens <= pipecat: {'yes' if v['tokens_at_or_under_pipecat'] else 'NO':<3}  "
                     f"passes/call {v['passes_per_call']:.1f}  -> {'meets the goal' if v['meets_goal'] else 'fails'}")
    return "\n".join(lines)
