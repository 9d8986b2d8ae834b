"""Call store benchmark: state write per turn, load on resume, state size, and the resume gap as heard.

Run: ``.venv/bin/python scripts/bench_store.py [--gap-trials N] [--skip-gap]``. Needs ``redis-server`` on
PATH (``scripts/ensure_redis`` installs it); the script starts its own on a free loopback port.

1. States of a ``billing_dispute`` call played through the real pipeline in text mode, at turns 10, 300 and
   1,000 (after the 36 scripted turns the caller goes on asking the scenario's questions again). For SQLite
   (a temporary file, WAL, in the store's own process as served; ``in-proc``: opened in this process, what the
   isolation costs) and Redis: the save after a turn as a served call makes it (what the turn
   changed: the bounded head and the items it appended, encoded and written atomically) beside the state
   saved whole (the baseline, what every save cost before), the load on resume (read + decode + restore into
   a new session), p50 / p99, and the sizes. Also beside them, what every served call already pays per
   turn: the journal's turn line with its ``fsync`` (``--transcripts``).
2. The resume gap as the caller hears it: two worker processes on one store behind the balancer; the
   emulator dials, the first worker is killed with SIGKILL (or sent SIGTERM: a drain hands the call
   over) while the caller speaks; the gap is from the moment the stream dropped to the first voiced
   audio of the resumed call (the apology line), measured at the emulated caller.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from voice_agent.call.factory import CallParts, build_call
from voice_agent.harness.fleet_worker import WorkerProcess
from voice_agent.harness.redis_server import redis_server
from voice_agent.harness.scenarios import load_scenario
from voice_agent.harness.simulation.runner import caller_lines
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.settings import Settings, with_overrides
from voice_agent.store import CallStore, encode, open_store, restore
from voice_agent.store.codec import counts, decode_changes, encode_changes
from voice_agent.store.sqlite import SQLiteCallStore
from voice_agent.telephony.journal import CallJournal

SCENARIO = load_scenario("billing_dispute")
REFERENCE_DATE = SCENARIO.reference_date or dt.date(2026, 11, 30)
SETTINGS = with_overrides(Settings(), call={"reference_date": REFERENCE_DATE},
                          summarizer={"kind": "extractive"})
"""The built-in defaults (lanes, K=6, S=5, cadence), whatever config/settings.toml says, so runs compare."""
TURNS = (10, 300, 1000)


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """(p50, p99) of ``samples``."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def script(turns: int) -> list[CallerLine]:
    """``turns`` caller lines: the scenario's, then its questions (turns 9-30) asked again."""
    lines = caller_lines(SCENARIO)
    questions = [line.text for line in lines[8:30]]
    out = list(lines[:turns])
    while len(out) < turns:
        out.append(CallerLine(len(out) + 1, questions[(len(out) - len(lines)) % len(questions)]))
    return out


async def played(turns: int) -> tuple[CallParts, dict[str, int]]:
    """A call played to ``turns`` turns through the pipeline (text mode, reference agent), and what its store held
    before the last turn (each growing part's item count): the save after that turn appends the rest."""
    parts = build_call(SETTINGS, f"call-bench-{turns}")
    lines = script(turns)
    await run_text_call(parts.session, parts.llm, lines[:-1], turn_timeout=60)
    before = counts(parts.session)
    await run_text_call(parts.session, parts.llm, lines[-1:], turn_timeout=60)
    return parts, before


def timed(fn: Callable[[], object], reps: int) -> list[float]:
    """Milliseconds of each of ``reps`` calls of ``fn``."""
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def bench_state(parts: CallParts, before: dict[str, int], store: CallStore, reps: int) -> dict[str, Any]:
    """Save and load figures of one call state on one store: saved whole (the baseline), and saved as what the last
    turn changed (what a served call does: the head and the items appended since the save before)."""
    session = parts.session
    call_id = session.call_id
    turn = session.turn
    data = encode(session)
    saves = timed(lambda: store.save(call_id, encode(session), turn=turn, leg=1, provider_call_id="CABENCH"), reps)
    encodes = timed(lambda: encode(session), reps)
    # The changes: the store holds the call up to the turn before; each rep writes the last turn's changes again
    # (items past the base are replaced, so every rep costs what the one real save costs).
    head, everything = encode_changes(session, {})
    base = sum(before.values())
    store.save_changes(call_id, head, everything[:base], base=0, turn=turn, leg=1, provider_call_id="CABENCH")

    def save_changes() -> None:
        head, items = encode_changes(session, before)
        store.save_changes(call_id, head, items, base=base, turn=turn, leg=1, provider_call_id="CABENCH")

    change_saves = timed(save_changes, reps)
    head, items = encode_changes(session, before)
    fresh = [build_call(SETTINGS, call_id) for _ in range(reps)]

    def load() -> None:
        stored = store.load(call_id)
        assert stored is not None and stored.items
        restore(fresh.pop().session, decode_changes(stored.data, stored.items, call_id=call_id))

    loads = timed(load, reps)
    return {"save": percentiles(saves), "encode": percentiles(encodes), "load": percentiles(loads),
            "bytes": len(data), "change_save": percentiles(change_saves),
            "change_bytes": len(head) + sum(len(i) for _, i in items)}


def bench_journal(parts: CallParts, directory: Path, reps: int) -> tuple[float, float]:
    """The baseline: a served call's journal turn line with its fsync, per turn."""
    transcript = parts.session.state.transcript
    journal = CallJournal.open(directory, "call-journal-bench")
    journal.sync(transcript)
    samples = timed(lambda: journal.turn_completed(parts.session.turn, transcript, fsync=True), reps)
    journal.close({})
    return percentiles(samples)


# --- the resume gap ---------------------------------------------------------------------------------------------


class Worker(WorkerProcess):
    """A worker process (``voice_agent.harness.fleet_worker``: serve's wiring, fake audio); output discarded."""

    def wait_ready(self, timeout: float = 120) -> None:
        try:
            super().wait_ready(timeout)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from None


async def one_gap(store: CallStore, proxy_url: str, first: Worker, how: signal.Signals, at_turn: int) -> float:
    """One call cut on ``first`` after ``at_turn`` with ``how``; the gap (ms) the caller heard."""
    from voice_agent.audio.stack import caller_voice
    from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator

    lines = [t.text for t in SCENARIO.turns if t.speaker == "caller"][: at_turn + 3]
    emulator = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(
        speed=8.0, silence_secs=0.25, reply_timeout_secs=15, lead_secs=0.1))
    dialing = asyncio.create_task(emulator.dial(f"{proxy_url}/voice", lines))
    deadline = time.monotonic() + 60
    while True:
        stored = await asyncio.to_thread(store.find, emulator.call_sid)
        turns = emulator._result.turns if emulator._result else []
        if stored is not None and stored.turn >= at_turn and len(turns) == at_turn + 1 and turns[-1].latency_ms is None:
            break
        if time.monotonic() > deadline or dialing.done():
            raise SystemExit("the call never reached the cut")
        await asyncio.sleep(0.01)
    first.proc.send_signal(how)
    result = await asyncio.wait_for(dialing, 120)
    if result.status != "completed" or len(result.resume_gaps_ms) != 1:
        raise SystemExit(f"the call did not resume: {result.render()}")
    return result.resume_gaps_ms[0]


async def bench_gaps(env: dict[str, str], store: CallStore, records: Path, trials: int) -> dict[str, list[float]]:
    """Resume gaps after kill -9 and after a drain, ``trials`` calls each, cut at turns 4..."""
    from voice_agent.telephony.balancer import ReadyProxy

    first, second = Worker(env, records), Worker(env, records)
    gaps: dict[str, list[float]] = {"kill -9": [], "drain (SIGTERM)": []}
    try:
        first.wait_ready()
        second.wait_ready()
        for trial in range(trials):
            for kind, how in (("kill -9", signal.SIGKILL), ("drain (SIGTERM)", signal.SIGTERM)):
                async with ReadyProxy([("127.0.0.1", first.port), ("127.0.0.1", second.port)]) as proxy:
                    gaps[kind].append(await one_gap(store, proxy.url, first, how, 4 + trial % 5))
                first.proc.wait(timeout=30)
                first = Worker(env, records)
                first.wait_ready()
    finally:
        first.stop()
        second.stop()
    return gaps


# --- report -----------------------------------------------------------------------------------------------------


def main() -> None:
    """Runs the benchmark and prints the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="Saves and loads timed per state (default 200).")
    parser.add_argument("--gap-trials", type=int, default=5, help="Calls cut per kind for the resume gap.")
    parser.add_argument("--skip-gap", action="store_true", help="Only the state figures.")
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        with redis_server(tmp) as url:
            states = {turns: asyncio.run(played(turns)) for turns in TURNS}  # a 1,000-turn call: about a minute
            stores: dict[str, CallStore] = {}
            for backend, kwargs in (("sqlite", {"path": str(tmp / "bench.sqlite3")}), ("redis", {"url": url})):
                opened = open_store(backend, **kwargs)
                assert opened is not None
                stores[backend] = opened
            # What the isolation costs: the same file opened in this process (the store served before it ran in a
            # process of its own, where a SIGBUS in SQLite's shared memory took the worker with it).
            stores["in-proc"] = SQLiteCallStore(tmp / "bench-in-process.sqlite3")
            rows = []
            for turns, (parts, before) in states.items():
                journal = bench_journal(parts, tmp / "records", args.reps)
                for backend, store in stores.items():
                    rows.append((turns, backend, bench_state(parts, before, store, args.reps), journal))
            print(f"\ncall state per turn (billing_dispute in text mode; {args.reps} saves and loads each). 'whole': "
                  "the state encoded and written whole (the baseline); 'changes': what a served call writes, the "
                  "head and the last turn's items\n")
            head = (f"{'turn':>5} {'store':<7} {'state KiB':>9} {'whole save p50/p99 ms':>22} "
                    f"{'changes KiB':>11} {'changes save p50/p99 ms':>24} {'load p50/p99 ms':>17} "
                    f"{'journal fsync p50 ms':>21} {'changes/whole p50':>18} {'changes/journal':>16}")
            print(head)
            print("-" * len(head))
            for turns, backend, fig, journal in rows:
                save, change = fig["save"], fig["change_save"]
                print(f"{turns:>5} {backend:<7} {fig['bytes'] / 1024:>9.1f} {save[0]:>11.2f} / {save[1]:<8.2f} "
                      f"{fig['change_bytes'] / 1024:>11.1f} {change[0]:>12.2f} / {change[1]:<9.2f} "
                      f"{fig['load'][0]:>7.2f} / {fig['load'][1]:<7.2f} {journal[0]:>21.2f} "
                      f"{change[0] / save[0]:>17.2f}x {change[0] / journal[0]:>15.2f}x")
            if not args.skip_gap:
                print(f"\nresume gap as the caller hears it (stream dropped -> first voiced audio of the resumed call; "
                      f"{args.gap_trials} calls per kind and store, fake audio stack, emulator at 8x)\n")
                print(f"{'store':<7} {'cut':<16} {'p50 ms':>8} {'max ms':>8}  gaps ms")
                for backend, store in stores.items():
                    if backend == "in-proc":
                        continue
                    env = {**os.environ, "TWILIO_AUTH_TOKEN": "", "TWILIO_ACCOUNT_SID": "",
                           "VOICE_AGENT_SUMMARIZER__KIND": "extractive",
                           "VOICE_AGENT_CALL__REFERENCE_DATE": REFERENCE_DATE.isoformat(),
                           "VOICE_AGENT_STORE__BACKEND": backend}
                    env.update({"VOICE_AGENT_STORE__PATH": str(tmp / "bench.sqlite3")} if backend == "sqlite"
                               else {"VOICE_AGENT_STORE__URL": url})
                    gaps = asyncio.run(bench_gaps(env, store, tmp / "records", args.gap_trials))
                    for kind, values in gaps.items():
                        print(f"{backend:<7} {kind:<16} {statistics.median(values):>8.0f} {max(values):>8.0f}  "
                              f"{', '.join(f'{v:.0f}' for v in values)}")
            for store in stores.values():
                store.close()
    print(f"\nwall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
