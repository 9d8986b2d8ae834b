"""The call's journal follows its transcript lane entry by entry, with no pipecat observer."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from voice_agent.core.transcript import ToolOutcome, TranscriptLane
from voice_agent.telephony.journal import CallJournal, prune_records, write_private


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


def test_after_its_end_a_journal_writes_nothing_while_its_file_settles_on_another_thread(tmp_path: Path) -> None:
    lane = TranscriptLane()
    journal = CallJournal(tmp_path / "call.jsonl")
    journal.follow(lane)
    lane.append_caller(1, "hello")
    handle = journal.end({"reason": "hung up"})
    assert handle is not None and journal.closed
    journal.write("event", event="handed over")  # a drain's line that comes after the end: dropped
    lane.append_agent(1, "too late")
    settling = threading.Thread(target=journal.settle, args=(handle,))
    settling.start()
    journal.fsync()  # a turn's fsync still queued: nothing to do, no error
    settling.join()
    assert handle.closed and [line["type"] for line in lines(journal.path)] == ["entry", "end"]
    assert journal.end({"reason": "again"}) is None


def test_two_writers_of_one_record_file_never_spoil_each_other(tmp_path: Path) -> None:
    path = tmp_path / "call-1-abc.json"
    errors: list[BaseException] = []

    def write(leg: int) -> None:
        for n in range(50):
            try:
                write_private(path, json.dumps({"leg": leg, "n": n, "pad": "x" * 20_000}))
            except BaseException as exc:
                errors.append(exc)

    writers = [threading.Thread(target=write, args=(leg,)) for leg in (1, 2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert not errors
    assert json.loads(path.read_text())["n"] == 49 and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert prune_records(tmp_path, 30, now=time.time() + 31 * 86400) == 1  # the server's names are pruned
    stale = tmp_path / ".call-1-abc.json.k3j_9x2a.tmp"  # what a write killed mid-way leaves
    stale.write_text("{")
    assert prune_records(tmp_path, 30, now=time.time() + 31 * 86400) == 1 and not stale.exists()
