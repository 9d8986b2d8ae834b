"""``voice-agent eval --html DIR``: one self-contained HTML page with the evaluation's plots.

Four figures, each a PNG embedded as base64 (and also written to ``DIR`` for reuse):

* ``fig-presence-timeline``: per call, facts x turns, one panel per policy: was the
  fact's value in the assembled context at each turn;
* ``fig-survival``: presence at need against the number of summary rewrites, with the
  ``R^n`` curve of the summarizer's retention overlaid;
* ``fig-tokens``: estimated tokens per LLM request by turn, per policy;
* ``fig-date-guard``: the date guard's verdicts on the recorded date arguments and on
  each kind of perturbation.

Tables: presence by fact kind, presence by distance bucket (statement to action) per
policy and fact kind, the ID guard's verdicts (perturbed records, their perturbed
arguments, the clean twins' same arguments, clean records), the perturbed-record
scores (caught, twin accepted, pair; missing twins listed) and the date guard. Every
heading names the harvest mode the figures were measured with.

Everything is drawn from the JSON report alone, so a saved report can be re-rendered.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

FIGURE_IDS = ("fig-presence-timeline", "fig-survival", "fig-tokens", "fig-date-guard")
"""The ids of the four figures in the page, in order."""

POLICY_COLOURS = {"lanes": "#1b9e77", "rolling": "#d95f02", "window": "#7570b3"}
VERDICT_COLOURS = {"ok": "#4daf4a", "unconfirmed": "#ff7f00", "conflict": "#e41a1c", "superseded": "#984ea3"}
TIMELINE_CALLS = 3
"""Calls drawn in the presence timeline by default (those with the most facts x turns)."""


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def _colour(policy: str) -> str:
    return POLICY_COLOURS.get(policy, "#666666")


def timeline_figure(call: str, timeline: Mapping[str, Any]) -> Figure:
    """Facts x turns for one call, one panel per policy (green present, red absent, grey not yet said)."""
    policies: Mapping[str, Mapping[str, Sequence[bool | None]]] = timeline["policies"]
    exchanges = int(timeline["exchanges"])
    facts = sorted({f for series in policies.values() for f in series})
    fig = Figure(figsize=(3.2 * len(policies) + 2.5, 0.22 * len(facts) + 1.4))
    axes = fig.subplots(1, len(policies), squeeze=False, sharey=True)[0]
    cmap = ListedColormap(["#d73027", "#1a9850"]).with_extremes(bad="#dddddd")
    for ax, (policy, series) in zip(axes, policies.items(), strict=True):
        grid = [[math.nan] * exchanges for _ in facts]
        for i, fact in enumerate(facts):
            for t, value in enumerate(series.get(fact, [])[:exchanges]):
                grid[i][t] = math.nan if value is None else float(value)
        ax.imshow(grid, aspect="auto", cmap=cmap, vmin=0, vmax=1, interpolation="nearest",
                  extent=(0.5, exchanges + 0.5, len(facts) - 0.5, -0.5))
        ax.set_yticks(range(len(facts)), labels=facts, fontsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(f"{call}: {policy}", fontsize=8)
        ax.set_xlabel("turn", fontsize=8)
    fig.tight_layout()
    return fig


def survival_figure(points: Sequence[Mapping[str, Any]], retention: float) -> Figure:
    """Observed presence at need against summary rewrites per policy, with R^n overlaid."""
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    policies = sorted({str(p["policy"]) for p in points})
    most = max((int(p["rewrites"]) for p in points), default=0)
    for policy in policies:
        mine = sorted((p for p in points if p["policy"] == policy), key=lambda p: int(p["rewrites"]))
        ax.plot([p["rewrites"] for p in mine], [p["rate"] for p in mine], marker="o", color=_colour(policy),
                label=f"{policy} (observed)")
        for p in mine:
            ax.annotate(f"n={p['n']}", (p["rewrites"], p["rate"]), fontsize=6, textcoords="offset points",
                        xytext=(3, -9))
    xs = [x / 10 for x in range(0, max(most, 4) * 10 + 1)]
    ax.plot(xs, [retention**x for x in xs], linestyle="--", color="black", label=f"R^n, R={retention:g}")
    ax.set_xlabel("summary rewrites between the caller's last mention and the action")
    ax.set_ylabel("value in context at the action")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    ax.set_title("Survival vs rewrites")
    fig.tight_layout()
    return fig


def tokens_figure(policies: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Mean estimated tokens of each turn's first request, by turn, per policy."""
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    for policy, body in policies.items():
        by_turn = {int(t): float(v) for t, v in dict(body.get("tokens_by_turn", {})).items()}
        turns = sorted(by_turn)
        ax.plot(turns, [by_turn[t] for t in turns], marker=".", color=_colour(policy), label=policy)
    ax.set_xlabel("turn")
    ax.set_ylabel("tokens per request (chars/4, mean over calls)")
    ax.legend(fontsize=7)
    ax.set_title("Tokens per request by turn")
    fig.tight_layout()
    return fig


def date_guard_figure(accuracy: Mapping[str, Any] | None) -> Figure:
    """Stacked verdict counts: recorded date arguments, then each perturbation kind."""
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    if not accuracy:
        ax.text(0.5, 0.5, "no date-guard audit (run without --no-perturb)", ha="center", va="center")
        return fig
    groups: list[tuple[str, Mapping[str, int]]] = [("recorded", accuracy["recorded"]["verdicts"])]
    groups += [(kind, body["verdicts"]) for kind, body in accuracy["perturbed"].items()]
    bottoms = [0.0] * len(groups)
    for verdict, colour in VERDICT_COLOURS.items():
        heights = [float(v.get(verdict, 0)) for _, v in groups]
        ax.bar([g for g, _ in groups], heights, bottom=bottoms, color=colour, label=verdict)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for i, (name, _) in enumerate(groups):
        rate = (accuracy["recorded"]["false_alarm_rate"] if name == "recorded"
                else accuracy["perturbed"][name]["rate"])
        label = "false alarms" if name == "recorded" else "caught"
        if rate is not None:
            ax.annotate(f"{label} {rate:.0%}", (i, bottoms[i]), ha="center", fontsize=7, textcoords="offset points",
                        xytext=(0, 3))
    ax.set_ylim(0, max([*bottoms, 1.0]) * 1.15)
    ax.set_ylabel("date arguments")
    ax.legend(fontsize=7, loc="upper center")
    ax.set_title("Date guard: recorded actions (should be ok) and perturbations (should not)")
    fig.tight_layout()
    return fig


def _pick_calls(timelines: Mapping[str, Mapping[str, Any]], count: int) -> list[str]:
    def size(call: str) -> int:
        t = timelines[call]
        facts = {f for s in t["policies"].values() for f in s}
        return int(t["exchanges"]) * len(facts)

    return sorted(timelines, key=lambda c: (-size(c), c))[:count]


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pct(rate: Any) -> str:
    return "-" if rate is None else f"{float(rate):.1%}"


BUCKET_ORDER = ("0-6", "7-15", "16-30", "31+", "n/a")
KIND_ORDER = ("identifier", "date_constraint", "other", "unlinked")
ID_VERDICTS = ("ok", "unverified", "mutated", "unknown")


def distance_rows(policies: Mapping[str, Any]) -> list[list[Any]]:
    """Fact kind x distance bucket rows, one cell per policy: ``rate (present/n)``."""
    rows: list[list[Any]] = []
    kinds = [k for k in KIND_ORDER if any(k in b.get("by_kind_bucket", {}) for b in policies.values())]
    kinds += sorted({k for b in policies.values() for k in b.get("by_kind_bucket", {})} - set(kinds))
    for kind in kinds:
        buckets = {label for b in policies.values() for label in b.get("by_kind_bucket", {}).get(kind, {})}
        for label in [*[x for x in BUCKET_ORDER if x in buckets], *sorted(buckets - set(BUCKET_ORDER))]:
            cells = []
            for body in policies.values():
                cell = body.get("by_kind_bucket", {}).get(kind, {}).get(label)
                cells.append(f"{_pct(cell['rate'])} ({cell['present']}/{cell['n']})" if cell else "-")
            rows.append([kind, label, *cells])
    return rows


def id_guard_rows(guards: Mapping[str, Any], expect: Mapping[str, Any]) -> list[list[Any]]:
    """ID-guard verdicts: perturbed records, their perturbed arguments, the twins' same arguments, clean records."""
    sets = guards.get("id_by_set", {})
    at = expect.get("at_argument", {}).get("id_guard", {})
    columns = [sets.get("perturbed", {}), at.get("perturbed", {}), at.get("twin", {}), sets.get("clean", {})]
    verdicts = [*ID_VERDICTS, *sorted({v for c in columns for v in c} - set(ID_VERDICTS))]
    return [[verdict, *[c.get(verdict, 0) for c in columns]] for verdict in verdicts]


def expect_rows(expect: Mapping[str, Any]) -> list[list[Any]]:
    """Per perturbation kind (then all): pairs, caught, twin accepted, pair, refused, missing twins, unlocated."""
    def cells(body: Mapping[str, Any]) -> list[Any]:
        return [body["n"], f"{body['caught']} ({_pct(body['caught_rate'])})",
                f"{body['twin_accepted']} ({_pct(body['twin_accepted_rate'])})",
                f"{body['pair']} ({_pct(body['pair_rate'])})", f"{body['refused']} ({_pct(body['refused_rate'])})",
                body["missing_twin"], body["unlocated"]]

    rows = [[kind, *cells(body)] for kind, body in expect.get("by_kind", {}).items()]
    if expect.get("all"):
        rows.append(["all", *cells(expect["all"])])
    return rows


def render_html(report: Mapping[str, Any], out_dir: Path | str, *, timeline_calls: int = TIMELINE_CALLS) -> Path:
    """Writes ``index.html`` (self-contained) and the figure PNGs into ``out_dir``.

    Args:
        report: The JSON report of ``voice-agent eval``.
        out_dir: Directory to write into (created if missing).
        timeline_calls: How many calls get a presence timeline.

    Returns:
        The path of ``index.html``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    retention = float(report.get("config", {}).get("retention", 0.9))
    timelines: Mapping[str, Any] = report.get("timelines", {})
    images: dict[str, list[tuple[str, bytes]]] = {fid: [] for fid in FIGURE_IDS}
    for i, call in enumerate(_pick_calls(timelines, timeline_calls)):
        images["fig-presence-timeline"].append((f"presence-timeline-{i + 1}.png",
                                                _png(timeline_figure(call, timelines[call]))))
    images["fig-survival"].append(("survival.png", _png(survival_figure(report.get("survival", []), retention))))
    images["fig-tokens"].append(("tokens.png", _png(tokens_figure(report.get("policies", {})))))
    images["fig-date-guard"].append(("date-guard.png", _png(date_guard_figure(report.get("date_guard_accuracy")))))
    config = report.get("config", {})
    harvest = str(report.get("harvest", config.get("harvest", "")))
    tag = f"(harvest={harvest})"
    titles = {
        "fig-presence-timeline": f"Fact presence by turn (green: in context, red: lost, grey: not said yet) {tag}",
        "fig-survival": f"Survival vs summary rewrites, with R^n {tag}",
        "fig-tokens": f"Tokens per request by turn {tag}",
        "fig-date-guard": f"Date-guard outcomes {tag}",
    }
    sections = []
    for fid in FIGURE_IDS:
        imgs = []
        for name, data in images[fid]:
            (out / name).write_bytes(data)
            encoded = base64.b64encode(data).decode("ascii")
            imgs.append(f'<img src="data:image/png;base64,{encoded}" alt="{html.escape(name)}" data-file="{name}">')
        sections.append(f'<section class="figure" id="{fid}"><h2>{html.escape(titles[fid])}</h2>{"".join(imgs)}'
                        "</section>")
    policies: Mapping[str, Any] = report.get("policies", {})
    kinds = sorted({k for body in policies.values() for k in body.get("by_kind", {})})
    presence_rows = [
        [kind, *[f"{_pct(body['by_kind'][kind]['rate'])} (n={body['by_kind'][kind]['n']})"
                 if kind in body["by_kind"] else "-" for body in policies.values()]]
        for kind in kinds
    ]
    accuracy = report.get("date_guard_accuracy") or {}
    guard_rows = []
    if accuracy:
        rec = accuracy["recorded"]
        guard_rows.append(["recorded (false alarms)", rec["n"], rec["false_alarms"], _pct(rec["false_alarm_rate"])])
        guard_rows += [
            [f"{k} (caught)", b["n"], b["caught"], _pct(b["rate"])] for k, b in accuracy["perturbed"].items()
        ]
    failures = [
        [f["call"], f["turn"], f["tool"], f["argument"], f["value"], f["verdict"],
         "; ".join(f"turn {c['turn']}: {c['words']}" for c in f["citations"])]
        for f in accuracy.get("failures", [])
    ]
    expect: Mapping[str, Any] = report.get("expect") or {}
    guards: Mapping[str, Any] = report.get("guards") or {}
    meaning = str(report.get("harvest_meaning", config.get("harvest_meaning", harvest)))
    if expect.get("records"):
        expect_html = _table(["kind", "pairs scored", "caught", "twin accepted", "pair (caught AND twin ok)",
                              "refused", "missing twin", "unlocated"], expect_rows(expect))
        expect_html += f"<p>{html.escape(str(expect.get('definition', '')))}</p>"
        listed = [[m["call"], m.get("twin") or "-", m["kind"], m.get("reason", "")]
                  for m in [*expect.get("missing_twin", []), *expect.get("unlocated", [])]]
        if listed:
            expect_html += "<h3>Not scored: twin missing or not located</h3>"
            expect_html += _table(["call", "expected twin", "kind", "why"], listed)
        failed = [[p["call"], p["twin"], p["kind"], loc["action"], f"{loc['tool']}.{loc['argument']}",
                   loc["value"], loc["expected"], loc["verdict"] or "not checked", loc["twin_verdict"] or "not checked"]
                  for p in expect.get("pairs", []) if not p["pair"] for loc in p["locations"]]
        if failed:
            expect_html += "<h3>Pairs that failed</h3>"
            expect_html += _table(["call", "twin", "kind", "action", "argument", "value", "expected", "verdict",
                                   "twin verdict"], failed)
    else:
        expect_html = "<p>No perturbed records (records with <code>expect</code>) in this file.</p>"
    id_rows = id_guard_rows(guards, expect)
    if any(any(c for c in row[1:]) for row in id_rows):
        id_html = _table(["verdict", "perturbed records (all identifier args)", "perturbed argument",
                          "clean twin, same argument", "clean records (all identifier args)"], id_rows)
    else:
        id_html = "<p>No identifier arguments were checked.</p>"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>voice-agent eval</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }}
td, th {{ border: 1px solid #bbb; padding: 3px 8px; text-align: left; }}
section.figure img {{ display: block; max-width: 100%; margin: 0.5em 0; border: 1px solid #eee; }}
</style></head><body>
<h1>voice-agent eval: {html.escape(str(report.get("file", "")))}</h1>
<p>{report.get("records", 0)} calls; policies {", ".join(policies)}; K={config.get("keep")}, S={config.get("every")},
R={config.get("retention")}, replay={html.escape(str(config.get("replay")))}, seed={config.get("seed")}.</p>
<p id="harvest-mode"><strong>harvest={html.escape(harvest)}</strong>: {html.escape(meaning)}</p>
<h2>Argument value in context at the action, by fact kind {tag}</h2>
{_table(["fact kind", *policies], presence_rows)}
<section id="distance-breakdown"><h2>Presence by distance between the caller's last statement and the action {tag}</h2>
{_table(["fact kind", "distance (turns)", *policies], distance_rows(policies))}
</section>
<section id="id-guard"><h2>ID guard verdicts {tag}</h2>
{id_html}
</section>
<section id="expect"><h2>Perturbed records vs their clean twins, at exactly the perturbed argument {tag}</h2>
{expect_html}
</section>
<h2>Date guard {tag}</h2>
{_table(["set", "n", "flagged", "rate"], guard_rows)}
{"".join(sections)}
<h2>Recorded actions the date guard refuses {tag}</h2>
{_table(["call", "turn", "tool", "argument", "value", "verdict", "cited"], failures)}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
