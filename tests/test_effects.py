"""Exactly-once effects: a mutating call a dead leg made is never run again by the next leg.

A worker killed after ``issue_credit`` ran, before the call's state was saved, leaves a resumed leg whose
model asks for the same credit again. Each leg here is a fresh session with a fresh billing backend (as a
resumed leg on another worker has); the effect log is the call store, real SQLite and a real redis-server.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from voice_agent.call.factory import build_call
from voice_agent.call.session import CallSession
from voice_agent.core.effects import Effect, MemoryEffectLog, effect_key
from voice_agent.core.transcript import EntryKind, ToolOutcome
from voice_agent.settings import Settings, with_overrides
from voice_agent.store import CallStore, open_store
from voice_agent.store.codec import decode, encode, restore
from voice_agent.telephony.persistence import StoreEffectLog

SETTINGS = with_overrides(Settings(), call={"reference_date": dt.date(2026, 11, 30)},
                          summarizer={"kind": "extractive"})
CALL = "call-3-abcdef"
CREDIT = {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "amount": "19.99"}


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CallStore]:
    if request.param == "sqlite":
        opened = open_store("sqlite", path=tmp_path / "calls.sqlite3")
        assert opened is not None
        yield opened
        opened.close()
        return
    opened = open_store("redis", url=request.getfixturevalue("redis_url"))
    assert opened is not None
    yield opened
    opened.close()


async def leg_one() -> tuple[CallSession, bytes]:
    """The first leg up to the caller's request: its state as saved when the turn opened."""
    session = build_call(SETTINGS, CALL).session
    await session.begin_turn("My account is ACC-4729-18, I was charged twice in October.")
    await session.execute_tool("lookup_account", "c1", {"account_id": "ACC-4729-18"})
    await session.execute_tool("list_invoices", "c2", {"account_id": "ACC-4729-18"})
    await session.begin_turn("Yes please, credit the 19.99 back.")
    return session, encode(session)


def resumed(saved: bytes) -> CallSession:
    """The next leg on another worker: a fresh session and backend, the state saved before the credit ran."""
    session = build_call(SETTINGS, CALL).session
    restore(session, decode(saved, call_id=CALL))
    return session


def credits(session: CallSession) -> list[Any]:
    return list(session.domain.extra["backend"].credits)


def test_the_effect_key_is_the_call_the_tool_and_its_arguments() -> None:
    key = effect_key(CALL, "issue_credit", CREDIT)
    assert key == effect_key(CALL, "issue_credit", dict(reversed(list(CREDIT.items()))))
    assert key != effect_key(CALL, "issue_credit", {**CREDIT, "amount": "20.00"})
    assert key != effect_key("call-4-abcdef", "issue_credit", CREDIT)


async def test_a_credit_the_dead_leg_made_is_not_made_again(store: CallStore) -> None:
    first, saved = await leg_one()
    first.effects = StoreEffectLog(store, CALL, 1)
    made = await first.execute_tool("issue_credit", "c3", CREDIT)
    assert made.get("credit_id") and len(credits(first)) == 1
    # The worker dies here: the state saved before the credit is all the next leg has.
    second = resumed(saved)
    second.effects = StoreEffectLog(store, CALL, 2)
    again = await second.execute_tool("issue_credit", "r1", CREDIT)
    assert again == made and credits(second) == []  # the recorded result; nothing run on the new leg
    assert second.effects_replayed == ["issue_credit"]
    last = second.state.transcript.entries[-1]
    assert last.kind is EntryKind.TOOL_RESULT and last.outcome is ToolOutcome.COMPLETED and last.result == made
    # Another credit (other arguments) still runs.
    other = await second.execute_tool("issue_credit", "r2", {**CREDIT, "amount": "5.00"})
    assert other.get("credit_id") and len(credits(second)) == 1


def begun_on_leg_one(store: CallStore) -> str:
    key = effect_key(CALL, "issue_credit", CREDIT)
    assert store.begin_effect(CALL, key, Effect(key, "issue_credit", "begun", 1).to_json()) is None
    return key


async def test_a_credit_begun_by_a_dead_leg_that_the_backend_never_received_runs_once_now(store: CallStore) -> None:
    _, saved = await leg_one()
    key = begun_on_leg_one(store)
    second = resumed(saved)  # its backend holds what the call store saved: no credit with this key
    second.effects = StoreEffectLog(store, CALL, 2)
    result = await second.execute_tool("issue_credit", "r1", CREDIT)
    assert result.get("credit_id") and len(credits(second)) == 1 and second.effects_unknown == []
    assert Effect.from_json(key, store.begin_effect(CALL, key, "{}") or "").state == "done"
    assert await second.execute_tool("issue_credit", "r2", CREDIT) == result  # and never twice
    assert len(credits(second)) == 1


async def test_a_credit_begun_by_a_dead_leg_that_the_backend_made_is_learned_not_run_again(store: CallStore) -> None:
    first, _ = await leg_one()
    first.effects = MemoryEffectLog()  # the credit runs on leg one; the call store only saw it begin
    made = await first.execute_tool("issue_credit", "c3", CREDIT)
    key = begun_on_leg_one(store)
    second = resumed(encode(first))  # the backend kept the credit (the state was saved after it ran)
    second.effects = StoreEffectLog(store, CALL, 2)
    again = await second.execute_tool("issue_credit", "r1", CREDIT)
    assert again == made and len(credits(second)) == 1 and second.effects_replayed == ["issue_credit"]
    assert Effect.from_json(key, store.begin_effect(CALL, key, "{}") or "").result == made


async def test_a_credit_begun_by_a_dead_leg_is_not_run_blind_when_the_backend_cannot_tell(store: CallStore) -> None:
    _, saved = await leg_one()
    begun_on_leg_one(store)
    second = resumed(saved)
    second.domain = dataclasses.replace(second.domain, outcome_of=None)
    second.effects = StoreEffectLog(store, CALL, 2)
    result = await second.execute_tool("issue_credit", "r1", CREDIT)
    assert result["status"] == "unknown" and "not run again" in result["error"]
    assert credits(second) == [] and second.effects_unknown == ["issue_credit"]
    assert second.state.transcript.entries[-1].outcome is ToolOutcome.FAILED


async def test_a_backend_that_fails_to_answer_leaves_the_outcome_unknown(store: CallStore) -> None:
    _, saved = await leg_one()
    begun_on_leg_one(store)
    second = resumed(saved)

    async def down(tool: str, key: str) -> Any:
        raise ConnectionError("billing API unreachable")

    second.domain = dataclasses.replace(second.domain, outcome_of=down)
    second.effects = StoreEffectLog(store, CALL, 2)
    result = await second.execute_tool("issue_credit", "r1", CREDIT)
    assert result["status"] == "unknown" and credits(second) == []


async def test_a_credit_the_backend_refused_may_be_asked_for_again() -> None:
    session, _ = await leg_one()
    log = MemoryEffectLog()
    session.effects = log
    too_much = {**CREDIT, "amount": "500.00"}
    refused = await session.execute_tool("issue_credit", "c3", too_much)
    assert refused["status"] == "error" and log.effects == {}  # forgotten: it did nothing
    assert (await session.execute_tool("issue_credit", "c4", too_much))["status"] == "error"
    assert session.effects_replayed == [] and credits(session) == []


async def test_a_store_that_fails_lets_the_call_go_on(tmp_path: Path) -> None:
    from .test_resume import BrokenStore

    session, _ = await leg_one()
    session.effects = StoreEffectLog(BrokenStore(), CALL, 1)
    made = await session.execute_tool("issue_credit", "c3", CREDIT)
    assert made.get("credit_id") and len(credits(session)) == 1  # run unchecked (at least once), logged


def test_arguments_are_compared_as_values_not_spellings() -> None:
    from voice_agent.domains.billing.tools import ISSUE_CREDIT

    key = effect_key(CALL, "issue_credit", CREDIT, ISSUE_CREDIT)
    for spelled in ({**CREDIT, "amount": 19.99}, {**CREDIT, "amount": "19.990"}, {**CREDIT, "order_id": None},
                    {**CREDIT, "invoice_id": " INV-2026-1018 "}):
        assert effect_key(CALL, "issue_credit", spelled, ISSUE_CREDIT) == key, spelled
    assert effect_key(CALL, "issue_credit", {**CREDIT, "amount": "19.98"}, ISSUE_CREDIT) != key


class SlowLog(MemoryEffectLog):
    """An effect log whose writes wait for a signal each (a store far away)."""

    def __init__(self) -> None:
        super().__init__()
        import asyncio

        self.begin_go, self.finish_go = asyncio.Event(), asyncio.Event()

    async def begin(self, key: str, tool: str) -> Effect | None:
        await self.begin_go.wait()
        return await super().begin(key, tool)

    async def finish(self, key: str, tool: str, result: Any) -> None:
        await self.finish_go.wait()
        await super().finish(key, tool, result)


async def test_a_barge_in_before_the_credit_ran_leaves_it_free_to_run() -> None:
    import asyncio

    session, _ = await leg_one()
    log = SlowLog()
    log.finish_go.set()
    session.effects = log
    attempt = asyncio.ensure_future(session.execute_tool("issue_credit", "c3", CREDIT))
    await asyncio.sleep(0.05)
    attempt.cancel()  # the caller spoke while the store was being asked
    log.begin_go.set()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    for _ in range(50):
        if not log.effects:
            break
        await asyncio.sleep(0.01)
    assert log.effects == {} and credits(session) == []  # given back: it never ran
    made = await session.execute_tool("issue_credit", "c4", CREDIT)
    assert made.get("credit_id") and len(credits(session)) == 1


async def test_a_credit_that_ran_is_recorded_even_when_the_turn_is_cancelled_meanwhile() -> None:
    import asyncio

    session, _ = await leg_one()
    log = SlowLog()
    session.effects = log
    log.begin_go.set()
    attempt = asyncio.ensure_future(session.execute_tool("issue_credit", "c3", CREDIT))
    await asyncio.sleep(0.05)  # the credit ran; its result waits to be recorded
    assert len(credits(session)) == 1
    attempt.cancel()  # the caller spoke
    log.finish_go.set()
    await asyncio.gather(attempt, return_exceptions=True)
    await asyncio.sleep(0.05)
    key = effect_key(CALL, "issue_credit", CREDIT, session.domain.tool("issue_credit"))
    assert log.effects[key].state == "done"  # recorded all the same: the next leg will not run it again


@pytest.mark.parametrize("backend_can_tell", [True, False])
async def test_a_credit_that_failed_without_a_refusal_is_never_run_blind_again(backend_can_tell: bool) -> None:
    session, _ = await leg_one()
    session.effects = MemoryEffectLog()
    backend = session.domain.extra["backend"]
    issue_credit = session.domain.handlers["issue_credit"]

    async def applied_then_timed_out(arguments: dict[str, Any], state: Any) -> dict[str, Any]:
        await issue_credit(arguments, state)
        raise TimeoutError("the billing system did not answer in time")

    session.domain.handlers["issue_credit"] = applied_then_timed_out  # type: ignore[index]  # this call's own domain
    if not backend_can_tell:
        session.domain = dataclasses.replace(session.domain, outcome_of=None)
    assert (await session.execute_tool("issue_credit", "c3", CREDIT))["status"] == "error"
    again = await session.execute_tool("issue_credit", "c4", CREDIT)
    assert len(backend.credits) == 1  # it went through: never a second credit
    if backend_can_tell:
        assert again.get("credit_id") == backend.credits[0]["credit_id"]  # learned from the backend
    else:
        assert again["status"] == "unknown"
