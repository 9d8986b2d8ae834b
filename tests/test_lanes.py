"""Unit tests for the transcript, ledger, slots, summary and drop-log lanes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from voice_agent.core.drop_log import DropLog, facts_present
from voice_agent.core.harvest import harvest_result, record_caller_arguments
from voice_agent.core.ledger import CALLER_SOURCE, Ledger
from voice_agent.core.slots import SlotError, SlotLane
from voice_agent.core.summary import Commitment, EpisodeSummary, RejectedItem, SummaryRequest
from voice_agent.core.tool_spec import HarvestField, ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptLane


class Slots(BaseModel):
    account_id: str | None = None
    disputed_items: list[str] = Field(default_factory=list)
    credit_amount: float | None = None


LOOKUP = ToolSpec(
    name="lookup_account",
    description="Look up an account.",
    params=(ToolParam("account_id", "Account number", kind=ParamKind.IDENTIFIER, role="account"),),
    harvest=(HarvestField("account_id", role="account", slot="account_id"),
             HarvestField("invoices[].invoice_id", role="invoice_{month}")),
)


# --- transcript -------------------------------------------------------------------------------

def test_transcript_is_append_only_and_ordered() -> None:
    lane = TranscriptLane()
    lane.append_caller(1, "hi")
    lane.append_tool_call(1, "lookup_account", "c1", {"account_id": "A-1"})
    lane.append_tool_result(1, "lookup_account", "c1", {"ok": True}, ToolOutcome.COMPLETED)
    lane.append_agent(2, "Hello", interrupted=True)
    snapshot = lane.entries
    assert [e.kind for e in snapshot] == [EntryKind.CALLER, EntryKind.TOOL_CALL, EntryKind.TOOL_RESULT, EntryKind.AGENT]
    assert [e.index for e in snapshot] == [0, 1, 2, 3]
    assert snapshot[3].interrupted and "[interrupted]" in snapshot[3].render()
    with pytest.raises(ValueError, match="older"):
        lane.append_caller(1, "late")
    with pytest.raises(ValueError):
        lane.append_caller(0, "turn zero")
    assert not hasattr(lane, "remove") and lane.entries == snapshot
    assert lane.pending_tool_calls() == []


def test_transcript_reports_pending_tool_calls() -> None:
    lane = TranscriptLane()
    lane.append_tool_call(3, "get_invoice", "c9", {"invoice_id": "INV-1"})
    assert [e.tool_call_id for e in lane.pending_tool_calls()] == ["c9"]


# --- ledger -----------------------------------------------------------------------------------

def test_ledger_evicts_least_recently_used_not_oldest() -> None:
    ledger = Ledger(capacity=3)
    ledger.record_from_tool("account", "ACC-1", 1, "lookup_account", "account_id")
    ledger.record_from_tool("invoice", "INV-2", 2, "list_invoices", "invoice_id")
    ledger.record_from_tool("invoice", "INV-3", 3, "list_invoices", "invoice_id")
    ledger.touch("ACC-1", 10)  # oldest, but used recently
    ledger.record_from_tool("invoice", "INV-4", 11, "list_invoices", "invoice_id")
    assert ledger.values() == {"ACC-1", "INV-3", "INV-4"}
    assert [e.value for e in ledger.evicted] == ["INV-2"]


def test_caller_value_is_unverified_until_a_tool_returns_it() -> None:
    ledger = Ledger()
    entry = ledger.record_from_caller("account", "4729-18", 4)
    assert not entry.verified and entry.source == CALLER_SOURCE
    assert "UNVERIFIED" in entry.render()
    ledger.record_from_tool("account", "4729-18", 5, "lookup_account", "account_id")
    assert entry.verified and entry.last_used == 5


def test_same_value_different_roles_stay_distinct() -> None:
    ledger = Ledger()
    ledger.record_from_tool("listed_invoice", "INV-7", 2, "list_invoices", "invoice_id")
    ledger.record_from_tool("disputed_invoice", "INV-7", 6, "open_dispute", "invoice_id")
    assert sorted(e.role for e in ledger.find("INV-7")) == ["disputed_invoice", "listed_invoice"]
    assert len(ledger) == 2


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.text("XYZ0123", min_size=1, max_size=4)),
                max_size=60), st.integers(1, 8))
def test_ledger_never_exceeds_capacity(records: list[tuple[str, str]], capacity: int) -> None:
    ledger = Ledger(capacity=capacity)
    for turn, (role, value) in enumerate(records, start=1):
        ledger.record_from_tool(role, value, turn, "t", "f")
        assert len(ledger) <= capacity
        assert ledger.get(role, value) is not None  # the newest is never the victim


def test_ledger_rejects_bad_capacity_and_empty_values() -> None:
    with pytest.raises(ValueError):
        Ledger(capacity=0)
    with pytest.raises(ValueError):
        Ledger().record_from_caller("account", "", 1)


# --- slots and harvest ------------------------------------------------------------------------

def test_harvest_reads_fields_by_name_into_ledger_and_slots() -> None:
    ledger, slots = Ledger(), SlotLane(Slots)
    result = {"account_id": "ACC-4729-18", "note": "call me on ACC-9999-99",
              "invoices": [{"invoice_id": "INV-1", "month": "oct"}, {"invoice_id": "INV-2", "month": "nov"}]}
    got = harvest_result(LOOKUP, result, ledger, slots, turn=5)
    assert ("account", "ACC-4729-18") in got.ledger
    assert {e.role for e in ledger} == {"account", "invoice_oct", "invoice_nov"}
    assert "ACC-9999-99" not in ledger.values()  # free text is never harvested
    slot = slots.get("account_id")
    assert slot is not None and (slot.value, slot.turn, slot.source) == ("ACC-4729-18", 5, "lookup_account.account_id")


def test_list_slots_accumulate_and_type_errors_are_reported() -> None:
    slots = SlotLane(Slots)
    slots.apply_harvest("disputed_items", "INV-1", 3, "open_dispute.invoice_id")
    slots.apply_harvest("disputed_items", ["INV-1", "INV-2"], 4, "open_dispute.invoice_id")
    assert slots.model.disputed_items == ["INV-1", "INV-2"]
    with pytest.raises(SlotError, match="credit_amount"):
        slots.apply_harvest("credit_amount", "a lot", 5, "issue_credit.amount")
    with pytest.raises(SlotError, match="no slot"):
        slots.apply_harvest("nope", 1, 5, "x.y")
    assert slots.render_lines() == ["disputed_items: INV-1, INV-2"]
    assert slots.render_lines(provenance=True)[0].startswith("disputed_items: INV-1, INV-2 (turn 4")


def test_bad_harvest_values_do_not_raise() -> None:
    spec = ToolSpec("issue_credit", "", harvest=(HarvestField("amount", slot="credit_amount"),))
    got = harvest_result(spec, {"amount": "lots"}, Ledger(), SlotLane(Slots), 2)
    assert got.errors and not got.slots


def test_caller_arguments_enter_ledger_unverified() -> None:
    ledger = Ledger()
    record_caller_arguments(LOOKUP, {"account_id": "4729-18"}, ledger, 4)
    (entry,) = ledger.entries
    assert (entry.role, entry.verified, entry.source) == ("account", False, "caller")


# --- summary and drop log ---------------------------------------------------------------------

def test_summary_renders_every_section() -> None:
    summary = EpisodeSummary(
        established=["caller disputes the disputed_invoice"],
        rejected=[RejectedItem(item="Tuesday callback", reason="school run")],
        decided=["open a dispute"], pending=["credit decision"],
        commitments=[Commitment(text="I'll call you back on Friday", turn=12)],
    )
    text = summary.render()
    for needle in ["Established", "school run", "Decided", "Pending", 'turn 12: "I\'ll call you back on Friday"']:
        assert needle in text
    assert EpisodeSummary().is_empty() and not summary.is_empty()


def test_summarizer_instructions_name_what_it_does_not_own() -> None:
    request = SummaryRequest(EpisodeSummary(), (), ["account", "disputed_invoice"], ["account_id"], 10)
    text = request.instructions()
    assert "do NOT own" in text and "identifier values" in text
    assert "account, disputed_invoice" in text and "Slot facts: account_id" in text


def test_drop_log_records_in_out_and_dropped() -> None:
    tracked = {"account": "ACC-4729-18", "limit": "until the 14th"}
    log = DropLog()
    keys_in = facts_present("ACC-4729-18 ... travelling until the 14th", tracked)
    event = log.record(15, keys_in, facts_present("one of the accounts; until the 14th", tracked))
    assert event.dropped == {"account"}
    attrs = event.span_attributes()
    assert attrs["summary.facts_dropped"] == ["account"] and "ACC-4729-18" not in str(attrs)
    assert log.retention() == 0.5


def test_a_subscriber_hears_each_entry_once_it_is_in_the_lane_and_a_failing_one_is_dropped() -> None:
    lane = TranscriptLane()
    heard: list[tuple[int, int]] = []
    lane.subscribe(lambda entry: heard.append((entry.index, len(lane))))

    def broken(_entry: object) -> None:
        raise RuntimeError("disk on fire")

    lane.subscribe(broken)
    lane.append_caller(1, "my account is 12345")
    lane.append_agent(1, "thanks")
    # Each entry is in the lane when its subscribers hear it; the broken one is dropped after its first
    # failure and the record goes on.
    assert heard == [(0, 1), (1, 2)]
    assert [e.text for e in lane] == ["my account is 12345", "thanks"]
    assert lane._listeners == [lane._listeners[0]] and broken not in lane._listeners
    lane.unsubscribe(broken)  # not subscribed any more: nothing happens
    assert lane == TranscriptLane(list(lane.entries), [1, 1])  # listeners are not part of the lane's value
