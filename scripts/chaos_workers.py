"""kill -9 one of two workers during N calls: how many calls still end whole, side by side with no kill.

Runs ``voice-agent serve --workers 2`` (fake audio stack, SQLite call store, signed Twilio webhooks) twice in
one go: once undisturbed (the baseline), once with the worker running the most calls killed with SIGKILL once
they are under way. The Twilio emulator dials every call and follows the provider's instructions (action URL,
pause and redirect) as Twilio does. A call is *whole* when it completed and every caller line got a reply.

Usage: ``.venv/bin/python scripts/chaos_workers.py [--calls 20] [--speed 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voice_agent.audio.stack import caller_voice  # noqa: E402
from voice_agent.harness.scenarios import load_scenario  # noqa: E402
from voice_agent.telephony.emulator import CallResult, EmulatorConfig, TwilioCallerEmulator  # noqa: E402

TOKEN = "chaos-webhook-token"
CALLS_TOKEN = "c" * 24
LINES = [t.text for t in load_scenario("bridge_smoke").turns if t.speaker == "caller"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def active_by_worker(port: int) -> dict[str, int]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/calls",
                                     headers={"Authorization": f"Bearer {CALLS_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as reply:
        calls = json.loads(reply.read())["fleet"]["calls"]
    counts: dict[str, int] = {}
    for entry in calls.values():
        if entry["state"] == "active":
            index = entry["worker"].rsplit("/", 1)[1]
            counts[index] = counts.get(index, 0) + 1
    return counts


def run(calls: int, speed: float, kill: bool, keep: Path | None = None) -> tuple[list[CallResult], float, str, int]:
    import psutil

    port = free_port()
    with tempfile.TemporaryDirectory() as directory:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TWILIO_AUTH_TOKEN": TOKEN, "TWILIO_ACCOUNT_SID": "",
               "VOICE_AGENT_STORE__BACKEND": "sqlite", "VOICE_AGENT_STORE__PATH": f"{directory}/calls.sqlite3",
               "VOICE_AGENT_CALLS_TOKEN": CALLS_TOKEN}
        log = Path(directory) / "serve.log"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "voice_agent.cli", "serve", "--port", str(port), "--stack", "fake",
                 "--workers", "2", "--no-knowledge", "--script", "bridge_smoke", "--max-calls", str(calls),
                 "--drain-timeout", "5",
                 *(["--transcripts", str(keep / f"calls-{'kill' if kill else 'baseline'}")] if keep else [])],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 180
            while "ready (2/2)" not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"serve did not start:\n{log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.2)
            workers = sorted(psutil.Process(proc.pid).children(), key=lambda c: c.create_time())
            started = time.monotonic()
            most = 0  # the most calls one worker ran at once, from the kill on (or all along, without one)

            async def watch() -> None:
                nonlocal most
                while True:
                    with contextlib.suppress(OSError, ValueError, KeyError):
                        most = max(most, *(await asyncio.to_thread(active_by_worker, port)).values(), 0)
                    await asyncio.sleep(0.5)

            async def dial_all() -> list[CallResult]:
                config = EmulatorConfig(speed=speed, silence_secs=0.3, auth_token=TOKEN, reply_timeout_secs=45)
                dialled = [asyncio.create_task(TwilioCallerEmulator(caller_voice("tone"), None, config).dial(
                    f"http://127.0.0.1:{port}/voice", LINES, max_legs=6)) for _ in range(calls)]
                if kill:
                    while True:
                        counts = active_by_worker(port)
                        if sum(counts.values()) >= calls * 3 // 4:
                            break
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(3.0)
                    busiest = max(counts, key=lambda k: counts[k])
                    print(f"  killing worker-{busiest} (running {counts[busiest]} of {sum(counts.values())} calls)",
                          file=sys.stderr)
                    workers[int(busiest)].kill()
                watching = asyncio.create_task(watch())  # without a kill: all along
                try:
                    return list(await asyncio.gather(*dialled))
                finally:
                    watching.cancel()

            results = asyncio.run(dial_all())
            if keep is not None:
                (keep / f"callers-{'kill' if kill else 'baseline'}.json").write_text(
                    json.dumps([r.to_json() for r in results], indent=1))
            return results, time.monotonic() - started, log.read_text(errors="replace"), most
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"serve-{'kill' if kill else 'baseline'}.log").write_bytes(log.read_bytes())


def whole(result: CallResult) -> bool:
    return (result.status == "completed" and len(result.turns) == len(LINES)
            and all(t.latency_ms is not None for t in result.turns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--speed", type=float, default=2.0, help="caller audio speed (x real time)")
    parser.add_argument("--keep", type=Path, default=None, help="copy each run's serve log into this directory")
    args = parser.parse_args()
    rows = []
    for name, kill in (("no kill (baseline)", False), ("kill -9 one worker", True)):
        print(f"{name}: {args.calls} calls ...", file=sys.stderr)
        results, secs, log, most = run(args.calls, args.speed, kill, args.keep)
        good = sum(whole(r) for r in results)
        resumed = [r for r in results if r.legs > 1]
        gaps = sorted(g for r in resumed for g in r.resume_gaps_ms)
        restarted = "restarting it" in log
        rows.append((name, good, len(results), len(resumed), gaps, secs, restarted, most))
        for r in results:
            if not whole(r):
                print(r.render(), file=sys.stderr)
    print(f"{'run':<22}{'whole':>10}{'resumed':>9}{'resume gap p50':>16}{'most on one':>13}{'wall':>8}"
          "  worker restarted")
    for name, good, total, resumed_n, gaps, secs, restarted, most in rows:
        p50 = f"{gaps[len(gaps) // 2] / 1000:.1f} s" if gaps else "-"
        print(f"{name:<22}{f'{good}/{total}':>10}{resumed_n:>9}{p50:>16}{most:>13}{secs:>7.0f}s"
              f"  {'yes' if restarted else 'no'}")
    base, chaos = rows[0][1] / rows[0][2], rows[1][1] / rows[1][2]
    print(f"whole calls with a kill vs without: {chaos / base if base else 0:.2f}x")


if __name__ == "__main__":
    main()
