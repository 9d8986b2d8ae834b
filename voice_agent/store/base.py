"""The call store interface, shared by the SQLite and the Redis backend.

A store keeps one row per call: its id, the provider's call id (to find it again when the provider
comes back to ``/voice``), the leg (how many workers the call has run on, from 1), the last saved
turn, whether the call is ``live`` or ``ended``, and the encoded state (:mod:`voice_agent.store.codec`).

Every save is one atomic operation (one SQLite transaction, one Redis script), so a reader sees the
previous state or the new one, never a mix. A served call saves what changed (:meth:`CallStore.save_changes`):
the bounded head of its state and the items its growing parts (the transcript, the logs) gained since the
last save, so a save costs the same at turn 1,000 as at turn 10. A save from an older leg
than the stored one is refused: a worker that lost the call (a network split, a slow drain) cannot
overwrite what the worker now running it wrote.

Beside the state, each call keeps its **effects**: one record per mutating tool call, keyed by the call's
effect key (:mod:`voice_agent.core.effects`), so a leg never runs again what an earlier leg ran.

A leg runs under a **lease**: the worker whose stream starts opens the leg (:meth:`CallStore.open_leg`),
renews its lease while the stream runs and closes it when the stream ends. Only one leg holds a call at
a time: a new leg opens only once the previous one closed or its lease lapsed (its worker died), so a
replayed webhook cannot start a second leg beside the live one.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CallStatus = Literal["live", "ended"]


class StoreError(RuntimeError):
    """The store cannot be reached or written (one line: what and why)."""


class ItemsOutOfStep(StoreError):
    """A save of changes whose base is past the items the store holds (they were lost or replaced): save again
    from no base, with every item."""


class UnreadableCall(StoreError):
    """A stored call whose fields do not parse (a corrupted row or hash): the call starts fresh."""


@dataclass(frozen=True)
class StoredCall:
    """One call as the store holds it.

    Attributes:
        call_id: Our call id.
        provider_call_id: The provider's call id (``CallSid``, ``call_control_id``, ``CallUUID``).
        leg: The worker leg that wrote it (1 for the first worker, +1 per resume).
        turn: The last turn saved.
        status: ``live`` (may be resumed) or ``ended`` (hung up or finished: never resumed).
        end: How it ended, when ended.
        data: The encoded state.
        updated: When it was written (epoch seconds).
        lease_until: Until when the leg running the call holds it (epoch seconds; 0: no leg runs it now).
        resume_key: The secret the latest leg gave the provider to come back with (in its action URL): only a
            request carrying it may resume the call ("": none recorded).
        items: What saves of the changes appended, in order, ``(part, item)``; ``data`` is then their head
            (:func:`voice_agent.store.codec.decode_changes`). Empty for a state saved whole.
    """

    call_id: str
    provider_call_id: str | None
    leg: int
    turn: int
    status: CallStatus
    end: str
    data: bytes
    updated: float
    lease_until: float = 0.0
    resume_key: str = ""
    items: tuple[tuple[str, bytes], ...] = ()

    def held(self, now: float) -> bool:
        """Whether a leg is running the call now (its lease has not lapsed)."""
        return self.status == "live" and self.lease_until > now


class CallStore(ABC):
    """Where call states live between turns and between workers. Methods block: call them off the event loop."""

    backend: str = "none"

    @abstractmethod
    def save(self, call_id: str, data: bytes, *, turn: int, leg: int, provider_call_id: str | None) -> bool:
        """Writes the call's state atomically; False (nothing written) when a later leg owns the call.

        Raises:
            StoreError: The store failed.
        """

    @abstractmethod
    def save_changes(self, call_id: str, head: bytes, items: list[tuple[str, bytes]], *, base: int, turn: int,
                     leg: int, provider_call_id: str | None) -> bool:
        """Writes the call's head and appends ``items`` after the first ``base`` stored ones, atomically; False
        (nothing written) when a later leg owns the call. Items past ``base`` (a save that was written but
        reported failed) are replaced, so a save may be retried. :meth:`save` (a whole state) clears the items.

        Raises:
            ItemsOutOfStep: The store holds fewer than ``base`` items (a file replaced, a key lost, a whole save
                between): nothing written.
            StoreError: The store failed.
        """

    @abstractmethod
    def load(self, call_id: str) -> StoredCall | None:
        """The call's stored state, or None."""

    @abstractmethod
    def find(self, provider_call_id: str) -> StoredCall | None:
        """The call stored under the provider's call id, or None."""

    @abstractmethod
    def end(self, call_id: str, how: str, *, leg: int | None = None) -> None:
        """Marks the call ended (``how``: the record's end, e.g. ``hung up``): it is never resumed.

        With ``leg``, only when no later leg holds the call: a worker that lost the call cannot end it
        under a leg now running it, but the end of a leg that lost its right to save is still recorded
        when no other leg runs the call.
        """

    @abstractmethod
    def open_leg(self, call_id: str, leg: int, *, provider_call_id: str | None, lease_secs: float,
                 resume_key: str = "", returning_key: str = "") -> bool:
        """Takes the call for ``leg`` under a lease, recording its ``resume_key``; False when it cannot be taken.

        Granted to the first leg of a call the store does not know (unless another live call holds the
        same provider call id), or to a later leg of a live call once the previous leg closed its lease
        or let it lapse, or at once when ``returning_key`` is the previous leg's resume key: only the
        provider knows it, and it asks for the action URL when that leg's stream has ended (a worker
        killed, a half-open connection), so the previous leg's lease no longer stands. Refused while
        another leg holds it, for an ended call, and for a leg that is not later than the stored one.

        Raises:
            StoreError: The store failed.
        """

    @abstractmethod
    def renew(self, legs: list[tuple[str, int]], lease_secs: float) -> list[str]:
        """Extends the leases of ``(call id, leg)`` pairs this worker runs; the call ids whose leg lost the call.

        Raises:
            StoreError: The store failed.
        """

    @abstractmethod
    def close_leg(self, call_id: str, leg: int) -> None:
        """Gives up the lease of ``leg`` (its stream ended; the call may resume on a next leg at once).

        Raises:
            StoreError: The store failed.
        """

    @abstractmethod
    def begin_effect(self, call_id: str, key: str, record: str) -> str | None:
        """Records a mutating call's ``record`` (:class:`~voice_agent.core.effects.Effect` JSON) under ``key``
        unless one is there: None when this attempt took the key, else the record found (one atomic step).

        Raises:
            StoreError: The store failed.
        """

    @abstractmethod
    def finish_effect(self, call_id: str, key: str, record: str) -> None:
        """Replaces the record under ``key`` (the call's result).

        Raises:
            StoreError: The store failed.
        """

    @abstractmethod
    def drop_effect(self, call_id: str, key: str) -> None:
        """Forgets the record under ``key``.

        Raises:
            StoreError: The store failed.
        """

    @abstractmethod
    def close(self) -> None:
        """Releases connections."""


def default_sqlite_path() -> Path:
    """``$XDG_STATE_HOME/voice-agent/call-state.sqlite3`` (``~/.local/state`` when unset)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "voice-agent" / "call-state.sqlite3"


def open_store(backend: str, *, path: Path | str | None = None, url: str | None = None,
               retention_secs: float = 86400.0) -> CallStore | None:
    """The store the settings name; None for ``none``.

    Args:
        backend: ``sqlite``, ``redis`` or ``none``.
        path: The SQLite file (default :func:`default_sqlite_path`).
        url: The Redis URL (``redis://host:port/db``).
        retention_secs: How long a call's state is kept after its last write.

    Raises:
        StoreError: The store cannot be opened, in one line.
    """
    if backend == "none":
        return None
    if backend == "sqlite":
        # In a child process of its own: a fault in SQLite's shared memory (SIGBUS) ends that process, not the worker.
        from voice_agent.store.sqlite_process import IsolatedSQLiteStore

        return IsolatedSQLiteStore(Path(path) if path is not None else default_sqlite_path(),
                                   retention_secs=retention_secs)
    if backend == "redis":
        from voice_agent.extras import need

        need("telephony", "the redis call store")  # redis-py comes with the telephony extra
        from voice_agent.store.redis import RedisCallStore

        if not url:
            raise StoreError("the redis store needs a url (store.url, e.g. redis://127.0.0.1:6379/0)")
        return RedisCallStore(url, retention_secs=retention_secs)
    raise StoreError(f"unknown store backend {backend!r}: use sqlite, redis or none")
