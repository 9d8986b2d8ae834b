"""The ``voice-agent`` command line."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import typer

from voice_agent.core.policy import PolicyError
from voice_agent.policy_report import PolicyQuestion, policy_report, render_policy_report

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
    every: Annotated[int, typer.Option("--every", help="S: regenerate the summary every S turns.")] = 5,
    stated: Annotated[int, typer.Option("--stated", help="Turn the fact was stated on.")] = 4,
    needed: Annotated[int, typer.Option("--needed", help="Turn the fact is needed on.")] = 31,
    retention: Annotated[float, typer.Option("--retention", help="R: per-pass retention of the summarizer.")] = 0.9,
    facts: Annotated[int, typer.Option("--facts", help="N independent facts carried together.")] = 1,
    alignments: Annotated[bool, typer.Option("--alignments", help="Slide the stated turn over 1..2S.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Computes how many summary rewrites a fact goes through, and its odds of surviving them."""
    try:
        report = policy_report(
            PolicyQuestion(keep, every, stated, needed, retention, facts), alignments=alignments
        )
    except PolicyError as exc:
        fail(str(exc))
    print(json.dumps(report) if as_json else render_policy_report(report))


@app.command("check-dates")
def check_dates(
    texts: Annotated[list[str], typer.Argument(help="Caller sentences to read.")],
    reference_date: Annotated[
        str, typer.Option("--reference-date", help="The call's 'today' (YYYY-MM-DD); never the machine clock.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Prints the date constraints the engine reads in each caller sentence."""
    import datetime as dt

    from voice_agent.core.dates import extract_constraints

    try:
        reference = dt.date.fromisoformat(reference_date)
    except ValueError:
        fail(f"--reference-date must be YYYY-MM-DD, got {reference_date!r}")
    results: list[dict[str, Any]] = [
        {"text": t, "constraints": [c.to_json() for c in extract_constraints(t, reference)]} for t in texts
    ]
    if as_json:
        print(json.dumps({"reference_date": reference.isoformat(), "results": results}, indent=2))
        return
    for text, item in zip(texts, results, strict=True):
        print(f"{text!r}")
        if not item["constraints"]:
            print("  (no date constraint)")
        for c in item["constraints"]:
            span = f"{c['start'] or '...'} .. {c['end'] or '...'}"
            extra = f" weekday={c['weekday']}" if c["weekday"] is not None else ""
            print(f"  {c['kind']:<16} {span}{extra} blocked={c['blocked']} words={c['text']!r}")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
