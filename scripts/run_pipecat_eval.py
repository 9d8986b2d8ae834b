"""Runs pipecat eval scenario files against a running bot, without pipecat's CLI.

pipecat's own ``python -m pipecat.evals run`` needs the ``pipecat-ai[cli]`` extra, whose
``rich<14`` pin conflicts with this project's ``rich==15.0.0``; this script calls the same
harness classes (``EvalScenarioFile.load`` + ``EvalScriptSession``) directly. Scripted
scenarios with deterministic checks only need no judge, no LLM and no network.

Usage, from the repository root::

    .venv/bin/python -m voice_agent.harness.eval_bot --port 7860 --keep 2 --every 2 --reference-date 2026-11-30 &
    .venv/bin/python scripts/run_pipecat_eval.py config/evals/billing_dispute_memory.yaml \\
        --bot-url ws://127.0.0.1:7860/ws [-v]

Exit status: 0 when every scenario passed, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from loguru import logger
from pipecat.evals.results import EvalScriptResult
from pipecat.evals.scenario import EvalScenarioFile
from pipecat.evals.script import EvalScriptScenario
from pipecat.evals.script_session import EvalScriptSession
from pipecat.evals.session import EvalSessionParams

DEFAULT_BOT_URL = "ws://127.0.0.1:7860/ws"


async def run_scenarios(
    paths: Sequence[str | Path], bot_url: str, *, timeout_ms: int = 10_000, connect_timeout_s: float = 5.0
) -> list[EvalScriptResult]:
    """Runs every scripted scenario of the files, one harness session each, in order.

    Args:
        paths: Scenario YAML files in pipecat's format.
        bot_url: The bot's eval WebSocket, e.g. ``ws://127.0.0.1:7860/ws``.
        timeout_ms: Budget of an expectation that sets no ``within_ms``.
        connect_timeout_s: How long to wait for the bot to accept the connection.

    Returns:
        One result per scenario.

    Raises:
        ValueError: When a file holds a simulation (``persona:``), which needs an LLM.
    """
    params = EvalSessionParams(
        default_timeout_ms=timeout_ms, connect_timeout_s=connect_timeout_s, bot_ready_timeout_s=15.0
    )
    results: list[EvalScriptResult] = []
    for path in paths:
        for scenario in EvalScenarioFile.load(path):
            if not isinstance(scenario, EvalScriptScenario):
                raise ValueError(f"{path}: {scenario.name} is a simulation; only scripted scenarios run here")
            session = EvalScriptSession.from_scenario(scenario, bot_url, params=params)
            results.append(await session.run())
    return results


def describe(result: EvalScriptResult) -> str:
    """One line per scenario, plus one per failure.

    Args:
        result: A scenario's result.

    Returns:
        Human-readable text.
    """
    scored = [t for t in result.turns if t.status != "not_run"]
    passed = sum(1 for t in scored if t.status == "passed")
    verdict = "SKIP" if result.skipped else ("PASS" if result.passed else "FAIL")
    lines = [f"{verdict} {result.scenario_name}: {passed}/{len(result.turns)} turns, {result.duration_ms} ms"]
    lines += [f"    turn {f.turn_index} #{f.expectation_index} {f.event_name} [{f.kind}]: {f.reason}"
              for f in result.failures]
    if result.skipped:
        lines.append(f"    skipped: {result.skipped}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments without the program name; None reads ``sys.argv``.

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(description="Run pipecat eval scenario files against a running bot.")
    parser.add_argument("scenarios", nargs="+", help="scenario YAML files (pipecat script format)")
    parser.add_argument("--bot-url", default=DEFAULT_BOT_URL, help=f"bot WebSocket (default {DEFAULT_BOT_URL})")
    parser.add_argument("-t", "--timeout-ms", type=int, default=10_000, help="default expectation budget")
    parser.add_argument("-v", "--verbose", action="store_true", help="print pipecat's logs and the harness trace")
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="DEBUG" if args.verbose else "WARNING")
    try:
        results = asyncio.run(run_scenarios(args.scenarios, args.bot_url, timeout_ms=args.timeout_ms))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for result in results:
        print(describe(result))
        if args.verbose or not result.passed:
            for line in result.debug_log:
                print(f"    | {line}")
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
