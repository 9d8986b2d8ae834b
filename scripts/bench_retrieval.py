"""Speculative retrieval benchmark: the scripted calls' caller lines, with and without speculation.

Run: ``.venv/bin/python scripts/bench_retrieval.py [--word-ms 80] [--endpoint-ms 150] [--withhold 1]``.

Every caller line of every scenario in ``config/scenarios/`` is replayed as word-by-word interim transcripts
(``--word-ms`` apart), then, after ``--endpoint-ms`` of silence (the endpointing delay before an STT's final), the
final transcript. ``--withhold N`` keeps the last N words out of the interims, so the final always brings words the
speculation never saw (N=0: the last interim equals the final). The same lines go through a second retriever
with speculation off: every final retrieved on the critical path.

Printed per mode: critical-path retrieval latency (median, p95) over all turns and over knowledge-needing turns
(turns whose final text retrieves something above the floor without speculation), the share of those served from
the speculative cache, how often the served chunks equal a fresh retrieval of the final, retrievals per turn and
CPU time (``time.process_time``, worker threads included).
Targets: >= 80% of knowledge-needing turns served from the cache; median critical path on a hit < 1 ms;
at most 2 retrievals per turn on average (speculative and critical-path together).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from voice_agent.harness.scenarios import list_scenarios, load_scenario  # noqa: E402
from voice_agent.harness.stats import percentile  # noqa: E402
from voice_agent.retrieval.index import HybridIndex  # noqa: E402
from voice_agent.retrieval.speculative import SpeculativeConfig, SpeculativeRetriever, TurnRetrieval  # noqa: E402


@dataclass
class ModeRun:
    """One mode's records over all calls.

    Attributes:
        name: ``speculative`` or ``critical path only``.
        records: One per caller line, in order.
        retrievals: Retrievals run (speculative and critical-path).
        cpu_s: Process CPU time of the mode, worker threads included.
        wall_s: Wall time of the mode.
    """

    name: str
    records: list[TurnRetrieval] = field(default_factory=list)
    retrievals: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0


def caller_lines() -> list[tuple[str, list[str]]]:
    """(scenario id, caller lines) for every scenario."""
    out: list[tuple[str, list[str]]] = []
    for name in list_scenarios():
        scenario = load_scenario(name)
        out.append((scenario.id, [t.text for t in scenario.turns if t.speaker == "caller"]))
    return out


async def run_mode(
    index: HybridIndex,
    calls: list[tuple[str, list[str]]],
    *,
    speculate: bool,
    config: SpeculativeConfig,
    word_s: float,
    endpoint_s: float,
    withhold: int,
) -> ModeRun:
    """Replays every call through one fresh retriever per call."""
    run = ModeRun("speculative" if speculate else "critical path only")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _call, lines in calls:
        retriever = SpeculativeRetriever(index, config)
        for line in lines:
            if speculate:
                words = line.split()
                for n in range(1, max(len(words) - withhold, 0) + 1):
                    retriever.on_interim(" ".join(words[:n]))
                    await asyncio.sleep(word_s)
                await asyncio.sleep(endpoint_s)
            run.records.append(await retriever.on_final(line))
        run.retrievals += retriever.retrievals
        await retriever.close()
    run.cpu_s, run.wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    return run


def report(spec: ModeRun, base: ModeRun) -> list[str]:
    """The side-by-side table and the targets."""
    needing = [i for i, r in enumerate(base.records) if r.chunk_ids]
    turns = len(base.records)

    def row(label: str, a: str, b: str) -> str:
        return f"  {label:<56} {a:>16} {b:>20}"

    def ms(values: Sequence[float]) -> str:
        return f"{statistics.median(values):.3f} / {percentile(values, 0.95) or 0.0:.3f}" if values else "-"

    lines = [row("", spec.name, base.name), row("-" * 56, "-" * 16, "-" * 20)]
    for run_label, pick in (("all turns", range(turns)), ("knowledge-needing turns", needing)):
        lines.append(row(f"critical path ms, median / p95 ({run_label})",
                         ms([spec.records[i].critical_path_ms for i in pick]),
                         ms([base.records[i].critical_path_ms for i in pick])))
    hits = [i for i in needing if spec.records[i].status == "hit"]
    from_cache = [i for i in hits if spec.records[i].source == "cache"]
    lines.append(row("critical path ms on hits, median / p95", ms([spec.records[i].critical_path_ms for i in hits]),
                     "-"))
    share = len(hits) / len(needing) if needing else 0.0
    lines.append(row("served from speculation (knowledge-needing)", f"{len(hits)}/{len(needing)} = {share:.0%}",
                     f"0/{len(needing)}"))
    lines.append(row("  of which already cached / awaited in flight",
                     f"{len(from_cache)} / {len(hits) - len(from_cache)}", "-"))
    same = sum(1 for i in hits if spec.records[i].chunk_ids == base.records[i].chunk_ids)
    lines.append(row("hits with the same chunks as a fresh retrieval", f"{same}/{len(hits)}", "-"))
    top1 = sum(1 for i in hits if spec.records[i].chunk_ids[:1] == base.records[i].chunk_ids[:1])
    lines.append(row("hits with the same first chunk as a fresh one", f"{top1}/{len(hits)}", "-"))
    stale = [spec.records[i].staleness_words for i in hits]
    lines.append(row("staleness of hits, words: median / max",
                     f"{statistics.median(stale):.0f} / {max(stale)}" if stale else "-", "-"))
    all_hits = sum(1 for r in spec.records if r.status == "hit")
    lines.append(row("hits over all turns (incl. nothing injected)", f"{all_hits}/{turns}", f"0/{turns}"))
    lines.append(row("retrievals per turn", f"{spec.retrievals / turns:.2f}", f"{base.retrievals / turns:.2f}"))
    lines.append(row("CPU s total / ms per turn", f"{spec.cpu_s:.2f} / {spec.cpu_s / turns * 1000:.1f}",
                     f"{base.cpu_s:.2f} / {base.cpu_s / turns * 1000:.1f}"))
    lines.append(row("wall s (replay paced in real time)", f"{spec.wall_s:.1f}", f"{base.wall_s:.1f}"))
    hit_ms = statistics.median([spec.records[i].critical_path_ms for i in hits]) if hits else float("inf")
    lines.append("")
    lines.append(f"  target: >= 80% of knowledge-needing turns from the cache: {share:.0%} "
                 f"{'MET' if share >= 0.8 else 'MISSED'}")
    lines.append(f"  target: median critical path on a hit < 1 ms: {hit_ms:.3f} ms "
                 f"{'MET' if hit_ms < 1.0 else 'MISSED'}")
    per_turn = spec.retrievals / turns
    lines.append(f"  target: <= 2 retrievals per turn on average: {per_turn:.2f} "
                 f"{'MET' if per_turn <= 2 else 'MISSED'}")
    return lines


async def main(argv: Sequence[str] | None = None) -> None:
    """Parses arguments, runs both modes and prints the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--word-ms", type=float, default=80.0, help="gap between interims (default 80)")
    parser.add_argument("--endpoint-ms", type=float, default=150.0, help="silence before the final (default 150)")
    parser.add_argument("--debounce-ms", type=float, default=50.0, help="speculation debounce (default 50)")
    parser.add_argument("--withhold", type=int, default=1, help="last words never seen as interims (default 1)")
    parser.add_argument("--threshold", type=float, default=SpeculativeConfig().match_threshold,
                        help="least Jaccard similarity for a cached hit")
    parser.add_argument("--requery-below", type=float, default=SpeculativeConfig().requery_below,
                        help="retrieve an interim only below this Jaccard similarity with the turn's last one "
                             "(1.0: every interim)")
    parser.add_argument("--max-per-turn", type=int, default=SpeculativeConfig().max_per_turn,
                        help="most speculative retrievals per turn (default: no limit)")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    index = HybridIndex.load()
    print(f"index: {len(index.chunks)} chunks, {'from the disk cache' if index.from_cache else 'embedded now'} "
          f"in {(time.perf_counter() - t0) * 1000:.0f} ms (key {index.key[:12]})")
    index.search("warm up the model")
    calls = caller_lines()
    turns = sum(len(lines) for _, lines in calls)
    print(f"calls: {', '.join(c for c, _ in calls)}; {turns} caller lines, "
          f"{sum(len(line.split()) for _, lines in calls for line in lines) / turns:.1f} words on average")
    print(f"replay: interims every {args.word_ms:.0f} ms, final {args.endpoint_ms:.0f} ms after the last one, "
          f"last {args.withhold} word(s) only in the final; debounce {args.debounce_ms:.0f} ms, "
          f"match threshold {args.threshold}, requery below {args.requery_below}, at most {args.max_per_turn} "
          "per turn")
    config = SpeculativeConfig(debounce_s=args.debounce_ms / 1000, match_threshold=args.threshold,
                               requery_below=args.requery_below, max_per_turn=args.max_per_turn)
    common = {"config": config, "word_s": args.word_ms / 1000, "endpoint_s": args.endpoint_ms / 1000,
              "withhold": args.withhold}
    base = await run_mode(index, calls, speculate=False, **common)
    spec = await run_mode(index, calls, speculate=True, **common)
    print()
    print("\n".join(report(spec, base)))


if __name__ == "__main__":
    asyncio.run(main())
