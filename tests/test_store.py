"""The call store: both backends pass the same tests; a state round-trips into the same context."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lanes_content import assert_same_content
from voice_agent.call.factory import CallParts, build_call
from voice_agent.core.policy import PolicyTracker
from voice_agent.harness.scenarios import load_scenario
from voice_agent.harness.simulation.runner import caller_lines
from voice_agent.harness.simulation.text_call import run_text_call
from voice_agent.settings import Settings, with_overrides
from voice_agent.store import CallStore, StateError, decode, encode, open_store, restore, snapshot
from voice_agent.store.codec import SCHEMA_VERSION, from_plain, to_plain

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = load_scenario("billing_dispute")
LINES = caller_lines(SCENARIO)
SETTINGS = with_overrides(Settings(), call={"reference_date": SCENARIO.reference_date or dt.date(2026, 11, 30)})


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(backend, open_store keyword arguments) for each backend, Redis on its own server."""
    if request.param == "sqlite":
        yield "sqlite", {"path": str(tmp_path / "calls.sqlite3")}
        return
    yield "redis", {"url": request.getfixturevalue("redis_url")}


@pytest.fixture
def store(store_spec: tuple[str, dict[str, Any]]) -> Iterator[CallStore]:
    backend, kwargs = store_spec
    opened = open_store(backend, **kwargs)
    assert opened is not None
    yield opened
    opened.close()


def new_call(call_id: str = "call-1-abc") -> CallParts:
    return build_call(SETTINGS, call_id)


async def played(lines_count: int, call_id: str = "call-1-abc") -> CallParts:
    parts = new_call(call_id)
    await run_text_call(parts.session, parts.llm, LINES[:lines_count])
    return parts


# --- the store ------------------------------------------------------------------------------------------------------


def test_save_load_find_end(store: CallStore) -> None:
    assert store.load("call-1") is None and store.find("CA1") is None
    assert store.save("call-1", b"one", turn=1, leg=1, provider_call_id="CA1")
    assert store.save("call-1", b"two", turn=2, leg=1, provider_call_id="CA1")
    stored = store.load("call-1")
    assert stored is not None and (stored.data, stored.turn, stored.leg, stored.status) == (b"two", 2, 1, "live")
    found = store.find("CA1")
    assert found is not None and found.call_id == "call-1" and found.provider_call_id == "CA1"
    store.end("call-1", "hung up")
    ended = store.load("call-1")
    assert ended is not None and ended.status == "ended" and ended.end == "hung up" and ended.data == b"two"
    # An ended call is never written again (a late save of a worker that lost it changes nothing).
    assert not store.save("call-1", b"late", turn=3, leg=2, provider_call_id="CA1")
    assert store.load("call-1").data == b"two"  # type: ignore[union-attr]


def test_one_leg_holds_a_call_at_a_time_and_a_next_leg_opens_once_it_closes_or_lapses(store: CallStore) -> None:
    assert store.open_leg("call-l", 1, provider_call_id="CAL", lease_secs=30)
    assert store.save("call-l", b"turn-3", turn=3, leg=1, provider_call_id="CAL")
    held = store.find("CAL")
    assert held is not None and held.held(time.time()) and held.data == b"turn-3"
    # A replayed webhook's stream: neither a second first leg nor a next leg while leg 1 holds the call.
    assert not store.open_leg("call-replay", 1, provider_call_id="CAL", lease_secs=30)
    assert not store.open_leg("call-l", 2, provider_call_id="CAL", lease_secs=30)
    assert store.renew([("call-l", 1)], 30) == []
    store.close_leg("call-l", 1)  # the stream dropped without a hang-up
    closed = store.load("call-l")
    assert closed is not None and not closed.held(time.time()) and closed.status == "live"
    assert store.open_leg("call-l", 2, provider_call_id="CAL", lease_secs=30)
    assert not store.open_leg("call-l", 2, provider_call_id="CAL", lease_secs=30)  # two streams raced for leg 2
    assert store.renew([("call-l", 1), ("call-l", 2)], 30) == ["call-l"]  # leg 1 lost the call
    assert not store.save("call-l", b"leg1-late", turn=4, leg=1, provider_call_id="CAL")
    # A leg that lapsed (its worker was killed) lets the next one in.
    assert store.renew([("call-l", 2)], 0.05) == []
    time.sleep(0.1)
    assert store.open_leg("call-l", 3, provider_call_id="CAL", lease_secs=30)
    store.end("call-l", "hung up", leg=3)
    assert not store.open_leg("call-l", 4, provider_call_id="CAL", lease_secs=30)  # an ended call never resumes
    assert store.load("call-l").data == b"turn-3"  # type: ignore[union-attr]


def test_the_previous_legs_key_opens_the_next_leg_at_once_and_nothing_else_does(store: CallStore) -> None:
    assert store.open_leg("call-k", 1, provider_call_id="CAK", lease_secs=30, resume_key="key-1")
    assert store.load("call-k").resume_key == "key-1"  # type: ignore[union-attr]
    assert not store.open_leg("call-k", 2, provider_call_id="CAK", lease_secs=30, returning_key="key-0")
    assert not store.open_leg("call-k", 2, provider_call_id="CAK", lease_secs=30)
    assert store.open_leg("call-k", 2, provider_call_id="CAK", lease_secs=30, resume_key="key-2",
                          returning_key="key-1")  # leg 1 still held its lease: the provider says its stream ended
    assert not store.open_leg("call-k", 3, provider_call_id="CAK", lease_secs=30, returning_key="key-1")
    assert store.renew([("call-k", 1)], 30) == ["call-k"]


def test_the_end_of_a_leg_that_lost_the_call_is_recorded_once_no_leg_holds_it(store: CallStore) -> None:
    assert store.open_leg("call-e", 1, provider_call_id="CAE", lease_secs=0.05)
    time.sleep(0.1)  # leg 1 stalled past its lease
    assert store.open_leg("call-e", 2, provider_call_id="CAE", lease_secs=30)
    store.end("call-e", "hung up", leg=1)  # leg 2 runs the call: leg 1 cannot end it under it
    assert store.load("call-e").status == "live"  # type: ignore[union-attr]
    store.close_leg("call-e", 2)
    store.end("call-e", "hung up", leg=1)
    assert store.load("call-e").status == "ended"  # type: ignore[union-attr]


def test_an_older_leg_cannot_overwrite_the_worker_that_took_the_call_over(store: CallStore) -> None:
    assert store.save("call-2", b"leg1-turn4", turn=4, leg=1, provider_call_id="CA2")
    assert store.save("call-2", b"leg2-turn5", turn=5, leg=2, provider_call_id="CA2")
    assert not store.save("call-2", b"leg1-turn5", turn=5, leg=1, provider_call_id="CA2")
    stored = store.load("call-2")
    assert stored is not None and (stored.data, stored.leg) == (b"leg2-turn5", 2)


WRITER = """
import sys
from voice_agent.store import open_store
backend, target = sys.argv[1], sys.argv[2]
store = open_store(backend, **({"path": target} if backend == "sqlite" else {"url": target}))
turn = 0
print("writing", flush=True)
while True:
    turn += 1
    payload = (b'{"turn": %d, "pad": "' % turn) + b"x" * 400_000 + b'"}'
    store.save("call-torn", payload, turn=turn, leg=1, provider_call_id="CATORN")
"""


def test_a_writer_killed_mid_write_leaves_a_state_that_loads(store_spec: tuple[str, dict[str, Any]]) -> None:
    backend, kwargs = store_spec
    target = kwargs.get("path") or kwargs["url"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for delay in (0.35, 0.6, 0.85):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, backend, target], env=env, stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        opened = open_store(backend, **kwargs)
        assert opened is not None
        stored = opened.load("call-torn")
        opened.close()
        assert stored is not None, "the writer wrote nothing before it was killed"
        data = json.loads(stored.data)  # whole: a torn write would not parse
        assert data["turn"] == stored.turn and len(data["pad"]) == 400_000


# --- the codec ------------------------------------------------------------------------------------------------------


def test_plain_data_keeps_tuples_sets_dates_and_int_keys() -> None:
    value = {"a": (1, 2), "b": {3, 4}, "c": frozenset({"x"}), "d": dt.date(2026, 12, 3), 5: [{"e": None}]}
    back = from_plain(json.loads(json.dumps(to_plain(value))))
    assert back == value and isinstance(back["a"], tuple) and isinstance(back["c"], frozenset)


async def test_a_restored_call_assembles_the_same_context_and_encodes_the_same() -> None:
    parts = await played(20)
    before = parts.session.assemble().messages
    data = encode(parts.session)
    assert parts.session.state.summary.covers_through_turn > 0, "the round trip must carry a summary"
    assert len(parts.session.state.ledger) >= 2 and parts.session.state.slots.filled()
    resumed = new_call()
    assert restore(resumed.session, decode(data, call_id="call-1-abc")) == []
    assert_same_content(before, resumed.session.assemble().messages)
    resumed.session.requests_by_turn = dict(parts.session.requests_by_turn)  # assemble() above counted one more
    assert encode(resumed.session) == data
    assert resumed.session.domain.extra["backend"].disputes == parts.session.domain.extra["backend"].disputes


async def test_a_call_resumed_mid_way_ends_exactly_as_an_uninterrupted_one() -> None:
    whole = await played(len(LINES), call_id="call-1-abc")
    first = await played(18)
    second = new_call()
    restore(second.session, decode(encode(first.session)))
    await run_text_call(second.session, second.llm, LINES[18:])
    rendered = [e.render() for e in second.session.state.transcript]
    assert rendered == [e.render() for e in whole.session.state.transcript]
    credits = second.session.domain.extra["backend"].credits
    assert credits == whole.session.domain.extra["backend"].credits and credits


async def test_a_resumed_pipecat_call_starts_from_what_was_said_and_ends_as_an_uninterrupted_one() -> None:
    """Under ``pipecat`` the model sees only the pipeline's own context, which a resumed leg builds anew."""
    settings = with_overrides(SETTINGS, policy={"name": "pipecat"}, pipecat_summarizer={"summarize": False})
    whole = build_call(settings, "call-1-abc")
    await run_text_call(whole.session, whole.llm, LINES)
    first = build_call(settings, "call-1-abc")
    first_leg = await run_text_call(first.session, first.llm, LINES[:18])  # the account number is given early
    second = build_call(settings, "call-1-abc")
    restore(second.session, decode(encode(first.session)))
    # The second leg starts with the context pipecat held at the first leg's end, message for message.
    assert second.session.pipeline_history() == first_leg.user_aggregator.context.get_messages()
    await run_text_call(second.session, second.llm, LINES[18:])
    # Started empty, the second leg's model asked again for the account number the caller gave on the first.
    assert [e.render() for e in second.session.state.transcript] == [e.render() for e in whole.session.state.transcript]
    lanes = new_call()  # the lanes policy builds every request from the lanes: a restored call starts empty
    restore(lanes.session, decode(encode((await played(4)).session)))
    assert len(lanes.session.state.transcript) > 4 and lanes.session.pipeline_history() == []


async def test_open_tool_calls_are_recorded_as_cancelled_on_resume() -> None:
    parts = await played(4)
    turn = parts.session.turn
    parts.session.state.transcript.append_tool_call(turn, "issue_credit", "ref-open-1", {"amount": "5"})
    assert snapshot(parts.session)["open_tool_calls"] == ["ref-open-1"]
    resumed = new_call()
    assert restore(resumed.session, decode(encode(parts.session))) == ["ref-open-1"]
    last = resumed.session.state.transcript.entries[-1]
    assert last.tool_call_id == "ref-open-1" and last.outcome is not None and last.outcome.value == "cancelled"
    assert resumed.session.state.transcript.pending_tool_calls() == []


@dataclasses.dataclass
class GrownTracker(PolicyTracker):
    """A tracker with fields added later (as another change may add them): no codec change needed."""

    passes_run: int = 0
    turns_seen: set[int] = dataclasses.field(default_factory=set)
    cache: dict[int, str] = dataclasses.field(default_factory=dict, metadata={"derived": True})


async def test_a_new_plain_data_tracker_field_round_trips_and_a_derived_one_is_rebuilt() -> None:
    parts = await played(6)
    grown = GrownTracker(parts.session.state.policy, summarized_through=parts.session.state.tracker.summarized_through,
                         passes_run=3, turns_seen={1, 4})
    grown.cache[1] = "derived"
    parts.session.state.tracker = grown
    resumed = new_call()
    resumed.session.state.tracker = GrownTracker(resumed.session.state.policy)
    restore(resumed.session, decode(encode(parts.session)))
    back = resumed.session.state.tracker
    assert isinstance(back, GrownTracker) and back.passes_run == 3 and back.turns_seen == {1, 4}
    assert back.summarized_through == grown.summarized_through and back.cache == {}


def test_bad_states_fail_with_a_clear_error() -> None:
    with pytest.raises(StateError, match="not valid JSON"):
        decode(b'{"schema": 1, "turn": 3, "transcr')
    with pytest.raises(StateError, match="schema version 99"):
        decode(json.dumps({"schema": 99}).encode())
    with pytest.raises(StateError, match="belongs to call"):
        decode(json.dumps({"schema": SCHEMA_VERSION, "call_id": "other"}).encode(), call_id="call-1")


async def test_a_malformed_state_leaves_the_session_untouched() -> None:
    parts = await played(4)
    state = decode(encode(parts.session))
    state["ledger"]["entries"][0].pop("role")
    fresh = new_call()
    with pytest.raises(StateError, match="malformed"):
        restore(fresh.session, state)
    assert fresh.session.turn == 0 and len(fresh.session.state.ledger) == 0
    other = decode(encode(parts.session))
    other["policy"]["keep"] = 99
    with pytest.raises(StateError, match="policy"):
        restore(fresh.session, other)


def test_store_settings_are_checked_and_open_the_named_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from voice_agent.call.factory import call_store
    from voice_agent.settings import SettingsError, load_settings

    monkeypatch.setenv("VOICE_AGENT_STORE__BACKEND", "redis")
    with pytest.raises(SettingsError, match=r"needs store\.url"):
        load_settings()
    monkeypatch.setenv("VOICE_AGENT_STORE__URL", "http://127.0.0.1:1")
    with pytest.raises(SettingsError, match="redis://"):
        load_settings()
    monkeypatch.setenv("VOICE_AGENT_STORE__BACKEND", "sqlite")
    monkeypatch.setenv("VOICE_AGENT_STORE__PATH", str(tmp_path / "s.sqlite3"))
    monkeypatch.delenv("VOICE_AGENT_STORE__URL")
    store = call_store(load_settings())
    assert store is not None and store.backend == "sqlite" and (tmp_path / "s.sqlite3").exists()
    store.close()
    monkeypatch.setenv("VOICE_AGENT_STORE__BACKEND", "none")
    assert call_store(load_settings()) is None


async def test_a_call_under_the_reference_trigger_resumes_exactly_too() -> None:
    """The trigger keeps its index outside the state (rebuilt on load): the resumed call still matches."""
    settings = with_overrides(SETTINGS, policy={"trigger": "reference"})
    whole = build_call(settings, "call-ref")
    await run_text_call(whole.session, whole.llm, LINES)
    first = build_call(settings, "call-ref")
    await run_text_call(first.session, first.llm, LINES[:20])
    before = first.session.assemble().messages
    second = build_call(settings, "call-ref")
    restore(second.session, decode(encode(first.session)))
    assert_same_content(before, second.session.assemble().messages)
    await run_text_call(second.session, second.llm, LINES[20:])
    assert [e.render() for e in second.session.state.transcript] == [e.render() for e in whole.session.state.transcript]


async def test_after_a_resume_the_date_guard_still_reads_what_was_said_before_it() -> None:
    parts = await played(12)  # "don't call me before the 14th" was said on turn 8, on the first worker
    asked = "Could you call me back on the 10th?"
    resumed = new_call()
    restore(resumed.session, decode(encode(parts.session)))
    resumed.session.state.start_turn(asked)
    early = resumed.session.review_tool_call("schedule_callback", "c-early",
                                             {"account_id": "ACC-4729-18", "date": "2026-12-10"})
    # The caller asks for the 10th themselves: the contract reads their limit back rather than booking it.
    assert early.rejection is not None and early.rejection["verdict"] == "confirm", early.rejection
    assert [c.verdict.value for c in early.date_checks] == ["conflict"]
    assert early.rejection["citations"][0]["turn"] == 8
    fresh = new_call()  # the same request in a call that never heard the constraint passes the guard
    fresh.session.state.ledger.record_from_tool("account", "ACC-4729-18", 1, "lookup_account", "account_id")
    fresh.session.state.start_turn(asked)
    assert fresh.session.review_tool_call("schedule_callback", "c-fresh",
                                          {"account_id": "ACC-4729-18", "date": "2026-12-10"}).rejection is None


def test_the_sqlite_store_and_its_journal_files_are_the_owners_alone(tmp_path: Path) -> None:
    from voice_agent.store.sqlite import SQLiteCallStore

    old = os.umask(0o022)
    try:
        store = SQLiteCallStore(tmp_path / "calls.sqlite3")
        store.save("call-1", b"{}", turn=1, leg=1, provider_call_id=None)
        made = [p for p in tmp_path.iterdir() if p.name.startswith("calls.sqlite3")]
        assert made and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in made), [
            (p.name, oct(p.stat().st_mode)) for p in made]
        store.close()
    finally:
        os.umask(old)


def test_a_stored_call_whose_fields_do_not_parse_is_reported_as_unreadable(
        store: CallStore, store_spec: tuple[str, dict[str, Any]]) -> None:
    from voice_agent.store import UnreadableCall

    assert store.save("call-bad", b"{}", turn=2, leg=1, provider_call_id="CABAD")
    backend, kwargs = store_spec
    if backend == "sqlite":
        import sqlite3

        with sqlite3.connect(kwargs["path"]) as db:
            db.execute("UPDATE calls SET leg = 'two' WHERE call_id = 'call-bad'")
    else:
        import redis

        redis.Redis.from_url(kwargs["url"]).hset("va:call:call-bad", "leg", "two")
    with pytest.raises(UnreadableCall, match="call-bad unreadable"):
        store.find("CABAD")


def test_a_sqlite_store_whose_file_is_deleted_mid_call_reopens_it_and_keeps_saving(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite3"
    store, reader = open_store("sqlite", path=path), open_store("sqlite", path=path)  # two workers
    assert store is not None and reader is not None
    assert store.save("call-1", b"turn-1", turn=1, leg=1, provider_call_id="CA1")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)  # an operator's cleanup, mid-call
    assert store.save("call-1", b"turn-2", turn=2, leg=1, provider_call_id="CA1")
    other = open_store("sqlite", path=path)  # what another process (the next leg) reads
    assert other is not None
    stored = other.find("CA1")
    assert stored is not None and stored.data == b"turn-2"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The other worker, which opened the old file, reads the one at the path now (not the deleted one).
    found = reader.find("CA1")
    assert found is not None and found.data == b"turn-2"
    other.close()
    reader.close()
    store.close()


def test_the_store_directories_it_makes_are_the_owners_alone_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = open_store("sqlite", path=tmp_path / "state" / "voice-agent" / "calls.sqlite3")
    finally:
        os.umask(old)
    assert store is not None
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / "voice-agent").stat().st_mode) == 0o700
    store.close()


# --- saving what changed --------------------------------------------------------------------------------------------


def test_changes_append_after_what_is_stored_and_a_whole_save_clears_them(store: CallStore) -> None:
    call = "call-7-abc"
    assert store.save_changes(call, b'{"h":1}', [("transcript", b"a"), ("drop_log", b"b")], base=0, turn=1, leg=1,
                              provider_call_id="CA7")
    assert store.save_changes(call, b'{"h":2}', [("transcript", b"c")], base=2, turn=2, leg=1, provider_call_id="CA7")
    stored = store.load(call)
    assert stored is not None and stored.data == b'{"h":2}' and stored.turn == 2
    assert stored.items == (("transcript", b"a"), ("drop_log", b"b"), ("transcript", b"c"))
    # A save written but reported failed is retried with the same base: its items replace, never repeat.
    assert store.save_changes(call, b'{"h":3}', [("transcript", b"c"), ("transcript", b"d")], base=2, turn=3, leg=1,
                              provider_call_id="CA7")
    assert [item for _, item in store.load(call).items] == [b"a", b"b", b"c", b"d"]  # type: ignore[union-attr]
    # A later leg owns the call: an older leg's changes are refused, nothing appended.
    assert store.open_leg(call, 2, provider_call_id="CA7", lease_secs=5)
    assert not store.save_changes(call, b'{"h":9}', [("transcript", b"x")], base=4, turn=4, leg=1,
                                  provider_call_id="CA7")
    assert len(store.load(call).items) == 4  # type: ignore[union-attr]
    assert store.save(call, b'{"whole":1}', turn=5, leg=2, provider_call_id="CA7")
    whole = store.load(call)
    assert whole is not None and whole.items == () and whole.data == b'{"whole":1}'


async def test_a_call_saved_change_by_change_resumes_as_it_was(store: CallStore) -> None:
    from voice_agent.telephony.persistence import CallPersistence

    persistence = CallPersistence(store)
    first = new_call()
    for stop in (6, 12, 18):  # three turns' worth of saves, each appending what the turns added
        await run_text_call(first.session, first.llm, LINES[stop - 6: stop])
        assert await persistence.save(first.session, leg=1, provider_call_id="CA1")
    later_bytes = persistence.stats.last_bytes
    assert later_bytes < len(encode(first.session)) / 2  # the third save wrote six turns, not the call
    second = new_call()
    assert persistence.restore(second.session).problem is None
    assert [e.render() for e in second.session.state.transcript] == [e.render() for e in first.session.state.transcript]
    assert_same_content(first.session.assemble().messages, second.session.assemble().messages)
    assert second.session.summary_passes == [dataclasses.replace(p, text_in="", text_out="")
                                             for p in first.session.summary_passes]
    # It goes on exactly as a leg resumed from the whole state does.
    reference = new_call()
    restore(reference.session, decode(encode(first.session)))
    await run_text_call(reference.session, reference.llm, LINES[18:])
    await run_text_call(second.session, second.llm, LINES[18:])
    assert [e.render() for e in second.session.state.transcript] == [
        e.render() for e in reference.session.state.transcript]
    credits = second.session.domain.extra["backend"].credits
    assert credits and credits == reference.session.domain.extra["backend"].credits
    # The resumed leg goes on appending after what the store holds.
    assert await persistence.save(second.session, leg=2, provider_call_id="CA1")
    third = new_call()
    assert persistence.restore(third.session).problem is None
    assert len(third.session.state.transcript) == len(second.session.state.transcript)


def test_a_stored_item_that_does_not_parse_starts_the_call_fresh(store: CallStore) -> None:
    from voice_agent.store.codec import encode_changes
    from voice_agent.telephony.persistence import CallPersistence

    call = "call-1-abc"
    head, _ = encode_changes(new_call().session, {})
    assert store.save_changes(call, head, [("transcript", b"{not json")], base=0, turn=0, leg=1,
                              provider_call_id="CA1")
    restored = CallPersistence(store).restore(new_call().session)
    assert restored.problem is not None and "transcript item is not valid JSON" in restored.problem


async def test_a_store_that_lost_the_saved_items_gets_the_whole_call_again(store: CallStore) -> None:
    from voice_agent.store.base import ItemsOutOfStep
    from voice_agent.telephony.persistence import CallPersistence

    persistence = CallPersistence(store)
    first = await played(8)
    assert await persistence.save(first.session, leg=1, provider_call_id="CA1")
    # The items are gone (a file replaced, a key evicted): here, a whole state of turn 0 written over them.
    assert store.save(first.session.call_id, encode(new_call().session), turn=0, leg=1, provider_call_id="CA1")
    with pytest.raises(ItemsOutOfStep):
        store.save_changes(first.session.call_id, b"{}", [], base=5, turn=8, leg=1, provider_call_id="CA1")
    await run_text_call(first.session, first.llm, LINES[8:10])
    assert await persistence.save(first.session, leg=1, provider_call_id="CA1")
    second = new_call()
    assert persistence.restore(second.session).problem is None
    assert [e.render() for e in second.session.state.transcript] == [e.render() for e in first.session.state.transcript]


async def test_a_call_saved_before_its_first_turn_resumes(store: CallStore) -> None:
    from voice_agent.telephony.persistence import CallPersistence

    persistence = CallPersistence(store)
    assert await persistence.save(new_call().session, leg=1, provider_call_id="CA1")  # the leg died at once
    restored = persistence.restore(new_call().session)
    assert restored.problem is None and restored.turn == 0


def test_a_renewal_of_a_call_the_store_no_longer_holds_is_not_a_takeover(store: CallStore) -> None:
    assert store.open_leg("call-1-abc", 1, provider_call_id="CA1", lease_secs=5, resume_key="k1")
    assert store.open_leg("call-2-abc", 1, provider_call_id="CA2", lease_secs=0.01, resume_key="k2")
    assert store.open_leg("call-2-abc", 2, provider_call_id="CA2", lease_secs=5, returning_key="k2")
    # call-2's leg 1 lost the call to leg 2; call-9 is one the store lost (restarted empty, file replaced)
    assert store.renew([("call-1-abc", 1), ("call-2-abc", 1), ("call-9-abc", 1)], 5) == ["call-2-abc"]


def test_a_call_rewritten_without_its_key_is_resumed_by_the_providers_key(store: CallStore) -> None:
    # The store lost the call and a save wrote it again: its resume key is gone; the provider's (which the
    # webhook checked) is what is left.
    assert store.save("call-3-abc", b"{}", turn=2, leg=1, provider_call_id="CA3")
    assert store.open_leg("call-3-abc", 2, provider_call_id="CA3", lease_secs=5, returning_key="k-from-provider")


def test_a_stored_call_with_a_hole_in_its_items_is_unreadable(tmp_path: Path) -> None:
    import sqlite3

    from voice_agent.store import UnreadableCall

    store = open_store("sqlite", path=tmp_path / "calls.sqlite3")
    assert store is not None
    assert store.save_changes("call-4-abc", b"{}", [("transcript", b"1"), ("transcript", b"2"), ("transcript", b"3")],
                              base=0, turn=1, leg=1, provider_call_id="CA4")
    with sqlite3.connect(tmp_path / "calls.sqlite3") as db:
        db.execute("DELETE FROM call_items WHERE seq = 1")
    with pytest.raises(UnreadableCall, match="missing saved items"):
        store.load("call-4-abc")
    store.close()


def test_a_full_disk_is_reported_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from voice_agent.store import StoreError
    from voice_agent.store.sqlite import SQLiteCallStore

    store = SQLiteCallStore(tmp_path / "calls.sqlite3")
    real = store._db

    class FullDisk:
        """A connection whose writes fail as SQLite's do on a full disk (it has rolled back by itself)."""

        def execute(self, sql: str, *args: Any) -> object:
            if sql.startswith("INSERT"):
                raise sqlite3.OperationalError("database or disk is full")
            if sql == "ROLLBACK":
                raise sqlite3.OperationalError("cannot rollback - no transaction is active")
            return real.execute(sql, *args)

    monkeypatch.setattr(store, "_db", FullDisk())
    with pytest.raises(StoreError, match="disk is full"):
        store.save_changes("call-1-abc", b"{}", [("transcript", b"1")], base=0, turn=1, leg=1, provider_call_id=None)
    if real.in_transaction:
        real.execute("ROLLBACK")
    real.close()


async def test_an_older_leg_ending_late_leaves_the_newer_legs_saves_alone(store: CallStore) -> None:
    from voice_agent.telephony.persistence import CallPersistence

    persistence = CallPersistence(store)
    call = await played(6)
    assert await persistence.save(call.session, leg=2, provider_call_id="CA1")
    persistence.forget(call.session.call_id, 1)  # leg 1's teardown on this worker, late
    before = persistence.stats.last_bytes
    await run_text_call(call.session, call.llm, LINES[6:7])
    assert await persistence.save(call.session, leg=2, provider_call_id="CA1")
    assert persistence.stats.last_bytes < before  # it appended one turn, not the whole call again
    persistence.forget(call.session.call_id, 2)
    assert await persistence.save(call.session, leg=3, provider_call_id="CA1")
