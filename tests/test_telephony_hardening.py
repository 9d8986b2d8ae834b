"""A telephony bridge a stranger cannot break, measured from outside.

Malformed known events (every provider) are dropped and counted while the call goes on; protocol
violations close with 1008; the call's record file survives ``kill -9`` up to the last completed
turn, is private (0600 in a 0700 directory) and expires; SIGTERM lets calls finish, and a call still
running at the drain limit hears a goodbye and is recorded as drained; ``/calls`` needs a token;
a bad ``--port`` or a misspelt ``VOICE_AGENT_*`` variable is one line. The fake audio stack
(energy VAD, scripted STT, tone TTS) stands in for the models; sockets, audio and processes are real.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import datetime as dt
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

import aiohttp
import pytest
import typer
from typer.testing import CliRunner
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.test_telephony_bridge import ended, wait_for
from voice_agent.audio.codec import PHONE_RATE, pcm16_to_ulaw, resample
from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.call.factory import CallFactory, call_factory
from voice_agent.harness.scenarios import load_scenario
from voice_agent.settings import Settings, SettingsError, load_settings, with_overrides
from voice_agent.telephony import app as app_module
from voice_agent.telephony.app import VoiceBridge
from voice_agent.telephony.bridge import EndReason, GuardedSerializer
from voice_agent.telephony.call_runner import RECORD_THREADS
from voice_agent.telephony.cli import register_telephony_commands
from voice_agent.telephony.config import GOODBYE_LINE, ConfigError, ServerConfig
from voice_agent.telephony.emulator import SILENCE, EmulatorConfig, TwilioCallerEmulator
from voice_agent.telephony.journal import prune_records
from voice_agent.telephony.process import running_bridge
from voice_agent.telephony.providers import HandshakeError, HangupCredentials, Provider, make_serializer, parse_start

ROOT = Path(__file__).resolve().parents[1]
LINES = [t.text for t in load_scenario("bridge_smoke").turns if t.speaker == "caller"]
DATE = dt.date(2026, 11, 30)
TOKEN = "calls-token-0123456789abcdef"


def config(**overrides: Any) -> ServerConfig:
    stack = overrides.pop("stack", AudioStack.named("fake").with_script(LINES))
    overrides = {"knowledge": False, "idle_timeout_secs": None, "handshake_timeout_secs": 2.0, **overrides}
    return ServerConfig(port=0, stack=stack, **overrides)


def factory() -> CallFactory:
    return call_factory(with_overrides(Settings(), policy={"keep": 2, "every": 2}, call={"reference_date": DATE}))




def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- a hand-driven media stream for each provider -------------------------------------------------------------------

STREAM_KEY = {Provider.TWILIO: "streamSid", Provider.TELNYX: "stream_id", Provider.PLIVO: "streamId"}
CALL_KEY = {Provider.TWILIO: "callSid", Provider.TELNYX: "call_control_id", Provider.PLIVO: "callId"}
WEBHOOK_ID = {Provider.TWILIO: "CallSid", Provider.TELNYX: "CallControlId", Provider.PLIVO: "CallUUID"}
MARK_EVENT = {Provider.TWILIO: "mark", Provider.TELNYX: "mark", Provider.PLIVO: "playedStream"}
AUDIO_OUT = {Provider.TWILIO: "media", Provider.TELNYX: "media", Provider.PLIVO: "playAudio"}


class StreamCaller:
    """One provider's media-stream messages, sent by hand."""

    def __init__(self, provider: Provider, ws: ClientConnection | None = None) -> None:
        self.provider = provider
        self.ws = cast(ClientConnection, ws)
        self.stream_id = f"{provider.value}-stream-7"
        self.call_id = {Provider.TWILIO: "CA" + "7" * 32, Provider.TELNYX: "v3:telnyx-call-7",
                        Provider.PLIVO: "5a1b2c3d-plivo-call-7"}[provider]

    def msg(self, event: str, **body: Any) -> dict[str, Any]:
        return {"event": event, STREAM_KEY[self.provider]: self.stream_id, **body}

    def start_messages(self, token: str) -> list[dict[str, Any]]:
        if self.provider is Provider.TWILIO:
            return [{"event": "connected", "protocol": "Call", "version": "1.0.0"}, self.msg("start", start={
                "streamSid": self.stream_id, "callSid": self.call_id, "customParameters": {"token": token},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}})]
        if self.provider is Provider.TELNYX:
            return [{"event": "connected", "version": "1.0.0"}, self.msg("start", start={
                "call_control_id": self.call_id, "media_format": {"encoding": "PCMU", "sample_rate": 8000,
                                                                  "channels": 1}})]
        return [self.msg("start", start={"streamId": self.stream_id, "callId": self.call_id,
                                         "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}})]

    def media(self, chunk: bytes) -> dict[str, Any]:
        return self.msg("media", media={"track": "inbound", "payload": base64.b64encode(chunk).decode()})

    def dtmf(self, digit: Any) -> dict[str, Any]:
        return self.msg("dtmf", dtmf={"digit": digit})

    def mark(self, name: Any) -> dict[str, Any]:
        if self.provider is Provider.PLIVO:
            return self.msg("playedStream", name=name)
        return self.msg("mark", mark={"name": name})

    def stop(self) -> dict[str, Any]:
        return self.msg("stop", stop={CALL_KEY[self.provider]: self.call_id})

    async def send(self, message: dict[str, Any] | str | bytes) -> None:
        await self.ws.send(message if isinstance(message, str | bytes) else json.dumps(message))

    async def open(self, token: str) -> None:
        for message in self.start_messages(token):
            await self.send(message)

    async def speak(self) -> None:
        samples, rate = caller_voice("tone")("a short caller line for the agent")
        ulaw = pcm16_to_ulaw(resample(samples, rate, PHONE_RATE)) + SILENCE * 50
        for i in range(0, len(ulaw) - 159, 160):
            await self.send(self.media(ulaw[i : i + 160]))
            if i % 3200 == 0:
                await asyncio.sleep(0.005)

    async def agent_audio(self, timeout: float = 10.0) -> None:
        """Reads until the agent's audio arrives."""
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            if message.get("event") == AUDIO_OUT[self.provider]:
                return


async def webhook(url: str, caller: StreamCaller) -> tuple[str, str]:
    """Posts the provider's webhook; returns the stream URL and the one-time token its answer carries."""
    async with aiohttp.ClientSession() as http, http.post(
        f"{url}/voice", data={WEBHOOK_ID[caller.provider]: caller.call_id, "From": "+15550100"}
    ) as reply:
        assert reply.status == 200, await reply.text()
        root = ElementTree.fromstring(await reply.text())
    stream = next(root.iter("Stream"))
    target = stream.get("url") or (stream.text or "").strip()
    params = {p.get("name"): p.get("value") for p in stream.iter("Parameter")}
    token = params.get("token") or parse_qs(urlsplit(target).query)["token"][0]
    return target, str(token)


def malformed_events(caller: StreamCaller) -> dict[str, list[dict[str, Any]]]:
    """Known events with fields of the wrong type or missing, by the violation kind they must be counted as.

    Each is something pipecat's serializer dereferences (``message.get("dtmf", {}).get("digit")``,
    ``message.get("media", {}).get("payload")``) or a body our own handling reads.
    """
    m = caller.msg
    payload = base64.b64encode(SILENCE).decode()
    mark_kind = "malformed playedStream" if caller.provider is Provider.PLIVO else "malformed mark"
    if caller.provider is Provider.PLIVO:
        marks = [m("playedStream"), m("playedStream", name=None), m("playedStream", name=["x"]),
                 m("playedStream", name={"a": 1})]
    else:
        marks = [m("mark", mark="x"), m("mark", mark=None), m("mark", mark=["x"]), m("mark"),
                 m("mark", mark={"name": 5})]
    return {
        "malformed dtmf": [m("dtmf", dtmf="x"), m("dtmf", dtmf=None), m("dtmf", dtmf=["1"]), m("dtmf"),
                           caller.dtmf(5), caller.dtmf("x"), caller.dtmf(None), caller.dtmf("55")],
        mark_kind: marks,
        "malformed stop": [m("stop", stop="x"), m("stop", stop=["x"]), m("stop", stop=5)],
        "stop for another call": [m("stop", stop={CALL_KEY[caller.provider]: "someone-else"})],
        "media without a payload": [m("media", media="x"), m("media", media=None), m("media", media=[payload]),
                                    m("media"), m("media", media={"payload": 5}), m("media", media={"payload": None})],
        "media on track '5'": [m("media", media={"track": 5, "payload": payload})],
        "message for another stream": [{**caller.dtmf("1"), STREAM_KEY[caller.provider]: None}],
        "unexpected 'start' after the stream started": caller.start_messages("t")[-1:],
    }


# --- 1. bad events never end a call -----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", list(Provider))
async def test_malformed_known_events_are_dropped_counted_and_the_call_goes_on(provider: Provider) -> None:
    async with running_bridge(config(provider=provider), factory()) as (bridge, url):
        caller = StreamCaller(provider)
        stream_url, token = await webhook(url, caller)
        bad = malformed_events(caller)
        async with connect(stream_url, max_size=2**22) as ws:
            caller.ws = ws
            await caller.open(token)
            await wait_for(lambda: bool(bridge.registry.active))
            for messages in bad.values():
                for message in messages:
                    await caller.send(message)
            await asyncio.sleep(0.5)  # the call used to end ~0.1 s after one of these
            assert [r.state for r in bridge.registry.active] == ["active"]
            await caller.speak()
            await caller.agent_audio()  # the agent still hears and answers
            await caller.send(caller.dtmf("5"))
            await caller.send(caller.mark("m1"))
            await caller.send(caller.stop())
            await wait_for(lambda: len(ended(bridge)) == 1)
        record = ended(bridge)[0]
    assert (record.reason, record.end) == ("caller hung up (stop)", EndReason.HUNG_UP)
    assert record.violations == {kind: len(messages) for kind, messages in bad.items()}
    assert record.dtmf == ["5"] and record.marks == 1
    assert record.transcript[0].startswith("CALLER: ")


BAD_VALUES: list[Any] = [None, "x", "", 5, 1.5, True, [], ["x"], {}, {"x": {"y": 1}}]


def mutations(message: dict[str, Any]) -> list[dict[str, Any]]:
    """``message`` with each field (nested objects included) removed or replaced by each bad value."""
    out: list[dict[str, Any]] = []

    def visit(path: tuple[str, ...], node: dict[str, Any]) -> None:
        for key, value in node.items():
            if path == () and key == "event":
                continue
            for bad in [*BAD_VALUES, ...]:
                changed = copy.deepcopy(message)
                parent = changed
                for part in path:
                    parent = parent[part]
                if bad is ...:
                    del parent[key]
                else:
                    parent[key] = bad
                out.append(changed)
            if isinstance(value, dict):
                visit((*path, key), value)

    visit((), message)
    return out


@pytest.mark.parametrize("provider", list(Provider))
async def test_no_malformed_field_reaches_pipecats_serializer(provider: Provider) -> None:
    """Every field of every known event, missing or of every wrong type: dropped by our checks or accepted,
    never raising, and never left to pipecat's serializer to choke on (no "not decodable" drops)."""
    caller = StreamCaller(provider)
    start = parse_start(caller.start_messages("t")[-1], provider)
    payload = base64.b64encode(SILENCE).decode()
    valid = [caller.media(SILENCE), caller.dtmf("5"), caller.mark("m"), caller.stop(),
             caller.msg("media", media={"track": "inbound", "payload": payload, "chunk": "1", "timestamp": "5"})]
    if provider is Provider.PLIVO:
        valid.append(caller.msg("clearedAudio"))
    if provider is Provider.TELNYX:
        valid.append(caller.msg("error", payload={"code": 1, "title": "x"}))
    closed: list[tuple[str, EndReason]] = []

    async def close_call(reason: str, end: EndReason) -> None:
        closed.append((reason, end))

    checked = 0
    for message in [m for v in valid for m in [v, *mutations(v)]]:
        guarded = GuardedSerializer(make_serializer(start, HangupCredentials()), start, close_call, max_violations=10)
        await guarded.setup(cast(Any, SimpleNamespace(audio_in_sample_rate=16000)))
        await guarded.deserialize(json.dumps(message))  # must not raise
        assert guarded.violation_count <= 1, message
        assert not any("decodable" in kind for kind in guarded.violations), (message, guarded.violations)
        checked += 1
    assert checked > 100
    assert all(end is EndReason.HUNG_UP for _, end in closed)  # only a well-formed stop ends a call


@pytest.mark.parametrize("provider", list(Provider))
def test_a_malformed_start_is_a_handshake_error_only(provider: Provider) -> None:
    """Before the call exists a bad ``start`` refuses the stream (1008): it must never raise anything else."""
    start = StreamCaller(provider).start_messages("t")[-1]
    refused = 0
    for message in mutations(start):
        try:
            parse_start(message, provider)
        except HandshakeError:
            refused += 1
    assert refused > 10


async def test_pipecats_own_serializer_raises_on_a_malformed_dtmf() -> None:
    """Why the checks exist: pipecat dereferences the dtmf body, and its receive loop ends on the exception."""
    caller = StreamCaller(Provider.TWILIO)
    start = parse_start(caller.start_messages("t")[-1], Provider.TWILIO)
    with pytest.raises(AttributeError):
        await make_serializer(start, HangupCredentials()).deserialize(json.dumps(caller.msg("dtmf", dtmf="x")))


async def test_too_many_bad_messages_close_with_1008_as_a_violation() -> None:
    async with running_bridge(config(max_violations=5), factory()) as (bridge, url):
        caller = StreamCaller(Provider.TWILIO)
        stream_url, token = await webhook(url, caller)
        async with connect(stream_url) as ws:
            caller.ws = ws
            await caller.open(token)
            with pytest.raises(ConnectionClosed) as closed:
                for _ in range(60):
                    await caller.send("{not json")
                while True:
                    await asyncio.wait_for(ws.recv(), 5)
        await wait_for(lambda: len(ended(bridge)) == 1)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert "too many protocol violations" in closed.value.rcvd.reason
    record = ended(bridge)[0]
    assert (record.reason, record.end) == ("too many protocol violations (6)", EndReason.VIOLATION)


async def test_an_8_mb_frame_closes_with_1008_as_a_violation_not_a_hang_up() -> None:
    async with running_bridge(config(), factory()) as (bridge, url):
        caller = StreamCaller(Provider.TWILIO)
        stream_url, token = await webhook(url, caller)
        async with connect(stream_url, max_size=2**24) as ws:
            caller.ws = ws
            await caller.open(token)
            await wait_for(lambda: bool(bridge.registry.active))
            with pytest.raises(ConnectionClosed) as closed:
                await ws.send("x" * 8_000_000)
                await asyncio.wait_for(ws.recv(), 5)
        await wait_for(lambda: len(ended(bridge)) == 1)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    record = ended(bridge)[0]
    assert (record.reason, record.end) == ("frame too large (over 65536 bytes)", EndReason.VIOLATION)


async def test_end_reasons_tell_hang_up_idle_and_server_error_apart() -> None:
    async with running_bridge(config(idle_timeout_secs=0.6), factory()) as (bridge, url):
        caller = StreamCaller(Provider.TWILIO)
        stream_url, token = await webhook(url, caller)
        async with connect(stream_url) as ws:
            caller.ws = ws
            await caller.open(token)
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
        await wait_for(lambda: len(ended(bridge)) == 1)
        idle = ended(bridge)[0]

    def broken(call_id: str) -> Any:
        raise RuntimeError("backend down")

    async with running_bridge(config(), broken) as (bridge, url):
        caller = StreamCaller(Provider.TWILIO)
        stream_url, token = await webhook(url, caller)
        async with connect(stream_url) as ws:
            caller.ws = ws
            await caller.open(token)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
        await wait_for(lambda: len(ended(bridge)) == 1)
        failed = ended(bridge)[0]
    assert idle.end == EndReason.IDLE and idle.reason.startswith("idle")
    assert failed.end == EndReason.SERVER_ERROR and closed.value.rcvd is not None and closed.value.rcvd.code == 1011


# --- 2. nothing lost on a crash, records private and expiring ----------------------------------------------------

SERVER_APP = """
import asyncio, datetime as dt, sys
from pathlib import Path
from voice_agent.audio.stack import AudioStack
from voice_agent.call.factory import call_factory
from voice_agent.harness.scenarios import load_scenario
from voice_agent.settings import Settings, with_overrides
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.process import serve

lines = [t.text for t in load_scenario("bridge_smoke").turns if t.speaker == "caller"]
port, records, drain = int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
settings = with_overrides(Settings(), policy={"keep": 2, "every": 2}, call={"reference_date": dt.date(2026, 11, 30)})
config = ServerConfig(port=port, stack=AudioStack.named("fake").with_script(lines), knowledge=False,
                      idle_timeout_secs=None, transcript_dir=records, drain_timeout_secs=drain)
asyncio.run(serve(config, call_factory(settings)))
"""


def start_server(records: Path, drain_secs: float = 300.0) -> tuple[subprocess.Popen[str], int]:
    """The bridge in its own process (fake stack scripted with the bridge_smoke caller), once it is ready."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TWILIO_AUTH_TOKEN": "", "TWILIO_ACCOUNT_SID": ""}
    proc = subprocess.Popen([sys.executable, "-c", SERVER_APP, str(port), str(records), str(drain_secs)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("the server did not start")


def journal_lines(records: Path, *, strict: bool = True) -> list[dict[str, Any]]:
    """The call's journal, line by line (``strict=False`` while the server may be mid-write)."""
    files = list(records.glob("*.jsonl"))
    out = []
    for line in files[0].read_text().splitlines() if files else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if strict:
                raise
    return out


def twilio_caller(**overrides: Any) -> TwilioCallerEmulator:
    settings = {"speed": 4.0, "silence_secs": 0.3, "reply_timeout_secs": 8.0, **overrides}
    return TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(**settings))


@pytest.mark.timeout(300)
async def test_kill_9_mid_call_keeps_everything_up_to_the_last_completed_turn(tmp_path: Path) -> None:
    records = tmp_path / "records"
    proc, port = start_server(records)
    try:
        dialing = asyncio.create_task(twilio_caller().dial(f"http://127.0.0.1:{port}/voice", LINES))

        def credit_turn_done() -> bool:
            return any(line["type"] == "turn" and line["turn"] == 7 for line in journal_lines(records, strict=False))

        await wait_for(credit_turn_done, 60)  # the credit is issued and confirmed on turn 7 (of 8)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        await asyncio.wait_for(dialing, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = journal_lines(records)  # every line whole, parseable JSON
    assert lines[0]["type"] == "call" and not any(line["type"] == "end" for line in lines)
    entries = [line for line in lines if line["type"] == "entry"]
    assert [e["index"] for e in entries] == list(range(len(entries)))
    turns = [line["turn"] for line in lines if line["type"] == "turn"]
    assert turns[:7] == [1, 2, 3, 4, 5, 6, 7]
    executed = [(e["tool"], e["outcome"]) for e in entries if e["kind"] == "tool_result"]
    assert ("lookup_account", "completed") in executed and ("issue_credit", "completed") in executed
    credit = next(e for e in entries if e["kind"] == "tool_result" and e["tool"] == "issue_credit")
    assert credit["result"]["account_id"] == "ACC-4729-18" and credit["turn"] == 7
    callers = [e["text"] for e in entries if e["kind"] == "caller"]
    assert callers[:7] == LINES[:7]
    journal = next(records.glob("*.jsonl"))
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(records.stat().st_mode) == 0o700


async def test_records_are_private(tmp_path: Path) -> None:
    records = tmp_path / "calls"
    async with running_bridge(config(transcript_dir=records), factory()) as (bridge, url):
        result = await twilio_caller(speed=8.0).dial(f"{url}/voice", LINES[:2])
        await wait_for(lambda: len(ended(bridge)) == 1)
    assert result.status == "completed"
    files = sorted(p.name for p in records.iterdir())
    call_id = ended(bridge)[0].call_id
    assert files == [f"{call_id}.json", f"{call_id}.jsonl"]
    assert {stat.S_IMODE(p.stat().st_mode) for p in records.iterdir()} == {0o600}
    assert stat.S_IMODE(records.stat().st_mode) == 0o700
    lines = journal_lines(records)
    assert lines[-1]["type"] == "end" and lines[-1]["end"] == "hung up"
    assert json.loads((records / f"{call_id}.json").read_text())["end"] == "hung up"


@pytest.mark.timeout(300)
async def test_a_slow_disk_at_a_calls_end_does_not_stall_the_other_calls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal_module = sys.modules["voice_agent.telephony.journal"]
    real_fsync = os.fsync
    loop = asyncio.get_running_loop()
    threads: set[str] = set()
    stalled: list[str] = []

    def slow_fsync(fd: int) -> None:
        # A disk that confirms a write only once the event loop has run something else (the process's other
        # calls): an fsync on the loop's own thread would wait for itself, and is caught here, without timing.
        threads.add(threading.current_thread().name)
        other_calls_ran = threading.Event()
        loop.call_soon_threadsafe(other_calls_ran.set)
        if not other_calls_ran.wait(10):
            stalled.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(journal_module.os, "fsync", slow_fsync)
    records = tmp_path / "calls"
    async with running_bridge(config(transcript_dir=records), factory()) as (bridge, url):
        result = await twilio_caller(speed=8.0).dial(f"{url}/voice", LINES[:2])
        await wait_for(lambda: len(ended(bridge)) == 1)
        await wait_for(lambda: len(list(records.glob("*.json"))) == 1, timeout=30)
    assert result.status == "completed"
    # Each end fsyncs twice (the journal's end line, the record file): none of it blocks the loop.
    assert len(threads) >= 1 and stalled == [], f"an fsync waited for the event loop it was blocking: {stalled}"
    assert journal_lines(records)[-1]["type"] == "end"
    # On the records' own threads: asyncio's default pool runs the calls' STT and TTS.
    assert threads and all(name.startswith("call-records") for name in threads), threads


async def test_record_work_is_done_when_its_call_is_cancelled_while_queued_or_ends_after_the_pool_closed() -> None:
    bridge = VoiceBridge(config(), factory())
    release, done = threading.Event(), []

    def slow(tag: str) -> None:
        release.wait(10)
        done.append(tag)

    busy = [asyncio.ensure_future(bridge.run_on_record_threads(slow, f"busy {n}"))
            for n in range(RECORD_THREADS)]
    queued = asyncio.ensure_future(bridge.run_on_record_threads(done.append, "queued"))  # waits for a record thread
    await asyncio.sleep(0.1)
    queued.cancel()  # uvicorn cancelled its call's handler at shutdown
    release.set()
    await asyncio.gather(*busy)
    await asyncio.to_thread(bridge.close)  # waits for what the threads were given
    assert "queued" in done
    # A call that ended after close: asyncio's own pool writes it.
    await bridge.run_on_record_threads(done.append, "late")
    assert done[-1] == "late"


def test_prune_deletes_only_old_call_records(tmp_path: Path) -> None:
    now = time.time()
    old, fresh, foreign = tmp_path / "call-1-abc123.jsonl", tmp_path / "call-2-def456.json", tmp_path / "notes.txt"
    stale_tmp = tmp_path / ".call-3-aaaaaa.json.tmp"
    for path in (old, fresh, foreign, stale_tmp):
        path.write_text("{}")
    for path in (old, foreign, stale_tmp):
        os.utime(path, (now - 31 * 86400, now - 31 * 86400))
    assert prune_records(tmp_path, 30, now=now) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["call-2-def456.json", "notes.txt"]


async def test_the_server_prunes_at_start_up_and_then_daily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "PRUNE_INTERVAL_SECS", 0.1)
    month_ago = time.time() - 40 * 86400
    first = tmp_path / "call-1-000001.json"
    first.write_text("{}")
    os.utime(first, (month_ago, month_ago))
    async with running_bridge(config(transcript_dir=tmp_path, transcript_retention_days=30), factory()):
        await wait_for(lambda: not first.exists())
        later = tmp_path / "call-9-000009.jsonl"
        later.write_text("{}")
        os.utime(later, (month_ago, month_ago))
        await wait_for(lambda: not later.exists())
    with pytest.raises(ConfigError, match="retention"):
        VoiceBridge(config(transcript_retention_days=0), factory())


# --- 3. SIGTERM: finish, or goodbye and drained -------------------------------------------------------------------


async def test_a_call_left_at_the_drain_limit_hears_a_goodbye_and_is_recorded_drained(tmp_path: Path) -> None:
    async with running_bridge(config(transcript_dir=tmp_path), factory()) as (bridge, url):
        caller = StreamCaller(Provider.TWILIO)
        stream_url, token = await webhook(url, caller)
        async with connect(stream_url) as ws:
            caller.ws = ws
            await caller.open(token)
            await caller.speak()
            await caller.agent_audio()
            while True:  # let the first answer play out
                try:
                    await asyncio.wait_for(ws.recv(), 1.0)
                except TimeoutError:
                    break
            draining = asyncio.create_task(bridge.drain(timeout=0.3))
            refused = await twilio_caller().dial(f"{url}/voice", LINES[:1])
            assert refused.status == "refused"  # no new calls while draining
            goodbye_audio = 0
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 15))
                    audio = base64.b64decode(message["media"]["payload"]) if message.get("event") == "media" else b""
                    if audio.strip(b"\xff\x7f"):  # not µ-law silence
                        goodbye_audio += len(audio)
            assert await asyncio.wait_for(draining, 15) == 1
        record = ended(bridge)[0]
    words = len(GOODBYE_LINE.split())
    assert 0.05 * words <= goodbye_audio / PHONE_RATE < 0.05 * words + 0.2  # the tone TTS: 50 ms a word
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert (record.reason, record.end) == ("server shutdown (drain timeout)", EndReason.DRAINED)
    lines = journal_lines(tmp_path)
    assert any(line["type"] == "event" and line["event"] == "goodbye" for line in lines)
    assert lines[-1]["type"] == "end" and lines[-1]["end"] == "drained"


@pytest.mark.timeout(300)
async def test_sigterm_lets_a_call_finish_within_the_drain_limit(tmp_path: Path) -> None:
    records = tmp_path / "records"
    proc, port = start_server(records)  # the default limit, 300 s: a whole call fits
    try:
        dialing = asyncio.create_task(twilio_caller().dial(f"http://127.0.0.1:{port}/voice", LINES[:4]))
        await wait_for(lambda: any(line["type"] == "turn" for line in journal_lines(records, strict=False)), 60)
        proc.send_signal(signal.SIGTERM)
        result = await asyncio.wait_for(dialing, 60)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns)
    summary = json.loads(next(records.glob("*.json")).read_text())
    assert summary["end"] == "hung up" and summary["reason"] == "caller hung up (stop)"
    executed = [t for turn in summary["turns"] for t in turn["executed"]]
    assert executed == ["lookup_account", "list_invoices"]


@pytest.mark.timeout(300)
async def test_sigterm_past_the_drain_limit_says_goodbye_then_exits(tmp_path: Path) -> None:
    records = tmp_path / "records"
    proc, port = start_server(records, drain_secs=1.0)
    try:
        dialing = asyncio.create_task(twilio_caller(speed=1.0).dial(f"http://127.0.0.1:{port}/voice", LINES))
        await wait_for(lambda: any(line["type"] == "turn" for line in journal_lines(records, strict=False)), 60)
        proc.send_signal(signal.SIGTERM)
        result = await asyncio.wait_for(dialing, 60)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result.status == "closed" and result.close_code == 1001
    lines = journal_lines(records)
    assert any(line["type"] == "event" and line["event"] == "goodbye" for line in lines)
    assert lines[-1]["type"] == "end" and lines[-1]["end"] == "drained"


# --- 4. /calls, --port, environment ---------------------------------------------------------------------------


async def test_calls_listing_is_off_by_default_and_needs_the_bearer_token() -> None:
    async with running_bridge(config(), factory()) as (_bridge, url), aiohttp.ClientSession() as http, http.get(
        f"{url}/calls"
    ) as reply:
        assert reply.status == 404
    async with running_bridge(config(calls_token=TOKEN), factory()) as (_bridge, url), aiohttp.ClientSession() as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN},
                        {"Authorization": f"Basic {TOKEN}"}):
            async with http.get(f"{url}/calls", headers=headers) as reply:
                assert reply.status == 401 and reply.headers["WWW-Authenticate"] == "Bearer"
        async with http.get(f"{url}/calls", headers={"Authorization": f"Bearer {TOKEN}"}) as reply:
            assert reply.status == 200 and (await reply.json())["calls"] == []
    with pytest.raises(ConfigError, match="at least 16"):
        VoiceBridge(config(calls_token="short"), factory())


def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.callback()
    def root() -> None:
        """Test root."""

    register_telephony_commands(app)
    return app


def one_line_error(args: list[str], env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(cli(), ["serve", "--stack", "fake", *args], env=env)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("voice-agent serve: error: ")
    return lines[0]


def test_a_bad_port_is_one_line() -> None:
    assert one_line_error(["--port", "70000"]).endswith("--port must be between 0 and 65535, got 70000")
    assert "between 0 and 65535" in one_line_error(["--port", "-1"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(["--port", str(port)])
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in line


def test_a_misspelt_environment_variable_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_POLCY__KEEP", "3")
    with pytest.raises(SettingsError) as error:
        load_settings()
    assert str(error.value) == (
        "settings: unknown environment variable VOICE_AGENT_POLCY__KEEP (did you mean VOICE_AGENT_POLICY__KEEP?)"
    )
    assert one_line_error([], env={"VOICE_AGENT_POLCY__KEEP": "3"}).endswith("did you mean VOICE_AGENT_POLICY__KEEP?)")
    monkeypatch.delenv("VOICE_AGENT_POLCY__KEEP")
    for name, guess in (("VOICE_AGENT_POLICY_KEEP", "VOICE_AGENT_POLICY__KEEP"),
                        ("VOICE_AGENT_LOGLEVEL", "VOICE_AGENT_LOG_LEVEL"),
                        ("VOICE_AGENT_CALL_TOKEN", "VOICE_AGENT_CALLS_TOKEN")):
        monkeypatch.setenv(name, "1")
        with pytest.raises(SettingsError, match=f"unknown environment variable {name} \\(did you mean {guess}\\?\\)"):
            load_settings()
        monkeypatch.delenv(name)
    monkeypatch.setenv("VOICE_AGENT_NOTHING", "1")
    with pytest.raises(SettingsError, match="SECTION one of CALL, CALLER_SPANS, DATES, LLM"):
        load_settings()
    monkeypatch.delenv("VOICE_AGENT_NOTHING")


def test_variables_read_outside_the_settings_are_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VOICE_AGENT_CALLS_TOKEN", "VOICE_AGENT_PRODUCTION", "VOICE_AGENT_LOG_LEVEL", "VOICE_AGENT_CACHE_DIR",
                 "VOICE_AGENT_POLICY__KEEP", "voice_agent_call__ledger_capacity"):
        monkeypatch.setenv(name, "3" if "__" in name else "x")
    settings = load_settings()
    assert settings.policy.keep == 3 and settings.call.ledger_capacity == 3


def test_one_address_sending_bare_webhooks_cannot_hold_every_slot_against_another() -> None:
    """Development mode: unsigned webhooks cost nothing, so one address keeps at most its fair share."""
    from voice_agent.telephony.providers import Provider
    from voice_agent.telephony.registry import CallRegistry

    registry = CallRegistry(max_calls=2, token_ttl=10, grace=3.0)
    flood = [registry.reserve(Provider.TWILIO, f"CAF{i}", address="10.0.0.66") for i in range(2)]
    assert all(flood) and registry.busy == 2
    caller = registry.reserve(Provider.TWILIO, "CAREAL", address="10.0.0.7")  # every slot fresh, all the flood's
    assert caller is not None and flood[1] is not None and flood[1].state == "ended"
    # The flood goes on: one slot each now, so neither address takes the other's young reservation.
    assert registry.reserve(Provider.TWILIO, "CAF9", address="10.0.0.66") is None
    assert caller.state == "reserved"
    # Signed webhooks (no address) keep the rule as it was: only stale reservations are taken over.
    signed = CallRegistry(max_calls=1, token_ttl=10, grace=3.0)
    assert signed.reserve(Provider.TWILIO, "CAS1") is not None
    assert signed.reserve(Provider.TWILIO, "CAS2") is None


def test_warm_up_runs_the_reference_agent_only_for_calls_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from voice_agent.call.factory import CallParts
    from voice_agent.domains.base import Domain
    from voice_agent.services.fake_llm import FakeLLM

    runs: list[str] = []
    real_brain = Domain.brain

    class Counting:
        def __init__(self, brain: Any) -> None:
            self.brain = brain

        def respond(self, *args: Any) -> Any:
            runs.append("brain")
            return self.brain.respond(*args)

    def counting_brain(self: Domain) -> Any:
        return Counting(real_brain(self))

    monkeypatch.setattr(Domain, "brain", counting_brain)
    reference = factory()

    def other_llm(call_id: str) -> CallParts:
        parts = reference(call_id)
        return dataclasses.replace(parts, llm=FakeLLM({}))

    VoiceBridge(config(), other_llm).warm_up()
    assert runs == []  # an OpenAI (here: scripted) call never runs the stand-in agent
    VoiceBridge(config(), reference).warm_up()
    assert runs == ["brain", "brain"]
