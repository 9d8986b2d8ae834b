"""Store faults degrade, never kill: a SQLite ``-shm`` damaged under a live worker (SIGBUS in SQLite's shared
memory) is logged once and the call goes on in memory; the store comes back in a new process once it can.

Each fault runs in a worker-like child process (a served call saving after every turn through
:class:`CallPersistence`), never in the test process: before the store ran in a process of its own, the first
save after the fault killed the worker with SIGBUS, without a line in its log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from voice_agent.store import open_store
from voice_agent.store.sqlite_process import IsolatedSQLiteStore

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import asyncio, datetime as dt, sys
from loguru import logger
from voice_agent.call.factory import build_call
from voice_agent.harness.scenarios import load_scenario
from voice_agent.settings import Settings, with_overrides
from voice_agent.harness.simulation.runner import caller_lines
from voice_agent.harness.simulation.text_call import run_text_call
from voice_agent.store import open_store
from voice_agent.store.codec import counts
from voice_agent.telephony.persistence import CallPersistence

logger.remove()
logger.add(sys.stderr, level="INFO", format="{level} {message}")
scenario = load_scenario("billing_dispute")
lines = caller_lines(scenario)
settings = with_overrides(Settings(), call={"reference_date": scenario.reference_date or dt.date(2026, 11, 30)},
                          summarizer={"kind": "extractive"})

async def main() -> None:
    persistence = CallPersistence(open_store("sqlite", path=sys.argv[1]))
    call = build_call(settings, "call-shm-abc")
    saved = []
    for turn in range(8):
        if turn == 3:
            print("saved 3 turns", flush=True)
            sys.stdin.readline()  # the test damages the store's -shm here
        if turn == 4:
            await asyncio.sleep(1.2)  # past the store's first reopening delay (1 s)
        await run_text_call(call.session, call.llm, lines[turn:turn + 1])
        saved.append(await persistence.save(call.session, leg=1, provider_call_id="CASHM"))
    print("saved", "".join("y" if s else "n" for s in saved), "transcript", counts(call.session)["transcript"],
          flush=True)
    persistence.close()

asyncio.run(main())
"""


def run_worker(path: Path, fault: Callable[[Path], object]) -> tuple[int, str, str]:
    """Runs the worker on the store at ``path``, applies ``fault`` to its ``-shm`` after three saved turns;
    (exit code, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(path)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "saved 3 turns"
        fault(Path(f"{path}-shm"))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def died_lines(err: str) -> list[str]:
    """The store's own lines about its process's death (each failed save of a call says why in its own line too)."""
    return [line for line in err.splitlines()
            if line.startswith("ERROR sqlite store") and "store's process was killed by SIGBUS" in line]


@pytest.mark.timeout(45)
def test_a_shm_cut_under_a_live_worker_is_logged_once_and_the_call_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite3"
    code, out, err = run_worker(path, lambda shm: os.truncate(shm, 0))  # a cleanup script, a copy over it
    assert code == 0, f"the worker died ({signal.Signals(-code).name if code < 0 else code}): {err[-2000:]}"
    # The save right after the fault is lost (logged); the store is back in a new process a second later.
    assert out.startswith("saved yyynyyyy transcript "), out + err
    assert len(died_lines(err)) == 1 and "-shm file was cut to 0 bytes" in died_lines(err)[0], err
    assert "works again" in err
    store = open_store("sqlite", path=path)
    assert store is not None
    stored = store.load("call-shm-abc")
    store.close()
    # The store holds the whole call, the turn whose save was lost included.
    assert stored is not None and sum(part == "transcript" for part, _ in stored.items) == int(out.split()[-1]) > 8


@pytest.mark.timeout(45)
def test_an_immutable_shm_is_logged_once_and_the_call_goes_on_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite3"
    probe = tmp_path / "probe"
    probe.touch()
    if os.geteuid() != 0 or subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root and a filesystem that keeps the flag")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    try:
        code, out, err = run_worker(path, lambda shm: subprocess.run(["chattr", "+i", str(shm)], check=True))
    finally:
        subprocess.run(["chattr", "-i", f"{path}-shm"], capture_output=True)
    assert code == 0, f"the worker died ({signal.Signals(-code).name if code < 0 else code}): {err[-2000:]}"
    assert out.startswith("saved yyyn"), out + err  # the call went on to its end; its later saves failed
    assert len(died_lines(err)) == 1 and "-shm file is immutable" in died_lines(err)[0], err
    # Reopening checks the -shm before SQLite maps it: refused, said once, not a crash at every retry.
    assert len([line for line in err.splitlines() if line.startswith("ERROR sqlite store") and "immutable" in line
                and "killed" not in line]) == 1, err


def test_the_store_process_outlives_a_sigterm_and_comes_back_after_it_dies(tmp_path: Path) -> None:
    store = IsolatedSQLiteStore(tmp_path / "calls.sqlite3")
    try:
        assert store.save("call-1", b"one", turn=1, leg=1, provider_call_id="CA1")
        assert store._proc is not None
        os.kill(store._proc.pid, signal.SIGTERM)  # the process manager's drain signal: the worker saves on
        time.sleep(0.2)
        assert store.save("call-1", b"two", turn=2, leg=1, provider_call_id="CA1")
        os.kill(store._proc.pid, signal.SIGKILL)
        with pytest.raises(Exception, match="killed by SIGKILL"):
            store.save("call-1", b"three", turn=3, leg=1, provider_call_id="CA1")
        with pytest.raises(Exception, match="reopening it shortly"):
            store.load("call-1")
        time.sleep(1.1)
        stored = store.load("call-1")
        assert stored is not None and stored.data == b"two"
    finally:
        store.close()
