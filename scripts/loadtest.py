#!/usr/bin/env python
"""Load test of the telephony bridge: N concurrent emulated Twilio calls on loopback.

The bridge runs in a child process (so its CPU and memory are measured alone); this process runs
N emulated callers that stream real 20 ms µ-law frames in real time and time each reply: from the
end of the caller's speech to the first voiced frame of the agent's answer.

``--stack fake`` (the default) uses an energy VAD, an instant scripted STT and an instant tone TTS,
so what is measured is the pipeline's own overhead; "added latency" is the reply latency minus the
VAD's end-of-speech wait (``stop_secs``), the one delay the stack imposes by design. ``--stack
light`` or ``default`` measure with real models.

    .venv/bin/python scripts/loadtest.py --calls 1,2,4,8,16 --turns 4
    .venv/bin/python scripts/loadtest.py --calls 8 --stack default

Loopback only; every loop is bounded and the child is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from voice_agent.stats import percentile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUDGET_MS = 100.0
"""The p95 added latency a call count must stay under."""


@dataclass
class RunStats:
    """One load level."""

    calls: int
    turns: int = 0
    replies: int = 0
    errors: list[str] = field(default_factory=list)
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    added_p50_ms: float = 0.0
    added_p95_ms: float = 0.0
    added_p99_ms: float = 0.0
    server_cpu_percent: float = 0.0
    server_rss_mb: float = 0.0
    rss_per_call_mb: float = 0.0
    wall_secs: float = 0.0


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_server(port: int, stack_name: str, max_calls: int, lines: list[str]) -> None:
    """Child-process entry: the bridge with the chosen stack (scripted STT gets the scenario's lines)."""
    from loguru import logger

    from voice_agent.audio.stack import AudioStack
    from voice_agent.call_factory import call_factory
    from voice_agent.settings import SettingsError, load_settings, with_overrides
    from voice_agent.telephony.server import ServerConfig, serve

    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    stack = AudioStack.named(stack_name).with_script(lines)
    # Knowledge retrieval embeds each final transcript: model time, like STT and TTS, so it is off
    # here and the figures are the pipeline's own overhead.
    config = ServerConfig(port=port, stack=stack, max_calls=max_calls, idle_timeout_secs=None, drain_timeout_secs=5,
                          knowledge=False)
    try:
        # The configured call (offline default: reference agent, extractive summarizer), with K=2, S=2.
        settings = with_overrides(load_settings(), policy={"keep": 2, "every": 2})
    except SettingsError as exc:
        raise SystemExit(str(exc)) from None
    asyncio.run(serve(config, call_factory(settings)))


async def one_call(url: str, lines: list[str], voice: Any, delay: float, speed: float) -> tuple[list[float], str]:
    """One emulated call: (reply latencies in ms, error or '')."""
    from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator

    await asyncio.sleep(delay)
    emulator = TwilioCallerEmulator(voice, None, EmulatorConfig(speed=speed, silence_secs=0.5, reply_timeout_secs=10))
    result = await emulator.dial(f"{url}/voice", lines)
    latencies = [t.latency_ms for t in result.turns if t.latency_ms is not None]
    error = "" if result.status == "completed" else f"{result.status}: {result.message or result.close_reason}"
    if not error and len(latencies) < len(lines):
        error = f"{len(lines) - len(latencies)} turn(s) without a reply"
    return latencies, error


async def load_level(url: str, pid: int, calls: int, lines: list[str], voice: Any, vad_wait_ms: float,
                     speed: float) -> RunStats:
    """Runs ``calls`` concurrent calls (starts spread over one second) and measures them."""
    import psutil

    server = psutil.Process(pid)
    idle_rss = server.memory_info().rss
    server.cpu_percent(None)
    stats = RunStats(calls)
    started = time.monotonic()
    peak_rss = idle_rss
    tasks = [asyncio.create_task(one_call(url, lines, voice, random.random(), speed)) for _ in range(calls)]
    while not all(t.done() for t in tasks):
        await asyncio.sleep(0.25)
        peak_rss = max(peak_rss, server.memory_info().rss)
        if time.monotonic() - started > 120 + 15 * len(lines):
            for task in tasks:
                task.cancel()
            stats.errors.append("level timed out")
            break
    stats.wall_secs = time.monotonic() - started
    stats.server_cpu_percent = server.cpu_percent(None)
    latencies: list[float] = []
    for task in tasks:
        if task.cancelled():
            continue
        found, error = task.result()
        latencies.extend(found)
        if error:
            stats.errors.append(error)
    stats.turns = calls * len(lines)
    stats.replies = len(latencies)
    added = [max(0.0, v - vad_wait_ms) for v in latencies]
    stats.p50_ms, stats.p95_ms, stats.p99_ms = (percentile(latencies, q) or 0.0 for q in (0.5, 0.95, 0.99))
    added_quantiles = (percentile(added, q) or 0.0 for q in (0.5, 0.95, 0.99))
    stats.added_p50_ms, stats.added_p95_ms, stats.added_p99_ms = added_quantiles
    stats.server_rss_mb = peak_rss / 2**20
    stats.rss_per_call_mb = (peak_rss - idle_rss) / 2**20 / calls
    return stats


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Polls ``/readyz`` until the child is ready (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"loadtest: the bridge exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise SystemExit("loadtest: the bridge did not become ready")


def render(rows: list[RunStats], stack: str, vad_wait_ms: float) -> str:
    """The results as a Markdown table."""
    head = (
        f"stack={stack}; latency = end of caller speech -> first agent audio; added = latency - VAD stop "
        f"({vad_wait_ms:.0f} ms)\n\n"
        "| calls | replies | errors | p50 ms | p95 ms | p99 ms | added p50 | added p95 | added p99 | server CPU % "
        "| server RSS MB | MB/call |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    body = [
        f"| {r.calls} | {r.replies}/{r.turns} | {len(r.errors)} | {r.p50_ms:.0f} | {r.p95_ms:.0f} | {r.p99_ms:.0f} "
        f"| {r.added_p50_ms:.0f} | {r.added_p95_ms:.0f} | {r.added_p99_ms:.0f} | {r.server_cpu_percent:.0f} "
        f"| {r.server_rss_mb:.0f} | {r.rss_per_call_mb:.1f} |"
        for r in rows
    ]
    return "\n".join([head, *body])


def main() -> int:
    """Runs the sweep; prints the table and the largest N within budget."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", default="1,2,4,8,16", help="Concurrent calls, or a comma list swept in order.")
    parser.add_argument("--stack", default="fake", choices=("fake", "light", "default"))
    parser.add_argument("--turns", type=int, default=4, help="Caller lines per call (from bridge_smoke).")
    parser.add_argument("--speed", type=float, default=1.0, help="Media pacing (1.0 = real time).")
    parser.add_argument("--json", type=Path, help="Write the results here.")
    parser.add_argument("--server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    from voice_agent.scenarios import load_scenario

    lines = [t.text for t in load_scenario("bridge_smoke").turns if t.speaker == "caller"][: max(1, args.turns)]
    levels = [int(n) for n in str(args.calls).split(",") if n.strip()]
    if args.server is not None:
        run_server(args.server, args.stack, max(levels), lines)
        return 0

    from voice_agent.audio.stack import AudioStack, caller_voice

    stack = AudioStack.named(args.stack)
    vad_wait_ms = stack.vad_stop_secs * 1000 + stack.user_speech_timeout * 1000
    voice = caller_voice("tone" if args.stack == "fake" else "piper")
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "--server", str(port), "--stack", args.stack, "--calls", args.calls,
         "--turns", str(args.turns)],
        cwd=ROOT, env={**os.environ, "TWILIO_AUTH_TOKEN": "", "TWILIO_ACCOUNT_SID": ""},
    )
    rows: list[RunStats] = []
    try:
        wait_ready(port, child)
        url = f"http://127.0.0.1:{port}"
        for calls in levels:
            row = asyncio.run(load_level(url, child.pid, calls, lines, voice, vad_wait_ms, args.speed))
            rows.append(row)
            print(f"{calls:>3} calls: p95 {row.p95_ms:.0f} ms (added {row.added_p95_ms:.0f}), "
                  f"errors {len(row.errors)}, server CPU {row.server_cpu_percent:.0f} %", flush=True)
            if row.errors and len(row.errors) == calls:
                break
            time.sleep(1.0)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=5)
    print()
    print(render(rows, args.stack, vad_wait_ms))
    within = [r.calls for r in rows if not r.errors and r.added_p95_ms < BUDGET_MS]
    print(f"\nlargest N with p95 added latency < {BUDGET_MS:.0f} ms and no errors: {max(within) if within else 'none'}")
    for row in rows:
        for error in row.errors[:3]:
            print(f"  {row.calls} calls: {error}")
    if args.json:
        args.json.write_text(json.dumps({"stack": args.stack, "rows": [asdict(r) for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
