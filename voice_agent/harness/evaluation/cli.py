"""``voice-agent eval``: replay call records, pass safety, retention.

Mount it on the main app with ``app.add_typer(eval_app, name="eval")``. Then:

* ``voice-agent eval FILE.jsonl [options]`` (the ``replay`` command is the default);
* ``voice-agent eval pass-safety TRACE [options]``;
* ``voice-agent eval retention REPORT... [--json PATH]``;
* ``voice-agent eval retention --summarizer local [--calls N] [--passes N]`` (a real summarizer, measured);
* ``voice-agent eval retrieval [--strict] [--json PATH]`` (precision@3, MRR, nothing injected, every question set).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from voice_agent.extras import need
from voice_agent.policies import ASSEMBLED, PolicyName

console = Console(highlight=False)


class DefaultToReplay(TyperGroup):
    """A command group whose first argument, when it names no subcommand, goes to ``replay``."""

    default_command = "replay"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Prepends ``replay`` unless the first argument is a subcommand or a help flag.

        Args:
            ctx: The click context (typer vendors click, so it is left untyped here).
            args: The command line after ``eval``.
        """
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    cls=DefaultToReplay,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Replay call records through the context core and measure what each memory policy keeps.",
)


HARVEST_HELP = (
    "What a replayed action's tool result hands back, and so what lanes can keep. "
    "ids (default): only what a real backend returns: a status, the action's identifier arguments (marked in the "
    "record's tools schema, or named by an identifier fact) and, for an action that creates something "
    "(transactional), a deterministic booking, reservation, ticket or confirmation reference; identifiers enter the "
    "ledger, nothing enters a slot, no other argument is handed back. "
    "echo: upper bound, not a measurement: tool results hand every argument back and every argument is harvested "
    "into a slot, so lanes keeps whatever an action once carried. The mode is printed beside every figure."
)


def _fail(message: str, code: int = 2) -> NoReturn:
    print(f"voice-agent: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def parse_policies(value: str) -> tuple[PolicyName, ...]:
    """``lanes``, ``rolling``, ``window``, ``all`` or a comma list, as policy names.

    Raises:
        ValueError: An unknown name.
    """
    names = [p.value for p in ASSEMBLED] if value == "all" else [p.strip() for p in value.split(",") if p.strip()]
    known = {p.value for p in ASSEMBLED}  # a replay assembles each context itself: pipecat's policy has none
    if not names or any(n not in known for n in names):
        raise ValueError(f"--policy takes lanes, rolling, window, all or a comma list; got {value!r}")
    return tuple(PolicyName(n) for n in dict.fromkeys(names))


def _pct(rate: Any) -> str:
    return "-" if rate is None else f"{float(rate) * 100:5.1f}%"


def print_replay_summary(report: dict[str, Any], *, show_failures: int = 10, out: Console = console) -> None:
    """The terminal summary of ``voice-agent eval FILE``: presence by kind and distance, guards, expect, date audit.

    Every headline carries the harvest mode (``(harvest=ids)``): it decides what a tool result hands back.
    """
    from voice_agent.harness.evaluation.replay import KIND_ORDER, bucket_labels, harvest_label

    policies: dict[str, Any] = report["policies"]
    cfg = report["config"]
    mode = str(report.get("harvest", cfg["harvest"]))
    tag = f"(harvest={mode})"
    out.print(f"[bold]{report.get('file', '')}[/]: {report['records']} calls, K={cfg['keep']} S={cfg['every']} "
              f"R={cfg['retention']} replay={cfg['replay']} seed={cfg['seed']}")
    out.print(f"harvest: {harvest_label(mode)}")
    for error in report.get("errors", []):
        out.print(f"[yellow]line {error['line']} skipped:[/] {error['message']}")
    table = Table(title=f"Argument value in the assembled context at the action (verbatim) {tag}")
    table.add_column("fact kind")
    table.add_column("distance")
    for name in policies:
        table.add_column(name, justify="right")
    table.add_column("n", justify="right")
    for kind in KIND_ORDER:
        if not any(kind in body["by_kind"] for body in policies.values()):
            continue
        first = next(iter(policies.values()))
        table.add_row(f"[bold]{kind}[/]", "all", *[_pct(b["by_kind"][kind]["rate"]) for b in policies.values()],
                      str(first["by_kind"][kind]["n"]))
        for label in [*bucket_labels(), "n/a"]:
            cells = [b["by_kind_bucket"].get(kind, {}).get(label) for b in policies.values()]
            if cells[0] is None:
                continue
            table.add_row("", label, *[_pct(c["rate"]) if c else "-" for c in cells], str(cells[0]["n"]))
    table.add_section()
    table.add_row("[bold]linked args[/]", "all", *[_pct(b["linked_arguments"]["rate"]) for b in policies.values()],
                  str(next(iter(policies.values()))["linked_arguments"]["n"]))
    table.add_row("tokens/request", "", *[f"{b['tokens_per_request']:.0f}" for b in policies.values()], "")
    table.add_row("measured R", "", *[_pct(b["measured_retention"]) for b in policies.values()], "")
    out.print(table)
    guards = report["guards"]
    out.print(f"{tag} ID guard verdicts: {guards['id'] or '(no identifier arguments)'}; "
              f"date guard verdicts: {guards['date'] or '(no date arguments)'}")
    id_sets = guards.get("id_by_set", {})
    if id_sets.get("perturbed"):
        out.print(f"{tag} ID guard verdicts on perturbed records: {id_sets['perturbed']}; "
                  f"on clean records: {id_sets.get('clean') or '(none)'}")
    print_expect(report.get("expect"), tag, out=out)
    accuracy = report.get("date_guard_accuracy")
    if accuracy:
        audit = Table(title="Date guard: perturbed dates caught (verdict != ok) and false alarms on recorded actions "
                            f"{tag}")
        for column in ("set", "n", "flagged", "rate", "verdicts"):
            audit.add_column(column, justify="left" if column in ("set", "verdicts") else "right")
        rec = accuracy["recorded"]
        audit.add_row("recorded: false alarms", str(rec["n"]), str(rec["false_alarms"]),
                      _pct(rec["false_alarm_rate"]), _verdicts(rec["verdicts"]))
        for kind, body in accuracy["perturbed"].items():
            audit.add_row(f"{kind}: caught", str(body["n"]), str(body["caught"]), _pct(body["rate"]),
                          _verdicts(body["verdicts"]))
        audit.add_row("all perturbations: caught", "", "", _pct(accuracy["caught_rate"]), "")
        out.print(audit)
        failures = accuracy["failures"]
        if failures:
            out.print(f"[bold]{len(failures)} recorded date argument(s) the guard refuses[/] {tag} "
                      f"(all in the JSON report{'' if len(failures) <= show_failures else '; first shown'}):")
        for f in failures[:show_failures]:
            cites = "; ".join(f"turn {c['turn']}: {c['words']!r}" for c in f["citations"])
            out.print(f"  {f['call']} turn {f['turn']} {f['tool']}.{f['argument']}={f['value']} "
                      f"[red]{f['verdict']}[/]: {f['reason']} [dim](cited: {cites})[/]")


def print_expect(expect: dict[str, Any] | None, tag: str, *, out: Console = console, limit: int = 10) -> None:
    """The perturbed-records table: per kind, caught, clean twin accepted, and the pair score."""
    if not expect or not expect.get("records"):
        out.print(f"{tag} expect: no perturbed records (records with `expect`) in the file")
        return
    table = Table(title=f"Perturbed records vs their clean twins, at exactly the perturbed argument {tag}")
    for column in ("kind", "pairs", "caught", "twin ok", "pair", "refused", "no twin", "unlocated"):
        table.add_column(column, justify="left" if column == "kind" else "right")

    def cells(body: dict[str, Any]) -> list[str]:
        return [str(body["n"]), f"{body['caught']} {_pct(body['caught_rate'])}",
                f"{body['twin_accepted']} {_pct(body['twin_accepted_rate'])}",
                f"{body['pair']} {_pct(body['pair_rate'])}", f"{body['refused']} {_pct(body['refused_rate'])}",
                str(body["missing_twin"]), str(body["unlocated"])]

    for kind, body in expect["by_kind"].items():
        table.add_row(kind, *cells(body))
    table.add_section()
    table.add_row("[bold]all[/]", *cells(expect["all"]))
    out.print(table)
    out.print(f"  [dim]{expect['definition']}[/]")
    for pair in [p for p in expect["pairs"] if not p["pair"]][:limit]:
        where = "; ".join(f"action {loc['action']} {loc['tool']}.{loc['argument']}={loc['value']}: "
                          f"{loc['verdict']} (expected {loc['expected']}), twin {loc['twin_verdict']}"
                          for loc in pair["locations"])
        out.print(f"  [red]pair failed[/] {pair['call']} (twin {pair['twin']}): {where}")
    for missing in expect["missing_twin"]:
        out.print(f"  [yellow]missing twin[/] {missing['call']}: expected twin {missing['twin']!r} is not in the file; "
                  f"not scored (any-action check: {'met' if missing['met'] else 'unmet'})")
    for same in expect["unlocated"]:
        out.print(f"  [yellow]unlocated[/] {same['call']}: identical to its twin {same['twin']}; not scored")


def _verdicts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


@eval_app.command("replay")
def replay(
    file: Annotated[Path, typer.Argument(help="A JSON Lines file of call records.")],
    policy: Annotated[str, typer.Option("--policy", help="lanes, rolling, window, all or a comma list.")] = "all",
    retention: Annotated[float, typer.Option("--retention", help="R of the fault-injecting summarizer.")] = 0.9,
    seed: Annotated[int, typer.Option("--seed", help="First seed (record i uses seed+i).")] = 0,
    keep: Annotated[int, typer.Option("--keep", help="K: recent turns kept raw.")] = 6,
    every: Annotated[int, typer.Option("--every", help="S: summary pass cadence.")] = 5,
    replay_mode: Annotated[str, typer.Option("--replay", help="caller: caller turns only; all: agent turns too.")] = (
        "caller"
    ),
    harvest: Annotated[str, typer.Option("--harvest", help=HARVEST_HELP)] = "ids",
    perturb: Annotated[bool, typer.Option("--perturb/--no-perturb", help="Audit the date guard.")] = True,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    html_dir: Annotated[Path | None, typer.Option("--html", help="Write an HTML report with plots here.")] = None,
    timeline_calls: Annotated[int, typer.Option("--timeline-calls", help="Calls drawn in the timeline.")] = 3,
    show_failures: Annotated[int, typer.Option("--show-failures", help="Guard failures printed.")] = 10,
) -> None:
    """Replays call records through the context core under each policy and scores each action's arguments.

    Records with `expect` are perturbed copies of a clean call (its twin, named by the id: `<twin id>-<kind>`, e.g.
    `...-bad-id`, or by a `twin` field). Each is scored at exactly the perturbed action and argument (found by diffing
    against the twin): caught (the expected verdict there), twin accepted (verdict ok on the twin's same argument) and
    the pair (both). Records whose twin is missing are listed.

    Harvest (--harvest), printed beside every figure: ids (default) hands back only what a real backend returns
    (identifiers, a created reference, a status); echo is an upper bound that hands every argument back.
    """
    from voice_agent.harness.evaluation.replay import ReplayConfig, evaluate_file
    from voice_agent.settings import SettingsError, load_settings
    from voice_agent.telemetry import install_telemetry

    if replay_mode not in ("caller", "all"):
        _fail(f"--replay takes caller or all, got {replay_mode!r}")
    if harvest == "all":
        _fail("--harvest all is now --harvest echo (an upper bound: tool results hand every argument back)")
    if harvest not in ("ids", "echo"):
        _fail(f"--harvest takes ids or echo, got {harvest!r}")
    if not file.is_file():
        _fail(f"no such file: {file} (data from outside the repository, such as the public SGD calls, is not "
              "shipped with the package: give the path to your copy)")
    try:
        settings = load_settings()
        telemetry = install_telemetry(settings.telemetry)
        config = ReplayConfig(parse_policies(policy), retention, seed, keep, every,
                              "all" if replay_mode == "all" else "caller", "echo" if harvest == "echo" else "ids",
                              perturb, settings)
    except (ValueError, SettingsError) as exc:
        _fail(str(exc))
    if html_dir is not None:
        need("eval", "the HTML report (--html)")  # before the replay, not after minutes of it
    result = evaluate_file(file, config)
    telemetry.shutdown()
    print_replay_summary(result.report, show_failures=show_failures)
    if json_path is not None:
        json_path.write_text(json.dumps(result.report, indent=1, default=str), encoding="utf-8")
        console.print(f"report written to {json_path}")
    if html_dir is not None:
        from voice_agent.harness.evaluation.html_report import render_html

        index = render_html(result.report, html_dir, timeline_calls=timeline_calls)
        console.print(f"HTML report written to {index}")


def print_safety(report: dict[str, Any], out: Console = console, limit: int = 20) -> None:
    """The terminal summary of ``voice-agent eval pass-safety``."""
    table = Table(title=f"Pass safety ({report['mode']} mode, {report['runs']} seed(s)): "
                        f"{', '.join(report['traces'])}")
    for column in ("policy", "inference points", "calls with IDs", "passes", "mismatch", "missing", "extra",
                   "defects"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, body in report["policies"].items():
        kinds = [m["kind"] for m in body["mismatches"]]
        table.add_row(name, str(body["inference_points"]), str(body["calls_compared"]), str(body["passes"]),
                      str(kinds.count("mismatch")), str(kinds.count("missing")), str(kinds.count("extra")),
                      f"[{'green' if not body['defects'] else 'red'}]{body['defects']}[/]")
    out.print(table)
    for name, body in report["policies"].items():
        for m in body["mismatches"][:limit]:
            out.print(f"  {name} {m['trace']} seed {m['seed']} turn {m['turn']}: {m['tool']}.{m['argument']} "
                      f"forced={m['forced']!r} raw={m['raw']!r} ({m['kind']})")
        if len(body["mismatches"]) > limit:
            out.print(f"  {name}: {len(body['mismatches']) - limit} more in the JSON report")


@eval_app.command("pass-safety")
@eval_app.command("compaction-safety", hidden=True)  # legacy-name: the command's old name still runs
def pass_safety_command(
    trace: Annotated[str, typer.Argument(help="A trace JSON (simulate --trace), or a scenario name to record one.")],
    policy: Annotated[str, typer.Option("--policy", help="lanes, rolling, window, all or a comma list.")] = (
        "lanes,rolling"
    ),
    mode: Annotated[str, typer.Option("--mode", help="window: keep the last K turns raw; all: summarize every "
                                                     "earlier turn.")] = "window",
    retention: Annotated[float | None, typer.Option("--retention", help="R (default: the trace's).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="First seed (default: the trace's).")] = None,
    runs: Annotated[int, typer.Option("--runs", help="Seeds per trace and policy.")] = 1,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
) -> None:
    """Forces a summary pass at every turn and diffs the agent's identifier arguments against a run with no pass."""
    import asyncio

    from voice_agent.harness.evaluation.pass_safety import load_traces, pass_safety, record_trace

    if mode not in ("window", "all"):
        _fail(f"--mode takes window or all, got {mode!r}")
    try:
        policies = parse_policies(policy)
        path = Path(trace)
        if path.suffix == ".json" or path.is_file():
            traces = load_traces(path)
        else:
            from voice_agent.harness.scenarios import load_scenario

            console.print(f"recording a trace of scenario {trace!r} (lanes, seed {seed or 0})")
            traces = [record_trace(load_scenario(trace), seed=seed or 0, retention=retention or 0.9)]
        report = asyncio.run(pass_safety(traces, policies, mode="all" if mode == "all" else "window",
                                               retention=retention, seed=seed, runs=runs))
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    print_safety(report)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1), encoding="utf-8")
        console.print(f"report written to {json_path}")


def print_retention(report: dict[str, Any], out: Console = console) -> None:
    """The terminal table of ``voice-agent eval retention``."""
    table = Table(title=f"Per-pass retention R from {report['passes']} summary pass(es) in {len(report['files'])} "
                        "file(s)")
    for column in ("policy", "fact kind", "passes", "offered", "kept", "R", "95% CI (Wilson)"):
        table.add_column(column, justify="left" if column in ("policy", "fact kind") else "right")
    for row in report["rows"]:
        low, high = row["ci95"]
        table.add_row(row["policy"], row["kind"], str(row["passes"]), str(row["offered"]), str(row["kept"]),
                      _pct(row["retention"]), f"{low * 100:.1f}% - {high * 100:.1f}%")
    out.print(table)


@eval_app.command("retention")
def retention_command(
    reports: Annotated[
        list[Path] | None, typer.Argument(help="JSON reports or traces carrying drop logs (not with --summarizer).")
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON result here.")] = None,
    summarizer: Annotated[
        str | None, typer.Option("--summarizer", help="Measure a real summarizer instead: local (the packaged model; "
                                 "15-35 s a pass) or extractive (calibrates the presence rule). Reports capture at "
                                 "the first pass, intake, survival per pass, identifier leaks, inversions.")
    ] = None,
    sources: Annotated[
        str, typer.Option("--sources", help="--summarizer: scenarios, paraphrases, sgd, comma list.")
    ] = "scenarios,paraphrases,sgd",
    calls: Annotated[int | None, typer.Option("--calls", help="--summarizer: at most N calls per source.")] = None,
    passes: Annotated[int | None, typer.Option("--passes", help="--summarizer: at most N passes per call.")] = None,
    keep: Annotated[int, typer.Option("--keep", help="--summarizer: K, recent turns kept raw.")] = 6,
    every: Annotated[int, typer.Option("--every", help="--summarizer: S, the pass cadence.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="--summarizer: SGD sample and sampling seed.")] = 0,
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="--summarizer local: sampling temperature (default: "
                                   "settings).")
    ] = None,
    sgd: Annotated[Path | None, typer.Option("--sgd", help="--summarizer: the public SGD calls (JSON Lines).")] = None,
) -> None:
    """Per-pass retention R per fact kind with a 95% Wilson interval, from drop logs (or measured: --summarizer)."""
    from voice_agent.harness.evaluation.retention import retention_report

    if summarizer is not None:
        from voice_agent.harness.evaluation import real_retention

        try:
            measured = real_retention.run_measurement(
                summarizer, sources=[s.strip() for s in sources.split(",") if s.strip()], calls=calls, passes=passes,
                keep=keep, every=every, seed=seed, temperature=temperature, sgd_path=sgd or real_retention.SGD_PATH,
                out=console)
        except (OSError, ValueError) as exc:
            _fail(str(exc))
        real_retention.print_report(measured, console)
        if json_path is not None:
            json_path.write_text(json.dumps(measured, indent=1), encoding="utf-8")
            console.print(f"report written to {json_path}")
        return
    if not reports:
        _fail("give report files carrying drop logs, or --summarizer local|extractive to measure one")
    try:
        report = retention_report(reports)
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    print_retention(report)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1), encoding="utf-8")


def _rate_cell(body: dict[str, Any] | None, *, hits_first: bool = True) -> str:
    if not body or not body.get("n"):
        return "-"
    k = body.get("hits", body.get("correct", 0))
    return f"{k}/{body['n']} {_pct(body['rate'])}" if hits_first else _pct(body["rate"])


def _mark(met: bool | None) -> str:
    return "-" if met is None else "[green]met[/]" if met else "[red]missed[/]"


def print_dates(report: dict[str, Any], *, show_failures: int = 10, out: Console = console) -> None:
    """The terminal summary of ``voice-agent eval dates``: calls per class with targets, SGD beside, sentences."""
    from voice_agent.harness.evaluation.date_eval import TARGETS

    engine = report["engine"]
    out.print(f"[bold]date guard evaluation[/]: guard {engine['guard']}; statements {engine['read_statements']}")
    out.print(f"[dim]{report['turn_numbering']}[/]")
    calls = report.get("calls")
    if calls:
        title = (f"Date guard on {calls['calls']} generated calls ({report['inputs']['calls']}; "
                 f"{calls['records']} records: {calls['roles']})")
        table = Table(title=title)
        table.add_column("class")
        for target in TARGETS:
            table.add_column(f"{target.short} ({target.describe()})", justify="right")
        table.add_column("stale: superseded", justify="right")
        table.add_column("bad: constraint cited", justify="right")
        rows = [*calls["by_class"].items(), ("[bold]all[/]", calls["all"])]
        for index, (name, cell) in enumerate(rows):
            if index == len(rows) - 1:
                table.add_section()
            table.add_row(name, *[_rate_cell(cell[t.metric]) for t in TARGETS], _rate_cell(cell["stale_superseded"]),
                          _rate_cell(cell["bad_cited"]))
        table.add_row("[bold]target[/]", *[_mark(t.met(calls["all"][t.metric]["rate"])) for t in TARGETS], "", "")
        out.print(table)
        features = Table(title="The same, by call feature (a call counts under each of its features)")
        features.add_column("feature")
        for target in TARGETS:
            features.add_column(target.short, justify="right")
        for name, cell in calls["by_feature"].items():
            features.add_row(name, *[_rate_cell(cell[t.metric]) for t in TARGETS])
        out.print(features)
        out.print(f"verdicts by twin: {calls['verdicts']}")
        for f in calls["failures"][:show_failures]:
            cites = "; ".join(f"turn {c['turn']}: {c['words']!r}" for c in f["citations"])
            out.print(f"  [red]{f['what']}[/] {f['call']} ({f['class']}) date={f['date']} verdict={f['verdict']} "
                      f"expected cite turns {f['expected_cite_turns']} [dim](cited: {cites}; {f['reason']})[/]")
        if len(calls["failures"]) > show_failures:
            out.print(f"  ... {len(calls['failures']) - show_failures} more failing records in the JSON report")
    side = Table(title="Generated calls beside the SGD perturbation audit")
    for column in ("metric", "target", "generated", "", "SGD", "", "SGD figure"):
        side.add_column(column, justify="left" if column in ("metric", "SGD figure") else "right")
    for row in report["targets"]:
        side.add_row(row["label"], row["target"], f"{_pct(row['generated'])} (n={row['generated_n']})",
                     _mark(row["met"]), _pct(row["sgd"]), _mark(row["sgd_met"]), row["sgd_note"])
    out.print(side)
    sgd = report.get("sgd")
    if sgd and sgd.get("error"):
        out.print(f"[yellow]SGD not scored:[/] {sgd['error']}")
    elif sgd:
        unrelated = (sgd.get("perturbed") or {}).get("unrelated") or {}
        out.print(f"SGD {sgd['file']}: {sgd['records']} calls; unrelated-date perturbation caught "
                  f"{_pct(unrelated.get('rate'))} (n={unrelated.get('n', 0)})")
    sentences = report.get("sentences")
    if sentences:
        table = Table(title=f"Labelled sentences ({sentences['n']}, {report['inputs']['sentences']})")
        columns = (("subject", "subject"), ("kind", "kind"), ("topic", "topic"), ("probes", "probes (statements)"),
                   ("guard_probes", "probes (guard)"), ("guard_ruled_out_refused", "guard: ruled-out not ok"),
                   ("guard_free_kept", "guard: free not blocked"), ("agreement", "agreement (guard)"))
        table.add_column("class")
        table.add_column("n", justify="right")
        for _, label in columns:
            table.add_column(label, justify="right")
        rows = [*sentences["by_class"].items(), ("[bold]all[/]", sentences["all"])]
        for index, (name, cell) in enumerate(rows):
            if index == len(rows) - 1:
                table.add_section()
            table.add_row(name, str(cell["n"]), *[_rate_cell(cell[m]) for m, _ in columns])
        out.print(table)
        by_metric: dict[str, list[dict[str, Any]]] = {}
        for f in sentences["failures"]:
            by_metric.setdefault(f["metric"], []).append(f)
        for metric, fails in by_metric.items():
            shown = f" (first {min(len(fails), show_failures)}):" if show_failures else ""
            out.print(f"[bold]{len(fails)} sentence miss(es) on {metric}[/]{shown}")
            for f in fails[:show_failures]:
                out.print(f"  {f['class']}: {f['text']!r} ({f['tool']}, ref {f['reference_date']}) expected "
                          f"{f['expected']}, got {f['got']}")
    seconds = report["seconds"]
    out.print(f"[dim]time: sentences {seconds['sentences']:.1f}s, calls {seconds['calls']:.1f}s, "
              f"SGD {seconds['sgd']:.1f}s, total {seconds['total']:.1f}s[/]")


@eval_app.command("date-verdicts")
def date_verdicts_command(
    sentences: Annotated[Path | None, typer.Option("--sentences", help="Labelled sentences (YAML; default: "
                                                                       "config/evals/dates/sentences.yaml).")] = None,
    calls: Annotated[Path | None, typer.Option("--calls", help="Score these call records (JSON Lines) instead of "
                                                               "generating calls.")] = None,
    n: Annotated[int, typer.Option("--n", help="Calls to generate (each with its twins).")] = 60,
    seed: Annotated[int, typer.Option("--seed", help="The call generator's seed.")] = 0,
    write_calls: Annotated[Path | None, typer.Option("--write-calls", help="Also write the generated calls here "
                                                                           "(JSON Lines).")] = None,
    sgd: Annotated[Path | None, typer.Option("--sgd", help="SGD call records for the perturbation audit "
                                                           "(default: ../shared/data/sgd-calls-public.jsonl when "
                                                           "present).")] = None,
    no_sgd: Annotated[bool, typer.Option("--no-sgd", help="Skip the SGD audit.")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when a target on the generated calls is "
                                                          "missed.")] = False,
    show_failures: Annotated[int, typer.Option("--show-failures", help="Failures printed per list.")] = 10,
) -> None:
    """The cue-word reader's verdicts on in-house data: labelled sentences and generated calls, SGD beside.

    The date contract itself (run, confirm or refuse) on data written apart from the engine is ``eval dates``.

    Targets on the generated calls: false alarms on correct dates <= 2 %, stale dates caught >= 90 %, binding
    breaks caught >= 98 %, clean dates accepted citing the caller's turn >= 95 %. Exit 0 unless an input is broken
    (2), or, with --strict, a target is missed (1).
    """
    from voice_agent.harness.evaluation.date_calls import write_calls as write_jsonl
    from voice_agent.harness.evaluation.date_eval import (
        DEFAULT_SENTENCES,
        DEFAULT_SGD,
        DatesConfig,
        InputError,
        evaluate_dates,
    )

    if n < 1:
        _fail(f"--n must be at least 1, got {n}")
    sentences_path = sentences or DEFAULT_SENTENCES
    if not sentences_path.is_file():
        _fail(f"no such file: {sentences_path}")
    if calls is not None and not calls.is_file():
        _fail(f"no such file: {calls}")
    sgd_path = None if no_sgd else sgd if sgd is not None else DEFAULT_SGD if DEFAULT_SGD.is_file() else None
    if sgd_path is not None and not sgd_path.is_file():
        _fail(f"no such file: {sgd_path}")
    if write_calls is not None:
        written = write_jsonl(write_calls, n, seed)
        console.print(f"{written} call records ({n} calls with their twins, seed {seed}) written to {write_calls}")
    try:
        report = evaluate_dates(DatesConfig(sentences_path, calls, n, seed, sgd_path))
    except InputError as exc:
        _fail(str(exc))
    print_dates(report, show_failures=show_failures)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        console.print(f"report written to {json_path}")
    if strict and not report["targets_met"]:
        missed = [r["label"] for r in report["targets"] if r["met"] is False]
        print(f"voice-agent: targets missed: {', '.join(missed)}", file=sys.stderr)
        raise typer.Exit(1)


def print_retrieval(report: dict[str, Any], *, show_failures: int = 0, blind_failures: bool = False,
                    out: Console = console) -> None:
    """Prints the retrieval-quality table of :func:`voice_agent.harness.evaluation.retrieval_eval.evaluate_sets`."""
    table = Table(title="Retrieval quality (P@3: precision@3 over what was injected)")
    for column in ("set", "ans / unans", "P@3", "MRR", "hit@3", "none injected", "empty on ans", "ASR slips P@3/MRR"):
        table.add_column(column, justify="left" if column == "set" else "right", no_wrap=True)
    for name, body in report["sets"].items():
        slip = body.get("asr_slip")
        table.add_row(name, f"{body['answerable']} / {body['unanswerable']}", f"{body['precision_at_3']:.3f}",
                      f"{body['mrr']:.3f}", f"{body['hit_at_3']:.3f}", f"{body['nothing_injected_rate']:.3f}",
                      f"{body['empty_on_answerable_rate']:.3f}",
                      f"{slip['precision_at_3']:.2f}/{slip['mrr']:.2f} ({slip['answerable']})" if slip else "-")
    out.print(table)
    floor = report["floor"]
    if floor["met"] is not None:
        out.print(f"floor: precision@3 >= {floor['precision_at_3_min']:.2f} on {floor['set']}: "
                  f"{floor['precision_at_3']:.3f} {_mark(floor['met'])}")
    if show_failures <= 0:
        return
    for name, body in report["sets"].items():
        if body["blind"] and not blind_failures:
            out.print(f"{name}: {len(body['failures'])} misses, not shown (a blind set; --blind-failures shows them)")
            continue
        for failure in body["failures"][:show_failures]:
            out.print(f"  {name}: {failure['question']!r} -> {failure['returned']}")


@eval_app.command("retrieval")
def retrieval_command(
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when the held-out floor is missed.")] = False,
    show_failures: Annotated[int, typer.Option("--show-failures", help="Misses printed per set.")] = 0,
    blind_failures: Annotated[bool, typer.Option("--blind-failures", help="Also print the blind set's misses "
                                                                          "(it is then no longer blind).")] = False,
) -> None:
    """Scores retrieval over config/knowledge on every labelled question set: precision@3, MRR, nothing injected.

    Sets: the calibration questions and their twelve held-out ones (config/evals/retrieval/calibration.yaml), and
    config/evals/retrieval/heldout.yaml and blind.yaml (written apart from the code, frozen before retrieval was
    changed). Floor: precision@3 >= 0.80 on heldout. Exit 0 unless a set file is broken (2) or, with --strict,
    the floor is missed (1).
    """
    from voice_agent.harness.evaluation.retrieval_eval import evaluate_sets
    from voice_agent.retrieval.index import HybridIndex

    try:
        report = evaluate_sets(HybridIndex.load())
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    print_retrieval(report, show_failures=show_failures, blind_failures=blind_failures)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        console.print(f"report written to {json_path}")
    if strict and report["floor"]["met"] is False:
        print("voice-agent: retrieval floor missed: precision@3 on heldout "
              f"{report['floor']['precision_at_3']:.3f} < {report['floor']['precision_at_3_min']:.2f}",
              file=sys.stderr)
        raise typer.Exit(1)


@eval_app.command("triggers")
def triggers_command(
    every: Annotated[str, typer.Option("--every", help="Cadences to compare, comma-separated (S=5 always).")] = "5,10",
    runs: Annotated[int, typer.Option("--runs", help="Seeds of the fault model per script.")] = 3,
    retention: Annotated[float, typer.Option("--retention", help="R of the fault model.")] = 0.9,
    corpora: Annotated[str, typer.Option("--corpora", help="scenarios, sgd, long (comma-separated).")] = (
        "scenarios,sgd,long"
    ),
    jobs: Annotated[int, typer.Option("--jobs", help="Worker processes (default: CPU count).")] = 0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the rows as JSON here.")] = None,
) -> None:
    """When a pass runs: cadence, pipecat's threshold and the reference trigger, under lanes and rolling.

    One table over every scenario and its paraphrases, the public SGD calls and long (110-turn) calls.
    """
    import os
    import time

    from voice_agent.harness.evaluation.pass_triggers import (
        render,
        render_verdicts,
        run_table,
        table_rows,
        trigger_specs,
        verdicts,
    )

    try:
        everies = [int(s) for s in every.split(",") if s.strip()]
        if any(s < 1 for s in everies) or runs < 1 or not 0.0 <= retention <= 1.0:
            raise ValueError("--every values and --runs must be at least 1, --retention in [0, 1]")
        started = time.perf_counter()
        with console.status("playing every call under every trigger...") as status:
            results = run_table(trigger_specs(everies), runs=runs, retention=retention,
                                jobs=jobs or os.cpu_count() or 1, corpora=[c.strip() for c in corpora.split(",")],
                                on_done=lambda done, total: status.update(f"{done}/{total} tasks"))
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    rows = table_rows(results)
    print(render(rows))
    print(render_verdicts(verdicts(rows)))
    print(f"R={retention:g}, {runs} seed(s) per script, wall {time.perf_counter() - started:.0f} s")
    if json_path is not None:
        json_path.write_text(json.dumps({"rows": rows, "verdicts": verdicts(rows)}, indent=1), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    """Runs ``eval_app`` standalone (``python -m voice_agent.harness.evaluation.cli``)."""
    eval_app(args=list(argv) if argv is not None else None)



def _count(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "-"


def print_contract(report: dict[str, Any], *, show_failures: int = 10, show_test_failures: bool = False,
                   out: Console = console) -> None:
    """The terminal summary of ``voice-agent eval dates``: per set and reader, overall and per class."""
    from voice_agent.harness.evaluation.date_contract_eval import TARGETS

    summary = Table(title="Date contract on data written apart from the engine (dev: rules tuned on it; "
                          "test: never looked at item by item)")
    for column in ("set", "reader", "calls", "bad run", "stale run", "clean run (>=85%)", "clean refused (<=2%)",
                   "confirms/action", "sentences", "ruled-out run", "never-asked run", "asked run", "quotes dropped"):
        summary.add_column(column, justify="left" if column in ("set", "reader") else "right")
    for name, body in report["sets"].items():
        reading = body.get("reading") or {}
        for reader, result in body["readers"].items():
            f = result["overall"]
            met = result["targets"]
            dropped = (_count(reading["dropped"], reading["quotes"]) if reader != "rules" and reading else "-")
            summary.add_row(
                name, reader, str(f["calls"]),
                _flag(_count(f["bad_run"], f["bad"]), met["bad_run"]),
                _flag(_count(f["stale_run"], f["stale"]), met["stale_run"]),
                _flag(_pct(f["clean_run_rate"]), met["clean_run_rate"]),
                _flag(_pct(f["clean_refused_rate"]), met["clean_refused_rate"]),
                _pct(f["confirms_per_action"]), str(f["sentences"]),
                _flag(_count(f["ruled_out_run"], f["ruled_out"]), met["ruled_out_run"]),
                _flag(_count(f["open_run"], f["open"]), met["open_run"]),
                _pct(f["asked_run_rate"]), dropped)
    out.print(summary)
    out.print("[dim]targets: " + ", ".join(f"{k} {op} {v:g}" for k, op, v in TARGETS) + "[/]")
    for name, body in report["sets"].items():
        reading = body.get("reading")
        if reading:
            out.print(f"{name}: {reading['readings']} model readings, {reading['failed']} failed, reading time p50 "
                      f"{_secs(reading['seconds_p50'])}, p95 {_secs(reading['seconds_p95'])}")
        for reader, result in body["readers"].items():
            table = Table(title=f"{name} set, {reader}: by class (an item counts in each of its classes)")
            for column in ("class", "calls", "bad run", "stale run", "clean run", "clean refused", "confirms/action",
                           "sentences", "ruled-out run", "never-asked run", "asked run"):
                table.add_column(column, justify="left" if column == "class" else "right")
            for klass, f in result["classes"].items():
                table.add_row(klass, str(f["calls"]), _count(f["bad_run"], f["bad"]),
                              _count(f["stale_run"], f["stale"]), _pct(f["clean_run_rate"]),
                              _pct(f["clean_refused_rate"]), _pct(f["confirms_per_action"]),
                              str(f["sentences"]), _count(f["ruled_out_run"], f["ruled_out"]),
                              _count(f["open_run"], f["open"]), _pct(f["asked_run_rate"]))
            out.print(table)
            misses = result["failures"]
            if not name.startswith("dev") and not show_test_failures:
                out.print(f"[dim]{len(misses)} {name} action(s) missed a target or asked a clean date; not listed (the "
                          f"test half is never read item by item; --show-test-failures lists them)[/]")
                continue
            unsafe = [m for m in misses if m["action"] == "run"]
            for m in (unsafe + [m for m in misses if m["action"] != "run"])[:show_failures]:
                out.print(f"  {m['kind']} {m['id']} ({', '.join(m['classes'])}) {m['date']} {m['label']}: "
                          f"{m['action']} ({m['why']})")
            if len(misses) > show_failures:
                out.print(f"  ... {len(misses) - show_failures} more in the JSON report")


def _flag(text: str, met: bool | None) -> str:
    return text if met is None else f"[green]{text}[/]" if met else f"[red]{text}[/]"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


@eval_app.command("dates")
def dates_command(
    data_set: Annotated[str, typer.Option(
        "--set", help="A set (the folders under --data: dev, test, dev-b, test-b, ...) or all.")] = "all",
    data: Annotated[Path | None, typer.Option("--data", help="Where the sets live (default: "
                                                             "config/evals/dates/contract/).")] = None,
    reader: Annotated[str, typer.Option(
        "--reader", help="rules (no model), local (the packaged local model) or llm (the settings' hosted LLM), "
                         "beside the rules.")] = "rules",
    reader_timeout: Annotated[float, typer.Option(
        "--reader-timeout", help="Seconds one model reading may take (a call on 2 cores: about a minute).")] = 300.0,
    cache: Annotated[Path | None, typer.Option("--cache", help="Model replies kept between runs (default for "
                                                               "local: config/evals/dates/contract/"
                                                               "local-readings.json; re-checked every run).")] = None,
    model_on: Annotated[str, typer.Option("--model-on", help="What the model reads: all, or calls (sentences "
                                                              "then by the rules alone).")] = "all",
    cached_only: Annotated[bool, typer.Option(
        "--cached-only", help="Never ask the model: score the cached readings; a call not yet read counts as a "
                              "reading that timed out (the rules and the confirm rule decide).")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when a target is missed.")] = False,
    show_failures: Annotated[int, typer.Option("--show-failures", help="Dev-set misses listed per reader.")] = 10,
    show_test_failures: Annotated[bool, typer.Option("--show-test-failures",
                                                     help="Also list the test set's misses.")] = False,
) -> None:
    """The date contract (run, confirm or refuse) on calls and sentences written apart from the engine.

    Targets, per set and reader: bad, stale, ruled-out and never-asked dates never run; clean dates refused outright
    <= 2 %; clean dates that run with no question >= 85 %. Exit 0 unless an input is broken (2) or, with --strict, a
    target is missed (1).
    """
    from voice_agent.harness.evaluation.date_contract_eval import (
        CONTRACT_DIR,
        SETS,
        CachedOnly,
        ContractConfig,
        InputError,
        evaluate_contract,
    )

    sets = SETS if data_set == "all" else (data_set,)
    if data_set != "all" and data_set not in SETS:
        _fail(f"--set must be {', '.join(SETS)} or all, got {data_set!r}")
    if reader not in ("rules", "local", "llm"):
        _fail(f"--reader must be rules, local or llm, got {reader!r}")
    if cached_only and reader == "rules":
        _fail("--cached-only needs --reader local or llm")
    model: Any = None
    if reader != "rules" and cached_only:
        model = CachedOnly()
        if cache is None and reader == "local":
            cache = CONTRACT_DIR / "local-readings.json"
        console.print(f"[dim]scoring the {reader} model's cached readings only ({cache}); calls not read yet count "
                      "as timed out[/]")
    elif reader != "rules":
        from voice_agent.domains.billing import billing_domain
        from voice_agent.services.date_reader import make_date_reader
        from voice_agent.services.factory import make_llm
        from voice_agent.settings import SettingsError, load_settings, with_overrides

        try:
            settings = with_overrides(load_settings(), dates={"reader": reader,
                                                                  "reader_timeout_secs": reader_timeout})
            llm = make_llm(settings, billing_domain()) if reader == "llm" else None
            model = make_date_reader(settings, llm)
        except SettingsError as exc:
            _fail(str(exc))
        if cache is None and reader == "local":
            cache = CONTRACT_DIR / "local-readings.json"
        console.print(f"[dim]reading each call and sentence once with the {reader} model (cached in {cache}); "
                      "the first run takes long[/]")

    def progress(n: int) -> None:
        if n % 10 == 0:
            console.print(f"[dim]  {n} read[/]")

    try:
        if model_on not in ("all", "calls"):
            _fail(f"--model-on must be all or calls, got {model_on!r}")
        kinds = ("calls", "sentences") if model_on == "all" else ("calls",)
        report = evaluate_contract(ContractConfig(sets=sets, root=data or CONTRACT_DIR, reader=model,
                                                  reader_name=reader, cache=cache, model_on=kinds), progress)
    except InputError as exc:
        _fail(str(exc))
    print_contract(report, show_failures=show_failures, show_test_failures=show_test_failures)
    if isinstance(model, CachedOnly):
        console.print(f"{model.asked} readings not cached: counted as timed out")
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        console.print(f"report written to {json_path}")
    missed = [f"{name}/{r}: {k}" for name, body in report["sets"].items() for r, res in body["readers"].items()
              for k, met in res["targets"].items() if met is False]
    if strict and missed:
        _fail("targets missed: " + "; ".join(missed), 1)


if __name__ == "__main__":
    main()
