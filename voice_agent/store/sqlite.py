"""The SQLite call store: one embedded file in WAL mode, the default for a single worker.

Each save is one ``INSERT ... ON CONFLICT DO UPDATE`` in its own transaction: SQLite's journal
makes it all or nothing, so a process killed mid-write leaves the previous state, which loads.
``synchronous=NORMAL`` with WAL survives any process crash; a power loss may lose the last turns'
writes, never the file's consistency.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path

from loguru import logger

from voice_agent.store.base import CallStore, ItemsOutOfStep, StoredCall, StoreError, UnreadableCall

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY,
    provider_call_id TEXT,
    leg INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'live',
    end_how TEXT NOT NULL DEFAULT '',
    data BLOB NOT NULL,
    updated REAL NOT NULL,
    lease_until REAL NOT NULL DEFAULT 0,
    resume_key TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS calls_by_provider_call ON calls (provider_call_id);
CREATE TABLE IF NOT EXISTS call_items (
    call_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    part TEXT NOT NULL,
    item BLOB NOT NULL,
    PRIMARY KEY (call_id, seq)
);
CREATE TABLE IF NOT EXISTS effects (
    call_id TEXT NOT NULL,
    key TEXT NOT NULL,
    record TEXT NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (call_id, key)
);
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
        self._reopen_problem = ""
        self._db, self._identity = self._open(path, retention_secs)

    @staticmethod
    def _open(path: Path, retention_secs: float) -> tuple[sqlite3.Connection, tuple[int, int]]:
        try:
            home = path.parent
            for directory in reversed([home, *home.parents]):
                if not directory.exists():  # each directory made here is the owner's alone, whatever the umask
                    directory.mkdir(mode=0o700)
                    os.chmod(directory, 0o700)
            # Callers' words live here: the file is the owner's alone (SQLite gives its -wal and -shm files the
            # database file's mode), whatever the umask.
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
            os.chmod(path, 0o600)
            # One connection shared by the worker threads the server calls from, behind a lock.
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
            if "lease_until" not in columns:  # a file written before leases
                db.execute("ALTER TABLE calls ADD COLUMN lease_until REAL NOT NULL DEFAULT 0")
            if "resume_key" not in columns:
                db.execute("ALTER TABLE calls ADD COLUMN resume_key TEXT NOT NULL DEFAULT ''")
            db.execute("DELETE FROM calls WHERE updated < ?", (time.time() - retention_secs,))
            db.execute("DELETE FROM effects WHERE updated < ?", (time.time() - retention_secs,))
            db.execute("DELETE FROM call_items WHERE call_id NOT IN (SELECT call_id FROM calls)")
            stat = os.stat(path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"sqlite store {path}: {exc}") from None
        return db, (stat.st_dev, stat.st_ino)

    def _same_file(self) -> None:
        """Reopens the store when its file was deleted or replaced under it (call under the lock).

        SQLite keeps writing into a deleted file without an error, and no other process would ever read
        those saves; a new file at the path keeps the next saves resumable (the first finds the call's items
        missing, :class:`ItemsOutOfStep`, and its worker writes the whole call again).
        """
        try:
            stat = os.stat(self.path)
            if (stat.st_dev, stat.st_ino) == self._identity:
                return
            why = "replaced"
        except FileNotFoundError:
            why = "deleted"
        except OSError as exc:
            raise StoreError(f"sqlite store {self.path}: cannot check the file: {exc}") from None
        if self._reopen_problem != why:  # once per change, not at every save and renewal of every call
            logger.error("sqlite store {}: the file was {} while in use; reopening it (each call's next save writes "
                         "the whole call again)", self.path, why)
        self._reopen_problem = why
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self._db, self._identity = self._open(self.path, retention_secs=float("inf"))
        self._reopen_problem = ""

    def save(self, call_id: str, data: bytes, *, turn: int, leg: int, provider_call_id: str | None) -> bool:
        """See :meth:`CallStore.save`."""
        return self._write(call_id, data, None, 0, turn=turn, leg=leg, provider_call_id=provider_call_id)

    def save_changes(self, call_id: str, head: bytes, items: list[tuple[str, bytes]], *, base: int, turn: int,
                     leg: int, provider_call_id: str | None) -> bool:
        """See :meth:`CallStore.save_changes`."""
        return self._write(call_id, head, items, base, turn=turn, leg=leg, provider_call_id=provider_call_id)

    def _write(self, call_id: str, data: bytes, items: list[tuple[str, bytes]] | None, base: int, *, turn: int,
               leg: int, provider_call_id: str | None) -> bool:
        try:
            with self._lock:
                self._same_file()
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    if items is not None and base > 0:
                        held = self._db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM call_items WHERE call_id = ?",
                                                (call_id,)).fetchone()[0]
                        if held < base:
                            raise ItemsOutOfStep(f"sqlite store {self.path}: call {call_id} holds {held} items, "
                                                 f"the save appends after {base}")
                    cursor = self._db.execute(
                        "INSERT INTO calls (call_id, provider_call_id, leg, turn, status, data, updated) "
                        "VALUES (?, ?, ?, ?, 'live', ?, ?) "
                        "ON CONFLICT (call_id) DO UPDATE SET provider_call_id = excluded.provider_call_id, "
                        "leg = excluded.leg, turn = excluded.turn, data = excluded.data, updated = excluded.updated "
                        "WHERE excluded.leg >= calls.leg AND calls.status = 'live'",
                        (call_id, provider_call_id, leg, turn, data, time.time()),
                    )
                    written = cursor.rowcount == 1
                    if written:
                        # A whole state replaces every item; changes replace what lies past ``base``.
                        self._db.execute("DELETE FROM call_items WHERE call_id = ? AND seq >= ?",
                                         (call_id, 0 if items is None else base))
                        self._db.executemany(
                            "INSERT INTO call_items (call_id, seq, part, item) VALUES (?, ?, ?, ?)",
                            [(call_id, base + n, part, item) for n, (part, item) in enumerate(items or [])])
                    self._db.execute("COMMIT")
                except BaseException:
                    # SQLite may have rolled back itself (a full disk): its own error is the one to report.
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                    raise
                return written
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: save failed: {exc}") from None

    def _row(self, where: str, value: str) -> StoredCall | None:
        try:
            with self._lock:
                self._same_file()  # another process may have recreated the file: read the one at the path
                self._db.execute("BEGIN")  # the row and its items from one moment, whoever writes meanwhile
                try:
                    row = self._db.execute(
                        "SELECT call_id, provider_call_id, leg, turn, status, end_how, data, updated, lease_until, "
                        "resume_key "
                        f"FROM calls WHERE {where} = ? ORDER BY updated DESC LIMIT 1", (value,),
                    ).fetchone()
                    items = () if row is None else tuple(self._db.execute(
                        "SELECT seq, part, item FROM call_items WHERE call_id = ? ORDER BY seq", (row[0],)))
                finally:
                    self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: read failed: {exc}") from None
        if row is None:
            return None
        if any(int(seq) != n for n, (seq, _part, _item) in enumerate(items)):
            # A row deleted by hand or a torn copy: the transcript would come back with a hole, silently.
            raise UnreadableCall(f"sqlite store {self.path}: stored call {row[0]} is missing saved items")
        try:
            return StoredCall(str(row[0]), row[1], int(row[2]), int(row[3]), "ended" if row[4] == "ended" else "live",
                              str(row[5]), bytes(row[6]), float(row[7]), float(row[8]), str(row[9]),
                              tuple((str(part), bytes(item)) for _seq, part, item in items))
        except (TypeError, ValueError) as exc:
            raise UnreadableCall(f"sqlite store {self.path}: stored call {row[0]} unreadable: {exc}") from None

    def open_leg(self, call_id: str, leg: int, *, provider_call_id: str | None, lease_secs: float,
                 resume_key: str = "", returning_key: str = "") -> bool:
        """See :meth:`CallStore.open_leg`."""
        now = time.time()
        try:
            with self._lock:
                self._same_file()
                self._db.execute("BEGIN IMMEDIATE")  # the check and the write are one step for every process
                try:
                    granted = self._may_open(call_id, leg, provider_call_id, now, returning_key)
                    if granted:
                        self._db.execute(
                            "INSERT INTO calls (call_id, provider_call_id, leg, turn, status, data, updated, "
                            "lease_until, resume_key) VALUES (?, ?, ?, 0, 'live', x'', ?, ?, ?) "
                            "ON CONFLICT (call_id) DO UPDATE SET leg = excluded.leg, updated = excluded.updated, "
                            "lease_until = excluded.lease_until, resume_key = excluded.resume_key",
                            (call_id, provider_call_id, leg, now, now + lease_secs, resume_key),
                        )
                    self._db.execute("COMMIT")
                except BaseException:
                    # SQLite may have rolled back itself (a full disk): its own error is the one to report.
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                    raise
                return granted
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: opening leg {leg} failed: {exc}") from None

    def _may_open(self, call_id: str, leg: int, provider_call_id: str | None, now: float, returning_key: str) -> bool:
        row = self._db.execute("SELECT leg, status, lease_until, resume_key FROM calls WHERE call_id = ?",
                               (call_id,)).fetchone()
        if row is not None:
            # A row without a key was written after the file was lost and recreated: the provider's key is the
            # only proof left, and the webhook accepted it against what the store knew then.
            released = float(row[2]) <= now or (bool(returning_key) and returning_key == (row[3] or returning_key))
            return bool(row[1] == "live" and leg > int(row[0]) and released)
        if provider_call_id is None:
            return True
        # A first leg under a provider call id another live call holds: a replayed first webhook.
        other = self._db.execute("SELECT 1 FROM calls WHERE provider_call_id = ? AND status = 'live' "
                                 "AND lease_until > ?", (provider_call_id, now)).fetchone()
        return other is None

    def renew(self, legs: list[tuple[str, int]], lease_secs: float) -> list[str]:
        """See :meth:`CallStore.renew`."""
        lost: list[str] = []
        until = time.time() + lease_secs
        try:
            with self._lock:
                self._same_file()
                for call_id, leg in legs:
                    cursor = self._db.execute("UPDATE calls SET lease_until = ? WHERE call_id = ? AND leg = ? "
                                              "AND status = 'live'", (until, call_id, leg))
                    # A call the file no longer holds (deleted, replaced) is not a takeover: the next save writes it.
                    if cursor.rowcount != 1 and self._db.execute("SELECT 1 FROM calls WHERE call_id = ?",
                                                                 (call_id,)).fetchone() is not None:
                        lost.append(call_id)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: lease renewal failed: {exc}") from None
        return lost

    def close_leg(self, call_id: str, leg: int) -> None:
        """See :meth:`CallStore.close_leg`."""
        try:
            with self._lock:
                self._same_file()
                self._db.execute("UPDATE calls SET lease_until = 0 WHERE call_id = ? AND leg = ?", (call_id, leg))
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: closing leg {leg} failed: {exc}") from None

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
                self._same_file()
                now = time.time()
                self._db.execute("UPDATE calls SET status = 'ended', end_how = ?, updated = ?, lease_until = 0 "
                                 "WHERE call_id = ? AND (? IS NULL OR leg <= ? OR lease_until <= ?)",
                                 (how, now, call_id, leg, leg, now))
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: end failed: {exc}") from None

    def begin_effect(self, call_id: str, key: str, record: str) -> str | None:
        """See :meth:`CallStore.begin_effect`."""
        try:
            with self._lock:
                self._same_file()
                cursor = self._db.execute("INSERT INTO effects (call_id, key, record, updated) VALUES (?, ?, ?, ?) "
                                          "ON CONFLICT (call_id, key) DO NOTHING", (call_id, key, record, time.time()))
                if cursor.rowcount == 1:
                    return None
                row = self._db.execute("SELECT record FROM effects WHERE call_id = ? AND key = ?",
                                       (call_id, key)).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: recording an effect failed: {exc}") from None
        return str(row[0]) if row is not None else None

    def finish_effect(self, call_id: str, key: str, record: str) -> None:
        """See :meth:`CallStore.finish_effect`."""
        try:
            with self._lock:
                self._same_file()
                self._db.execute("INSERT INTO effects (call_id, key, record, updated) VALUES (?, ?, ?, ?) "
                                 "ON CONFLICT (call_id, key) DO UPDATE SET record = excluded.record, "
                                 "updated = excluded.updated", (call_id, key, record, time.time()))
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: recording an effect failed: {exc}") from None

    def drop_effect(self, call_id: str, key: str) -> None:
        """See :meth:`CallStore.drop_effect`."""
        try:
            with self._lock:
                self._same_file()
                self._db.execute("DELETE FROM effects WHERE call_id = ? AND key = ?", (call_id, key))
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: forgetting an effect failed: {exc}") from None

    def close(self) -> None:
        """See :meth:`CallStore.close`."""
        with self._lock:
            self._db.close()
