"""Benchmarks the pass triggers' per-turn cost: reference and threshold against the cadence, same run.

Run: .venv/bin/python scripts/bench_trigger.py

Each trigger schedules the start of every turn of one scripted call (caller line, a tool call every fourth
turn, agent line; 20 ledger entries). The cost is the time of ``PassTrigger.schedule`` alone (no
summarizer runs: passes are only scheduled), per turn, measured over the turns of each stretch; the
``reference`` trigger must stay flat as the call grows (it looks at the last K turns and the turns
waiting, never the whole call).
"""

from __future__ import annotations

import datetime as dt
import statistics
import sys
import time

from loguru import logger

from voice_agent.core.call_state import CallState
from voice_agent.core.pass_trigger import PassTrigger
from voice_agent.core.policy import ContextPolicy, Trigger
from voice_agent.core.transcript import ToolOutcome
from voice_agent.harness.stats import percentile

TOPICS = ("the router", "roaming", "the mobile app", "paperless letters", "the family plan", "voicemail")
STRETCHES = ((1, 10), (11, 100), (101, 1000))


def scripted_turn(state: CallState, n: int) -> None:
    topic = TOPICS[(n // 7) % len(TOPICS)]  # topics change every 7 turns and come back
    state.start_turn(f"About {topic}, turn {n}: how does that work with my invoice INV-2026-{n % 40:04d}?")


def finish_turn(state: CallState, n: int) -> None:
    if n % 4 == 0:
        args = {"invoice_id": f"INV-2026-{n % 40:04d}"}
        state.transcript.append_tool_call(state.turn, "get_invoice", f"c{n}", args)
        state.transcript.append_tool_result(state.turn, "get_invoice", f"c{n}", {"status": "ok", **args},
                                            ToolOutcome.COMPLETED)
    state.record_agent("Let me look at that for you. It is set up online in a few minutes.")


def per_turn_us(trigger: Trigger, turns: int) -> dict[int, float]:
    """Microseconds ``schedule`` took at the start of each turn 1..``turns``."""
    state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(keep=6, every=5, trigger=trigger))
    for i in range(20):
        state.ledger.record_from_tool(f"invoice_{i}", f"INV-2026-{i:04d}", 1, "list_invoices", "invoice_id")
    scheduler = PassTrigger()
    out = {}
    for n in range(1, turns + 1):
        scripted_turn(state, n)
        t0 = time.perf_counter_ns()
        scheduler.schedule(state)
        out[n] = (time.perf_counter_ns() - t0) / 1000
        finish_turn(state, n)
    return out


def main() -> None:
    runs = {t: per_turn_us(t, STRETCHES[-1][1]) for t in (Trigger.CADENCE, Trigger.THRESHOLD, Trigger.REFERENCE)}
    print("Per-turn cost of scheduling (µs, one 1000-turn call, 20 ledger entries, K=6)")
    # The median is the figure: on a shared machine the mean and p99 carry the other processes' preemptions.
    print(f"{'turns':>10} {'trigger':<10} {'p50':>8} {'p99':>8} {'mean':>8} {'x cadence (p50)':>16}")
    for lo, hi in STRETCHES:
        base = percentile([runs[Trigger.CADENCE][n] for n in range(lo, hi + 1)], 0.5) or 1.0
        for trigger, samples in runs.items():
            stretch = [samples[n] for n in range(lo, hi + 1)]
            p50 = percentile(stretch, 0.5) or 0.0
            print(f"{f'{lo}-{hi}':>10} {trigger.value:<10} {p50:>8.1f} "
                  f"{percentile(stretch, 0.99) or 0:>8.1f} {statistics.mean(stretch):>8.1f} {p50 / base:>16.1f}")
    ref = runs[Trigger.REFERENCE]
    early = percentile([ref[n] for n in range(11, 101)], 0.5) or 1.0
    late = percentile([ref[n] for n in range(901, 1001)], 0.5) or 0.0
    print(f"reference p50, turns 901-1000 vs 11-100: {late / early:.2f}x (flat: the cost does not grow with the call)")


if __name__ == "__main__":
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    main()
