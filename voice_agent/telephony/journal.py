"""Each call's record on disk, written while the call happens, so a crash loses nothing already done.

``<dir>/<call_id>.jsonl`` is an append-only JSON Lines journal, one object per line:

- ``{"type": "call", ...}``: the call opened (id, provider, start time, the call's configuration);
- ``{"type": "entry", ...}``: one transcript lane entry (caller words, agent words as heard, a tool
  call, a tool result with its outcome), written as soon as the lane holds it; its ``id``
  (``<leg>-<index>``) is unique across the legs of a call, whose journals each go on from the
  restored entries' count;
- ``{"type": "turn", ...}``: the agent finished its answer to a turn (tools that completed in it);
- ``{"type": "event", ...}``: something the server did to the call (the drain goodbye);
- ``{"type": "end", ...}``: the call's summary (why it ended) and its per-turn record.

Every line goes to the kernel with one ``write`` as it is produced (a ``kill -9`` keeps it) and the
file is ``fsync``'d at each completed turn and at the end (a power loss keeps the last turn); the
server runs those fsyncs, and the end's record file, on threads of their own, so a slow disk holds
neither the event loop that the process's calls share nor the thread pool their speech models run on.
The end line itself is written on the loop (:meth:`CallJournal.end`): nothing is written after it.

The journal is fed from outside the call: it subscribes to the transcript lane
(:meth:`~voice_agent.core.transcript.TranscriptLane.subscribe`), so the call's code knows nothing of it,
and each entry reaches the kernel as it is appended, on the appending code's own stack (one ``write``,
no fsync). It used to be a pipecat observer polling the lane at every frame push, which cost every
frame of every processor a queue put and a task switch for a few entries a turn.

Files are created ``0600`` and the directory ``0700``; :func:`prune_records` deletes records older
than the retention period (the server runs it at start-up and daily). A journal that cannot be
written (disk full) logs once and stops; the call goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from loguru import logger

from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry, TranscriptLane

FILE_MODE = 0o600
DIR_MODE = 0o700
_RECORD_NAME = re.compile(r"^\.?call-[A-Za-z0-9-]+\.(?:json|jsonl)(?:(?:\.[A-Za-z0-9_]+)?\.tmp)?$")
"""Names the server writes (records, journals, interrupted atomic writes); nothing else is pruned."""


def ensure_record_dir(path: Path) -> Path:
    """Creates the record directory ``0700`` (a directory that already exists is left as it is, with a
    warning when others can read it)."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        os.chmod(path, DIR_MODE)  # mkdir's mode is reduced by the umask
    elif stat.S_IMODE(path.stat().st_mode) & 0o077:
        logger.warning("transcripts: {} is readable by other users (chmod 700 it); records themselves are 0600", path)
    return path


def _open_private(path: Path, flags: int) -> int:
    fd = os.open(path, flags | os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    os.fchmod(fd, FILE_MODE)  # an existing file keeps its mode otherwise
    return fd


def write_private(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` atomically, mode ``0600``.

    Each write has its own temporary file (``mkstemp`` creates it ``0600``), so two writers of one path (two
    legs of a call ending on one worker) never truncate each other's; the last to finish is the file.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def prune_records(directory: Path, retention_days: float, now: float | None = None) -> int:
    """Deletes the server's record files in ``directory`` last written more than ``retention_days`` ago.

    Returns:
        How many files were deleted.
    """
    if not directory.is_dir():
        return 0
    cutoff = (time.time() if now is None else now) - retention_days * 86400
    removed = 0
    for path in directory.iterdir():
        if not _RECORD_NAME.match(path.name):
            continue
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError as exc:
            logger.warning("transcripts: cannot delete {}: {}", path.name, exc.strerror)
    if removed:
        logger.info("transcripts: deleted {} record file(s) older than {:g} day(s)", removed, retention_days)
    return removed


def entry_json(entry: TranscriptEntry) -> dict[str, Any]:
    """A transcript entry as a journal line (the rendered line included)."""
    line: dict[str, Any] = {"type": "entry", "index": entry.index, "turn": entry.turn, "kind": entry.kind.value}
    if entry.kind in (EntryKind.CALLER, EntryKind.AGENT):
        line["text"] = entry.text
        if entry.interrupted:
            line["interrupted"] = True
    else:
        line["tool"] = entry.tool_name
        line["tool_call_id"] = entry.tool_call_id
        if entry.kind is EntryKind.TOOL_CALL:
            line["arguments"] = dict(entry.arguments or {})
        else:
            line["outcome"] = entry.outcome.value if entry.outcome is not None else None
            line["result"] = entry.result
    line["line"] = entry.render()
    return line


class CallJournal:
    """The append-only journal of one call (see the module docstring for its lines).

    Args:
        path: The ``.jsonl`` file, created ``0600``; it must not exist yet.
    """

    def __init__(self, path: Path, leg: int = 1) -> None:
        self.path = path
        self.leg = leg
        """The call's leg this journal records (in each entry's ``id``)."""
        self.written = 0
        """Transcript entries written so far."""
        self._file: IO[str] | None = os.fdopen(_open_private(path, os.O_EXCL | os.O_APPEND), "a", encoding="utf-8")
        self._followed: TranscriptLane | None = None
        # Held by the blocking parts (fsync, the final close), which may run on a worker thread: a close
        # never lands while an fsync of the same file runs.
        self._file_lock = threading.Lock()

    @classmethod
    def open(cls, directory: Path, call_id: str, leg: int = 1) -> CallJournal:
        """A new journal for leg ``leg`` of ``call_id`` in ``directory`` (a name already taken gets a suffix)."""
        ensure_record_dir(directory)
        try:
            return cls(directory / f"{call_id}.jsonl", leg)
        except FileExistsError:
            return cls(directory / f"{call_id}-{secrets.token_hex(3)}.jsonl", leg)

    @property
    def closed(self) -> bool:
        """Whether nothing more is written (ended, or failed)."""
        return self._file is None

    def write(self, line_type: str, /, **fields: Any) -> None:
        """Appends one line (``type`` = ``line_type``, ``at`` = epoch seconds)."""
        if self._file is None:
            return
        try:
            self._file.write(json.dumps({"type": line_type, "at": round(time.time(), 3), **fields}, default=str) + "\n")
            self._file.flush()
        except (OSError, ValueError, TypeError) as exc:  # TypeError: a value JSON cannot encode
            self._fail(exc)

    def sync(self, transcript: TranscriptLane) -> None:
        """Appends the entries the transcript lane gained since the last call, counting each as it is written."""
        if self._file is None or len(transcript) <= self.written:
            return
        for entry in transcript.since(self.written):
            try:
                line = entry_json(entry)
            except Exception as exc:  # an entry that cannot be rendered stops the journal, never the call
                self._fail(exc)
                return
            self.write(line.pop("type"), id=f"{self.leg}-{line['index']}", **line)
            if self._file is None:
                return
            self.written += 1

    def follow(self, transcript: TranscriptLane) -> None:
        """Writes the entries ``transcript`` holds past :attr:`written` now (a resumed leg: those it added, its
        cancelled tool calls and its opening line, since earlier legs' journals hold the rest), then each entry
        as it is appended, before the code that appended it goes on: the line reaches the kernel (a ``kill -9``
        right after keeps it); the file is forced to disk at each completed turn. Stops at :meth:`end`."""
        self.sync(transcript)
        if self._file is not None:
            self._followed = transcript
            transcript.subscribe(self._appended)

    def _appended(self, _entry: TranscriptEntry) -> None:
        if self._followed is not None:
            self.sync(self._followed)

    def turn_completed(self, turn: int, transcript: TranscriptLane, *, fsync: bool = True) -> None:
        """Syncs, writes the turn line and forces the file to disk (``fsync=False``: call :meth:`fsync` yourself)."""
        self.sync(transcript)
        executed = [
            e.tool_name for e in transcript.in_turns(turn, turn)
            if e.kind is EntryKind.TOOL_RESULT and e.outcome is ToolOutcome.COMPLETED
        ]
        self.write("turn", turn=turn, entries=self.written, executed=executed)
        if fsync:
            self.fsync()

    def fsync(self) -> None:
        """Forces what was written to disk (blocking; safe on a worker thread, where a live call runs it).

        A failure is logged; the journal goes on (a disk that fails for good fails the next write, which
        stops it).
        """
        handle = self._file
        if handle is not None:
            with self._file_lock:
                if not handle.closed:
                    self._force(handle)

    def end(self, summary: Mapping[str, Any]) -> IO[str] | None:
        """Writes the end line and stops the journal: every later write is a no-op, on any thread.

        Returns:
            The file, still open, for :meth:`settle` (blocking: a live call runs it in a worker thread); None
            when the journal had already stopped.
        """
        self.unfollow()
        self.write("end", **summary)
        handle, self._file = self._file, None
        return handle

    def settle(self, handle: IO[str] | None) -> None:
        """Forces an ended journal's file to disk and closes it (blocking; safe on a worker thread)."""
        if handle is None:
            return
        with self._file_lock:
            self._force(handle)
            with contextlib.suppress(OSError):
                handle.close()

    def close(self, summary: Mapping[str, Any]) -> None:
        """Writes the end line, forces the file to disk and closes it (:meth:`end`, then :meth:`settle`)."""
        self.settle(self.end(summary))

    def _force(self, handle: IO[str]) -> None:
        """fsync, a failure logged (called holding ``_file_lock``)."""
        try:
            os.fsync(handle.fileno())
        except (OSError, ValueError) as exc:
            logger.error("transcripts: journal {} not forced to disk: {}", self.path.name, exc)

    def unfollow(self) -> None:
        """Stops writing the lane's new entries (on the thread that appends to it; :meth:`settle` may then run
        on another)."""
        if self._followed is not None:
            self._followed.unsubscribe(self._appended)
            self._followed = None

    def _fail(self, exc: Exception) -> None:
        self.unfollow()
        logger.error("transcripts: journal {} not written, no more lines for this call: {}", self.path.name, exc)
        with contextlib.suppress(OSError, ValueError):
            if self._file is not None:
                self._file.close()
        self._file = None
