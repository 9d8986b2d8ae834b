"""What ``voice-agent simulate`` prints: a live transcript, progress, and the side-by-side table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from voice_agent.session import CallSession, TurnRecord

console = Console(highlight=False)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def print_turn(policy: str, session: CallSession, record: TurnRecord) -> None:
    """One live line per turn: words, latency, lane sizes, guard verdicts."""
    state = session.state
    latency = f"{record.first_response_ms:6.1f} ms" if record.first_response_ms is not None else "      - "
    lanes = (f"tok {record.total_tokens:>5} (facts {record.lane_tokens.get('known_facts', 0)}, "
             f"summary {record.lane_tokens.get('summary', 0)}, recent {record.lane_tokens.get('recent', 0)}) "
             f"ledger {len(state.ledger)} slots {len(state.slots.filled())}")
    console.print(f"[dim]{policy:<7}[/dim] [bold]T{record.turn:02d}[/bold] {latency}  {lanes}")
    console.print(f"        caller: {_clip(record.caller, 110)}")
    for text in record.agent:
        console.print(f"        agent:  {_clip(text, 110)}")
    notes = []
    if record.executed:
        notes.append("ran " + ", ".join(record.executed))
    if record.rejections:
        notes.append("[red]guard rejected " + ", ".join(f"{r['tool']} ({r['verdict']})" for r in record.rejections)
                     + "[/red]")
    if record.reasks:
        notes.append("[yellow]asked for " + ", ".join(record.reasks) + "[/yellow]")
    if record.output_blocks:
        notes.append("[red]output blocked: " + ", ".join(record.output_blocks) + "[/red]")
    if record.retrieval.get("chunk_ids"):
        r = record.retrieval
        chunks = ", ".join(f"{c} ({score:.2f})" for c, score in zip(r["chunk_ids"], r["scores"], strict=False))
        notes.append(f"[cyan]knowledge {r['status']} ({r['source']}, {r['critical_path_ms']:.2f} ms): {chunks}[/cyan]")
    if record.drop is not None:
        dropped = ", ".join(sorted(record.drop.dropped)) or "nothing"
        notes.append(f"summary pass: {len(record.drop.keys_in)} facts in, dropped {dropped}")
    if notes:
        console.print("        " + " · ".join(notes))


def print_comparison(report: dict[str, Any]) -> None:
    """The side-by-side table: facts present at need, re-asks, tokens per request, guard figures."""
    policies = report["policies"]
    names = list(policies)
    title = (f"{report['scenario']}: {report['runs']} run(s) per policy, retention R={report['retention']:g}, "
             f"K={report['keep']}, S={report['every']}")
    table = Table(title=title)
    table.add_column("measure")
    for name in names:
        table.add_column(name, justify="right")
    first = policies[names[0]]
    for i, fact in enumerate(first["facts"]):
        label = f"{fact['key']} @ turn {fact['needed_turn']} (said {fact['stated_turn']})"
        table.add_row(label, *[f"{policies[n]['facts'][i]['present_at_need'] * 100:.1f} %" for n in names])
    table.add_row("re-asks per call", *[f"{policies[n]['reasks_per_call']:.2f}" for n in names])
    table.add_row("tokens per request (mean)", *[f"{policies[n]['tokens_per_request']:.0f}" for n in names])
    table.add_row("guard rejections (all runs)", *[str(policies[n]["guard_rejections"]) for n in names])
    table.add_row("executed calls with unledgered IDs", *[str(policies[n]["unledgered_executed"]) for n in names])
    if any(policies[n].get("retrieval") for n in names):
        def hits(n: str) -> str:
            r = policies[n].get("retrieval") or {}
            rate = r.get("hit_rate")
            return "-" if rate is None else f"{rate * 100:.0f} % of {r['turns_with_chunks']} turns"

        table.add_row("knowledge served from speculation", *[hits(n) for n in names])
        table.add_row("retrieval on the critical path p50", *[
            f"{(policies[n].get('retrieval') or {}).get('critical_path_ms', {}).get('p50') or 0:.2f} ms"
            for n in names])
    table.add_row("first-response latency p50 / p95", *[
        f"{policies[n]['latency_ms']['p50'] or 0:.1f} / {policies[n]['latency_ms']['p95'] or 0:.1f} ms" for n in names])
    console.print(table)
