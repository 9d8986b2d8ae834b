"""The call store interface, shared by the SQLite and the Redis backend.

A store keeps one row per call: its id, the provider's call id (to find it again when the provider
comes back to ``/voice``), the leg (how many workers the call has run on, from 1), the last saved
turn, whether the call is ``live`` or ``ended``, and the encoded state (:mod:`voice_agent.store.codec`).

Every save replaces the whole state in one atomic operation (one SQLite transaction, one Redis
script), so a reader sees the previous state or the new one, never a mix. A save from an older leg
than the stored one is refused: a worker that lost the call (a network split, a slow drain) cannot
overwrite what the worker now running it wrote.
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
    """

    call_id: str
    provider_call_id: str | None
    leg: int
    turn: int
    status: CallStatus
    end: str
    data: bytes
    updated: float


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
    def load(self, call_id: str) -> StoredCall | None:
        """The call's stored state, or None."""

    @abstractmethod
    def find(self, provider_call_id: str) -> StoredCall | None:
        """The call stored under the provider's call id, or None."""

    @abstractmethod
    def end(self, call_id: str, how: str, *, leg: int | None = None) -> None:
        """Marks the call ended (``how``: the record's end, e.g. ``hung up``): it is never resumed.

        With ``leg``, only when no later leg owns the call: a worker that lost the call cannot end it
        under the worker now running it.
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
        from voice_agent.store.sqlite import SQLiteCallStore

        return SQLiteCallStore(Path(path) if path is not None else default_sqlite_path(), retention_secs=retention_secs)
    if backend == "redis":
        from voice_agent.extras import need

        need("telephony", "the redis call store")  # redis-py comes with the telephony extra
        from voice_agent.store.redis import RedisCallStore

        if not url:
            raise StoreError("the redis store needs a url (store.url, e.g. redis://127.0.0.1:6379/0)")
        return RedisCallStore(url, retention_secs=retention_secs)
    raise StoreError(f"unknown store backend {backend!r}: use sqlite, redis or none")
