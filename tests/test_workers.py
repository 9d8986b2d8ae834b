"""``serve --workers``: workers on one port share stream tokens and the call cap through the local fleet file."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.call.factory import call_factory
from voice_agent.settings import Settings, with_overrides
from voice_agent.telephony.app import VoiceBridge
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.emulator import CallResult, EmulatorConfig, TwilioCallerEmulator, request_twiml
from voice_agent.telephony.fleet import FleetReservation, FleetUnavailable
from voice_agent.telephony.local_fleet import LocalFleet
from voice_agent.telephony.process import running_bridge

from .fakes.callers import tone_caller
from .test_telephony_cli import APP, ROOT, free_port

LINES = ["Hi, is this the billing line?"]
CALLS_TOKEN = "t" * 24


@asynccontextmanager
async def worker(path: Path, name: str, max_calls: int = 4) -> AsyncIterator[tuple[VoiceBridge, str]]:
    config = ServerConfig(port=0, stack=AudioStack.named("fake").with_script(LINES), idle_timeout_secs=None,
                          knowledge=False, fleet=LocalFleet(path, name), hand_over=False, max_calls=max_calls)
    settings = with_overrides(Settings(), call={"reference_date": dt.date(2026, 11, 30)})
    async with running_bridge(config, call_factory(settings)) as running:
        yield running




async def test_a_stream_reaching_another_worker_than_its_webhook_is_taken_there_once(tmp_path: Path) -> None:
    path = tmp_path / "fleet.sqlite3"
    async with worker(path, "a") as (bridge_a, url_a), worker(path, "b") as (bridge_b, url_b):
        emulator = tone_caller()
        plan = await request_twiml(f"{url_a}/voice", emulator.config, emulator.call_sid)
        token = plan.parameters["token"]
        emulator.config.ws_token = token
        result = await emulator.dial(url_b.replace("http://", "ws://") + "/ws", LINES)
        assert result.status == "completed" and result.turns[0].latency_ms is not None, result.render()
        assert [r.call_id for r in bridge_b.registry.all() if r.started] == [plan.parameters["call_id"]]
        assert not [r for r in bridge_a.registry.all() if r.started]
        again = await tone_caller(token, emulator.call_sid).dial(url_a.replace("http://", "ws://") + "/ws", LINES)
        assert again.status == "closed" and again.close_code == 1008
        fleet = bridge_a.config.fleet
        assert fleet is not None
        assert (await fleet.calls())[plan.parameters["call_id"]]["worker"] == "b"
        for _ in range(500):  # the slot is freed as the call ends, after the caller has seen the stream close
            if await fleet.busy() == 0:
                break
            await asyncio.sleep(0.01)
        assert await fleet.busy() == 0


async def test_a_full_worker_frees_the_reservations_whose_stream_another_worker_took(tmp_path: Path) -> None:
    path = tmp_path / "fleet.sqlite3"
    async with worker(path, "a", max_calls=1) as (bridge_a, url_a), worker(path, "b") as (_bridge_b, url_b):
        first = tone_caller()
        plan = await request_twiml(f"{url_a}/voice", first.config, first.call_sid)
        first.config.ws_token = plan.parameters["token"]
        result = await first.dial(url_b.replace("http://", "ws://") + "/ws", LINES)
        assert result.status == "completed", result.render()
        # Worker a's one slot still holds the first call's reservation: its stream went to b, and its token has
        # not lapsed. The next caller must get the slot, not the busy line.
        second = tone_caller()
        again = await request_twiml(f"{url_a}/voice", second.config, second.call_sid)
        assert "token" in again.parameters, again
        first_record = bridge_a.registry.get(plan.parameters["call_id"])
        assert first_record is not None and first_record.reason == "stream taken by b"


async def test_the_fleet_file_holding_stream_tokens_is_the_owners_alone(tmp_path: Path) -> None:
    import stat

    old = os.umask(0o022)
    try:
        fleet = LocalFleet(tmp_path / "fleet.sqlite3", "a")
        await fleet.reserve(FleetReservation("call-1", "twilio", "CA1", 1), "tok-1", ttl_secs=10)
    finally:
        os.umask(old)
    made = [p for p in tmp_path.iterdir() if p.name.startswith("fleet.sqlite3")]
    assert made and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in made), [oct(p.stat().st_mode) for p in made]
    await fleet.close()


async def test_the_local_fleet_cap_counts_every_worker_and_a_lapsed_hold_frees_its_slot(tmp_path: Path) -> None:
    path = tmp_path / "fleet.sqlite3"
    one, other = LocalFleet(path, "a", max_calls=1, lease_secs=0.2), LocalFleet(path, "b", max_calls=1)
    assert await one.reserve(FleetReservation("call-1", "twilio", "CA1", 1), "tok-1", ttl_secs=10)
    assert not await other.reserve(FleetReservation("call-2", "twilio", "CA2", 1), "tok-2", ttl_secs=10)
    assert await other.claim("tok-2") is None
    claimed = await other.claim("tok-1")
    assert claimed is not None and claimed.call_id == "call-1" and await one.claim("tok-1") is None
    await one.hold(["call-1"])  # a 0.2 s lease: the worker holding it stops renewing (killed)
    await asyncio.sleep(0.3)
    assert await other.reserve(FleetReservation("call-2", "twilio", "CA2", 1), "tok-2", ttl_secs=10)
    await one.close()
    await other.close()


@pytest.mark.timeout(300)
def test_serve_with_two_workers_answers_calls_from_both_on_one_port_and_a_hang_up_drains_them(
        tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TWILIO_AUTH_TOKEN": "", "TWILIO_ACCOUNT_SID": "",
           "VOICE_AGENT_STORE__BACKEND": "none", "VOICE_AGENT_CALLS_TOKEN": CALLS_TOKEN}
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", APP, "serve", "--port", str(port), "--stack", "fake", "--workers", "2",
             "--no-knowledge", "--script", "bridge_smoke", "--max-calls", "8", "--drain-timeout", "5"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
    try:
        wait_for(log, "ready (2/2)", proc)
        assert listeners(proc.pid, port) == 2  # the supervisor's own copy of the socket is closed
        workers: set[str] = set()
        for _ in range(3):  # the kernel picks a worker per connection: 8 calls miss one worker 1 time in 128
            # a hung-up call holds its slot until its pipeline has stopped on the server: wait for all eight
            wait_until(lambda: fleet(port)["busy"] == 0, "the last calls' slots to be freed")
            results = asyncio.run(calls(f"http://127.0.0.1:{port}/voice", 8))
            failed = [r.render() for r in results if r.status != "completed" or r.turns[0].latency_ms is None]
            assert not failed, "\n".join([*failed, serve_log(log.read_text(errors="replace"))])
            workers |= {entry["worker"] for entry in fleet_calls(port).values()}
            if len(workers) == 2:
                break
        assert {w.rsplit("/", 1)[1] for w in workers} == {"0", "1"}
        children = psutil.Process(proc.pid).children()
        proc.send_signal(signal.SIGHUP)  # a closed terminal: forwarded, the workers drain as on SIGTERM
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        kill_tree(proc)


def serve_log(log: str) -> str:
    """A serve log's tail without pipecat's once-per-call turn-strategy warnings (which hide what went wrong)."""
    return "\n".join(line for line in log.splitlines()
                     if "user_turn_stop_strategy" not in line and "stt-benchmark" not in line)[-6000:]


CALLS = 6
SMOKE_LINES = [
    "Hi, is this the billing line?", "I've got a problem with my bill. Something has been charged twice.",
    "My account number is ACC-4729-18.", "Can you pull up my invoices? It's the October one that's wrong.",
    "On the October invoice, the same thing was charged twice. Please open a dispute for the duplicate charge.",
    "What hours are your lines open?",
]


@pytest.mark.timeout(600)
def test_kill_9_of_one_of_two_workers_during_calls_is_not_an_outage(tmp_path: Path) -> None:
    """The mechanism, on six calls (scripts/chaos_workers.py measures twenty, side by side with no kill)."""
    port = free_port()
    # Signed webhooks, as in production (unsigned ones are rate-limited per address: twenty callers and their
    # returns from one loopback address would hit it).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TWILIO_AUTH_TOKEN": "kill-test-token", "TWILIO_ACCOUNT_SID": "",
           "VOICE_AGENT_STORE__BACKEND": "sqlite", "VOICE_AGENT_STORE__PATH": str(tmp_path / "calls.sqlite3"),
           "VOICE_AGENT_CALLS_TOKEN": CALLS_TOKEN, "VOICE_AGENT_LOG_LEVEL": "INFO"}
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", APP, "serve", "--port", str(port), "--stack", "fake", "--workers", "2",
             "--no-knowledge", "--script", "bridge_smoke", "--max-calls", "20", "--drain-timeout", "5"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
    try:
        wait_for(log, "ready (2/2)", proc)
        children = sorted(psutil.Process(proc.pid).children(), key=lambda c: c.create_time())  # by worker index
        killed: list[int] = []

        async def run() -> list[CallResult]:
            # Real time x2 (at 8x a caller sends 400 media messages a second into 2 cores); a reply late on a busy
            # machine is still a reply: this test is about calls surviving, not latency.
            config = EmulatorConfig(speed=2.0, silence_secs=0.3, auth_token="kill-test-token", reply_timeout_secs=45)
            callers = [TwilioCallerEmulator(caller_voice("tone"), None, config) for _ in range(CALLS)]
            dialled = [asyncio.create_task(c.dial(f"http://127.0.0.1:{port}/voice", SMOKE_LINES, max_legs=6))
                       for c in callers]
            # The kernel spreads the streams: the worker running the most is killed once they are under way.
            deadline = time.monotonic() + 60
            while True:
                active = [e["worker"].rsplit("/", 1)[1] for e in fleet_calls(port).values() if e["state"] == "active"]
                busiest = max(("0", "1"), key=active.count)
                if active.count(busiest) >= CALLS // 2:
                    break
                assert time.monotonic() < deadline, serve_log(log.read_text(errors="replace"))
                await asyncio.sleep(0.2)
            await asyncio.sleep(4.0)  # a turn or two in
            killed.append(int(busiest))
            children[int(busiest)].kill()
            return list(await asyncio.gather(*dialled))

        results = asyncio.run(run())
        whole = [r for r in results if r.status == "completed" and len(r.turns) == len(SMOKE_LINES)
                 and all(t.latency_ms is not None for t in r.turns)]
        resumed = [r for r in results if r.legs > 1]
        report = "\n".join(r.render() for r in results if r not in whole)
        served = serve_log(log.read_text(errors="replace"))
        assert len(whole) == CALLS, f"{len(whole)}/{CALLS} whole\n{report}\n{served}"
        assert resumed, "no call ran on the killed worker"
        assert f"worker-{killed[0]} (pid {children[killed[0]].pid}) killed by SIGKILL; restarting it" in log.read_text()
        wait_for(log, f"worker-{killed[0]} ready (2/2)", proc)  # its replacement serves again
        # The dead worker's calls are not all piled on the survivor (past one core, every call on it fell behind):
        # the replacement runs some of them, or the survivor, carrying its share, waited for it (and said so).
        on_replacement = [e for e in fleet_calls(port).values()
                          if e["worker"].endswith(f"/{killed[0]}") and int(e.get("leg", 1)) > 1]
        out = log.read_text(errors="replace")
        # Which of these happens depends on how the calls were split and how fast the replacement came up.
        assert on_replacement or "wait for its replacement" in out, serve_log(out)
    finally:
        kill_tree(proc)


def test_a_second_serve_on_a_port_shared_with_reuse_port_is_refused_before_forking() -> None:
    from typer.testing import CliRunner

    from .test_telephony_cli import make_app

    # A leftover worker of another group (SO_REUSEPORT): without a plain bind first, new workers would join it
    # and the kernel would split calls between two groups with two fleet files.
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        result = CliRunner().invoke(make_app(), ["serve", "--workers", "2", "--port", str(port), "--stack", "fake"])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output, result.output
    assert "another process is listening there" in result.output


SUPERVISOR = """
import os, signal, socket, sys, time
from voice_agent.telephony.workers import run_workers
mode, marker = sys.argv[1], sys.argv[2]
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(8)
def worker(slot):
    first = not os.path.exists(marker)
    if mode == "slow-restart" and slot.index == 0 and not first:
        print("warming up", flush=True)
        time.sleep(2.0)  # a replacement warming up, with no handler of its own yet
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    slot.ready()
    print(f"pid {slot.index} {os.getpid()}", flush=True)
    if slot.index == 0 and (mode == "die" or (mode in ("die-once", "slow-restart") and first)):
        open(marker, "w").close()
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        time.sleep(0.05)
sys.exit(run_workers(2, sock, worker))
"""


def supervisor(mode: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-c", SUPERVISOR, mode, str(log.with_suffix(".died"))], cwd=ROOT,
                                stdout=out, stderr=out,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})


def worker_pids(log: Path, proc: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pids: dict[str, str] = {}
        # Two workers print at once into one log: a line can hold both ("pid 0 12pid 1 34"), so match, not split.
        for index, pid in re.findall(r"pid (\d+) (\d+)", log.read_text()):
            pids.setdefault(index, pid)  # each index's first process
        if len(pids) == 2:
            return [int(pids["0"]), int(pids["1"])]  # by worker index
        assert proc.poll() is None or len(pids) == 2, log.read_text()
        time.sleep(0.05)
    raise AssertionError(log.read_text())


def test_workers_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    proc = supervisor("wait", log)
    try:
        pids = worker_pids(log, proc)
        wait_for(log, "ready (2/2)", proc)
        proc.kill()  # SIGKILL: no handler runs, nothing is forwarded
        proc.wait(timeout=5)
        _gone, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], timeout=10)
        assert not alive, f"workers outlived the supervisor: {alive}"
    finally:
        kill_tree(proc)


def test_a_worker_killed_by_sigkill_is_forked_again_and_the_others_go_on(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    proc = supervisor("die-once", log)
    try:
        pids = worker_pids(log, proc)
        deadline = time.monotonic() + 20
        while log.read_text().count("pid 0 ") < 2:
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.05)
        out = log.read_text()
        assert f"worker-0 (pid {pids[0]}) killed by SIGKILL; restarting it (1 in the last minute)" in out, out
        assert psutil.Process(pids[1]).status() != psutil.STATUS_ZOMBIE  # the other worker never stopped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, log.read_text()
    finally:
        kill_tree(proc)


def test_a_stop_asked_while_a_replacement_warms_up_stops_it_too(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    proc = supervisor("slow-restart", log)
    try:
        worker_pids(log, proc)
        wait_for(log, "warming up", proc, timeout=20)
        proc.send_signal(signal.SIGTERM)
        # The replacement was forked with the supervisor's forwarding handler and went on serving: never exited.
        assert proc.wait(timeout=15) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        kill_tree(proc)


def test_a_crash_looping_worker_stops_the_others_and_the_supervisor_exits_128_plus_its_signal(
        tmp_path: Path) -> None:
    from voice_agent.telephony.workers import RESTARTS_PER_MINUTE

    log = tmp_path / "out.log"
    proc = supervisor("die", log)
    try:
        pids = worker_pids(log, proc)
        assert proc.wait(timeout=30) == 128 + signal.SIGKILL, log.read_text()
        out = log.read_text()
        assert out.count("killed by SIGKILL; restarting it") == RESTARTS_PER_MINUTE, out
        assert f"killed by SIGKILL {RESTARTS_PER_MINUTE + 1} times in a minute; stopping the other workers" in out
        assert not psutil.pid_exists(pids[1]) or psutil.Process(pids[1]).status() == psutil.STATUS_ZOMBIE
    finally:
        kill_tree(proc)


def test_exit_status_maps_a_death_by_signal_to_128_plus_the_signal() -> None:
    from voice_agent.telephony.workers import exit_status

    assert exit_status(-9) == 137 and exit_status(-15) == 143 and exit_status(0) == 0 and exit_status(2) == 2
    assert exit_status(None) == 1


def wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}"
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in: {log.read_text(errors='replace')[-2000:]}")


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kills the supervisor and every worker by PID (a worker left behind would keep the port)."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    for each in tree:
        with contextlib.suppress(psutil.Error):
            each.kill()
    psutil.wait_procs(tree, timeout=5)
    if proc.poll() is None:
        proc.wait(timeout=5)


def listeners(pid: int, port: int) -> int:
    """Sockets listening on ``port`` in the supervisor's worker processes."""
    count = 0
    for child in psutil.Process(pid).children(recursive=True):
        try:
            count += sum(1 for c in child.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port)
        except psutil.Error:
            continue
    return count


async def calls(url: str, count: int) -> list[CallResult]:
    return list(await asyncio.gather(*(tone_caller().dial(url, LINES) for _ in range(count))))


def fleet(port: int) -> dict[str, Any]:
    """The ``fleet`` part of ``GET /calls``: ``busy`` (slots held now) and ``calls`` (the registry)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/calls",
                                     headers={"Authorization": f"Bearer {CALLS_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as reply:
        return dict(json.loads(reply.read())["fleet"])


def fleet_calls(port: int) -> dict[str, dict[str, str]]:
    return dict(fleet(port)["calls"])


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.05)


def test_workers_need_a_fixed_port() -> None:
    from typer.testing import CliRunner

    from .test_telephony_cli import make_app

    result = CliRunner().invoke(make_app(), ["serve", "--workers", "2", "--port", "0"])
    assert result.exit_code == 2 and "fixed --port" in result.output
    result = CliRunner().invoke(make_app(), ["serve", "--workers", "0"])
    assert result.exit_code == 2 and "at least 1" in result.output


def test_a_worker_of_serve_workers_does_not_hand_over_even_on_the_redis_fleet(monkeypatch, tmp_path: Path) -> None:
    import voice_agent.telephony.fleet as fleet_module
    import voice_agent.telephony.process as process_module
    from voice_agent.telephony.cli import _serve_worker
    from voice_agent.telephony.fleet import Fleet
    from voice_agent.telephony.workers import WorkerSlot

    seen: list[ServerConfig] = []

    async def fake_serve(config: ServerConfig, _factory: object, **_: object) -> None:
        seen.append(config)

    redis_fleet = Fleet("redis://127.0.0.1:1/0", "w")  # never dialled: the client connects lazily
    monkeypatch.setenv("VOICE_AGENT_STORE__BACKEND", "none")
    monkeypatch.setattr(fleet_module, "fleet_for", lambda *_a, **_k: redis_fleet)
    monkeypatch.setattr(process_module, "serve", fake_serve)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        reader, writer = __import__("multiprocessing").Pipe(duplex=False)
        slot = WorkerSlot(0, tmp_path / "fleet.sqlite3", sock, writer)
        for given, expected in ((None, False), (True, True)):
            _serve_worker("127.0.0.1", 8765, "twilio", None, False, 4, "fake", None, 0, 5, False, None, 0, given,
                          worker=slot)
            assert seen[-1].fleet is redis_fleet and seen[-1].hand_over is expected
        reader.close()


async def test_a_worker_waiting_for_another_ones_fleet_lock_keeps_its_event_loop_running(tmp_path: Path) -> None:
    path = tmp_path / "fleet.sqlite3"
    fleet = LocalFleet(path, "a", lock_timeout_secs=2.0)
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another worker's write in progress
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")  # runs only if the loop is free
    try:
        assert await fleet.reserve(FleetReservation("call-1", "twilio", "CA1", 1), "tok-1", ttl_secs=10)
    finally:
        task.cancel()
        other.close()
    assert ticks >= 10, f"the event loop stood still for the lock ({ticks} ticks)"
    await fleet.close()


async def test_an_unreadable_local_fleet_is_fleet_unavailable_and_calls_still_answers(tmp_path: Path) -> None:
    path = tmp_path / "fleet.sqlite3"
    fleet = LocalFleet(path, "a", lock_timeout_secs=0.05)
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(FleetUnavailable):
            await fleet.busy()
        with pytest.raises(FleetUnavailable):
            await fleet.calls()
        assert not await fleet.reserve(FleetReservation("call-1", "twilio", "CA1", 1), "tok-1", ttl_secs=10)
        config = ServerConfig(port=0, stack=AudioStack.named("fake").with_script(LINES), idle_timeout_secs=None,
                              knowledge=False, fleet=fleet, hand_over=False, calls_token=CALLS_TOKEN)
        settings = with_overrides(Settings(), call={"reference_date": dt.date(2026, 11, 30)})
        async with running_bridge(config, call_factory(settings)) as (_bridge, url):
            request = urllib.request.Request(f"{url}/calls", headers={"Authorization": f"Bearer {CALLS_TOKEN}"})
            reply = await asyncio.to_thread(urllib.request.urlopen, request, timeout=5)
            body = json.loads(reply.read())
        assert reply.status == 200 and "locked" in body["fleet"]["error"], body
    finally:
        other.close()


def test_workers_opening_the_fleet_file_together_all_start(tmp_path: Path) -> None:
    import sqlite3
    import threading

    from voice_agent.telephony.local_fleet import LocalFleet

    path = tmp_path / "fleet.sqlite3"
    # Another worker holds the file mid-transaction while this one starts: it waits, then starts.
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.5, lambda: other.execute("COMMIT"))
    release.start()
    try:
        fleet = LocalFleet(path, "w1", lock_timeout_secs=0.1)
    finally:
        release.join()
        other.close()
    assert fleet.worker == "w1"


def test_the_least_loaded_worker_accepts_and_a_dead_workers_calls_wait_for_its_replacement() -> None:
    from voice_agent.telephony.accept_gate import MAX_DEAF_SECS, should_accept
    from voice_agent.telephony.local_fleet import WorkerLoad

    def other(live: int, age: float = 0.1) -> list[WorkerLoad]:
        return [WorkerLoad("w/1", live, True, age)]

    # Both present: the one with more calls stops, the one with fewer (or as many) goes on: one always accepts.
    assert not should_accept(11, 21, 2, other(10), 0).accept
    assert should_accept(10, 21, 2, other(11), 0).accept and should_accept(10, 20, 2, other(10), 0).accept
    # The other worker was killed with 16 calls: the survivor takes its share of the 20, the rest wait for the
    # replacement (the old code: the survivor took all 20 before the replacement was up, past one core).
    assert should_accept(9, 20, 2, [], 0).accept
    held = should_accept(10, 20, 2, [], 0.5)
    assert not held.accept and "wait for its replacement" in held.why
    assert should_accept(10, 20, 2, [], MAX_DEAF_SECS).accept  # never deaf for longer than a webhook waits
    waited = should_accept(10, 20, 2, [], MAX_DEAF_SECS)
    assert waited.waited_out and should_accept(11, 21, 2, [], 0, waited_out=True).accept  # once per absence
    assert should_accept(10, 20, 2, other(0), 0).accept is False  # the replacement is up: it takes them
    assert should_accept(0, 0, 2, [], 0).accept  # start-up, the other still warming: nothing waits for it
    assert should_accept(7, 0, 2, [], 0).accept  # the fleet file unreadable (nothing known, nothing held): accept
    assert should_accept(5, 20, 2, other(9, age=60), 0).accept  # a silent worker is missing, not the least loaded


async def test_the_fleet_forgets_a_killed_workers_load_at_once(tmp_path: Path) -> None:
    path = tmp_path / "fleet.sqlite3"
    survivor, doomed = LocalFleet(path, "w/0"), LocalFleet(path, "w/1")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert (await doomed.beat(7, True))[1] == []
        with sqlite3.connect(path) as db:  # as if w/1 ran in that process
            db.execute("UPDATE workers SET pid = ? WHERE worker = 'w/1'", (child.pid,))
        _busy, others = await survivor.beat(3, True)
        assert [(w.worker, w.live) for w in others] == [("w/1", 7)]
        child.kill()
        # Dead but not reaped yet (a zombie: its supervisor is busy): gone already, its calls come back now.
        wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, "the child to be a zombie")
        _busy, others = await survivor.beat(3, True)
        assert others == []
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
        await survivor.close()
        await doomed.close()


async def test_a_stream_counts_for_the_accept_gate_before_its_call_starts(tmp_path: Path) -> None:
    from websockets.asyncio.client import connect

    # A burst of streams is accepted faster than each one's handshake and leg open: counting only started calls,
    # the survivor of a kill saw its share free and took every returning call (all 20 on one core).
    async with worker(tmp_path / "fleet.sqlite3", "a") as (bridge, url):
        assert bridge.live_calls() == 0
        async with connect(url.replace("http://", "ws://") + "/ws") as ws, \
                connect(url.replace("http://", "ws://") + "/ws") as _other:
            for _ in range(500):
                if bridge.live_calls() == 2:
                    break
                await asyncio.sleep(0.01)
            assert bridge.live_calls() == 2  # no start message sent: neither call has started
            assert not [r for r in bridge.registry.all() if r.started]
            await ws.close()
            for _ in range(500):
                if bridge.live_calls() == 1:
                    break
                await asyncio.sleep(0.01)
            assert bridge.live_calls() == 1


async def test_a_burst_of_a_dead_workers_calls_is_decided_stream_by_stream(tmp_path: Path) -> None:
    """The survivor of a kill stops at its share even when the dead worker's calls all come back at once."""
    from loguru import logger

    from voice_agent.telephony.accept_gate import AcceptGate

    class Listener:
        def __init__(self) -> None:
            self.listening = True

        def pause_accepting(self) -> None:
            self.listening = False

        async def resume_accepting(self) -> None:
            self.listening = True

    fleet = LocalFleet(tmp_path / "fleet.sqlite3", "w/0", lease_secs=60)
    for n in range(6):  # six calls hold slots: one runs here, five ran on the worker just killed
        await fleet.reserve(FleetReservation(f"call-{n}", "twilio", f"CA{n}", 1), f"tok-{n}", ttl_secs=60)
        await fleet.claim(f"tok-{n}")
    live = [1]
    listener = Listener()
    gate = AcceptGate(fleet, 2, lambda: live[0], listener)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO", format="{message}")
    try:
        await gate.beat()
        assert gate.accepting and listener.listening  # 1 of 6 here: below its share (3), it takes calls
        for _ in range(5):  # all five come back before anything awaits (the old gate decided after the burst)
            live[0] += 1
            gate.stream_started()
        assert not gate.accepting and not listener.listening and gate.pauses == 1
        assert any("wait for its replacement (3 >= 3 of 6)" in line for line in lines), lines
    finally:
        logger.remove(sink)
        await fleet.close()


async def test_a_connection_accepted_just_before_a_pause_is_still_answered() -> None:
    """Pausing a worker's accepting while a connection it took is still being set up keeps that connection."""
    from voice_agent.telephony.process import stop_accepting

    servers: list[asyncio.Server] = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(data)

    def pause_then_serve() -> asyncio.Protocol:
        # asyncio makes the protocol, then the transport, in the accepted connection's task: a gate deciding to
        # pause in between (a stream starting, a beat) is what happens on a busy worker.
        stop_accepting(servers)
        return Echo()

    server = await asyncio.get_running_loop().create_server(pause_then_serve, "127.0.0.1", 0)
    servers.append(server)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hello")
    assert await asyncio.wait_for(reader.read(5), 5) == b"hello"  # the old pause (close at once) reset it
    writer.close()
    await asyncio.sleep(0)
    assert not server.is_serving()  # and the server did stop
    with pytest.raises(OSError):
        await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
