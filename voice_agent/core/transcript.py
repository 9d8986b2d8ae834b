"""The transcript lane: the append-only record of truth for one call."""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loguru import logger

EntryListener = Callable[["TranscriptEntry"], None]
"""Called with each entry once it is in the lane (:meth:`TranscriptLane.subscribe`)."""


class EntryKind(StrEnum):
    """What a transcript entry records."""

    CALLER = "caller"
    AGENT = "agent"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"


class ToolOutcome(StrEnum):
    """How a tool call ended, so no call is ever left pending in the record."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class TranscriptEntry:
    """One immutable line of the transcript.

    Attributes:
        index: Position in the lane, from 0.
        turn: The turn it belongs to (turns count from 1).
        kind: Caller or agent utterance, tool call or tool result.
        text: The words as said (agent text is cut where the caller barged in).
        tool_name: For tool entries, the tool's name.
        tool_call_id: For tool entries, the id pairing a call with its result.
        arguments: For tool calls, the arguments as the model produced them.
        result: For tool results, the structured result.
        outcome: For tool results, how the call ended.
        interrupted: For agent utterances, whether the caller cut it off.
    """

    index: int
    turn: int
    kind: EntryKind
    text: str = ""
    tool_name: str | None = None
    tool_call_id: str | None = None
    arguments: Mapping[str, Any] | None = None
    result: Any = None
    outcome: ToolOutcome | None = None
    interrupted: bool = False

    def render(self) -> str:
        """Renders the entry as one line of plain text, values verbatim."""
        if self.kind is EntryKind.CALLER:
            return f"CALLER: {self.text}"
        if self.kind is EntryKind.AGENT:
            cut = " [interrupted]" if self.interrupted else ""
            return f"AGENT: {self.text}{cut}"
        if self.kind is EntryKind.TOOL_CALL:
            args = json.dumps(dict(self.arguments or {}), sort_keys=True, default=str)
            return f"TOOL_CALL {self.tool_name}({args})"
        body = json.dumps(self.result, sort_keys=True, default=str)
        return f"TOOL_RESULT {self.tool_name} [{self.outcome}]: {body}"


@dataclass
class TranscriptLane:
    """Append-only record of final utterances, tool calls and tool results.

    Nothing is ever removed or edited: every other lane is derived from this one,
    and the date guard re-reads it in full.
    """

    _entries: list[TranscriptEntry] = field(default_factory=list)
    # Turn of each entry, kept sorted (turns never go back), so a window lookup is a bisect
    # instead of a scan: the assembler asks for the recent turns on every inference.
    _turns: list[int] = field(default_factory=list)
    # Who is told of each new entry (the served call's journal); not part of the lane's value.
    _listeners: list[EntryListener] = field(default_factory=list, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        # A copy (copy, deepcopy, pickle) is a new lane: nobody listens to it yet.
        return {**self.__dict__, "_listeners": []}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[TranscriptEntry]:
        return iter(tuple(self._entries))

    @property
    def entries(self) -> tuple[TranscriptEntry, ...]:
        """All entries, oldest first (an immutable snapshot)."""
        return tuple(self._entries)

    def _append(self, turn: int, kind: EntryKind, **values: Any) -> TranscriptEntry:
        if turn < 1:
            raise ValueError(f"turns count from 1, got {turn}")
        if self._entries and turn < self._entries[-1].turn:
            raise ValueError(f"turn {turn} is older than the last recorded turn {self._entries[-1].turn}")
        entry = TranscriptEntry(index=len(self._entries), turn=turn, kind=kind, **values)
        self._entries.append(entry)
        self._turns.append(turn)
        for listener in tuple(self._listeners):
            try:
                listener(entry)
            except Exception:  # a listener's fault must not undo or stop the call's record
                logger.exception("transcript listener {!r} failed; it is unsubscribed", listener)
                self.unsubscribe(listener)
        return entry

    def subscribe(self, listener: EntryListener) -> None:
        """Calls ``listener`` with every entry appended from now on, right after it is in the lane.

        Listeners run on the appending thread (a served call's event loop). A listener that raises is logged
        and unsubscribed; the entry stays recorded.
        """
        self._listeners.append(listener)

    def unsubscribe(self, listener: EntryListener) -> None:
        """Stops calling ``listener`` (nothing happens if it was not subscribed)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def append_caller(self, turn: int, text: str) -> TranscriptEntry:
        """Records a final caller utterance."""
        return self._append(turn, EntryKind.CALLER, text=text)

    def append_agent(self, turn: int, text: str, *, interrupted: bool = False) -> TranscriptEntry:
        """Records what the agent said, as heard (cut and flagged when interrupted)."""
        return self._append(turn, EntryKind.AGENT, text=text, interrupted=interrupted)

    def append_tool_call(
        self, turn: int, tool_name: str, tool_call_id: str, arguments: Mapping[str, Any]
    ) -> TranscriptEntry:
        """Records a tool call as the model produced it, before any guard runs."""
        return self._append(
            turn, EntryKind.TOOL_CALL, tool_name=tool_name, tool_call_id=tool_call_id, arguments=dict(arguments)
        )

    def append_tool_result(
        self, turn: int, tool_name: str, tool_call_id: str, result: Any, outcome: ToolOutcome
    ) -> TranscriptEntry:
        """Records how a tool call ended and what it returned."""
        return self._append(
            turn, EntryKind.TOOL_RESULT, tool_name=tool_name, tool_call_id=tool_call_id, result=result, outcome=outcome
        )

    def in_turns(self, first: int, last: int) -> list[TranscriptEntry]:
        """Entries whose turn lies in ``first..last`` inclusive, in order."""
        lo = bisect.bisect_left(self._turns, first)
        hi = bisect.bisect_right(self._turns, last)
        return self._entries[lo:hi]

    def since(self, index: int) -> list[TranscriptEntry]:
        """Entries from position ``index`` on, in order: what was appended after a reader's last look."""
        return self._entries[max(index, 0):]

    @classmethod
    def of_lines(cls, lines: Iterable[tuple[str, str]]) -> TranscriptLane:
        """A lane of ``(speaker, text)`` lines (``caller`` or ``agent``): each caller line opens a turn, and agent
        lines belong to the turn they answer (those before the first caller line to turn 1)."""
        lane = cls()
        turn = 0
        for speaker, text in lines:
            if speaker == "caller":
                turn += 1
                lane.append_caller(turn, text)
            else:
                lane.append_agent(max(turn, 1), text)
        return lane

    def caller_utterances(self) -> list[TranscriptEntry]:
        """Every caller utterance of the call, in order."""
        return [e for e in self._entries if e.kind is EntryKind.CALLER]

    def pending_tool_calls(self) -> list[TranscriptEntry]:
        """Tool calls that have no result yet."""
        done = {e.tool_call_id for e in self._entries if e.kind is EntryKind.TOOL_RESULT}
        return [e for e in self._entries if e.kind is EntryKind.TOOL_CALL and e.tool_call_id not in done]

    @property
    def last_turn(self) -> int:
        """The highest turn recorded so far (0 for an empty lane)."""
        return self._entries[-1].turn if self._entries else 0
