"""A real summarizer against the fault model's prediction: billing_dispute under lanes and rolling.

Run: ``.venv/bin/python scripts/bench_real_summarizer.py --from-retention RETENTION.json`` (capture c and
per-pass r as ``voice-agent eval retention --summarizer local --json`` measured them), or give
``--capture C --retention R``. Needs the ``local-summarizer`` extra.

Each call is built by the simulation runner (SimulationPlan, the reference agent, the call factory)
with a summarizer factory: the local model, one run per temperature (run r: temperature
``temperatures[r]``, seed r), scripted and paraphrased. Passes run inline here (the summary lands
before the turn's reply), so "present at need" measures what the summary kept, as the fault model
assumes; a served call runs them in the background. Beside each row: the fault injector over the
same calls at the measured c and r, and at the R = 0.9 every earlier figure used.

"present at need" is the recorder's verbatim check (the exact value in the context on the turn that
needs it); "in summary at need" is the word match of ``voice-agent eval retention`` on the summary
alone, since a model paraphrases. Calls end at the last turn that needs a fact (later passes change
nothing measured). Slow: one pass is 15-35 s on 2 idle cores, five per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loguru import logger  # noqa: E402

from voice_agent.call.factory import CallParts  # noqa: E402
from voice_agent.domains.billing import billing_domain  # noqa: E402
from voice_agent.harness import paraphrases  # noqa: E402
from voice_agent.harness.evaluation.real_retention import find_fact  # noqa: E402
from voice_agent.harness.scenarios import Scenario, load_scenario  # noqa: E402  # noqa: E402
from voice_agent.harness.simulation.fault_summarizer import FaultInjectingSummarizer  # noqa: E402  # noqa: E402
from voice_agent.harness.simulation.report import RunOutcome, policy_report  # noqa: E402  # noqa: E402
from voice_agent.harness.simulation.runner import SimulationPlan, fault_tracked, run_once, run_plan, scenario_facts  # noqa: E402  # noqa: E402
from voice_agent.policies import PolicyName  # noqa: E402
from voice_agent.policies.base import PolicySummarizer  # noqa: E402
from voice_agent.recording.record import TurnRecord  # noqa: E402
from voice_agent.settings import SummarizerConfig, load_settings, with_overrides  # noqa: E402  # noqa: E402
from voice_agent.summarizers.extractive import parse_text_summary  # noqa: E402
from voice_agent.summarizers.local import LocalSummarizer, default_threads  # noqa: E402

POLICIES = (PolicyName.LANES, PolicyName.ROLLING)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="billing_dispute")
    parser.add_argument("--temperatures", default="0,0.7",
                        help="one real run per value, per side and policy (run r: seed r)")
    parser.add_argument("--from-retention", type=Path, help="a retention report with measured capture and r")
    parser.add_argument("--capture", type=float, help="measured capture c (instead of --from-retention)")
    parser.add_argument("--retention", type=float, help="measured per-pass r (instead of --from-retention)")
    parser.add_argument("--fault-runs", type=int, default=30, help="fault-model runs per side and policy")
    parser.add_argument("--paraphrased", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", type=Path, help="write the report here")
    return parser.parse_args()


def measured(args: argparse.Namespace) -> tuple[float, float]:
    if args.from_retention is not None:
        report = json.loads(args.from_retention.read_text(encoding="utf-8"))
        c, r = report["measured"]["capture"], report["measured"]["r"]
        return float(c), float(r if r is not None else 1.0)
    if args.capture is None or args.retention is None:
        sys.exit("bench_real_summarizer: give --from-retention PATH, or --capture C and --retention R")
    return args.capture, args.retention


def until_last_need(script: Scenario) -> Scenario:
    """The call cut after the last turn that needs a fact: later passes cannot change the score, only cost."""
    needs = [n for n in (script.fact_needed_turn(f) for f in script.facts) if n is not None]
    if not needs:
        return script
    return script.model_copy(update={"turns": script.turns[: 2 * max(needs)]})


def row_of(report: dict[str, Any], summary_hits: list[bool] | None = None) -> dict[str, Any]:
    facts = {f["key"]: f["present_at_need"] for f in report["facts"]}
    return {
        "present_at_need": statistics.mean(facts.values()) if facts else 0.0, "by_fact": facts,
        "in_summary_at_need": statistics.mean(summary_hits) if summary_hits else None,
        "reasks_per_call": report["reasks_per_call"], "tokens_per_request": report["tokens_per_request"],
        "runs": report["runs"], "failed_runs": report["failed_runs"],
    }


def main() -> None:
    args = arguments()
    c, r = measured(args)
    temperatures = [float(t) for t in args.temperatures.split(",") if t.strip()]
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    scenario = until_last_need(load_scenario(args.scenario))
    variants = [until_last_need(v) for v in paraphrases.variants(load_scenario(args.scenario))] if (
        args.paraphrased and paraphrases.available(scenario.id)) else []
    threads = default_threads()  # all cores but one: steady when the machine is shared (see local.py)
    # Inline passes (see the module docstring); no slow-answer failures: a pass turn waits for its pass.
    settings = with_overrides(load_settings(), summarizer={"background": False})
    made: list[LocalSummarizer] = []

    def local(script: Scenario, run: int) -> PolicySummarizer:
        summarizer = LocalSummarizer(SummarizerConfig(local_temperature=temperatures[run % len(temperatures)],
                                                      local_seed=run, local_threads=threads, local_timeout_secs=600))
        made.append(summarizer)
        return summarizer

    real = SimulationPlan(scenario, variants, billing_domain, POLICIES, settings, runs=len(temperatures),
                          retention=None, turn_timeout=900.0, slow_answer_secs=1e9, summarizer_factory=local)
    hits: dict[tuple[str, str], list[bool]] = {}
    started = time.monotonic()
    total = len(real.sides) * len(POLICIES) * real.runs
    outcomes: dict[tuple[str, str], list[RunOutcome]] = {}
    done = 0
    for side in real.sides:
        for policy in POLICIES:
            for run in range(real.runs):
                script = real.script(side, run)
                needed = {f.key: f for f in script.facts}
                cell = hits.setdefault((side, policy.value), [])

                def on_turn(p: PolicyName, _run: int, parts: CallParts, record: TurnRecord,
                            needed: dict[str, Any] = needed, cell: list[bool] = cell) -> None:
                    session = parts.session
                    if record.summary_pass is not None and made and made[-1].passes:
                        stats = made[-1].passes[-1]
                        print(f"    {p.value} T{record.turn:02d} pass: {stats.seconds:.1f} s, "
                              f"{stats.prompt_tokens} tokens in, {stats.completion_tokens} out ({stats.outcome})",
                              flush=True)
                    for fact in real.facts:
                        if fact.needed_turn != record.turn:
                            continue
                        summary = (session.state.summary if p is PolicyName.LANES
                                   else parse_text_summary(getattr(session.policy, "summary", "")))
                        cell.append(find_fact(needed[fact.key], summary) is not None)

                call_started = time.monotonic()
                outcome = asyncio.run(run_once(real, policy, run, side, on_turn))
                outcomes.setdefault((side, policy.value), []).append(outcome)
                done += 1
                elapsed, took = time.monotonic() - started, time.monotonic() - call_started
                print(f"[{done}/{total}, {elapsed:.0f} s] {side} {policy.value} run {run} "
                      f"(temperature {temperatures[run % len(temperatures)]:g}): {took:.0f} s, "
                      f"present at need {sum(outcome.present_at_need.values())}/{len(outcome.present_at_need)}, "
                      f"re-asks {outcome.reasks}" + (f", FAILED: {outcome.failure}" if outcome.failure else ""),
                      flush=True)
    real_wall = time.monotonic() - started

    def fault(capture: float | None, retention: float) -> dict[str, Any]:
        def make(script: Scenario, run: int) -> PolicySummarizer:
            return FaultInjectingSummarizer(retention, fault_tracked(scenario_facts(script)), run, capture=capture)

        plan = SimulationPlan(scenario, variants, billing_domain, POLICIES, settings, runs=args.fault_runs,
                              retention=None, summarizer_factory=make)
        return run_plan(plan, jobs=1)

    print(f"fault model: {args.fault_runs} runs per side and policy at c={c:.2f}, r={r:.2f} and at R=0.9 ...",
          flush=True)
    predicted, baseline = fault(c, r), fault(None, 0.9)
    rows = []
    for side in real.sides:
        for policy in POLICIES:
            key = (side, policy.value)
            rows.append({"side": side, "policy": policy.value, "summarizer": "local (real)",
                         **row_of(policy_report(policy.value, outcomes[key], real.facts), hits[key])})
            rows.append({"side": side, "policy": policy.value, "summarizer": f"fault c={c:.2f} r={r:.2f}",
                         **row_of(predicted["sides"][side][policy.value])})
            rows.append({"side": side, "policy": policy.value, "summarizer": "fault R=0.90",
                         **row_of(baseline["sides"][side][policy.value])})
    wall = time.monotonic() - started
    header = (f"{'side':<12}{'policy':<9}{'summarizer':<22}{'present at need':>16}{'in summary':>12}"
              f"{'re-asks/call':>14}{'tokens/req':>12}{'runs':>6}")
    print()
    shown = ", ".join(f"T={t:g}" for t in temperatures)
    print(f"{scenario.id}: real local summarizer ({shown}) vs the fault model; K={settings.policy.keep} "
          f"S={settings.policy.every}; real calls {real_wall:.0f} s, total {wall:.0f} s")
    print(header)
    print("-" * len(header))
    for row in rows:
        in_summary = "-" if row["in_summary_at_need"] is None else f"{row['in_summary_at_need'] * 100:.0f}%"
        print(f"{row['side']:<12}{row['policy']:<9}{row['summarizer']:<22}{row['present_at_need'] * 100:>15.0f}%"
              f"{in_summary:>12}{row['reasks_per_call']:>14.2f}{row['tokens_per_request']:>12.0f}{row['runs']:>6}")
    print()
    print("present at need, per fact (real local / fault at c, r / fault R=0.9):")
    for side in real.sides:
        for policy in POLICIES:
            trio = [row for row in rows if row["side"] == side and row["policy"] == policy.value]
            cells = ", ".join(
                k + " " + "/".join(f"{row['by_fact'][k] * 100:.0f}" for row in trio) for k in trio[0]["by_fact"])
            print(f"  {side} {policy.value}: {cells}")
    failures = sum(s.failures for s in made)
    passes = [p for s in made for p in s.passes]
    if passes:
        print(f"local passes: {len(passes)}, failed {failures}, seconds p50 "
              f"{statistics.median(p.seconds for p in passes):.1f}, max {max(p.seconds for p in passes):.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"scenario": scenario.id, "capture": c, "retention": r,
                                         "temperatures": temperatures, "rows": rows, "wall_seconds": wall,
                                         "real_wall_seconds": real_wall}, indent=1), encoding="utf-8")
        print(f"report written to {args.json}")


if __name__ == "__main__":
    main()
