"""The call's journal follows its transcript lane entry by entry, with no pipecat observer."""

from __future__ import annotations

import json
from pathlib import Path

from voice_agent.core.transcript import ToolOutcome, TranscriptLane
from voice_agent.telephony.journal import CallJournal


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_each_entry_is_on_disk_as_soon_as_the_lane_holds_it(tmp_path: Path) -> None:
    lane = TranscriptLane()
    lane.append_caller(1, "resumed: my account is 12345")  # a resumed call's earlier entry
    journal = CallJournal(tmp_path / "call.jsonl")
    journal.follow(lane)
    assert [line["text"] for line in lines(journal.path)] == ["resumed: my account is 12345"]
    lane.append_tool_call(2, "lookup_account", "t1", {"account_id": "12345"})
    # Written before anything else runs: a tool that hangs (or a kill -9) still leaves its call on disk.
    assert lines(journal.path)[-1]["tool"] == "lookup_account" and journal.written == 2
    lane.append_tool_result(2, "lookup_account", "t1", {"status": "open"}, ToolOutcome.COMPLETED)
    journal.turn_completed(2, lane, fsync=False)
    assert [line["type"] for line in lines(journal.path)] == ["entry", "entry", "entry", "turn"]
    journal.close({"reason": "hung up"})
    lane.append_agent(3, "after the end")  # the journal is closed: nothing is written, the lane goes on
    assert lines(journal.path)[-1]["type"] == "end" and len(lane) == 4


def test_a_journal_that_cannot_write_stops_and_the_lane_goes_on(tmp_path: Path) -> None:
    lane = TranscriptLane()
    journal = CallJournal(tmp_path / "call.jsonl")
    journal.follow(lane)
    assert journal._file is not None
    journal._file.close()  # the disk went away under the call
    lane.append_caller(1, "hello")
    lane.append_agent(1, "hi")
    assert journal.closed and [e.text for e in lane] == ["hello", "hi"]


def test_an_entry_json_cannot_encode_stops_the_journal_once_and_nothing_else(tmp_path: Path) -> None:
    lane = TranscriptLane()
    journal = CallJournal(tmp_path / "call.jsonl")
    journal.follow(lane)
    lane.append_caller(1, "hello")
    lane.append_tool_result(1, "lookup", "t1", {(1, 2): "a tuple key"}, ToolOutcome.COMPLETED)  # not JSON
    lane.append_agent(1, "done")
    # The journal stopped at the bad entry (the lines before it kept, counted once), unsubscribed, and every
    # later call on it is a no-op: the turn line and the end write nothing and raise nothing.
    assert journal.closed and journal.written == 1 and lane._listeners == []
    journal.turn_completed(1, lane)
    journal.close({"reason": "hung up"})
    assert [line["type"] for line in lines(journal.path)] == ["entry"] and len(lane) == 3
