"""The resume path in one process: what the webhook answers, a state that does not load, an ended call."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.call.factory import build_call, call_factory
from voice_agent.core.resume import DEFAULT_TOPIC, resume_line, resume_topic
from voice_agent.settings import Settings, with_overrides
from voice_agent.store import CallStore, StoredCall, StoreError, open_store
from voice_agent.telephony.call_runner import FRESH_START_LINE
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator, request_twiml
from voice_agent.telephony.process import running_bridge
from voice_agent.telephony.providers import Provider, stream_instruction

LINES = ["Hi, is this the billing line?", "Here it is: ACC-4729-18.", "Thanks, that's all."]
SETTINGS = with_overrides(Settings(), call={"reference_date": dt.date(2026, 11, 30)})


def caller() -> TwilioCallerEmulator:
    return TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(speed=8.0, silence_secs=0.2))


def config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(port=0, stack=AudioStack.named("fake").with_script(LINES), idle_timeout_secs=None,
                        knowledge=False, store=open_store("sqlite", path=tmp_path / "calls.sqlite3"))


def test_every_provider_is_told_to_come_back_after_the_stream() -> None:
    action = "https://agent.example.com/voice"
    twilio, _ = stream_instruction(Provider.TWILIO, "wss://agent.example.com/ws", {"token": "t"}, action)
    assert ElementTree.fromstring(twilio).find("./Connect").get("action") == action  # type: ignore[union-attr]
    for provider in (Provider.TELNYX, Provider.PLIVO):
        body, _ = stream_instruction(provider, "wss://agent.example.com/ws", {"token": "t"}, action)
        root = ElementTree.fromstring(body)
        assert [e.tag for e in root][-1] == "Redirect" and root.find("./Redirect").text == action  # type: ignore[union-attr]
    plain, _ = stream_instruction(Provider.TWILIO, "wss://agent.example.com/ws", {"token": "t"})
    assert "action" not in plain


def test_the_resume_line_names_the_latest_tool_and_never_an_identifier() -> None:
    session = build_call(SETTINGS, "call-line").session
    topics = session.domain.extra["resume_topics"]
    assert resume_topic(session.state, topics) == DEFAULT_TOPIC
    session.state.start_turn("credit it please")
    session.state.transcript.append_tool_call(1, "lookup_account", "c1", {"account_id": "ACC-4729-18"})
    session.state.transcript.append_tool_call(1, "issue_credit", "c2", {"account_id": "ACC-4729-18"})
    # Cut before the agent answered: the resumed leg answers that line first and promises only that.
    assert resume_line(session.state, topics) == "Sorry, we got cut off. I have what you just said; let me answer that."
    session.state.transcript.append_agent(1, "Done, the credit is on its way.")
    line = resume_line(session.state, topics)
    assert line == "Sorry, we got cut off. We were on the credit for your invoice; I still have everything you told me."
    assert "ACC" not in line


async def test_a_call_that_ended_is_hung_up_when_the_provider_comes_back(tmp_path: Path) -> None:
    async with running_bridge(config(tmp_path), call_factory(SETTINGS)) as (bridge, url):
        emulator = caller()
        result = await emulator.dial(f"{url}/voice", LINES)
        assert result.status == "completed" and result.legs == 1
        for _ in range(100):
            if bridge.registry.all()[-1].state == "ended":
                break
            await asyncio.sleep(0.05)
        again = await request_twiml(f"{url}/voice", emulator.config, emulator.call_sid, "in-progress")
        # A bare hang-up: no new stream, no busy message, nowhere to go next.
        assert again.stream_url is None and again.said == "" and again.after_stream is None
        stored = bridge.config.store.find(emulator.call_sid)  # type: ignore[union-attr]
        assert stored is not None and stored.status == "ended" and stored.end == "hung up"


async def test_a_state_that_does_not_load_starts_the_call_fresh_and_says_why(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    emulator = caller()
    assert cfg.store is not None
    cfg.store.save("call-9-abcdef", b'{"schema": 1, "turn": 3, "transcr', turn=3, leg=1,
                   provider_call_id=emulator.call_sid)
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        result = await emulator.dial(f"{url}/voice", LINES)
        for _ in range(100):
            if bridge.registry.all()[-1].state == "ended":
                break
            await asyncio.sleep(0.05)
    record = bridge.registry.all()[-1]
    assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns), result.render()
    assert record.call_id == "call-9-abcdef" and record.leg == 2 and record.resumed_at_turn is None
    assert "not valid JSON" in record.extra["resume_problem"]
    # The caller was mid-call: the agent speaks first and claims nothing it lost.
    assert record.transcript[0] == f"AGENT: {FRESH_START_LINE}"
    assert not any("I still have everything" in line for line in record.transcript)
    assert record.transcript[1] == f"CALLER: {LINES[0]}"


async def test_a_draining_worker_sends_a_resume_round_again_instead_of_turning_it_away(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    emulator = caller()
    assert cfg.store is not None
    cfg.store.save("call-7-abcdef", b"{}", turn=3, leg=1, provider_call_id=emulator.call_sid)
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        bridge.draining = True
        plan = await request_twiml(f"{url}/voice", emulator.config, emulator.call_sid, "in-progress")
        assert plan.stream_url is None and plan.redirect_url == f"{url}/voice" and plan.pause_secs == 1
        fresh = caller()
        busy = await request_twiml(f"{url}/voice", fresh.config, fresh.call_sid)
        assert busy.stream_url is None and "busy" in busy.said  # a new call is still turned away


class BrokenStore(CallStore):
    """A store whose every write fails (Redis gone, disk full)."""

    def save(self, call_id: str, data: bytes, *, turn: int, leg: int, provider_call_id: str | None) -> bool:
        raise StoreError("redis store redis://10.0.0.5:6379/0: save failed: Connection refused")

    def save_changes(self, call_id: str, head: bytes, items: list[tuple[str, bytes]], *, base: int, turn: int,
                     leg: int, provider_call_id: str | None) -> bool:
        raise StoreError("redis store redis://10.0.0.5:6379/0: save failed: Connection refused")

    def load(self, call_id: str) -> StoredCall | None:
        return None

    def find(self, provider_call_id: str) -> StoredCall | None:
        raise StoreError("redis store: read failed: Connection refused")

    def end(self, call_id: str, how: str, *, leg: int | None = None) -> None:
        raise StoreError("redis store: end failed: Connection refused")

    def open_leg(self, call_id: str, leg: int, *, provider_call_id: str | None, lease_secs: float,
                 resume_key: str = "", returning_key: str = "") -> bool:
        raise StoreError("redis store: open failed: Connection refused")

    def renew(self, legs: list[tuple[str, int]], lease_secs: float) -> list[str]:
        raise StoreError("redis store: renew failed: Connection refused")

    def close_leg(self, call_id: str, leg: int) -> None:
        raise StoreError("redis store: close failed: Connection refused")

    def begin_effect(self, call_id: str, key: str, record: str) -> str | None:
        raise StoreError("redis store: recording an effect failed: Connection refused")

    def finish_effect(self, call_id: str, key: str, record: str) -> None:
        raise StoreError("redis store: recording an effect failed: Connection refused")

    def drop_effect(self, call_id: str, key: str) -> None:
        raise StoreError("redis store: forgetting an effect failed: Connection refused")

    def close(self) -> None:
        pass


async def test_a_store_that_fails_is_logged_and_the_call_goes_on(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.store = BrokenStore()
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        result = await caller().dial(f"{url}/voice", LINES)
    assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns), result.render()
    assert bridge.persistence is not None and bridge.persistence.stats.failures >= len(LINES)
    assert bridge.persistence.stats.saves == 0


class HungStore(BrokenStore):
    """A store whose saves hang (its process stopped, a disk that does not answer) for longer than a turn."""

    def save_changes(self, call_id: str, head: bytes, items: list[tuple[str, bytes]], *, base: int, turn: int,
                     leg: int, provider_call_id: str | None) -> bool:
        time.sleep(4.0)
        raise StoreError("sqlite store: the store's process did not answer in 4 s and was stopped")

    def find(self, provider_call_id: str) -> StoredCall | None:
        return None

    def open_leg(self, call_id: str, leg: int, *, provider_call_id: str | None, lease_secs: float,
                 resume_key: str = "", returning_key: str = "") -> bool:
        return True

    def renew(self, legs: list[tuple[str, int]], lease_secs: float) -> list[str]:
        return []


@pytest.mark.timeout(120)
async def test_a_store_that_hangs_does_not_hold_the_agents_answer(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.store = HungStore()
    async with running_bridge(cfg, call_factory(SETTINGS)) as (_bridge, url):
        result = await caller().dial(f"{url}/voice", LINES[:3])
    assert result.status == "completed", result.render()
    # The answer waits for the save of the caller's line at most TURN_SAVE_WAIT_SECS, not the store's 4 s.
    assert all(t.latency_ms is not None and t.latency_ms < 3000 for t in result.turns), result.render()


def test_a_resume_replaces_a_leg_that_is_still_closing_on_this_worker() -> None:
    """The stream dropped and the provider came straight back before the old leg finished closing."""
    from voice_agent.telephony.bridge import EndReason
    from voice_agent.telephony.providers import Provider
    from voice_agent.telephony.registry import CallRegistry

    registry = CallRegistry(max_calls=4, token_ttl=30)
    first = registry.reserve(Provider.TWILIO, "CA1")
    assert first is not None
    assert not isinstance(registry.claim(first.token, "CA1"), str)  # streaming now
    assert registry.reserve(Provider.TWILIO, "CA1") is None  # a repeated webhook for a streaming call: refused
    first.end, first.reason = EndReason.HUNG_UP.value, "client disconnected"  # dropped, not yet finished
    second = registry.reserve(Provider.TWILIO, "CA1", resume=(first.call_id, first.leg + 1))
    assert second is not None and second.call_id == first.call_id and second.leg == first.leg + 1
    first.end, first.reason = EndReason.HUNG_UP.value, "caller hung up"  # a real hang-up is not resumed
    registry2 = CallRegistry(max_calls=4, token_ttl=30)
    ended = registry2.reserve(Provider.TWILIO, "CA2")
    assert ended is not None and not isinstance(registry2.claim(ended.token, "CA2"), str)
    ended.end, ended.reason = EndReason.HUNG_UP.value, "caller hung up"
    assert registry2.reserve(Provider.TWILIO, "CA2", resume=(ended.call_id, 2)) is None


async def test_a_stored_call_that_does_not_parse_starts_fresh_and_the_agent_greets_the_caller(tmp_path: Path) -> None:
    import sqlite3

    cfg = config(tmp_path)
    emulator = caller()
    assert cfg.store is not None
    cfg.store.save("call-5-abcdef", b"{}", turn=3, leg=1, provider_call_id=emulator.call_sid)
    with sqlite3.connect(tmp_path / "calls.sqlite3") as db:
        db.execute("UPDATE calls SET leg = 'x' WHERE call_id = 'call-5-abcdef'")  # a field of the wrong type
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        result = await emulator.dial(f"{url}/voice", LINES)
        for _ in range(100):
            if bridge.registry.all()[-1].state == "ended":
                break
            await asyncio.sleep(0.05)
    record = bridge.registry.all()[-1]
    assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns), result.render()
    assert "unreadable" in record.extra["resume_problem"]
    assert record.transcript[0] == f"AGENT: {FRESH_START_LINE}", record.transcript[:2]
    assert result.media_received > 0



async def test_a_resumed_call_answers_the_line_the_dead_leg_never_answered(tmp_path: Path) -> None:
    from voice_agent.store.codec import encode

    cfg = config(tmp_path)
    # The caller heard "let me answer that" and waits for the answer before saying more.
    emulator = TwilioCallerEmulator(caller_voice("tone"), None,
                                    EmulatorConfig(speed=8.0, silence_secs=0.2, lead_secs=30.0))
    assert cfg.store is not None
    session = build_call(SETTINGS, "call-7-abcdef").session
    await session.begin_turn(LINES[0])
    session.record_agent("Yes, this is billing. What's your account number?")
    await session.begin_turn(LINES[1])  # saved when it opened its turn; the leg died before the answer
    cfg.store.save("call-7-abcdef", encode(session), turn=session.turn, leg=1, provider_call_id=emulator.call_sid)
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        result = await emulator.dial(f"{url}/voice", [LINES[2]])
        for _ in range(100):
            if bridge.registry.all()[-1].state == "ended":
                break
            await asyncio.sleep(0.05)
    record = bridge.registry.all()[-1]
    assert result.status == "completed", result.render()
    said = record.transcript
    opening = said.index("AGENT: Sorry, we got cut off. I have what you just said; let me answer that.")
    answer = said[opening + 1 : said.index(f"CALLER: {LINES[2]}")]
    # The promise is kept: the account the caller gave on the dead leg is looked up and answered before they speak.
    assert any(line.startswith("TOOL_CALL lookup_account") and "ACC-4729-18" in line for line in answer), said
    assert any(line.startswith("AGENT: ") for line in answer), said


async def test_a_line_two_legs_never_answered_is_still_unanswered() -> None:
    from voice_agent.core.resume import unanswered

    session = build_call(SETTINGS, "call-8-abcdef").session
    await session.begin_turn("My account is ACC-4729-18.")
    assert unanswered(session.state)
    session.record_agent(resume_line(session.state, {}))  # leg 2's apology, then leg 2 died too
    assert unanswered(session.state)
    session.record_agent("Thanks, I've found your account.")
    assert not unanswered(session.state)


async def test_a_call_brought_back_while_the_store_cannot_be_read_starts_fresh_and_greets(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.store = BrokenStore()
    emulator = caller()
    async with running_bridge(cfg, call_factory(SETTINGS)) as (bridge, url):
        # The provider returns from a leg whose worker died (its action URL carries the leg's key).
        plan = await request_twiml(f"{url}/voice?resume=k3y", emulator.config, emulator.call_sid)
        assert plan.stream_url is not None
        record = bridge.registry.all()[-1]
        assert record.extra["resume_problem"].startswith("the store could not be read")
        fresh = caller()  # a new call while the store is down is just new
        await request_twiml(f"{url}/voice", fresh.config, fresh.call_sid)
        assert "resume_problem" not in bridge.registry.all()[-1].extra


def test_a_renewal_of_a_call_the_store_lost_is_not_a_takeover(tmp_path: Path) -> None:
    store = open_store("sqlite", path=tmp_path / "calls.sqlite3")
    assert store is not None
    assert store.open_leg("call-1-abc", 1, provider_call_id="CA1", lease_secs=5)
    assert store.open_leg("call-2-abc", 1, provider_call_id="CA2", lease_secs=5)
    assert store.open_leg("call-2-abc", 2, provider_call_id="CA2", lease_secs=5, returning_key="") is False
    (tmp_path / "calls.sqlite3").unlink()  # the file deleted under the worker
    assert store.renew([("call-1-abc", 1), ("call-2-abc", 1)], 5) == []
    store.close()
