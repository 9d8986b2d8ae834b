"""The telephony bridge on loopback with the fake audio stack (energy VAD, scripted STT, tone TTS).

Real WebSocket connections, real µ-law audio frames both ways; only the models are stand-ins, so
every protocol and robustness case runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import aiohttp
import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.uri import parse_uri

from voice_agent.audio.codec import PHONE_RATE, pcm16_to_ulaw, resample
from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.call.factory import CallFactory, CallParts, call_factory
from voice_agent.domains.billing import billing_domain
from voice_agent.harness.scenarios import load_scenario
from voice_agent.settings import Settings, with_overrides
from voice_agent.telephony.app import VoiceBridge
from voice_agent.telephony.config import ConfigError, ServerConfig
from voice_agent.telephony.emulator import SILENCE, EmulatorConfig, TwilioCallerEmulator, post_webhook
from voice_agent.telephony.process import running_bridge
from voice_agent.telephony.providers import HangupCredentials
from voice_agent.telephony.registry import RegisteredCall

LINES = [t.text for t in load_scenario("bridge_smoke").turns if t.speaker == "caller"]
DATE = dt.date(2026, 11, 30)


def config(**overrides: Any) -> ServerConfig:
    stack = overrides.pop("stack", AudioStack.named("fake").with_script(LINES))
    overrides.setdefault("knowledge", False)  # bad-input tests need no retrieval (the e2e test keeps it)
    return ServerConfig(port=0, stack=stack, idle_timeout_secs=None, handshake_timeout_secs=2.0, **overrides)


def call_settings() -> Settings:
    """The offline defaults (reference agent, extractive summarizer, lanes) with K=2, S=2 and a fixed today."""
    return with_overrides(Settings(), policy={"keep": 2, "every": 2}, call={"reference_date": DATE})


def factory() -> CallFactory:
    return call_factory(call_settings())


def emulator(**overrides: Any) -> TwilioCallerEmulator:
    settings = EmulatorConfig(**{"speed": 8.0, "silence_secs": 0.3, "reply_timeout_secs": 8.0, **overrides})
    return TwilioCallerEmulator(caller_voice("tone"), None, settings)


async def wait_for(check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Polls until ``check()``; the timeout is a hang guard (a call's end took over 10 s on a busy machine)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def ended(bridge: VoiceBridge) -> list[RegisteredCall]:
    return [r for r in bridge.registry.all() if r.state == "ended" and r.started is not None]


async def reserve(url: str) -> tuple[str, str]:
    """Posts the webhook; returns (stream URL, token)."""
    stream_url, params = await post_webhook(f"{url}/voice", EmulatorConfig(), "CA" + "1" * 32)
    return stream_url, params["token"]


class RawCaller:
    """A hand-driven Twilio media-stream client for protocol tests."""

    def __init__(self, ws: ClientConnection, stream_sid: str = "MZ" + "2" * 32) -> None:
        self.ws = ws
        self.stream_sid = stream_sid

    async def start(self, token: str) -> None:
        await self.ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await self.ws.send(json.dumps({"event": "start", "streamSid": self.stream_sid, "start": {
            "streamSid": self.stream_sid, "callSid": "CA" + "1" * 32, "accountSid": "AC1",
            "customParameters": {"token": token}, "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))

    def media(self, chunk: bytes, stream_sid: str | None = None) -> str:
        return json.dumps({"event": "media", "streamSid": stream_sid or self.stream_sid,
                           "media": {"track": "inbound", "payload": base64.b64encode(chunk).decode()}})

    async def speak(self, seconds_of_silence_after: float = 1.0) -> None:
        voice = caller_voice("tone")
        samples, rate = voice("a short caller line for the agent")
        ulaw = pcm16_to_ulaw(resample(samples, rate, PHONE_RATE))
        ulaw += SILENCE * int(seconds_of_silence_after * 50)
        for i in range(0, len(ulaw) - 159, 160):
            await self.ws.send(self.media(ulaw[i : i + 160]))
            if i % 3200 == 0:
                await asyncio.sleep(0.005)


async def test_health_readiness_and_call_listing() -> None:
    token = "calls-token-0123456789"  # /calls is off without one (tests/test_telephony_hardening.py)
    settings = config(max_calls=1, calls_token=token)
    async with running_bridge(settings, factory()) as (_bridge, url), aiohttp.ClientSession() as http:
        async with http.get(f"{url}/healthz") as reply:
            assert reply.status == 200 and (await reply.json())["status"] == "ok"
        async with http.get(f"{url}/readyz") as reply:
            assert reply.status == 200 and (await reply.json())["status"] == "ready"
        await reserve(url)
        async with http.get(f"{url}/readyz") as reply:
            assert reply.status == 503 and (await reply.json())["status"] == "full"
        async with http.get(f"{url}/calls", headers={"Authorization": f"Bearer {token}"}) as reply:
            body = await reply.json()
        assert body["calls"][0]["state"] == "reserved" and "transcript" not in body["calls"][0]


async def test_readyz_says_not_ready_while_the_fleet_store_is_unreachable(tmp_path: Path, need_redis: None) -> None:
    import contextlib

    from voice_agent.harness.redis_server import redis_server
    from voice_agent.telephony.fleet import Fleet

    with contextlib.ExitStack() as redis:
        fleet = Fleet(redis.enter_context(redis_server(tmp_path)), "w1")
        async with running_bridge(config(fleet=fleet), factory()) as (_bridge, url), \
                aiohttp.ClientSession() as http:
            async with http.get(f"{url}/readyz") as reply:
                assert reply.status == 200 and (await reply.json())["status"] == "ready"
            redis.close()  # redis-server stops
            async with http.get(f"{url}/readyz") as reply:
                body = await reply.json()
            assert reply.status == 503 and body["status"] == "store unreachable" and "fleet" in body["error"], body


@pytest.mark.timeout(300)
async def test_a_fake_audio_call_reaches_the_right_account(tmp_path: Path) -> None:
    async with running_bridge(config(transcript_dir=tmp_path), factory()) as (bridge, url):
        result = await emulator().dial(f"{url}/voice", LINES)
        await wait_for(lambda: len(ended(bridge)) == 1)
    assert result.status == "completed", result.message
    assert all(t.latency_ms is not None for t in result.turns)
    assert result.media_received > 0 and result.media_sent > 0
    record = ended(bridge)[0]
    assert record.reason == "caller hung up (stop)"
    credits = record.extra["domain"].extra["backend"].credits
    assert [(c["account_id"], c["invoice_id"]) for c in credits] == [("ACC-4729-18", "INV-2026-1018")]
    saved = json.loads((tmp_path / f"{record.call_id}.json").read_text())
    assert any(line.startswith("TOOL_CALL issue_credit") for line in saved["transcript"])
    assert "ACC-4729-18" not in json.dumps(record.summary())


async def test_twilio_signature_is_enforced_when_a_token_is_configured() -> None:
    creds = HangupCredentials(twilio_auth_token="s3cret")
    async with running_bridge(config(credentials=creds), factory()) as (_bridge, url), aiohttp.ClientSession() as http:
        form = {"CallSid": "CA9", "From": "+1555"}
        async with http.post(f"{url}/voice", data=form) as reply:
            assert reply.status == 403
        async with http.post(f"{url}/voice", data=form, headers={"X-Twilio-Signature": "bm9wZQ=="}) as reply:
            assert reply.status == 403
        result = await emulator(auth_token="s3cret").dial(f"{url}/voice", LINES[:1])
        assert result.status == "completed" and result.turns[0].latency_ms is not None
        refused = await emulator(auth_token="wrong").dial(f"{url}/voice", LINES[:1])
        assert refused.status == "refused" and "403" in refused.message
    with pytest.raises(ConfigError, match="TWILIO_AUTH_TOKEN"):
        VoiceBridge(ServerConfig(production=True, public_url="https://x.example"), factory())
    with pytest.raises(ConfigError, match="public-url"):
        VoiceBridge(ServerConfig(production=True, credentials=creds), factory())


async def test_capacity_and_stream_tokens() -> None:
    async with running_bridge(config(max_calls=1), factory()) as (_bridge, url):
        stream_url, token = await reserve(url)
        busy = await emulator().dial(f"{url}/voice", LINES[:1])
        assert busy.status == "refused" and "busy" in busy.message
        for bad in ("", "forged-token"):
            async with connect(stream_url) as ws:
                await RawCaller(ws).start(bad)
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        async with connect(stream_url) as ws:
            await ws.send(json.dumps({"event": "connected"}))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 5)  # no start within the handshake deadline
            assert closed.value.rcvd is not None and "no valid start" in closed.value.rcvd.reason
        call = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(speed=4.0, silence_secs=0.3,
                                                                                ws_token=token))
        call.call_sid = "CA" + "1" * 32  # the call the webhook reserved the token for
        result = await call.dial(stream_url, LINES[:1])
        assert result.status == "completed" and result.turns[0].latency_ms is not None
        reused = await TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(ws_token=token)).dial(
            stream_url, LINES[:1])
        assert reused.status == "closed" and reused.close_code == 1008


async def test_bad_input_is_dropped_with_a_reason_and_the_call_goes_on() -> None:
    async with running_bridge(config(), factory()) as (bridge, url):
        stream_url, token = await reserve(url)
        async with connect(stream_url, max_size=2**22) as ws:
            caller = RawCaller(ws)
            await ws.send(json.dumps({"event": "connected"}))
            await ws.send(caller.media(SILENCE))  # media before start
            await caller.start(token)
            await ws.send("{not json")
            await ws.send("[1, 2]")
            await ws.send(json.dumps({"event": "bogus", "streamSid": caller.stream_sid}))
            await ws.send(json.dumps({"event": "media", "streamSid": caller.stream_sid, "media": {"payload": "@@@"}}))
            await ws.send(caller.media(SILENCE, stream_sid="MZother"))
            await ws.send(json.dumps({"event": "media", "streamSid": caller.stream_sid,
                                      "media": {"payload": "A" * 20000}}))  # oversized
            await ws.send(b"\x00\x01binary")
            await ws.send(json.dumps({"event": "dtmf", "streamSid": caller.stream_sid, "dtmf": {"digit": "5"}}))
            await ws.send(json.dumps({"event": "mark", "streamSid": caller.stream_sid, "mark": {"name": "m1"}}))
            await caller.speak()
            events = []
            while "media" not in events:  # the agent still answers (after a clear: the caller's turn began)
                events.append(json.loads(await asyncio.wait_for(ws.recv(), 10))["event"])
            assert set(events) <= {"clear", "media"}
            await ws.send(json.dumps({"event": "stop", "streamSid": caller.stream_sid}))
            await wait_for(lambda: len(ended(bridge)) == 1)
        record = ended(bridge)[0]
    assert record.reason == "caller hung up (stop)"
    assert set(record.violations) == {
        "media before start", "malformed JSON", "JSON message is not an object", "unknown event type 'bogus'",
        "media payload is not valid base64", "message for another stream", "oversized message",
        "binary message",
    }
    assert record.dtmf == ["5"] and record.marks == 1
    assert record.transcript[0].startswith("CALLER: ")


async def test_a_frame_over_the_size_limit_closes_only_that_call() -> None:
    async with running_bridge(config(ws_max_size=65536), factory()) as (bridge, url):
        stream_url, token = await reserve(url)
        other = asyncio.create_task(emulator().dial(f"{url}/voice", LINES[:2]))
        async with connect(stream_url, max_size=2**22) as ws:
            await RawCaller(ws).start(token)
            await asyncio.sleep(0.3)
            await ws.send("x" * 200_000)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008  # a protocol violation
        result = await other
        await wait_for(lambda: len(ended(bridge)) == 2)
    assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns)
    reasons = sorted(r.reason for r in ended(bridge))
    assert reasons == ["caller hung up (stop)", "frame too large (over 65536 bytes)"]


async def test_hang_up_mid_utterance_keeps_the_transcript() -> None:
    async with running_bridge(config(), factory()) as (bridge, url):
        result = await emulator().dial(f"{url}/voice", LINES[:3], hangup_after=2)
        await wait_for(lambda: len(ended(bridge)) == 1)
        async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz") as reply:
            assert reply.status == 200
    assert [t.latency_ms is not None for t in result.turns[:2]] == [True, True]
    record = ended(bridge)[0]
    assert record.reason == "client disconnected"
    said = [line for line in record.transcript if line.startswith("CALLER")]
    assert said[:2] == [f"CALLER: {LINES[0]}", f"CALLER: {LINES[1]}"]


def slow_lookup_factory(delay: float) -> CallFactory:
    def domain() -> Any:
        d = billing_domain()
        handlers = dict(d.handlers)
        original = handlers["lookup_account"]

        async def slow(arguments: dict[str, Any], state: Any) -> dict[str, Any]:
            await asyncio.sleep(delay)
            return await original(arguments, state)

        handlers["lookup_account"] = slow
        return type(d)(d.name, d.slot_model, d.tools, handlers, d.make_brain, d.system_prompt, d.hard_constraints,
                       d.extra)

    return call_factory(call_settings(), domain_factory=domain)


async def test_hang_up_during_a_tool_call_records_it_cancelled() -> None:
    stack = AudioStack.named("fake").with_script(LINES[2:3])
    async with running_bridge(config(stack=stack), slow_lookup_factory(5.0)) as (bridge, url):
        call = emulator(reply_timeout_secs=10.0)
        dialing = asyncio.create_task(call.dial(f"{url}/voice", LINES[2:3]))

        def tool_running() -> bool:
            live = [r for r in bridge.registry.all() if r.session is not None]
            lines = live[0].transcript_lines() if live else []
            return any(line.startswith("TOOL_CALL lookup_account") for line in lines)

        await wait_for(tool_running)
        assert call._ws is not None
        call._ws.transport.abort()
        await asyncio.wait_for(dialing, 15)
        await wait_for(lambda: len(ended(bridge)) == 1)
    record = ended(bridge)[0]
    assert record.reason == "client disconnected"
    assert record.transcript[-1].startswith("TOOL_RESULT lookup_account [cancelled]")


class NonReadingCaller:
    """A Twilio client on a raw socket with a tiny receive buffer that never reads after the handshake."""

    def __init__(self, stream_url: str) -> None:
        parts = urlsplit(stream_url)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        self.sock.settimeout(5)
        self.sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
        self.protocol = ClientProtocol(parse_uri(stream_url))
        self.protocol.send_request(self.protocol.connect())
        self._flush()
        self.protocol.receive_data(self.sock.recv(4096))  # the 101 response, nothing more is ever read
        self.caller = RawCaller(cast(Any, self))

    def _flush(self) -> None:
        self.sock.sendall(b"".join(self.protocol.data_to_send()))

    async def send(self, message: str | bytes) -> None:
        self.protocol.send_text(message.encode() if isinstance(message, str) else message)
        self._flush()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.timeout(300)
async def test_a_client_that_stops_reading_is_closed_without_stalling_others() -> None:
    stack = AudioStack.named("fake").with_script(LINES)
    slow_stack = type(stack)(**{**stack.__dict__, "tone_secs_per_word": 0.7})
    settings = config(stack=slow_stack, socket_send_buffer=4096, send_timeout_secs=0.5)
    async with running_bridge(settings, factory()) as (bridge, url):
        stream_url, token = await reserve(url)
        client = await asyncio.to_thread(NonReadingCaller, stream_url)
        try:
            await client.caller.start(token)
            await client.caller.speak()
            other = asyncio.create_task(emulator().dial(f"{url}/voice", LINES[:1]))
            await wait_for(lambda: any(r.reason.startswith("slow client") for r in bridge.registry.all()), 30)
            result = await other
            await wait_for(lambda: len(ended(bridge)) == 2, 20)
        finally:
            client.close()
    assert result.status == "completed" and result.turns[0].latency_ms is not None


async def test_one_calls_setup_failure_does_not_touch_another() -> None:
    good = factory()

    def flaky(call_id: str) -> CallParts:
        if call_id.startswith("call-1-"):
            raise RuntimeError("backend unavailable")
        return good(call_id)

    async with running_bridge(config(), flaky) as (bridge, url):
        failed = await emulator().dial(f"{url}/voice", LINES[:1])
        ok = await emulator().dial(f"{url}/voice", LINES[:1])
        await wait_for(lambda: len(ended(bridge)) == 2)
    assert failed.status == "closed" and failed.close_code == 1011
    assert ok.status == "completed" and ok.turns[0].latency_ms is not None
    assert sorted(r.reason for r in ended(bridge)) == ["caller hung up (stop)", "set-up failed (RuntimeError)"]


async def test_drain_lets_active_calls_finish_and_turns_new_ones_away() -> None:
    async with running_bridge(config(), factory()) as (bridge, url):
        active = asyncio.create_task(emulator().dial(f"{url}/voice", LINES[:3]))
        await wait_for(lambda: bool(bridge.registry.active))
        draining = asyncio.create_task(bridge.drain(timeout=30))
        await wait_for(lambda: bridge.draining)
        async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as reply:
            assert reply.status == 503 and (await reply.json())["status"] == "draining"
        turned_away = await emulator().dial(f"{url}/voice", LINES[:1])
        assert turned_away.status == "refused"
        result = await active
        assert await asyncio.wait_for(draining, 10) == 0
    assert result.status == "completed" and len(result.turns) == 3


async def test_drain_timeout_cancels_what_is_left() -> None:
    async with running_bridge(config(), factory()) as (bridge, url):
        active = asyncio.create_task(emulator().dial(f"{url}/voice", LINES))
        await wait_for(lambda: bool(bridge.registry.active) and bool(bridge.registry.active[0].transcript_lines()))
        assert await bridge.drain(timeout=0.2) == 1
        result = await asyncio.wait_for(active, 15)
    assert result.status == "closed"
    assert ended(bridge)[0].reason == "server shutdown (drain timeout)"
    assert ended(bridge)[0].transcript


def test_tone_voice_is_loud_enough_for_the_energy_vad() -> None:
    samples, _ = caller_voice("tone")("hello there")
    assert float(np.sqrt(np.mean(samples.astype(float) ** 2))) > 3000
