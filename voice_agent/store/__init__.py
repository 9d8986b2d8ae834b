"""Durable call state: a call's lanes survive the worker that ran them (SQLite or Redis)."""

from voice_agent.store.base import CallStore, StoredCall, StoreError, UnreadableCall, open_store
from voice_agent.store.codec import SCHEMA_VERSION, StateError, decode, encode, restore, snapshot

__all__ = [
    "SCHEMA_VERSION",
    "CallStore",
    "StateError",
    "StoreError",
    "StoredCall",
    "UnreadableCall",
    "decode",
    "encode",
    "open_store",
    "restore",
    "snapshot",
]
