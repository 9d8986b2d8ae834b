"""Verdicts of the ID guard, one test per outcome."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from voice_agent.core.guards.id_guard import IdCheck, IdGuard, IdVerdict, near_miss
from voice_agent.core.ledger import Ledger
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane

GET = ToolSpec("get_invoice", "", (ToolParam("invoice_id", "", kind=ParamKind.IDENTIFIER, role="invoice"),))
CREDIT = ToolSpec(
    "issue_credit", "",
    (ToolParam("invoice_id", "", kind=ParamKind.IDENTIFIER, role="invoice"), ToolParam("reason", "")),
    mutates=True,
)
guard = IdGuard()


def call(tool: ToolSpec, value: str, ledger: Ledger, caller_says: str = "hello") -> list[IdCheck]:
    lane = TranscriptLane()
    lane.append_caller(30, caller_says)
    return guard.check(tool, {"invoice_id": value, "reason": "INV-NOT-AN-ID"}, ledger, lane.entries)


def ledger_with(*values: str) -> Ledger:
    ledger = Ledger()
    for v in values:
        ledger.record_from_tool("disputed_invoice", v, 5, "list_invoices", "invoice_id")
    return ledger


def test_ledger_value_is_ok_and_plain_params_are_not_checked() -> None:
    (check,) = call(CREDIT, "INV-7K3Q9", ledger_with("INV-7K3Q9"))
    assert check.verdict is IdVerdict.OK and check.accepted


def test_value_from_memory_is_rejected_with_instructions() -> None:
    (check,) = call(GET, "INV-1234", ledger_with("INV-7K3Q9"))
    assert check.verdict is IdVerdict.UNKNOWN and not check.accepted
    assert "Look it up again" in check.reason and "ask the" in check.reason


def test_one_character_mutation_names_the_entry() -> None:
    (check,) = call(GET, "INV-7K3Q8", ledger_with("INV-7K3Q9", "INV-2M4P1"))
    assert check.verdict is IdVerdict.MUTATED
    assert check.resembles is not None and check.resembles.role == "disputed_invoice"
    assert "disputed_invoice" in check.reason and "INV-7K3Q9" in check.reason


def test_truncated_prefix_is_mutated() -> None:
    (check,) = call(GET, "INV-7K3...", ledger_with("INV-7K3Q9"))
    assert check.verdict is IdVerdict.MUTATED


def test_caller_stated_value_ok_for_lookup_refused_for_state_change() -> None:
    said = "the invoice is inv 55 21 90 I think"
    (lookup,) = call(GET, "INV-552190", Ledger(), said)
    assert lookup.verdict is IdVerdict.OK and lookup.from_caller
    (credit,) = call(CREDIT, "INV-552190", Ledger(), said)
    assert credit.verdict is IdVerdict.UNVERIFIED and "Look it up first" in credit.reason


def test_unverified_ledger_entry_refused_by_mutating_tool_until_verified() -> None:
    ledger = Ledger()
    ledger.record_from_caller("invoice", "INV-552190", 3)
    assert call(CREDIT, "INV-552190", ledger)[0].verdict is IdVerdict.UNVERIFIED
    ledger.record_from_tool("invoice", "INV-552190", 4, "get_invoice", "invoice_id")
    assert call(CREDIT, "INV-552190", ledger)[0].verdict is IdVerdict.OK


def test_guard_does_not_modify_the_lanes() -> None:
    ledger = ledger_with("INV-7K3Q9")
    before = [(e.role, e.value, e.verified, e.last_used) for e in ledger]
    call(CREDIT, "INV-7K3Q8", ledger)
    call(GET, "INV-9", ledger)
    assert [(e.role, e.value, e.verified, e.last_used) for e in ledger] == before


@given(st.text("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", min_size=6, max_size=12), st.data())
def test_near_miss_is_one_or_two_substitutions(value: str, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(value) - 1))
    replacement = data.draw(st.sampled_from([c for c in "XYZ019" if c != value[i]]))
    mutated = value[:i] + replacement + value[i + 1 :]
    assert near_miss(mutated, value)
    assert not near_miss(value, value)


def test_tool_calls_and_agent_words_are_not_provenance() -> None:
    lane = TranscriptLane()
    lane.append_caller(3, "can you check my invoice")
    lane.append_agent(3, "Is it INV-4242-42?")
    lane.append_tool_call(3, "get_invoice", "c1", {"invoice_id": "INV-4242-42"})
    (check,) = guard.check(GET, {"invoice_id": "INV-4242-42"}, Ledger(), lane.entries)
    assert check.verdict is IdVerdict.UNKNOWN
