"""Durable call state: a call's lanes survive the worker that ran them (SQLite or Redis).

The codec (``encode``, ``decode``, ``restore``, ...) is loaded on first use: the SQLite store's own process
imports the store alone, not the call it stores.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from voice_agent.store.base import CallStore, StoredCall, StoreError, UnreadableCall, open_store

if TYPE_CHECKING:
    from voice_agent.store.codec import SCHEMA_VERSION as SCHEMA_VERSION
    from voice_agent.store.codec import StateError as StateError
    from voice_agent.store.codec import decode as decode
    from voice_agent.store.codec import encode as encode
    from voice_agent.store.codec import restore as restore
    from voice_agent.store.codec import snapshot as snapshot

_CODEC = ("SCHEMA_VERSION", "StateError", "decode", "encode", "restore", "snapshot")

__all__ = ["CallStore", "StoreError", "StoredCall", "UnreadableCall", "open_store", *_CODEC]


def __getattr__(name: str) -> Any:
    """Loads a codec name on first use."""
    if name not in _CODEC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("voice_agent.store.codec"), name)
