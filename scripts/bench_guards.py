"""Guard latency benchmark: date-constraint extraction and the date guard's full re-read.

Run: ``.venv/bin/python scripts/bench_guards.py``. Each section is a function
returning printable lines; add a section (e.g. the ID guard) to ``SECTIONS``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial

from voice_agent.core.dates import clear_cache, extract_constraints
from voice_agent.core.guards.date_contract import DateContract
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.guards.id_guard import IdGuard
from voice_agent.core.ledger import Ledger
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane
from voice_agent.harness.evaluation.date_table import REFERENCE, TABLE

SCHEDULE = ToolSpec("schedule_callback", "", (ToolParam("date", "d", kind=ParamKind.DATE),), mutates=True)
AGENT_LINES = (
    "I can help with that.",
    "How about the 10th?",
    "Let me check that for you.",
    "Shall I call you on Thursday?",
    "Is there anything else?",
)


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """(p50, p99) of ``samples``."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def transcript(turns: int) -> TranscriptLane:
    """A call of ``turns`` turns: caller sentences from the table, agent lines in between."""
    lane = TranscriptLane()
    sentences = [case.text for case in TABLE]
    for turn in range(1, turns + 1):
        if turn % 2:
            lane.append_caller(turn, sentences[(turn // 2) % len(sentences)])
        else:
            lane.append_agent(turn, AGENT_LINES[turn % len(AGENT_LINES)])
    return lane


def bench_extraction(rounds: int = 20) -> list[str]:
    """Per-sentence extraction over the table sentences, dateparser warm."""
    sentences = [case.text for case in TABLE]
    first = timed(lambda: extract_constraints("the 14th of December", REFERENCE))
    for s in sentences:  # warm dateparser's phrase cache: every phrase parsed once
        extract_constraints(s, REFERENCE)
    uncached: list[float] = []
    cached: list[float] = []
    for _ in range(rounds):
        for s in sentences:
            clear_cache()
            uncached.append(timed(partial(extract_constraints, s, REFERENCE)))
            cached.append(timed(partial(extract_constraints, s, REFERENCE)))
    u50, u99 = percentiles(uncached)
    c50, c99 = percentiles(cached)
    return [
        f"dates: first call in process (imports + warms dateparser): {first * 1e3:.1f} ms",
        f"dates: extraction per sentence, rule layer run (n={len(uncached)}): p50 {u50 * 1e6:.0f} µs, "
        f"p99 {u99 * 1e6:.0f} µs",
        f"dates: extraction per sentence, cached sentence: p50 {c50 * 1e6:.1f} µs, p99 {c99 * 1e6:.1f} µs",
    ]


def cold_and_warm(label: str, make: Callable[[], Callable[[], object]], rounds: int) -> list[str]:
    """p50/p99 of ``make()()`` cold (a fresh object, extraction cache cleared) and warm (one object, called again)."""
    cold: list[float] = []
    for _ in range(rounds):
        clear_cache()
        cold.append(timed(make()))
    call = make()
    call()
    warm = [timed(call) for _ in range(rounds * 4)]
    k50, k99 = percentiles(cold)
    w50, w99 = percentiles(warm)
    verdict = "ok" if w99 < 0.020 else "OVER TARGET"
    return [
        f"dates: {label}, cold (n={len(cold)}): p50 {k50 * 1e3:.2f} ms, p99 {k99 * 1e3:.2f} ms",
        f"dates: {label}, warm (n={len(warm)}): p50 {w50 * 1e3:.2f} ms, p99 {w99 * 1e3:.2f} ms "
        f"(target p99 < 20 ms: {verdict})",
    ]


def bench_reread(turns: int = 200, rounds: int = 50) -> list[str]:
    """DateGuard.check re-reading a ``turns``-turn lane: cold (fresh guard, no cached extraction) and warm."""
    lane = transcript(turns)
    value = {"date": "2026-12-10"}
    return cold_and_warm(f"DateGuard.check, {turns}-turn re-read",
                         lambda: partial(DateGuard(REFERENCE).check, SCHEDULE, value, lane), rounds)


def bench_contract(turns: int = 200, rounds: int = 50) -> list[str]:
    """DateContract.decide (the rules reader, the confirm rule and the read-back) on a ``turns``-turn lane."""
    lane = transcript(turns)
    value = {"date": "2026-12-10"}
    return cold_and_warm(f"DateContract.decide, {turns}-turn call",
                         lambda: partial(DateContract(DateGuard(REFERENCE)).decide, SCHEDULE, value, lane), rounds)


def bench_id_guard(rounds: int = 3000) -> list[str]:
    """ID guard on a full ledger (64 entries) over 6 raw turns: exact hit, mutated, unknown."""
    ledger = Ledger(capacity=64)
    for i in range(64):
        ledger.record_from_tool(f"invoice_{i}", f"INV-2026-{1000 + i:04d}", 1, "list_invoices", "invoice_id")
    lane = transcript(12)
    spec = ToolSpec("issue_credit", "", (ToolParam("invoice_id", "", kind=ParamKind.IDENTIFIER),), mutates=True)
    guard = IdGuard()
    lines = []
    for label, value in (("known", "INV-2026-1063"), ("mutated", "INV-2026-1O63"), ("unknown", "INV-1999-0001")):
        recent = lane.entries[-12:]
        samples = [timed(partial(guard.check, spec, {"invoice_id": value}, ledger, recent)) for _ in range(rounds)]
        p50, p99 = percentiles(samples)
        lines.append(f"ids: IdGuard.check, 64-entry ledger, {label:<8}: p50 {p50 * 1e6:.1f} µs, p99 {p99 * 1e6:.1f} µs")
    return lines


SECTIONS: list[Callable[[], list[str]]] = [bench_extraction, bench_reread, bench_contract, bench_id_guard]


def main() -> None:
    """Runs every section and prints its lines."""
    for section in SECTIONS:
        for line in section():
            print(line)


if __name__ == "__main__":
    main()
