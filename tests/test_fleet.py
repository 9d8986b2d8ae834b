"""Several workers on one Redis: any worker takes a stream whose token another issued, the cap is fleet-wide."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from voice_agent.audio.stack import AudioStack
from voice_agent.call.factory import call_factory
from voice_agent.settings import Settings, with_overrides
from voice_agent.store import open_store
from voice_agent.telephony.app import VoiceBridge
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.emulator import request_twiml
from voice_agent.telephony.fleet import Fleet, FleetReservation, FleetUnavailable
from voice_agent.telephony.process import running_bridge

from .fakes.callers import tone_caller

LINES = ["Hi, is this the billing line?", "Thanks, that's all."]


@asynccontextmanager
async def worker(url: str, name: str, *, fleet_max: int = 0) -> AsyncIterator[tuple[VoiceBridge, str]]:
    store = open_store("redis", url=url)
    config = ServerConfig(port=0, stack=AudioStack.named("fake").with_script(LINES), idle_timeout_secs=None,
                          knowledge=False, store=store, fleet=Fleet(url, name, max_calls=fleet_max))
    settings = with_overrides(Settings(), call={"reference_date": dt.date(2026, 11, 30)})
    async with running_bridge(config, call_factory(settings)) as running:
        yield running




async def test_a_stream_reaches_another_worker_than_the_webhook_and_is_taken_once(redis_url: str) -> None:
    async with worker(redis_url, "a") as (bridge_a, url_a), worker(redis_url, "b") as (bridge_b, url_b):
        emulator = tone_caller()
        plan = await request_twiml(f"{url_a}/voice", emulator.config, emulator.call_sid)
        assert plan.stream_url is not None and (plan.action_url or "").startswith(f"{url_a}/voice?resume=")
        token = plan.parameters["token"]
        emulator.config.ws_token = token
        stream_b = url_b.replace("http://", "ws://") + "/ws"
        result = await emulator.dial(stream_b, LINES)
        assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns), result.render()
        ran_b = [r for r in bridge_b.registry.all() if r.started is not None]
        assert len(ran_b) == 1 and ran_b[0].call_id == plan.parameters["call_id"]
        assert not [r for r in bridge_a.registry.all() if r.started is not None]
        # The token was taken: a second stream with it is refused on either worker.
        again = await tone_caller(token, emulator.call_sid).dial(url_a.replace("http://", "ws://") + "/ws", LINES[:1])
        assert again.status == "closed" and again.close_code == 1008
        fleet = bridge_b.config.fleet
        assert fleet is not None
        # The end reaches the fleet after the caller has gone: wait for it (a hang guard, not a measure).
        deadline = time.monotonic() + 30
        while (await fleet.calls())[ran_b[0].call_id]["state"] != "hung up":
            assert time.monotonic() < deadline, await fleet.calls()
            await asyncio.sleep(0.05)
        assert await fleet.busy() == 0


async def test_the_call_cap_is_fleet_wide_and_a_lapsed_hold_frees_its_slot(redis_url: str) -> None:
    async with worker(redis_url, "a", fleet_max=1) as (_a, url_a), worker(redis_url, "b", fleet_max=1) as (_b, url_b):
        first = tone_caller()
        plan = await request_twiml(f"{url_a}/voice", first.config, first.call_sid)
        assert plan.stream_url is not None
        second = tone_caller()
        busy = await request_twiml(f"{url_b}/voice", second.config, second.call_sid)
        assert busy.stream_url is None and "busy" in busy.said
        # A worker killed with kill -9 renews nothing: its hold lapses, and the slot is free again.
        fleet = Fleet(redis_url, "probe", max_calls=1, lease_secs=0.2)
        await fleet.client.delete("va:slots")
        assert await fleet.reserve(FleetReservation("call-x", "twilio", "CAX", 1), "tok-x", 0.2)
        assert not await fleet.reserve(FleetReservation("call-y", "twilio", "CAY", 1), "tok-y", 0.2)
        await asyncio.sleep(0.3)
        assert await fleet.reserve(FleetReservation("call-y", "twilio", "CAY", 1), "tok-y", 0.2)
        # A resumed call takes its own slot again, full fleet or not.
        assert await fleet.reserve(FleetReservation("call-y", "twilio", "CAY", 2), "tok-y2", 0.2)
        await fleet.close()


async def test_a_corrupt_token_value_is_refused_and_a_dead_redis_is_reported(redis_url: str, tmp_path: Path) -> None:
    fleet = Fleet(redis_url, "a")
    try:
        await fleet.client.set("va:token:broken", b"not json")
        assert await fleet.claim("broken") is None  # refused, not a crash of the stream handler
        await fleet.client.set("va:token:partial", b'{"call_id": "c1"}')
        assert await fleet.claim("partial") is None
    finally:
        await fleet.close()
    from voice_agent.harness.redis_server import free_port

    dead = Fleet(f"redis://127.0.0.1:{free_port()}/0", "b")  # nothing listens there
    try:
        with pytest.raises(FleetUnavailable):
            await dead.claim("any")
    finally:
        await dead.close()
