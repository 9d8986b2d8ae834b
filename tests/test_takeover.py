"""No takeover: a replayed webhook of a live call gets no stream, on SQLite and on a real redis-server.

Twilio signatures carry no timestamp, so a captured signed webhook verifies forever. Before leases, such a
replay sent to another worker got a next leg's stream token; that stream restored the victim's state and
acted on the victim's account, and the victim's own saves (and its hang-up) were refused.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.call.factory import call_factory
from voice_agent.settings import Settings, with_overrides
from voice_agent.store import CallStore, open_store
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator, request_twiml
from voice_agent.telephony.process import running_bridge
from voice_agent.telephony.providers import HangupCredentials

LINES = ["Hi, is this the billing line?", "Here it is: ACC-4729-18.", "Can you check my last invoice?",
         "Thanks, that's all."]
SETTINGS = with_overrides(Settings(), call={"reference_date": dt.date(2026, 11, 30)})
TOKEN = "s3cret-auth-token"


@pytest.fixture(params=["sqlite", "redis"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[CallStore, CallStore]]:
    """Two workers' connections to one store."""
    if request.param == "sqlite":
        path = tmp_path / "calls.sqlite3"
        pair = (open_store("sqlite", path=path), open_store("sqlite", path=path))
        assert pair[0] is not None and pair[1] is not None
        yield pair[0], pair[1]
        return
    url = request.getfixturevalue("redis_url")
    pair = (open_store("redis", url=url), open_store("redis", url=url))
    assert pair[0] is not None and pair[1] is not None
    yield pair[0], pair[1]


def config(store: CallStore) -> ServerConfig:
    return ServerConfig(port=0, stack=AudioStack.named("fake").with_script(LINES), idle_timeout_secs=None,
                        knowledge=False, store=store, credentials=HangupCredentials(twilio_auth_token=TOKEN))


async def test_a_replayed_signed_webhook_of_a_live_call_gets_no_stream_and_the_call_ends_whole(
        stores: tuple[CallStore, CallStore]) -> None:
    store_a, store_b = stores
    victim = TwilioCallerEmulator(caller_voice("tone"), None,
                                  EmulatorConfig(speed=8.0, silence_secs=0.3, auth_token=TOKEN))
    async with running_bridge(config(store_a), call_factory(SETTINGS)) as (bridge_a, url_a), \
            running_bridge(config(store_b), call_factory(SETTINGS)) as (bridge_b, url_b):
        call = asyncio.create_task(victim.dial(f"{url_a}/voice", LINES))
        deadline = time.monotonic() + 30
        while (stored := await asyncio.to_thread(store_a.find, victim.call_sid)) is None or stored.turn < 2:
            assert time.monotonic() < deadline and not call.done(), "the victim's call never saved turn 2"
            await asyncio.sleep(0.02)
        # The attacker replays the victim's webhook, signed (the signature verifies: it has no timestamp),
        # to the other worker and to the victim's own.
        for url in (url_b, url_a):
            replay = await request_twiml(f"{url}/voice", victim.config, victim.call_sid, "in-progress")
            # A bare hang-up for the replayer's own request: no stream, no redirect, nothing said.
            assert replay.stream_url is None and replay.redirect_url is None and replay.said == "", replay
        result = await call
        assert result.status == "completed" and result.legs == 1, result.render()
        assert all(t.latency_ms is not None for t in result.turns), result.render()
        for _ in range(200):
            if bridge_a.registry.all()[-1].state == "ended":
                break
            await asyncio.sleep(0.05)
        assert not [r for r in bridge_b.registry.all() if r.started], "no stream ran on the attacker's worker"
        assert bridge_a.persistence is not None and bridge_a.persistence.stats.refused == 0
        ended = await asyncio.to_thread(store_a.find, victim.call_sid)
        assert ended is not None and ended.status == "ended" and ended.end == "hung up" and ended.leg == 1
        # After the call: the replay is hung up, wherever it lands.
        after = await request_twiml(f"{url_b}/voice", victim.config, victim.call_sid, "in-progress")
        assert after.stream_url is None and after.redirect_url is None and after.said == ""


async def test_only_the_latest_legs_return_resumes_a_call_never_a_replayed_first_webhook_or_older_return(
        stores: tuple[CallStore, CallStore]) -> None:
    store_a, store_b = stores
    caller = TwilioCallerEmulator(caller_voice("tone"), None,
                                  EmulatorConfig(speed=8.0, silence_secs=0.3, auth_token=TOKEN))
    async with running_bridge(config(store_a), call_factory(SETTINGS)) as (bridge_a, url_a), \
            running_bridge(config(store_b), call_factory(SETTINGS)) as (_bridge_b, url_b):
        first = await request_twiml(f"{url_a}/voice", caller.config, caller.call_sid)
        assert first.stream_url is not None and first.action_url is not None and "resume=" in first.action_url
        caller.config.ws_token = first.parameters["token"]
        dropped = await caller.dial(first.stream_url, LINES, hangup_after=1)  # the line drops mid-call
        assert dropped.turns[0].latency_ms is not None, dropped.render()
        stored = None
        for _ in range(200):  # the leg gives the call up as its stream ends
            stored = await asyncio.to_thread(store_a.find, caller.call_sid)
            if stored is not None and not stored.held(time.time()) and bridge_a.registry.all()[-1].state == "ended":
                break
            await asyncio.sleep(0.05)
        assert stored is not None and stored.status == "live" and stored.leg == 1
        # In the gap, the attacker replays the call's first webhook (signed, no key) to either worker.
        for url in (url_b, url_a):
            replay = await request_twiml(f"{url}/voice", caller.config, caller.call_sid, "in-progress")
            assert replay.stream_url is None and replay.redirect_url is None, replay
        # The provider's own return (the action URL, with the leg's key) resumes the call, on the other worker.
        action_b = first.action_url.replace(url_a, url_b)
        second = await request_twiml(action_b, caller.config, caller.call_sid, "in-progress")
        assert second.stream_url is not None and second.parameters["call_id"] == first.parameters["call_id"]
        assert second.action_url is not None and second.action_url != action_b  # leg 2 has its own key
        resumed = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(
            speed=8.0, silence_secs=0.3, auth_token=TOKEN, ws_token=second.parameters["token"]))
        resumed.call_sid = caller.call_sid
        leg2 = asyncio.create_task(resumed.dial(second.stream_url, LINES[2:]))
        while (now := await asyncio.to_thread(store_b.find, caller.call_sid)) is None or now.leg < 2:
            await asyncio.sleep(0.02)
        # Leg 1's return, replayed while leg 2 runs, or after: a hang-up for the replayer, nothing else.
        old = await request_twiml(first.action_url, caller.config, caller.call_sid, "in-progress")
        assert old.stream_url is None and old.redirect_url is None
        result = await leg2
        assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns), result.render()


async def test_a_half_open_stream_is_given_up_so_the_providers_return_resumes_the_call(tmp_path: Path) -> None:
    from websockets.asyncio.client import connect

    from .test_telephony_bridge import RawCaller

    store = open_store("sqlite", path=tmp_path / "calls.sqlite3")
    assert store is not None
    cfg = config(store)
    cfg.credentials, cfg.leg_lease_secs, cfg.stream_silence_secs = HangupCredentials(), 0.9, 1.5
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        plan = await request_twiml(f"{url}/voice", EmulatorConfig(), "CA" + "1" * 32)
        assert plan.stream_url is not None and plan.action_url is not None
        async with connect(plan.stream_url) as ws:
            raw = RawCaller(ws)
            await raw.start(plan.parameters["token"])
            await raw.speak(seconds_of_silence_after=0.2)
            # The network drops without a FIN: the socket stays open and nothing more arrives.
            deadline = time.monotonic() + 10
            while not (records := [r for r in bridge.registry.all() if r.state == "ended"]):
                assert time.monotonic() < deadline, "the silent stream was never given up"
                await asyncio.sleep(0.05)
        assert records[0].end == "stream lost" and "no media" in records[0].reason
        stored = store.find("CA" + "1" * 32)
        assert stored is not None and stored.status == "live" and not stored.held(time.time())
        back = await request_twiml(plan.action_url, EmulatorConfig(), "CA" + "1" * 32, "in-progress")
        assert back.stream_url is not None and back.parameters["call_id"] == plan.parameters["call_id"]


async def test_the_providers_keyed_return_resumes_at_once_and_the_stale_leg_gives_the_call_up(tmp_path: Path) -> None:
    """A worker that has not noticed its stream is gone (half-open): the provider's return does not wait."""
    from websockets.asyncio.client import connect

    from .test_telephony_bridge import RawCaller

    store = open_store("sqlite", path=tmp_path / "calls.sqlite3")
    assert store is not None
    cfg = config(store)
    cfg.credentials, cfg.leg_lease_secs = HangupCredentials(), 0.9  # silence alone would take 30 s to notice
    sid = "CA" + "1" * 32
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        plan = await request_twiml(f"{url}/voice", EmulatorConfig(), sid)
        assert plan.stream_url is not None and plan.action_url is not None
        async with connect(plan.stream_url) as old_ws:
            old = RawCaller(old_ws)
            await old.start(plan.parameters["token"])
            await old.speak(seconds_of_silence_after=0.2)
            deadline = time.monotonic() + 10
            while (held := store.find(sid)) is None or held.turn < 1:  # the caller's line is saved
                assert time.monotonic() < deadline, "the caller's line was never saved"
                await asyncio.sleep(0.02)
            assert held.held(time.time())
            first_leg = next(r for r in bridge.registry.all() if r.started is not None)
            back = await request_twiml(plan.action_url, EmulatorConfig(), sid, "in-progress")
            assert back.stream_url is not None and back.parameters["call_id"] == plan.parameters["call_id"]
            async with connect(back.stream_url) as new_ws:
                await RawCaller(new_ws, "MZ" + "3" * 32).start(back.parameters["token"])
                deadline = time.monotonic() + 10
                while first_leg.state != "ended":
                    assert time.monotonic() < deadline, "the stale leg kept the call"
                    await asyncio.sleep(0.05)
                assert first_leg.end == "stream lost" and first_leg.reason == "a later leg took the call over"
                now = store.find(sid)
                assert now is not None and now.leg == 2 and now.held(time.time()) and now.status == "live"
                leg2 = next(r for r in bridge.registry.all() if r.leg == 2)
                assert leg2.resumed_at_turn == 1 and "resume_problem" not in leg2.extra  # the caller's line kept
