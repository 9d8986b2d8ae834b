"""The SQLite call store: one embedded file in WAL mode, the default for a single worker.

Each save is one ``INSERT ... ON CONFLICT DO UPDATE`` in its own transaction: SQLite's journal
makes it all or nothing, so a process killed mid-write leaves the previous state, which loads.
``synchronous=NORMAL`` with WAL survives any process crash; a power loss may lose the last turns'
writes, never the file's consistency.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from voice_agent.store.base import CallStore, StoredCall, StoreError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY,
    provider_call_id TEXT,
    leg INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'live',
    end_how TEXT NOT NULL DEFAULT '',
    data BLOB NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS calls_by_provider_call ON calls (provider_call_id);
"""


class SQLiteCallStore(CallStore):
    """Call states in one SQLite file.

    Args:
        path: The database file (its directory is created ``0700``).
        retention_secs: Rows not written for this long are deleted when the store opens.

    Raises:
        StoreError: The file cannot be opened or is not a database.
    """

    backend = "sqlite"

    def __init__(self, path: Path, *, retention_secs: float = 86400.0) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Callers' words live here: the file is the owner's alone (SQLite gives its -wal and -shm files the
            # database file's mode), whatever the umask.
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
            os.chmod(path, 0o600)
            # One connection shared by the worker threads the server calls from, behind a lock.
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.execute("DELETE FROM calls WHERE updated < ?", (time.time() - retention_secs,))
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"sqlite store {path}: {exc}") from None

    def save(self, call_id: str, data: bytes, *, turn: int, leg: int, provider_call_id: str | None) -> bool:
        """See :meth:`CallStore.save`."""
        try:
            with self._lock:
                cursor = self._db.execute(
                    "INSERT INTO calls (call_id, provider_call_id, leg, turn, status, data, updated) "
                    "VALUES (?, ?, ?, ?, 'live', ?, ?) "
                    "ON CONFLICT (call_id) DO UPDATE SET provider_call_id = excluded.provider_call_id, "
                    "leg = excluded.leg, turn = excluded.turn, data = excluded.data, updated = excluded.updated "
                    "WHERE excluded.leg >= calls.leg AND calls.status = 'live'",
                    (call_id, provider_call_id, leg, turn, data, time.time()),
                )
                return cursor.rowcount == 1
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: save failed: {exc}") from None

    def _row(self, where: str, value: str) -> StoredCall | None:
        try:
            with self._lock:
                row = self._db.execute(
                    "SELECT call_id, provider_call_id, leg, turn, status, end_how, data, updated FROM calls "
                    f"WHERE {where} = ? ORDER BY updated DESC LIMIT 1", (value,),
                ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: read failed: {exc}") from None
        if row is None:
            return None
        return StoredCall(row[0], row[1], int(row[2]), int(row[3]), row[4], row[5], bytes(row[6]), float(row[7]))

    def load(self, call_id: str) -> StoredCall | None:
        """See :meth:`CallStore.load`."""
        return self._row("call_id", call_id)

    def find(self, provider_call_id: str) -> StoredCall | None:
        """See :meth:`CallStore.find`."""
        return self._row("provider_call_id", provider_call_id)

    def end(self, call_id: str, how: str, *, leg: int | None = None) -> None:
        """See :meth:`CallStore.end`."""
        try:
            with self._lock:
                self._db.execute("UPDATE calls SET status = 'ended', end_how = ?, updated = ? "
                                 "WHERE call_id = ? AND (? IS NULL OR leg <= ?)",
                                 (how, time.time(), call_id, leg, leg))
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: end failed: {exc}") from None

    def close(self) -> None:
        """See :meth:`CallStore.close`."""
        with self._lock:
            self._db.close()
