"""Side by side with pipecat's own summarizer on the same real model: lanes, rolling, pipecat built-in, full, window.

Run: ``.venv/bin/python scripts/bench_vs_pipecat.py`` (needs the ``local-summarizer`` extra; slow: about 40 min
with ``--jobs 2`` on 2 idle cores). ``--quick`` plays billing_dispute only, scripted, one temperature.

Every call is built by the simulation runner (the reference agent, the call factory) from the same settings;
only the policy differs:
- ``lanes`` and ``rolling``: our policies, summarizing with the local model (K and S from the settings);
- ``pipecat default``: pipecat's real ``LLMContextSummarizer`` (``policy.name = "pipecat"``) at its own
  defaults (20 messages or 8000 tokens, keep 4 messages), with the same local model as its summarizing LLM;
- ``pipecat tuned``: the same with ``max_unsummarized_messages`` set so it summarizes about as often as
  lanes; the value is chosen by a calibration run of every call with an instant summarizer (pass counts
  depend on message counts, not on what the summary says), printed before the table;
- ``full``: plain pipecat with summarization off (the whole history); ``window``: the last K turns.
The call's guards run under every policy (they read the lanes, which the session keeps for all), so the
"mutated identifiers" columns show what the guards refused and what still ran.

Passes are measured inline (``summarizer.background = false``): our passes land before the turn's reply;
pipecat summarizes off the turn by design, so the driver waits for its summary before the caller's next line.
Calls end at the last turn that needs a fact. Run r uses temperature ``temperatures[r]`` and seed r, on both
sides (the paraphrased side plays variant r). "present at need" is the recorder's verbatim check: the exact
value in what the model received on the turn that needs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loguru import logger  # noqa: E402

from voice_agent.core.summary import EpisodeSummary  # noqa: E402
from voice_agent.domains.billing import billing_domain  # noqa: E402
from voice_agent.harness import paraphrases  # noqa: E402
from voice_agent.harness.scenarios import Scenario, load_scenario  # noqa: E402  # noqa: E402
from voice_agent.harness.simulation.runner import PARAPHRASED, SCRIPTED, SimulationPlan, run_once  # noqa: E402  # noqa: E402
from voice_agent.policies import PolicyName  # noqa: E402
from voice_agent.policies.base import PolicySummarizer  # noqa: E402
from voice_agent.settings import Settings, SummarizerConfig, load_settings, with_overrides  # noqa: E402  # noqa: E402
from voice_agent.summarizers.local import Completion, LocalSummarizer  # noqa: E402  # noqa: E402

SCENARIOS = ("billing_dispute", "refund_orders", "callback_constraints")
ROWS = ("lanes", "rolling", "pipecat default", "pipecat tuned", "full", "window")
MODEL_ROWS = ("lanes", "rolling", "pipecat default", "pipecat tuned")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--temperatures", default="0,0.7", help="one run per value (run r: seed r)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (each loads the model, 1 thread)")
    parser.add_argument("--paraphrased", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--tuned-messages", type=int, help="pipecat tuned: max_unsummarized_messages "
                        "(default: calibrated to lanes' pass count)")
    parser.add_argument("--quick", action="store_true", help="billing_dispute, scripted, temperature 0")
    parser.add_argument("--report-only", action="store_true",
                        help="with --cells: print the table of the calls already there, play nothing")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--cells", type=Path, help="a JSON-lines file of finished calls: each call is appended as it "
                        "ends, and calls already there are not played again (resume an interrupted run)")
    args = parser.parse_args()
    if args.quick:
        args.scenarios, args.temperatures, args.paraphrased = "billing_dispute", "0", False
    return args


def until_last_need(script: Scenario) -> Scenario:
    """The call cut after the last turn that needs a fact: later passes cannot change the score, only cost."""
    needs = [n for n in (script.fact_needed_turn(f) for f in script.facts) if n is not None]
    return script.model_copy(update={"turns": script.turns[: 2 * max(needs)]}) if needs else script


def row_settings(base: Settings, row: str, tuned: int) -> tuple[PolicyName, Settings]:
    """The policy and settings of one table row."""
    if row in ("lanes", "rolling", "window"):
        return PolicyName(row), base
    # Longer than the local summarizer's own 900 s, so a slow pass fails there, counted, as ours do.
    pipecat: dict[str, Any] = {"timeout_secs": 960.0}
    if row == "pipecat tuned":
        pipecat["max_unsummarized_messages"] = tuned
    if row == "full":
        pipecat["summarize"] = False
    return PolicyName.PIPECAT, with_overrides(base, pipecat_summarizer=pipecat)


class _InstantEngine:
    """Calibration only: a fixed one-line summary at once (how often a policy summarizes does not depend on it)."""

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, *, max_tokens: int,
                 temperature: float, seed: int, stop: Any) -> Completion:
        text = (json.dumps(EpisodeSummary().model_dump(exclude={"covers_through_turn"})) if schema is not None
                else "The caller called about their bill.")
        return Completion(text, 1, 1, 0.0)


@dataclass
class Cell:
    """One call of the bench: which, and what came out (picklable)."""

    scenario: str
    side: str
    row: str
    run: int
    temperature: float
    tuned: int
    present_at_need: dict[str, bool] = field(default_factory=dict)
    reasks: int = 0
    rejected_offers: int = 0
    guard_rejections: int = 0
    unledgered_executed: int = 0
    executed_calls: int = 0
    tokens: list[int] = field(default_factory=list)
    pass_seconds: list[float] = field(default_factory=list)
    pass_tokens: list[tuple[int, int]] = field(default_factory=list)
    """(prompt, completion) tokens of each pass that returned."""
    failed_passes: int = 0
    """Passes that kept the previous summary (failed, empty, timed out); not those the call's end cancelled."""
    failed_seconds: float = 0.0
    summaries_applied: int | None = None
    """pipecat rows: summaries pipecat applied (a pass it dropped as stale is not one)."""
    wall_seconds: float = 0.0
    failure: str | None = None


def play(cell: Cell, threads: int, instant: bool = False) -> Cell:
    """Plays one call (in a worker process or here) and fills ``cell``."""
    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    scenario = until_last_need(load_scenario(cell.scenario))
    variants = [until_last_need(v) for v in paraphrases.variants(load_scenario(cell.scenario))]
    base = with_overrides(load_settings(), summarizer={"background": False})
    policy, settings = row_settings(base, cell.row, cell.tuned)
    made: list[LocalSummarizer] = []

    def local(_script: Scenario, run: int) -> PolicySummarizer:
        config = SummarizerConfig(local_temperature=cell.temperature, local_seed=run, local_threads=threads,
                                  local_timeout_secs=900)
        summarizer = LocalSummarizer(config, engine=_InstantEngine()) if instant else LocalSummarizer(config)
        made.append(summarizer)
        return summarizer

    needs_model = cell.row in MODEL_ROWS
    plan = SimulationPlan(scenario, variants if cell.side == PARAPHRASED else [], billing_domain, [policy],
                          settings, runs=cell.run + 1, retention=None, turn_timeout=1800.0, slow_answer_secs=1e9,
                          summarizer_factory=local if needs_model else None)
    started = time.monotonic()
    outcome = asyncio.run(run_once(plan, policy, cell.run, cell.side))
    cell.wall_seconds = time.monotonic() - started
    cell.present_at_need = dict(outcome.present_at_need)
    cell.reasks, cell.rejected_offers = outcome.reasks, outcome.rejected_offers
    cell.guard_rejections, cell.unledgered_executed = outcome.guard_rejections, outcome.unledgered_executed
    cell.executed_calls, cell.tokens, cell.failure = outcome.executed_calls, list(outcome.tokens), outcome.failure
    if policy is PolicyName.PIPECAT:
        cell.summaries_applied = outcome.summaries_applied
    for summarizer in made:
        ok = [p for p in summarizer.passes if p.outcome == "ok"]
        failed = [p for p in summarizer.passes if p.outcome not in ("ok", "cancelled")]
        cell.pass_seconds += [p.seconds for p in ok]
        cell.pass_tokens += [(p.prompt_tokens, p.completion_tokens) for p in ok]
        cell.failed_passes += len(failed)
        cell.failed_seconds += sum(p.seconds for p in failed)
    return cell


def calibrate(scenarios: list[str], sides: list[str], runs: int) -> tuple[int, dict[int, float], float]:
    """max_unsummarized_messages whose passes per call come closest to lanes' (instant summarizer, this process)."""
    def passes(row: str, tuned: int) -> float:
        counts = [len(play(Cell(s, side, row, r, 0.0, tuned), 1, instant=True).pass_seconds)
                  for s in scenarios for side in sides for r in range(runs)]
        return statistics.mean(counts)

    lanes = passes("lanes", 20)
    tried = {m: passes("pipecat tuned", m) for m in range(6, 22, 2)}
    best = min(tried, key=lambda m: (abs(tried[m] - lanes), -m))
    return best, tried, lanes


def pct(values: list[bool]) -> str:
    return f"{100 * sum(values) / len(values):.0f}%" if values else "-"


def _mean(values: list[float] | list[int]) -> float:
    return statistics.mean(values) if values else 0.0


def report(cells: list[Cell], temperatures: list[float]) -> list[str]:
    """The table: one row per policy, then present at need per fact."""
    lines = []
    header = (f"{'policy':<17}{'present at need':>16}{'spread':>10}{'re-asks':>9}{'rejected':>9}{'refused':>9}"
              f"{'IDs ran':>8}{'tok/turn':>9}{'tok last':>9}{'passes':>7}{'applied':>8}{'pass s p50':>11}"
              f"{'in/out p50':>11}{'s/call':>8}{'failed':>8}")
    lines += [header, "-" * len(header)]
    for row in ROWS:
        mine = [c for c in cells if c.row == row]
        if not mine:
            continue
        present = [v for c in mine for v in c.present_at_need.values()]
        # The spread: present at need per run (one temperature), over the calls every run reached.
        runs = sorted({c.run for c in mine})
        common = set.intersection(*({(c.scenario, c.side) for c in mine if c.run == r} for r in runs))
        by_run = [statistics.mean(v) for r in runs
                  if (v := [x for c in mine if c.run == r and (c.scenario, c.side) in common
                            for x in c.present_at_need.values()])]
        spread = f"{100 * min(by_run):.0f}-{100 * max(by_run):.0f}%" if len(by_run) > 1 else "-"
        seconds = [s for c in mine for s in c.pass_seconds]
        tokens = [t for c in mine for t in c.pass_tokens]
        sizes = (f"{statistics.median(t[0] for t in tokens):.0f}/{statistics.median(t[1] for t in tokens):.0f}"
                 if tokens else "-")
        applied = [c.summaries_applied for c in mine if c.summaries_applied is not None]
        lines.append(
            f"{row:<17}{pct(present):>16}{spread:>10}{_mean([c.reasks for c in mine]):>9.2f}"
            f"{sum(c.rejected_offers for c in mine):>9}{sum(c.guard_rejections for c in mine):>9}"
            f"{sum(c.unledgered_executed for c in mine):>8}"
            f"{_mean([t for c in mine for t in c.tokens]):>9.0f}"
            f"{_mean([c.tokens[-1] for c in mine if c.tokens]):>9.0f}"
            f"{_mean([len(c.pass_seconds) for c in mine]):>7.1f}"
            f"{(f'{_mean(applied):.1f}' if applied else '-'):>8}"
            f"{(statistics.median(seconds) if seconds else 0):>11.1f}{sizes:>11}"
            f"{_mean([sum(c.pass_seconds) + c.failed_seconds for c in mine]):>8.0f}"
            f"{sum(1 for c in mine if c.failure):>4}/{sum(c.failed_passes for c in mine):<3}")
    lines += [
        "",
        "present at need: facts in what the model received on the turn that needs them (spread: per run); re-asks "
        "per call; rejected: ruled-out options offered again; refused: tool calls the guards refused; IDs ran: "
        "executed identifier arguments neither the caller nor a tool gave (mutated); tok/turn: tokens of each "
        "turn's first request, mean and last turn; passes per call that returned; applied: pipecat's summaries "
        "applied per call; pass seconds p50; prompt/output tokens p50; s/call: summary seconds per call, failed "
        "passes included; failed: calls / passes that kept the previous summary (not those the call's end cut)",
        "", "present at need per fact (all runs and sides):"]
    facts = sorted({(c.scenario, k) for c in cells for k in c.present_at_need})
    lines.append(f"{'fact':<44}" + "".join(f"{r:>17}" for r in ROWS))
    for scenario, key in facts:
        cells_of = [[c.present_at_need[key] for c in cells if c.row == r and c.scenario == scenario
                     and key in c.present_at_need] for r in ROWS]
        lines.append(f"{scenario + ':' + key:<44}" + "".join(f"{pct(v):>17}" for v in cells_of))
    return lines


def main() -> None:
    args = arguments()
    started = time.monotonic()
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    temperatures = [float(t) for t in args.temperatures.split(",") if t.strip()]
    sides = [SCRIPTED] + ([PARAPHRASED] if args.paraphrased else [])
    for name in scenarios:
        if args.paraphrased and not paraphrases.available(name):
            sys.exit(f"bench_vs_pipecat: {name} has no paraphrased variants (use --no-paraphrased)")
    if args.tuned_messages is None:
        print("calibrating pipecat tuned (instant summarizer) ...", flush=True)
        tuned, tried, lanes = calibrate(scenarios, sides, len(temperatures))
        shown = ", ".join(f"{m}: {n:.1f}" for m, n in tried.items())
        print(f"  lanes: {lanes:.1f} passes per call; pipecat by max_unsummarized_messages: {shown}; chosen {tuned}",
              flush=True)
    else:
        tuned = args.tuned_messages
    cells = [Cell(s, side, row, r, temperatures[r], tuned) for s in scenarios for side in sides for row in ROWS
             for r in range(len(temperatures))]
    # Run by run, both sides (an interrupted bench still has whole rows), the slow calls first within a run.
    cells.sort(key=lambda c: (c.run, c.side != SCRIPTED, c.row not in MODEL_ROWS, c.scenario != "billing_dispute"))
    done: list[Cell] = []
    if args.cells is not None and args.cells.exists():
        wanted = {(c.scenario, c.side, c.row, c.run, c.temperature, c.tuned) for c in cells}
        for line in args.cells.read_text(encoding="utf-8").splitlines():
            old = Cell(**{**json.loads(line), "pass_tokens": [tuple(t) for t in json.loads(line)["pass_tokens"]]})
            if (old.scenario, old.side, old.row, old.run, old.temperature, old.tuned) in wanted:
                done.append(old)
        have = {(c.scenario, c.side, c.row, c.run, c.temperature, c.tuned) for c in done}
        cells = [c for c in cells if (c.scenario, c.side, c.row, c.run, c.temperature, c.tuned) not in have]
        print(f"{len(done)} calls already in {args.cells}; {len(cells)} to play", flush=True)
    if args.report_only:
        if args.cells is None:
            sys.exit("bench_vs_pipecat: --report-only needs --cells PATH")
        print(f"report only: {len(cells)} calls of the full bench not played")
        cells = []
    total = len(done) + len(cells)
    jobs = max(1, args.jobs)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(play, cell, 1): cell for cell in cells}
        for future in as_completed(futures):
            cell = future.result()
            done.append(cell)
            if args.cells is not None:
                with args.cells.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(asdict(cell)) + "\n")
            present = sum(cell.present_at_need.values())
            print(f"[{len(done)}/{total}, {time.monotonic() - started:.0f} s] {cell.scenario} {cell.side} "
                  f"{cell.row} T={cell.temperature:g}: {cell.wall_seconds:.0f} s, {len(cell.pass_seconds)} passes, "
                  f"present {present}/{len(cell.present_at_need)}, re-asks {cell.reasks}"
                  + (f", FAILED: {cell.failure}" if cell.failure else ""), flush=True)
    wall = time.monotonic() - started
    print()
    print(f"bench_vs_pipecat: {', '.join(scenarios)}; sides {', '.join(sides)}; temperatures "
          f"{', '.join(f'{t:g}' for t in temperatures)} (run r: seed r); pipecat tuned: max_unsummarized_messages="
          f"{tuned}; {jobs} jobs x 1 thread; wall {wall:.0f} s")
    lines = report(done, temperatures)
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps({"scenarios": scenarios, "sides": sides, "temperatures": temperatures,
                                         "tuned_messages": tuned, "wall_seconds": wall,
                                         "cells": [asdict(c) for c in done], "table": lines}, indent=1),
                             encoding="utf-8")
        print(f"report written to {args.json}")


if __name__ == "__main__":
    main()
