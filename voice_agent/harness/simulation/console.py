"""What ``voice-agent simulate`` prints: a live transcript, progress, and the side-by-side table."""

from __future__ import annotations

import shutil
from typing import Any

from rich.console import Console
from rich.table import Table

from voice_agent.call.session import CallSession
from voice_agent.recording.record import TurnRecord
from voice_agent.retrieval.speculative import SEARCH_BUDGET_PER_TURN

# Piped output (CI logs, `| tee`) has no terminal width; the side-by-side table needs about 130 columns.
console = Console(highlight=False, width=max(shutil.get_terminal_size((130, 40)).columns, 130))


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def print_turn(policy: str, session: CallSession, record: TurnRecord) -> None:
    """One live line per turn: words, latency, lane sizes, guard verdicts."""
    state = session.state
    latency = f"{record.first_response_ms:6.1f} ms" if record.first_response_ms is not None else "      - "
    lanes = (f"tok {record.tokens:>5} (facts {record.lane_tokens.get('known_facts', 0)}, "
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
        notes.append("[yellow]asked again for " + ", ".join(record.reasks) + "[/yellow]")
    if record.unledgered:
        notes.append("[red]ran with an unsourced identifier: " + ", ".join(
            f"{u['tool']}.{u['argument']}" for u in record.unledgered) + "[/red]")
    if record.rejected_offers:
        notes.append("[yellow]offered a ruled-out option: " + ", ".join(record.rejected_offers) + "[/yellow]")
    if record.errors:
        notes.append("[red]error: " + "; ".join(record.errors) + "[/red]")
    if record.output_blocks:
        notes.append("[red]output blocked: " + ", ".join(record.output_blocks) + "[/red]")
    if record.retrieval.get("chunk_ids"):
        r = record.retrieval
        chunks = ", ".join(f"{c} ({score:.2f})" for c, score in zip(r["chunk_ids"], r["scores"], strict=False))
        notes.append(f"[cyan]knowledge {r['status']} ({r['source']}, {r['critical_path_ms']:.2f} ms): {chunks}[/cyan]")
    if record.summary_pass is not None:
        lost = sorted(set(record.summary_pass["facts_in"]) - set(record.summary_pass["facts_out"]))
        # What the summary text itself dropped; under lanes the ledger and slots still hold those facts.
        notes.append(f"summary pass: {len(record.summary_pass['facts_in'])} facts in, the summary text dropped "
                     f"{', '.join(lost) or 'none'}")
    if notes:
        console.print("        " + " · ".join(notes))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def print_comparison(report: dict[str, Any]) -> None:
    """The side-by-side table, scripted and paraphrased: facts at need (captured, kept), re-asks, tokens, guards."""
    sides = report["sides"]
    columns = [(side, name) for side in sides for name in sides[side]]
    title = (f"{report['scenario']}: {report['runs']} run(s) per policy and side, summarizer: {report['summarizer']}, "
             f"K={report['keep']}, S={report['every']}")
    table = Table(title=title)
    table.add_column("measure", min_width=32)  # a busy machine's wide latency cells must not fold the fact names
    for side, name in columns:
        table.add_column(f"{name}\n{side}", justify="right", overflow="fold")

    def row(label: str, cell: Any) -> None:
        table.add_row(label, *[cell(sides[side][name]) for side, name in columns])

    first = sides[columns[0][0]][columns[0][1]]
    for i, fact in enumerate(first["facts"]):
        row(f"{fact['key']} @ turn {fact['needed_turn']} (said {fact['stated_turn']})",
            lambda p, i=i: _pct(p["facts"][i]["present_at_need"]))
        row("  captured (in KNOWN FACTS or summary)", lambda p, i=i: _pct(p["facts"][i]["captured"]))
        row("  kept once captured", lambda p, i=i: _pct(p["facts"][i]["kept_once_captured"]))
    paired = report.get("lanes_minus_rolling") or {}
    if paired:
        def versus(side: str, name: str, cell: Any) -> str:
            found = paired.get(side)
            return cell(found) if found and name == "lanes" else ""

        def worst(p: dict[str, Any]) -> str:
            w = p["worst"]
            return "-" if w is None else f"{w['points']:+.1f} pts"

        table.add_row("lanes - rolling, worst fact",
                      *[versus(side, name, worst) for side, name in columns])
        table.add_row("  runs rolling had, lanes not",
                      *[versus(side, name, lambda p: str(len(p["lost"]))) for side, name in columns])
    kinds = list(dict.fromkeys(k for side in sides.values() for p in side.values()
                               for k in p.get("actions_correct", {})))
    for kind in kinds:
        row(f"{kind} done right", lambda p, kind=kind: _pct(p.get("actions_correct", {}).get(kind)))
    row("re-asks per call", lambda p: f"{p['reasks_per_call']:.2f}")
    row("ruled-out options offered again", lambda p: str(p["rejected_offers"]))
    row("tokens per request (mean)", lambda p: f"{p['tokens_per_request']:.0f}")
    row("guard rejections (all runs)", lambda p: str(p["guard_rejections"]))
    row("executed calls with unledgered IDs", lambda p: str(p["unledgered_executed"]))
    row("failed calls (errors, no answer)", lambda p: str(p["failed_runs"]))
    if any(p.get("retrieval") for side in sides.values() for p in side.values()):
        def hits(p: dict[str, Any]) -> str:
            r = p.get("retrieval") or {}
            rate = r.get("hit_rate")
            return "-" if rate is None else f"{rate * 100:.0f} % of {r['turns_with_chunks']} turns"

        row("knowledge served from speculation", hits)
        row("retrieval on the critical path p50",
            lambda p: f"{(p.get('retrieval') or {}).get('critical_path_ms', {}).get('p50') or 0:.2f} ms")

        def searches(p: dict[str, Any]) -> str:
            r = p.get("retrieval") or {}
            return "-" if not r else f"{r['searches_per_turn']:.2f}{' OVER' if r['over_budget'] else ''}"

        row(f"searches per turn (budget {SEARCH_BUDGET_PER_TURN:g})", searches)
    row("first-response latency p50 / p95",
        lambda p: f"{p['latency_ms']['p50'] or 0:.1f} / {p['latency_ms']['p95'] or 0:.1f} ms")
    console.print(table)
    for side, found in paired.items():
        points = ", ".join(f"{key} {value:+.1f}" for key, value in found["by_fact"].items())
        console.print(f"lanes - rolling at need, {side}, same runs and seeds (pts): {points}")
    if report.get("variants"):
        folder = f"config/scenarios/paraphrases/{report.get('paraphrase_set', '')}"
        console.print(f"paraphrased: {', '.join(report['variants'])} ({folder}), run r plays variant r mod 3")
    for side, policies in sides.items():
        for name, p in policies.items():
            if p["first_failure"]:
                console.print(f"[red]{name} ({side}): {p['failed_runs']} call(s) failed; first: "
                              f"{p['first_failure']}[/red]")
