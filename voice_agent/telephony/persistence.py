"""The served call and the call store: save after every turn, find a call the provider brings back, restore it.

Nothing here may take a call down: a store that fails is logged and the call goes on in memory; a
stored state that does not load is logged with its reason and the call starts fresh.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from loguru import logger

from voice_agent.call.session import CallSession
from voice_agent.core.effects import Effect
from voice_agent.store.base import CallStore, ItemsOutOfStep, StoredCall, StoreError, UnreadableCall
from voice_agent.store.codec import APPENDED, StateError, counts, decode, decode_changes, encode_changes, restore


@dataclass
class SaveStats:
    """What the saves of one worker cost (for logs and the benchmark).

    Attributes:
        saves: States written.
        refused: Saves refused because a later leg owns the call.
        failures: Saves that failed (store unreachable).
        last_bytes: Size of the last state written.
        total_secs: Time spent writing.
    """

    saves: int = 0
    refused: int = 0
    failures: int = 0
    last_bytes: int = 0
    total_secs: float = 0.0


@dataclass
class Restored:
    """The outcome of loading a call's stored state into a new session.

    Attributes:
        turn: The turn the state was saved at (0: nothing restored).
        left_open: Tool calls the stopped worker left without a result (now recorded as cancelled).
        problem: Why the state was not restored (the call started fresh), or None.
    """

    turn: int = 0
    left_open: list[str] = field(default_factory=list)
    problem: str | None = None


class StoreEffectLog:
    """A call's effect log in the call store (:class:`~voice_agent.core.effects.EffectLog`), shared by its legs.

    Args:
        store: The call store.
        call_id: The call.
        leg: This leg (recorded with each call it begins).
    """

    def __init__(self, store: CallStore, call_id: str, leg: int) -> None:
        self.store, self.call_id, self.leg = store, call_id, leg

    async def begin(self, key: str, tool: str) -> Effect | None:
        """See :meth:`EffectLog.begin`; a record that does not parse counts as begun (its outcome is unknown)."""
        found = await asyncio.to_thread(self.store.begin_effect, self.call_id, key,
                                        Effect(key, tool, "begun", self.leg).to_json())
        if found is None:
            return None
        try:
            return Effect.from_json(key, found)
        except ValueError as exc:
            logger.error("call {}: effect record unreadable ({}); treated as begun", self.call_id, exc)
            return Effect(key, tool, "begun", 0)

    async def finish(self, key: str, tool: str, result: Any) -> None:
        """See :meth:`EffectLog.finish`."""
        record = Effect(key, tool, "done", self.leg, result)
        await asyncio.to_thread(self.store.finish_effect, self.call_id, key, record.to_json())

    async def drop(self, key: str) -> None:
        """See :meth:`EffectLog.drop`."""
        await asyncio.to_thread(self.store.drop_effect, self.call_id, key)


class CallPersistence:
    """A worker's use of the call store.

    Args:
        store: The store (SQLite or Redis).
    """

    def __init__(self, store: CallStore) -> None:
        self.store = store
        self.stats = SaveStats()
        # Per call: how many items of each growing part the store holds (a save appends only what is past them).
        self._saved: dict[str, dict[str, int]] = {}
        self._saving: dict[str, asyncio.Lock] = {}
        self._renewal_failing = False
        self._legs: dict[str, int] = {}

    async def find(self, provider_call_id: str) -> StoredCall | StoreError | None:
        """The stored call the provider's call id names, None when there is none, or the store's error.

        A stored call that does not parse comes back as its :class:`UnreadableCall` error, and a store that
        cannot be read as its :class:`StoreError`: a call the provider brings back then starts fresh with a
        greeting rather than in silence.
        """
        try:
            return await asyncio.to_thread(self.store.find, provider_call_id)
        except UnreadableCall as exc:
            logger.error("call store: {}; the call starts fresh", exc)
            return exc
        except StoreError as exc:
            logger.error("call store: lookup failed: {}", exc)
            return exc

    async def save(self, session: CallSession, *, leg: int, provider_call_id: str | None) -> bool:
        """Writes what changed in the call's state since its last save: the bounded head and the items its growing
        parts gained (encoded on the event loop, one consistent moment; written in a thread). A call's saves run
        one at a time, in the order they were asked for."""
        call_id = session.call_id
        async with self._saving.setdefault(call_id, asyncio.Lock()):
            saved = self._saved.get(call_id, {})
            try:
                head, items = encode_changes(session, saved)
                now = counts(session)
            except (TypeError, ValueError) as exc:  # a value in the lanes that is not plain data: a bug, not a crash
                self.stats.failures += 1
                logger.error("call {}: state not encodable, not saved (the call goes on): {}", call_id, exc)
                return False
            started = time.perf_counter()
            try:
                try:
                    written = await asyncio.to_thread(partial(
                        self.store.save_changes, call_id, head, items, base=sum(saved.values()), turn=session.turn,
                        leg=leg, provider_call_id=provider_call_id))
                except ItemsOutOfStep as exc:
                    # The store lost what this worker had saved (a file replaced, a key gone): write it all again.
                    logger.error("call {}: {}; saving the whole call again", call_id, exc)
                    head, items = encode_changes(session, {})
                    written = await asyncio.to_thread(partial(
                        self.store.save_changes, call_id, head, items, base=0, turn=session.turn, leg=leg,
                        provider_call_id=provider_call_id))
            except StoreError as exc:
                self.stats.failures += 1
                logger.error("call {}: state not saved (the call goes on): {}", call_id, exc)
                return False
            self.stats.total_secs += time.perf_counter() - started
            self.stats.last_bytes = len(head) + sum(len(item) for _, item in items)
            if not written:
                self.stats.refused += 1
                logger.warning("call {}: state not saved: a later leg (another worker) owns the call now", call_id)
                return False
            self._saved[call_id] = now
            self._legs[call_id] = leg
            self.stats.saves += 1
            return True

    def forget(self, call_id: str, leg: int | None = None) -> None:
        """Drops what this worker knew of the call's saves (its leg here ended); with ``leg``, only when that leg is
        the one saving it (an older leg ending here late leaves a newer one's alone)."""
        if leg is not None and self._legs.get(call_id, leg) != leg:
            return
        self._saved.pop(call_id, None)
        self._saving.pop(call_id, None)
        self._legs.pop(call_id, None)

    async def open_leg(self, call_id: str, leg: int, *, provider_call_id: str | None, lease_secs: float,
                       resume_key: str, returning_key: str = "") -> bool | None:
        """Takes the call for this leg: True granted, False another leg holds it or it ended, None store failed."""
        try:
            return await asyncio.to_thread(partial(self.store.open_leg, call_id, leg, provider_call_id=provider_call_id,
                                                   lease_secs=lease_secs, resume_key=resume_key,
                                                   returning_key=returning_key))
        except Exception as exc:  # whatever the store does, the call goes on (in memory)
            logger.error("call {}: leg {} not recorded in the store (the call goes on in memory): {}", call_id, leg,
                         exc)
            return None

    async def renew(self, legs: list[tuple[str, int]], lease_secs: float) -> list[str]:
        """Renews this worker's leases; the call ids whose leg lost the call (none when the store failed)."""
        if not legs:
            return []
        try:
            lost = await asyncio.to_thread(self.store.renew, legs, lease_secs)
        except StoreError as exc:
            if not self._renewal_failing:  # once until it works again, not every few seconds
                logger.error("call store: lease renewal failed (the calls go on; logged again when it recovers): {}",
                             exc)
            self._renewal_failing = True
            return []
        if self._renewal_failing:
            logger.info("call store: lease renewal works again")
        self._renewal_failing = False
        return lost

    async def close_leg(self, call_id: str, leg: int) -> None:
        """Gives the call up at the end of this leg's stream, so its next leg may open at once."""
        try:
            await asyncio.to_thread(self.store.close_leg, call_id, leg)
        except StoreError as exc:
            logger.error("call {}: leg {} not closed in the store (its lease will lapse): {}", call_id, leg, exc)

    async def end(self, call_id: str, how: str, *, leg: int | None = None) -> None:
        """Marks the call ended in the store (it will not be resumed), unless a later leg owns it."""
        try:
            await asyncio.to_thread(partial(self.store.end, call_id, how, leg=leg))
        except StoreError as exc:
            logger.error("call {}: not marked ended in the store: {}", call_id, exc)

    def restore(self, session: CallSession) -> Restored:
        """Loads the stored state of ``session``'s call into it (blocking: run it in a thread).

        A state that does not load leaves the session fresh; the reason is logged and returned.
        """
        try:
            stored = self.store.load(session.call_id)
        except StoreError as exc:
            return self._fresh(session, f"the store failed ({exc})")
        if stored is None or not stored.data:  # no data: the leg was opened, the worker died before a save
            return self._fresh(session, "no stored state (expired or never written)")
        try:
            state = decode(stored.data, call_id=session.call_id)
            if "transcript" not in state:  # a head: saves of changes wrote it (its items may be none yet)
                state = decode_changes(stored.data, stored.items, call_id=session.call_id)
            left_open = restore(session, state)
        except StateError as exc:
            return self._fresh(session, str(exc))
        except Exception as exc:  # whatever a stored state does, the call starts (fresh) rather than fails
            logger.exception("call {}: restoring the stored state failed", session.call_id)
            return self._fresh(session, f"restore failed ({type(exc).__name__}: {exc})")
        # The next save appends after the items stored (a state saved whole: it writes them all once).
        self._saved[session.call_id] = {part: sum(1 for p, _ in stored.items if p == part) for part in APPENDED}
        logger.info("call {}: resumed at turn {} (leg {} saved it){}", session.call_id, stored.turn, stored.leg,
                    f"; {len(left_open)} open tool call(s) recorded as cancelled" if left_open else "")
        return Restored(turn=session.turn, left_open=left_open)

    @staticmethod
    def _fresh(session: CallSession, problem: str) -> Restored:
        logger.error("call {}: state not restored, the call starts fresh: {}", session.call_id, problem)
        return Restored(problem=problem)

    def close(self) -> None:
        """Closes the store."""
        self.store.close()
