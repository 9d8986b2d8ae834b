"""The ``voice-agent`` command line."""

from __future__ import annotations

import json
import os
import sys

# pipecat logs at INFO when imported, here and in worker processes; loguru reads this at import.
os.environ.setdefault("LOGURU_LEVEL", "WARNING")
from typing import Annotated, Any, NoReturn

import typer

from voice_agent.audio.stack import INTERIMS_HELP
from voice_agent.core.policy import PolicyError
from voice_agent.extras import EXIT_MISSING_EXTRA, MissingExtra, missing_extra
from voice_agent.harness.policy_report import PolicyQuestion, policy_report, render_policy_report

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="A voice agent that keeps what the caller said for the whole call.",
)


@app.callback()
def _root() -> None:
    """A voice agent that keeps what the caller said for the whole call."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Prints a one-line error to stderr and exits with ``code``."""
    print(f"voice-agent: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


@app.command()
def policy(
    keep: Annotated[int, typer.Option("--keep", help="K: recent turns kept raw.")] = 6,
    every: Annotated[int, typer.Option("--every", help="S: a summary pass every S turns.")] = 5,
    stated: Annotated[int, typer.Option("--stated", help="Turn the fact was stated on.")] = 4,
    needed: Annotated[int, typer.Option("--needed", help="Turn the fact is needed on.")] = 31,
    retention: Annotated[float, typer.Option("--retention", help="R: per-pass retention of the summarizer.")] = 0.9,
    facts: Annotated[int, typer.Option("--facts", help="N independent facts carried together.")] = 1,
    capture: Annotated[
        float | None, typer.Option("--capture", help="C: chance the first pass takes the fact in, when measured "
                                   "apart from R (survival C*R^(n-1)); default: R, i.e. R^n.")
    ] = None,
    alignments: Annotated[bool, typer.Option("--alignments", help="Slide the stated turn over 1..2S.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    trigger: Annotated[
        str, typer.Option("--trigger", help="cadence (the calculator), or reference / threshold: explain a run of "
                          "--scenario (which turns were folded when, and why).")
    ] = "cadence",
    scenario: Annotated[
        str | None, typer.Option("--scenario", help="With --trigger reference or threshold: the scenario to play.")
    ] = None,
    run_policy: Annotated[str, typer.Option("--policy", help="With --scenario: lanes or rolling.")] = "lanes",
) -> None:
    """Computes how many summary rewrites a fact goes through, and its odds of surviving them.

    With ``--trigger reference --scenario NAME`` it plays the scenario once and explains each summary pass.
    """
    if trigger != "cadence" or scenario is not None:
        _explain_trigger(trigger, scenario, run_policy, keep, retention, as_json)
        return
    try:
        report = policy_report(
            PolicyQuestion(keep, every, stated, needed, retention, facts, capture), alignments=alignments
        )
    except PolicyError as exc:
        fail(str(exc))
    print(json.dumps(report) if as_json else render_policy_report(report))


def _explain_trigger(trigger: str, scenario: str | None, run_policy: str, keep: int, retention: float,
                     as_json: bool) -> None:
    from voice_agent.core.policy import Trigger
    from voice_agent.harness.evaluation.trigger_explain import explain_run, render_explanation
    from voice_agent.harness.scenarios import load_scenario
    from voice_agent.policies import PolicyName

    if trigger not in {t.value for t in Trigger}:
        fail(f"--trigger takes {', '.join(t.value for t in Trigger)}; got {trigger!r}")
    if scenario is None:
        fail(f"--trigger {trigger} depends on what is said: give --scenario NAME to explain a run")
    if run_policy not in ("lanes", "rolling"):
        fail(f"--policy takes lanes or rolling; got {run_policy!r}")
    try:
        record = load_scenario(scenario)
        report = explain_run(record, policy=PolicyName(run_policy), trigger=Trigger(trigger), keep=keep,
                             retention=retention)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    print(json.dumps(report) if as_json else render_explanation(report))


@app.command("check-dates")
def check_dates(
    texts: Annotated[list[str], typer.Argument(help="The call's lines in order: each a caller turn, or an agent line "
                                                    "when it starts with 'agent:'.")],
    reference_date: Annotated[
        str, typer.Option("--reference-date", help="The call's 'today' (YYYY-MM-DD); never the machine clock.")
    ],
    on: Annotated[
        str | None, typer.Option("--date", help="Also decide this date (YYYY-MM-DD) as a tool call would: run, "
                                                "confirm (with the read-back) or refuse.")
    ] = None,
    binds: Annotated[
        str, typer.Option("--binds", help="Subjects that bind the date, comma-separated (availability, trip, booking).")
    ] = "availability",
    tool: Annotated[str, typer.Option("--tool", help="The date tool's name, as your bot declares it "
                                                     "(cancel_subscription): its verb and what it books.")] = (
        "schedule_callback"
    ),
    topic: Annotated[str | None, typer.Option("--topic", help="What the date books (callback, car, hotel, ...); "
                                                              "default: read from the tool's name.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Prints each date statement in the lines (subject, kind, dates) and, with --date, the date contract's decision."""
    import datetime as dt

    from voice_agent.core.dates import DateSubject, read_statements
    from voice_agent.core.guards.date_contract import DateContract
    from voice_agent.core.guards.date_guard import DateGuard
    from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
    from voice_agent.core.transcript import TranscriptLane

    try:
        reference = dt.date.fromisoformat(reference_date)
        day = dt.date.fromisoformat(on) if on else None
        subjects = tuple(DateSubject(b.strip()) for b in binds.split(",") if b.strip())
    except ValueError as exc:
        fail(f"check-dates: {exc} (dates are YYYY-MM-DD; subjects: {', '.join(s.value for s in DateSubject)})")
    lines = [(t[len("agent:"):].strip(), "agent") if t.lower().startswith("agent:") else (t, "caller") for t in texts]
    results: list[dict[str, Any]] = [
        {"text": t, "speaker": who, "statements": [st.to_json() for st in read_statements(t, reference)]}
        for t, who in lines if who == "caller"
    ]
    decision: dict[str, Any] | None = None
    if day is not None:
        lane = TranscriptLane.of_lines((who, text) for text, who in lines)
        param = ToolParam("date", "", kind=ParamKind.DATE, binds=tuple(s.value for s in subjects), topic=topic)
        (made,) = DateContract(DateGuard(reference)).decide(ToolSpec(tool, "", (param,)),
                                                          {"date": day.isoformat()}, lane)
        decision = made.to_json()
    if as_json:
        print(json.dumps({"reference_date": reference.isoformat(), "results": results, "decision": decision},
                         indent=2))
        return
    for item in results:
        print(f"{item['text']!r}")
        if not item["statements"]:
            print("  (no date)")
        for st in item["statements"]:
            c = st["constraint"]
            span = f"{c['start'] or '...'} .. {c['end'] or '...'}"
            extra = f" weekday={c['weekday']}" if c["weekday"] is not None else ""
            about = st["subject"] + (f"/{st['topic']}" if st["topic"] else "") + (f"/{c['role']}" if c["role"] else "")
            print(f"  {about:<22} {st['kind']:<11} {c['kind']:<16} {span}{extra} blocked={c['blocked']}")
    if decision is not None:
        print(f"{decision['value']}: {decision['action'].upper()} ({decision['why']}) - {decision['reason']}")
        if decision["readback"]:
            print(f"  the agent says: {decision['readback']}")
        for cite in decision["citations"]:
            print(f"  turn {cite['turn']}: {cite['words']!r}")
        print(f"  rules reader: {decision['rules']['verdict']}")


def unreachable(url: str, timeout: float = 3.0) -> str | None:
    """Why nothing answers at ``url``'s host and port (a local server not started), or None when something does.

    A simulated call against a server that is not there would retry and apologise through every turn first.
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=timeout):
            return None
    except OSError as exc:
        return f"nothing answers at {parts.hostname}:{port} ({exc.strerror or exc})"


@app.command()
def simulate(
    scenario: Annotated[str, typer.Argument(help="Scenario name under config/scenarios/, or a YAML path.")] = (
        "billing_dispute"
    ),
    policy: Annotated[
        str, typer.Option("--policy", help="lanes, rolling, window, pipecat (pipecat's own summarizer: needs "
                          "--summarizer settings with a model summarizer), all (the first three), or a comma list "
                          "(default: lanes,rolling).")
    ] = "lanes,rolling",
    retention: Annotated[
        float, typer.Option("--retention", help="R of the simulation's fault model over the extractive summarizer.")
    ] = 0.9,
    summarizer: Annotated[
        str, typer.Option("--summarizer", help="fault (the simulation's seeded fault model, default) or settings "
                          "(the configured summarizer, as a served call runs it).")
    ] = "fault",
    paraphrased: Annotated[
        bool, typer.Option("--paraphrased/--scripted-only",
                           help="Also play the paraphrased variants (config/scenarios/paraphrases/).")
    ] = True,
    paraphrase_set: Annotated[
        str, typer.Option("--paraphrases", help="Which paraphrases: a folder under config/scenarios/paraphrases/ "
                          "(blind/dev, blind/test: written by a helper who had not read the agent); default: the "
                          "set the rules were fitted on.")
    ] = "",
    runs: Annotated[int, typer.Option("--runs", help="Runs per policy (run r uses seed S+r).")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="First seed.")] = 0,
    keep: Annotated[int | None, typer.Option("--keep", help="K: recent turns kept raw (default: settings).")] = None,
    every: Annotated[
        int | None, typer.Option("--every", help="S: summary pass cadence (default: settings).")
    ] = None,
    trigger: Annotated[
        str | None, typer.Option("--trigger", help="When passes run: cadence, threshold (pipecat's rule) or "
                                 "reference (default: settings).")
    ] = None,
    llm: Annotated[
        str, typer.Option("--llm", help="reference (offline default), scripted (a FakeLLM replaying the scenario's "
                          "recorded actions and agent lines), openai, anthropic or google (keys: settings).")
    ] = "reference",
    pace: Annotated[
        float, typer.Option("--words-per-second", help="Interim transcript pace; 0 = no wait (10 with --knowledge).")
    ] = 0.0,
    json_path: Annotated[str | None, typer.Option("--json", help="Write the JSON report here.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No live transcript.")] = False,
    jobs: Annotated[int, typer.Option("--jobs", help="Worker processes for multi-run (default: CPU count).")] = 0,
    slow_answer: Annotated[
        float, typer.Option("--slow-answer-secs", help="A turn whose first agent words take longer counts as failed.")
    ] = 5.0,
    knowledge: Annotated[
        bool | None,
        typer.Option("--knowledge/--no-knowledge",
                     help="Speculative retrieval over config/knowledge (default: on for a single run)."),
    ] = None,
    trace_path: Annotated[
        str | None, typer.Option("--trace", help="Also record one call of the first policy as a trace (JSON).")
    ] = None,
    modality: Annotated[
        str, typer.Option("--modality", help="text (scripted transcripts) or audio (real speech over the bridge).")
    ] = "text",
    stack: Annotated[str, typer.Option("--stack", help="Audio: default (Whisper + Piper) or light.")] = "default",
    speed: Annotated[float, typer.Option("--speed", help="Audio: caller media pace, x real time.")] = 1.0,
    interims: Annotated[bool, typer.Option("--interims/--no-interims", help=INTERIMS_HELP)] = True,
) -> None:
    """Runs a scripted call through the real pipeline and compares memory policies side by side.

    With ``--modality audio`` one call is played over the telephony bridge on loopback, with
    synthesized speech both ways; the agent's audio and transcript are written under ./calls.
    """
    if modality == "audio":
        _simulate_audio(scenario, keep or 6, every or 5, stack, speed, interims, json_path)
        return
    if modality != "text":
        fail(f"--modality takes text or audio; got {modality!r}")
    from rich.progress import Progress

    from voice_agent.domains.billing import billing_domain
    from voice_agent.harness import paraphrases
    from voice_agent.harness.scenarios import load_scenario
    from voice_agent.harness.simulation.console import console, print_comparison, print_turn
    from voice_agent.harness.simulation.runner import SimulationPlan, run_plan
    from voice_agent.policies import ASSEMBLED, PolicyName
    from voice_agent.settings import SettingsError, load_settings, with_overrides
    from voice_agent.telemetry import install_telemetry

    names = [p.value for p in ASSEMBLED] if policy == "all" else [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [n for n in names if n not in {p.value for p in PolicyName}]
    if unknown or not names:
        fail(f"--policy takes lanes, rolling, window, pipecat, all (the first three) or a comma list; got {policy!r}")
    with_knowledge = runs == 1 if knowledge is None else knowledge
    if with_knowledge and pace == 0.0:
        pace = 10.0  # interims must arrive slower than the retrieval debounce for speculation to run
    if summarizer not in ("fault", "settings"):
        fail(f"--summarizer takes fault or settings; got {summarizer!r}")
    if PolicyName.PIPECAT.value in names and summarizer == "fault":
        fail("--policy pipecat runs pipecat's own summarizer through a model, and the fault model is not one: add "
             "--summarizer settings (the local model when its extra is installed); "
             "scripts/bench_vs_pipecat.py compares it with ours")
    try:
        settings = with_overrides(load_settings(), policy={"keep": keep, "every": every, "trigger": trigger})
        telemetry = install_telemetry(settings.telemetry)
    except SettingsError as exc:
        fail(str(exc))
    llm_factory = None
    scripted = llm == "scripted"
    if not scripted and (llm != "reference" or settings.llm.vendor != "reference"):
        llm_factory = _hosted_llm_factory(llm if llm != "reference" else settings.llm.vendor)
        if settings.llm.base_url and (problem := unreachable(settings.llm.base_url)):
            fail(f"llm.base_url {settings.llm.base_url}: {problem} (start the local server first)")
    try:
        record = load_scenario(scenario)
        folder = paraphrases.PARAPHRASE_DIR / paraphrase_set
        if paraphrase_set and not folder.is_dir():
            fail(f"--paraphrases: no folder {paraphrase_set!r} under {paraphrases.PARAPHRASE_DIR}")
        if paraphrase_set and not paraphrases.available(record.id, folder):
            fail(f"--paraphrases {paraphrase_set}: no paraphrases of {record.id} there")
        variants = (paraphrases.variants(record, directory=folder)
                    if paraphrased and paraphrases.available(record.id, folder) else [])
        plan = SimulationPlan(record, variants, billing_domain, [PolicyName(n) for n in names], settings, runs,
                              retention if summarizer == "fault" else None, seed, pace, llm_factory, with_knowledge,
                              scripted_llm=scripted, slow_answer_secs=slow_answer)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if trace_path and plan.policies[0] is PolicyName.PIPECAT:
        fail("--trace records our own policies' passes; put lanes, rolling or window first")
    try:
        for name in dict.fromkeys(plan.policies):
            plan.call(plan.scenario, name, 0)  # a summarizer or LLM that cannot serve a policy fails now, in one line
    except SettingsError as exc:
        fail(str(exc))
    live = not quiet

    def on_turn(p: PolicyName, run: int, parts: Any, record: Any) -> None:
        if live and run == 0 and (runs == 1 or p is plan.policies[0]):
            print_turn(p.value, parts.session, record)

    with Progress(console=console, transient=True, disable=runs == 1 and not variants) as progress:
        bars = {(side, p): progress.add_task(f"{p.value} {side} runs", total=runs)
                for side in plan.sides for p in plan.policies}
        report = run_plan(plan, jobs=jobs or os.cpu_count() or 1, on_turn=on_turn,
                          on_runs=lambda side, p, n: progress.advance(bars[(side, p)], n))
    report["paraphrase_set"] = paraphrase_set
    telemetry.shutdown()
    print_comparison(report)
    if trace_path:
        from voice_agent.harness.evaluation.pass_safety import record_trace

        trace = record_trace(plan.scenario, policy=plan.policies[0], retention=retention, seed=seed,
                             keep=settings.policy.keep, every=settings.policy.every)
        with open(trace_path, "w") as handle:
            json.dump(trace, handle, indent=2)
        console.print(f"trace written to {trace_path}")
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(report, handle, indent=2)
        console.print(f"report written to {json_path}")
    if report["failed_runs"]:
        failed = next((p["first_failure"] for side in report["sides"].values() for p in side.values()
                       if p["first_failure"]), "see the report")
        fail(f"{report['failed_runs']} simulated call(s) failed: {failed}", code=1)


def _simulate_audio(
    scenario: str, keep: int, every: int, stack: str, speed: float, interims: bool = True, json_path: str | None = None
) -> None:
    import asyncio
    from pathlib import Path

    from voice_agent.telephony.cli import print_audio_simulation, run_audio_simulation

    try:
        report = asyncio.run(
            run_audio_simulation(scenario, keep=keep, every=every, stack=stack, speed=speed, out=Path("calls"),
                                 interims=interims)
        )
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        fail(str(exc))
    print_audio_simulation(report)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def _hosted_llm_factory(vendor: str) -> Any:
    """A picklable factory for ``vendor``'s real pipecat service, validated now (one-line errors)."""
    import functools

    from voice_agent.domains.billing import billing_domain
    from voice_agent.services.factory import make_llm
    from voice_agent.settings import SettingsError, load_settings, with_vendor

    try:
        settings = with_vendor(load_settings(), vendor)
        make_llm(settings, billing_domain())  # fail now, in one line, not inside a worker process
    except SettingsError as exc:
        fail(str(exc))
    return functools.partial(_make_llm_for, settings)


def _make_llm_for(settings: Any, domain: Any) -> Any:
    from voice_agent.services.factory import make_llm

    return make_llm(settings, domain)


@app.command("config")
def show_config(
    path: Annotated[str | None, typer.Option("--file", help="Settings file (default: config/settings.toml).")] = None,
) -> None:
    """Validates the settings file and environment, and prints the result (secrets hidden)."""
    from voice_agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(path)
    except SettingsError as exc:
        fail(str(exc))
    print(json.dumps(settings.model_dump(mode="json"), indent=2, default=str))
    from voice_agent.services.factory import summarizer_choice

    chosen = summarizer_choice(settings)  # an unset summarizer.kind is resolved per machine: say how
    print(f"summarizer: {chosen.kind} ({chosen.reason}; passes "
          f"{'in the background' if chosen.background else 'inline'})", file=sys.stderr)
    from voice_agent.store.base import default_sqlite_path

    store = settings.store
    where = {"sqlite": str(store.path or default_sqlite_path()), "redis": str(store.url), "none": "calls are not saved"}
    print(f"call store: {store.backend} ({where[store.backend]})", file=sys.stderr)


def _mount_subcommands() -> None:
    # Heavy imports happen inside the commands, so mounting costs nothing at start-up.
    from voice_agent.harness.evaluation.cli import eval_app
    from voice_agent.telephony.cli import register_telephony_commands

    app.add_typer(eval_app, name="eval")
    register_telephony_commands(app)


_mount_subcommands()


def main() -> None:
    """Console-script entry point."""
    from voice_agent.telemetry import install_log_redaction

    # pipecat logs at INFO on import; a CLI user wants warnings and errors only. Raising the level
    # (VOICE_AGENT_LOG_LEVEL=DEBUG) never prints caller values: pipecat's lines are redacted.
    include_pii = os.environ.get("VOICE_AGENT_TELEMETRY__INCLUDE_PII", "").lower() in ("1", "true", "yes")
    install_log_redaction(os.environ.get("VOICE_AGENT_LOG_LEVEL", "WARNING").upper(), include_pii=include_pii)
    try:
        app()
    except MissingExtra as exc:
        _missing_extra_exit(exc)
    except ModuleNotFoundError as exc:
        # A module of an extra imported where no check named it: still say which extra, never a traceback.
        missing = missing_extra(exc, _command_words())
        if missing is None:
            raise
        _missing_extra_exit(missing)


def _command_words() -> str:
    """``voice-agent`` and the subcommand words of this run (``voice-agent eval dates``), for messages."""
    words = ["voice-agent"]
    for arg in sys.argv[1:]:
        if arg.startswith("-"):
            break
        words.append(arg)
        if arg != "eval":  # the one command group; its subcommand is the second word
            break
    return " ".join(words)


def _missing_extra_exit(exc: MissingExtra) -> NoReturn:
    # scripts/run reads the status and the pip command on stderr to install the extra and run again.
    print(f"voice-agent: error: {exc}", file=sys.stderr)
    raise SystemExit(EXIT_MISSING_EXTRA)


if __name__ == "__main__":
    main()
