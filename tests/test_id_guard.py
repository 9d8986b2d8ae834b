"""Verdicts of the ID guard: each refused case with its verdict, and the correct case beside it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.toy_domain import TOY
from voice_agent.call.session import CallSession
from voice_agent.core.call_state import CallState
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.guards.id_guard import IdCheck, IdGuard, IdVerdict
from voice_agent.core.guards.id_tokens import IdTokenIndex
from voice_agent.core.ledger import Ledger
from voice_agent.core.near_miss import NearMiss, near_miss
from voice_agent.core.tool_gate import ToolGate
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry, TranscriptLane
from voice_agent.domains.billing.tools import BILLING_TOOLS
from voice_agent.settings import CallConfig, Settings
from voice_agent.summarizers.extractive import ExtractiveSummarizer

GET = ToolSpec("get_invoice", "", (ToolParam("invoice_id", "", kind=ParamKind.IDENTIFIER, role="invoice"),))
CREDIT = ToolSpec(
    "issue_credit", "",
    (ToolParam("invoice_id", "", kind=ParamKind.IDENTIFIER, role="invoice"), ToolParam("reason", "")),
    mutates=True,
)
LOOKUP_ORDER = ToolSpec("lookup_order", "", (ToolParam("order_id", "", kind=ParamKind.IDENTIFIER, role="order"),))
CREDIT_ORDER = ToolSpec(
    "issue_credit", "", (ToolParam("order_id", "", kind=ParamKind.IDENTIFIER, role="order"),), mutates=True
)
LOOKUP_ACCOUNT = ToolSpec(
    "lookup_account", "", (ToolParam("account_id", "", kind=ParamKind.IDENTIFIER, role="account"),)
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


def turns(*said: str, results: Sequence[tuple[str, Any]] = (), outcome: ToolOutcome = ToolOutcome.COMPLETED
          ) -> tuple[TranscriptEntry, ...]:
    """Raw recent turns: caller utterances (turns 1..n), then tool results (name, result) in the last turn."""
    lane = TranscriptLane()
    for turn, text in enumerate(said, start=1):
        lane.append_caller(turn, text)
    last = max(len(said), 1)
    for n, (tool, result) in enumerate(results):
        lane.append_tool_result(last, tool, f"c{n}", result, outcome)
    return lane.entries


def one(tool: ToolSpec, value: str, recent: Sequence[TranscriptEntry] = (), ledger: Ledger | None = None,
        checker: IdGuard = guard) -> IdCheck:
    (name,) = [p.name for p in tool.params_of(ParamKind.IDENTIFIER)]
    (check,) = checker.check(tool, {name: value}, ledger if ledger is not None else Ledger(), recent)
    return check


def order_ledger(value: str = "ORD-7K4M2P", *, verified: bool = True) -> Ledger:
    ledger = Ledger()
    if verified:
        ledger.record_from_tool("damaged_order", value, 2, "lookup_order", "order_id")
    else:
        ledger.record_from_caller("damaged_order", value, 2)
    return ledger


# --- the original verdicts -----------------------------------------------------------------------------------------


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
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.TRUNCATED


def test_caller_stated_value_ok_for_lookup_refused_for_state_change() -> None:
    said = "the invoice is inv 55 21 90 I think"
    (lookup,) = call(GET, "INV-552190", Ledger(), said)
    assert lookup.verdict is IdVerdict.OK and lookup.from_caller
    (credit,) = call(CREDIT, "INV-552190", Ledger(), said)
    assert credit.verdict is IdVerdict.UNVERIFIED and "Look it up first" in credit.reason


def test_the_refusal_names_the_calls_own_lookup_tools_never_another_domains() -> None:
    from voice_agent.core.tool_spec import HarvestField

    find = ToolSpec("find_order", "", (ToolParam("order_id", "", kind=ParamKind.IDENTIFIER, role="order"),),
                    harvest=(HarvestField("order_id", role="order"),))
    said = turns("my order is ORD 7K3Q9X")
    (check,) = IdGuard(tools=[find, CREDIT_ORDER]).check(CREDIT_ORDER, {"order_id": "ORD-7K3Q9X"}, Ledger(), said)
    assert check.verdict is IdVerdict.UNVERIFIED and "with find_order" in check.reason
    assert "lookup_account" not in check.reason and "get_invoice" not in check.reason
    (bare,) = IdGuard().check(CREDIT_ORDER, {"order_id": "ORD-7K3Q9X"}, Ledger(), said)
    assert "with a tool that returns it" in bare.reason and "lookup_account" not in bare.reason


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


# --- truncation: refused before provenance is asked ----------------------------------------------------------------


@pytest.mark.parametrize(("said", "value"), [
    ("my order is ORD-7K4M2P", "ORD-7K4M"),
    ("my order is ORD-7K4M2P", "ORD-7K4M2"),
    ("it's ORD 7K4M 2P", "ORD-7K4M"),
    ("o r d seven k four m two p", "ORD-7K4M2"),
    ("account ACC 4729 18 please", "ACC-4729"),
    ("invoice INV-2026-1018", "INV-2026-10"),
    ("invoice INV-2026-1018", "INV-2026-"),
])
def test_truncation_of_what_the_caller_said_is_mutated(said: str, value: str) -> None:
    check = one(LOOKUP_ORDER, value, turns(said))
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.TRUNCATED
    assert check.token is not None and check.token.source is EntryKind.CALLER
    assert "the caller said in turn 1" in check.reason


def test_a_cut_off_repetition_is_still_a_truncation() -> None:
    # The short form is a token of its own here; the full form said a moment later is what it resembles.
    recent = turns("my order is ORD 7K4M... sorry, ORD 7K4M2P")
    assert one(LOOKUP_ORDER, "ORD-7K4M", recent).verdict is IdVerdict.MUTATED
    assert one(LOOKUP_ORDER, "ORD-7K4M2P", recent).verdict is IdVerdict.OK


@pytest.mark.parametrize("value", ["ORD-7K4M2", "ORD-7K4M", "ord-7k4m2"])
def test_truncation_of_a_ledger_value_is_mutated_though_the_full_value_is_in_a_result(value: str) -> None:
    recent = turns("go ahead", results=[("get_invoice", {"lines": [{"order_id": "ORD-7K4M2P", "amount": 49.0}]})])
    for tool in (CREDIT_ORDER, LOOKUP_ORDER):
        check = one(tool, value, recent, order_ledger())
        assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.TRUNCATED
        assert check.resembles is not None and check.resembles.value == "ORD-7K4M2P"
        assert "damaged_order (ORD-7K4M2P)" in check.reason  # the ledger's value, for the model to copy


def test_truncation_of_a_tool_result_value_is_mutated() -> None:
    recent = turns(results=[("lookup_order", {"order_id": "ORD-9TQ2XB", "invoice_id": "INV-2026-1143"})])
    check = one(GET, "INV-2026-114", recent)
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.TRUNCATED
    assert check.token is not None and check.token.path == "invoice_id"
    assert "the invoice_id that lookup_order returned in turn 1 (INV-2026-1143)" in check.reason


# --- provenance is whole-token equality ----------------------------------------------------------------------------


@pytest.mark.parametrize(("said", "value"), [
    ("I'm at flat 47, 2918 Main Street", "4729-18"),
    ("flat 47, 2918 Main Street", "472918"),
    ("unit 12, 3456 Elm Road", "12-3456"),
    ("I'm 47 and my house is 2918", "4729-18"),
    ("my order is ORD-7K4M2P and the total was 2018", "ORD-7K4M2P-2018"),
    ("the date was 2026. Invoice 1018", "2026-1018"),
])
def test_pieces_split_by_words_or_punctuation_are_not_one_identifier(said: str, value: str) -> None:
    check = one(LOOKUP_ACCOUNT, value, turns(said))
    assert check.verdict is IdVerdict.UNKNOWN and not check.from_caller


def test_a_value_inside_a_sentence_of_a_result_is_not_returned_by_it() -> None:
    recent = turns(results=[("lookup_order", {"note": "Refund for ORD-7K4M2P approved"})])
    assert one(LOOKUP_ORDER, "ORD-7K4M2P", recent).verdict is IdVerdict.UNKNOWN


@pytest.mark.parametrize("outcome", [ToolOutcome.REJECTED, ToolOutcome.FAILED, ToolOutcome.CANCELLED])
def test_a_result_that_did_not_complete_vouches_for_nothing(outcome: ToolOutcome) -> None:
    # A rejection or an error echoes the model's own argument back.
    recent = turns(results=[("lookup_order", {"status": "error", "order_id": "ORD-1234XY"})], outcome=outcome)
    assert one(LOOKUP_ORDER, "ORD-1234XY", recent).verdict is IdVerdict.UNKNOWN


@pytest.mark.parametrize(("said", "value"), [("my flat is 47", "47"), ("the code is 123", "123"),
                                             ("it's a b c", "ABC")])
def test_short_caller_values_are_not_accepted(said: str, value: str) -> None:
    check = one(LOOKUP_ACCOUNT, value, turns(said))
    assert check.verdict is IdVerdict.UNKNOWN


def test_a_short_value_a_tool_returned_is_accepted() -> None:
    # The floor is for what the caller said; a tool's field is a value on purpose.
    recent = turns(results=[("lookup_order", {"order_id": "77"})])
    assert one(LOOKUP_ORDER, "77", recent).verdict is IdVerdict.OK


# --- edits and separator slips -------------------------------------------------------------------------------------


def test_separator_turned_into_a_letter_is_mutated_not_unknown() -> None:
    ledger = Ledger()
    ledger.record_from_tool("account", "1414-5812", 2, "lookup_account", "account_id")
    check = one(LOOKUP_ACCOUNT, "1414G5812", (), ledger)
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.SEPARATOR
    assert check.resembles is not None and "account (1414-5812)" in check.reason


@pytest.mark.parametrize(("known", "value"), [("12-34-56", "12G34G56"), ("AB/CD/EF", "AB1CD2EF"),
                                              ("ACC-4729-18", "ACC04729-18")])
def test_separator_slips_beyond_the_edit_limit_are_mutated(known: str, value: str) -> None:
    ledger = Ledger()
    ledger.record_from_tool("account", known, 2, "lookup_account", "account_id")
    check = one(LOOKUP_ACCOUNT, value, (), ledger)
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.SEPARATOR


def test_a_character_turned_into_a_separator_is_mutated() -> None:
    check = one(LOOKUP_ORDER, "ORD-7K4M-P", (), order_ledger())
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.EDITED


@pytest.mark.parametrize("value", ["ORD-7K4M2Q", "ORD-7K4N2P", "ORD-K74M2P", "ORD-7K4M22P", "ORD-7KM2P"])
def test_edit_of_what_the_caller_said_is_mutated_without_quoting_it(value: str) -> None:
    check = one(LOOKUP_ORDER, value, turns("my order is ORD 7K4M2P"))
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.EDITED
    assert "7K4M2P" not in check.reason.replace(repr(value), "")  # the caller's words are not handed back


def test_edit_of_a_tool_result_value_is_mutated_and_names_the_field() -> None:
    recent = turns(results=[("lookup_order", {"order_id": "ORD-7K4M2P", "status": "delivered"})])
    check = one(LOOKUP_ORDER, "ORD-7K4N2P", recent)
    assert check.verdict is IdVerdict.MUTATED
    assert "order_id that lookup_order returned" in check.reason and "(ORD-7K4M2P)" in check.reason


def test_the_closest_ledger_entry_is_named() -> None:
    ledger = Ledger()
    for i in range(64):
        ledger.record_from_tool(f"invoice_{i}", f"INV-2026-{1000 + i:04d}", 1, "list_invoices", "invoice_id")
    check = one(GET, "INV-2026-1O63", (), ledger)
    assert check.verdict is IdVerdict.MUTATED
    assert check.resembles is not None and check.resembles.value == "INV-2026-1063"


def test_among_equally_close_entries_the_most_recent_is_named() -> None:
    ledger = Ledger()
    ledger.record_from_tool("old_order", "ORD-7K4M2A", 1, "lookup_order", "order_id")
    ledger.record_from_tool("new_order", "ORD-7K4M2B", 9, "lookup_order", "order_id")
    check = one(LOOKUP_ORDER, "ORD-7K4M2C", (), ledger)
    assert check.resembles is not None and check.resembles.role == "new_order"


def test_a_short_known_value_resembles_nothing() -> None:
    recent = turns(results=[("lookup_order", {"order_id": "77", "qty": 3})])
    assert one(LOOKUP_ORDER, "78", recent).verdict is IdVerdict.UNKNOWN


# --- correct cases still pass --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("said", "value"), [
    ("It's ACC 4729 18.", "ACC-4729-18"),
    ("my account number is a c c four seven two nine one eight", "ACC-4729-18"),
    ("A C C, 4729 18", "4729-18"),
    ("acc 4729-18 thanks", "ACC-4729-18"),
    ("it's ACC-4729-18", "acc-4729-18"),
    ("it's ACC-4729-18", "ACC/4729/18"),
    ("it's ACC-4729-18", "ACC 472918"),
    ("the order is ord 7k4m2p", "ORD-7K4M2P"),
    ("ORD dash seven K four M two P", "ORD-7K4M2P"),
    ("invoice i n v two zero two six one zero one eight", "INV-2026-1018"),
    ("four seven two nine, eighteen", "4729"),
    ("double four seven oh nine", "44709"),
    ("flat 47 2918", "472918"),
    ("Here it is: ACC-4729-18.", "ACC-4729-18"),
])
def test_caller_stated_identifiers_in_any_spelling_are_ok_for_a_lookup(said: str, value: str) -> None:
    check = one(LOOKUP_ACCOUNT, value, turns("hello", said))
    assert check.verdict is IdVerdict.OK and check.from_caller, check.reason
    assert check.token is not None and check.token.turn == 2


def test_caller_stated_identifier_is_unverified_for_a_state_change() -> None:
    check = one(CREDIT_ORDER, "ORD-7K4M2P", turns("my order is ORD 7K4M2P"))
    assert check.verdict is IdVerdict.UNVERIFIED and check.from_caller


@pytest.mark.parametrize("value", ["ORD-7K4M2P", "ord 7k4m2p", "ORD7K4M2P", "ORD/7K4M/2P"])
def test_verified_ledger_value_in_any_spelling_is_ok_for_a_state_change(value: str) -> None:
    check = one(CREDIT_ORDER, value, (), order_ledger())
    assert check.verdict is IdVerdict.OK
    assert check.match is not None and check.match.value == "ORD-7K4M2P"  # the verbatim form to run the tool with


@pytest.mark.parametrize("value", ["ORD-7K4M2P", "ord 7k4m2p"])
def test_caller_stated_ledger_value_is_unverified_for_a_state_change(value: str) -> None:
    assert one(CREDIT_ORDER, value, (), order_ledger(verified=False)).verdict is IdVerdict.UNVERIFIED
    assert one(LOOKUP_ORDER, value, (), order_ledger(verified=False)).verdict is IdVerdict.OK


def test_a_tool_result_value_is_ok_and_strict_mode_wants_the_ledger() -> None:
    recent = turns(results=[("lookup_order", {"order_id": "ORD-9TQ2XB", "invoice_id": "INV-2026-1143"})])
    credit = ToolSpec("open_dispute", "", (ToolParam("invoice_id", "", kind=ParamKind.IDENTIFIER),), mutates=True)
    assert one(GET, "INV-2026-1143", recent).verdict is IdVerdict.OK
    assert one(credit, "INV-2026-1143", recent).verdict is IdVerdict.OK
    strict = IdGuard(ledger_only_for_mutations=True)
    check = one(credit, "INV-2026-1143", recent, checker=strict)
    assert check.verdict is IdVerdict.UNVERIFIED and not check.from_caller


def test_sibling_identifiers_the_caller_said_are_each_ok() -> None:
    # ORD-7K4M2P and ORD-7K4M2R are one character apart: neither is a corruption of the other.
    recent = turns("I've got two problem orders: ORD-7K4M2P and ORD-7K4M2R.")
    assert one(LOOKUP_ORDER, "ORD-7K4M2R", recent, order_ledger()).verdict is IdVerdict.OK
    assert one(LOOKUP_ORDER, "ORD-7K4M2P", recent).verdict is IdVerdict.OK
    assert one(LOOKUP_ORDER, "ORD-7K4M2R", recent).verdict is IdVerdict.OK


def test_sibling_identifiers_a_tool_listed_are_each_ok() -> None:
    listed = {"invoices": [{"invoice_id": f"INV-2026-127{i}", "total": 165.5} for i in range(7, 10)]}
    recent = turns(results=[("list_invoices", listed)])
    for i in range(7, 10):
        assert one(GET, f"INV-2026-127{i}", recent).verdict is IdVerdict.OK


def test_a_given_index_is_used_instead_of_the_recent_turns() -> None:
    index = IdTokenIndex(turns("it's ORD 7K4M2P"))
    check = guard.check(LOOKUP_ORDER, {"order_id": "ORD-7K4M2P"}, Ledger(), (), index)
    assert [c.verdict for c in check] == [IdVerdict.OK]
    assert guard.check(LOOKUP_ORDER, {"order_id": "ORD-7K4M2P"}, Ledger(), ())[0].verdict is IdVerdict.UNKNOWN


def test_one_check_per_identifier_argument_present() -> None:
    spec = ToolSpec("open_dispute", "", (
        ToolParam("invoice_id", "", kind=ParamKind.IDENTIFIER), ToolParam("order_id", "", kind=ParamKind.IDENTIFIER),
        ToolParam("reason", ""),
    ))
    checks = guard.check(spec, {"invoice_id": "INV-2026-1018", "order_id": "", "reason": "x"}, Ledger(), ())
    assert [c.argument for c in checks] == ["invoice_id"]
    assert guard.check(spec, {"invoice_id": "--", "reason": "x"}, Ledger(), ())[0].verdict is IdVerdict.UNKNOWN


# --- running with the ledger's spelling ----------------------------------------------------------------------------


def test_the_gate_runs_a_respaced_ledger_identifier_as_the_ledger_spells_it() -> None:
    state = CallState()
    state.ledger.record_from_tool("account", "ACC-4729-18", 1, "lookup_account", "account_id")
    state.start_turn("my order is ORD 7K4M2P")
    gate = ToolGate({t.name: t for t in (LOOKUP_ACCOUNT, LOOKUP_ORDER)}, DateGuard(dt.date(2026, 11, 30)))
    respaced = {"account_id": "acc 4729 18", "note": "acc 4729 18"}
    assert gate.review(state, "lookup_account", respaced).arguments_to_run(respaced) == {
        "account_id": "ACC-4729-18", "note": "acc 4729 18",  # only the checked identifier is replaced
    }
    said = {"order_id": "ord 7k4m2p"}  # accepted because the caller said it: no ledger spelling to use
    assert gate.review(state, "lookup_order", said).arguments_to_run(said) == said


async def test_a_respaced_ledger_identifier_reaches_the_tool_and_the_harvest_verbatim() -> None:
    session = CallSession(TOY, Settings(call=CallConfig(reference_date=dt.date(2026, 11, 30))), ExtractiveSummarizer())
    session.state.ledger.record_from_tool("account", "ACC-1000-01", 1, "lookup_account", "account_id")
    await session.begin_turn("credit my account please")
    result = await session.execute_tool("issue_credit", "c1", {"account_id": "acc 1000 01"})
    assert result == {"account_id": "ACC-1000-01", "credited": 5}
    assert session.state.ledger.values() == {"ACC-1000-01"}  # no caller-stated copy in the model's spelling


def test_a_dispute_takes_the_invoice_lookup_order_returned_once_it_is_in_the_ledger() -> None:
    gate = ToolGate({t.name: t for t in BILLING_TOOLS}, DateGuard(dt.date(2026, 11, 30)))
    state = CallState()
    state.ledger.record_from_tool("account", "ACC-4729-18", 1, "lookup_account", "account_id")
    state.start_turn("the kettle on order ORD 7K4M2P arrived broken")
    order = {"order_id": "ORD-7K4M2P", "invoice_id": "INV-2026-1018", "description": "Electric Kettle"}
    state.transcript.append_tool_call(1, "lookup_order", "c1", {"order_id": "ORD-7K4M2P"})
    state.transcript.append_tool_result(1, "lookup_order", "c1", order, ToolOutcome.COMPLETED)
    dispute = {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "reason": "arrived broken"}
    refused = gate.review(state, "open_dispute", dispute)  # returned by a tool, but not yet a ledger fact
    assert refused.rejection is not None and refused.rejection["verdict"] == "unverified"
    gate.harvest(state, "lookup_order", {"order_id": "ORD-7K4M2P"}, order)
    assert gate.review(state, "open_dispute", dispute).allowed
