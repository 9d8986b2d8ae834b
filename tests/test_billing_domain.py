"""Billing domain: backend records and errors, dense identifiers, harvest, handoff card."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from voice_agent.core.call_state import CallState
from voice_agent.core.harvest import harvest_result
from voice_agent.core.summary import Commitment, EpisodeSummary
from voice_agent.core.tool_spec import ParamKind
from voice_agent.core.transcript import ToolOutcome
from voice_agent.domains.base import ToolError
from voice_agent.domains.billing import BILLING, BillingBackend, BillingSlots, billing_domain, render_handoff_card
from voice_agent.domains.billing.handoff import handoff_card

ROOT = Path(__file__).resolve().parent.parent
REF = dt.date(2026, 11, 30)
DIGITS = "0123456789"


@pytest.fixture
def backend() -> BillingBackend:
    return BillingBackend.from_directory()


@pytest.fixture
def state() -> CallState:
    call = CallState(call_id="t", reference_date=REF, slot_model=BillingSlots)
    call.start_turn("hello")
    return call


def _seed_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("seed_billing", ROOT / "scripts" / "seed_billing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mutations(value: str, alphabet_for: dict[int, str]) -> set[str]:
    out = set()
    for i, ch in enumerate(value):
        for alt in alphabet_for.get(i, ""):
            if alt != ch:
                out.add(value[:i] + alt + value[i + 1 :])
    return out


# --- domain shape ---------------------------------------------------------------------------------------------------


def test_domain_wires_every_tool_to_a_handler() -> None:
    names = {t.name for t in BILLING.tools}
    assert names == set(BILLING.handlers)
    assert {"lookup_account", "list_invoices", "get_invoice", "open_dispute", "issue_credit", "schedule_callback",
            "transfer_to_human", "update_case"} <= names
    assert BILLING.slot_model is BillingSlots and BillingSlots().disputed_items == []
    assert "Today is {reference_date}." in BILLING.system_prompt
    assert "Today is 2026-11-30." in BILLING.system_prompt.format(reference_date="2026-11-30")
    assert BILLING.brain() is not None and BILLING.hard_constraints


def test_marks_identifiers_dates_and_mutating_tools() -> None:
    mutating = {t.name for t in BILLING.tools if t.mutates}
    assert mutating == {"open_dispute", "issue_credit", "schedule_callback"}
    callback = BILLING.tool("schedule_callback")
    assert callback is not None and [p.name for p in callback.params_of(ParamKind.DATE)] == ["date"]
    for tool in BILLING.tools:
        for param in tool.params:
            if param.name.endswith("_id"):
                assert param.kind is ParamKind.IDENTIFIER and param.role, (tool.name, param.name)
        assert tool.json_schema()["type"] == "object"


def test_no_pipecat_import() -> None:
    code = (
        "import sys, voice_agent.domains.billing, voice_agent.harness.scenarios; "
        "sys.exit(1 if any(m.split('.')[0] == 'pipecat' for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0


# --- seeded data ----------------------------------------------------------------------------------------------------


def test_seed_is_deterministic_and_matches_committed_files() -> None:
    seed = _seed_module()
    built = seed.build(random.Random(seed.SEED))
    assert built == seed.build(random.Random(seed.SEED))
    for kind, records in built.items():
        on_disk = json.loads((ROOT / "config" / "billing" / f"{kind}.json").read_text())
        assert on_disk == records, f"config/billing/{kind}.json is stale: run scripts/seed_billing.py"
    total = sum(p.stat().st_size for p in (ROOT / "config" / "billing").glob("*.json"))
    assert total < 300_000


@pytest.mark.parametrize(("account", "at_least"), [("ACC-4729-18", 10), ("ACC-3318-52", 6), ("ACC-6051-07", 6)])
def test_one_character_slips_land_on_other_real_accounts(backend: BillingBackend, account: str, at_least: int) -> None:
    digit_positions = {i: DIGITS for i, ch in enumerate(account) if ch.isdigit()}
    hits = _mutations(account, digit_positions) & set(backend.accounts)
    assert len(hits) >= at_least, sorted(hits)
    assert {"ACC-4729-19", "ACC-4728-18"} <= set(backend.accounts)


def test_invoice_and_order_numbers_are_dense(backend: BillingBackend) -> None:
    assert {"INV-2026-1017", "INV-2026-1019", "INV-2026-1008"} <= set(backend.invoices)
    order_alphabet = {i: DIGITS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for i in range(4, 10)}
    assert len(_mutations("ORD-7K4M2P", order_alphabet) & set(backend.orders)) >= 4
    assert backend.orders["ORD-7K4M2R"]["account_id"] == backend.orders["ORD-7K4M2P"]["account_id"]
    assert backend.orders["ORD-7K4M2Q"]["account_id"] != "ACC-3318-52"


# --- handlers -------------------------------------------------------------------------------------------------------


async def test_lookups(backend: BillingBackend, state: CallState) -> None:
    account = await backend.lookup_account({"account_id": "ACC-4729-18"}, state)
    assert account["name"] == "Dana Whitfield" and account["account_id"] == "ACC-4729-18"
    listed = await backend.list_invoices({"account_id": "ACC-4729-18"}, state)
    assert [(i["invoice_id"], i["month"]) for i in listed["invoices"]] == [
        ("INV-2026-0981", "2026-09"), ("INV-2026-1018", "2026-10"), ("INV-2026-1102", "2026-11"),
    ]
    invoice = await backend.get_invoice({"invoice_id": "INV-2026-1018"}, state)
    assert [line["description"] for line in invoice["lines"]].count("CloudVault Pro") == 2
    order = await backend.lookup_order({"order_id": "ORD-7K4M2P"}, state)
    assert order["invoice_id"] == "INV-2026-1143" and order["amount"] == 49.0


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("lookup_account", {"account_id": "ACC-9999-99"}, "No account"),
        ("lookup_account", {"account_id": "ACC-4729-1"}, "not a valid account number"),
        ("lookup_account", {}, "account_id is required"),
        ("get_invoice", {"invoice_id": "INV-2026-9999"}, "No invoice"),
        ("lookup_order", {"order_id": "ORD-zz"}, "not a valid order number"),
        ("open_dispute", {"account_id": "ACC-4729-19", "invoice_id": "INV-2026-1018", "reason": "x"},
         "does not belong"),
        ("open_dispute", {"account_id": "ACC-3318-52", "invoice_id": "INV-2026-1143", "reason": "x",
                          "order_id": "ORD-7K4M2R"}, "was not billed on"),
        ("open_dispute", {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "reason": "x",
                          "category": "vibes"}, "category must be"),
        ("issue_credit", {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "amount": -5}, "greater than"),
        ("issue_credit", {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "amount": "lots"},
         "must be a number"),
        ("issue_credit", {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "amount": 500}, "exceeds"),
        ("issue_credit", {"account_id": "ACC-3318-52", "invoice_id": "INV-2026-1143", "amount": 50,
                          "order_id": "ORD-7K4M2P"}, "exceeds"),
        ("schedule_callback", {"account_id": "ACC-4729-18", "date": "2026-12-05"}, "weekdays only"),
        ("schedule_callback", {"account_id": "ACC-4729-18", "date": "2026-11-30"}, "after today"),
        ("schedule_callback", {"account_id": "ACC-4729-18", "date": "next week"}, "ISO date"),
        ("schedule_callback", {"account_id": "ACC-4729-18", "date": "2027-06-01"}, "at most"),
        ("update_case", {"requested_resolution": "  "}, "at least one"),
        ("transfer_to_human", {}, "reason is required"),
    ],
)
async def test_bad_input_raises_tool_error(
    backend: BillingBackend, state: CallState, tool: str, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        await backend.handlers()[tool](arguments, state)


async def test_effects_are_recorded_per_backend(backend: BillingBackend, state: CallState) -> None:
    args = {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "reason": "CloudVault Pro twice",
            "category": "duplicate_charge"}
    dispute = await backend.open_dispute(args, state)
    assert dispute["disputed_amount"] == 19.99 and dispute["status"] == "open"
    again = await backend.open_dispute(args, state)
    assert again["dispute_id"] == dispute["dispute_id"] and again["already_open"] is True
    credit = await backend.issue_credit(
        {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "amount": "19.99"}, state
    )
    assert credit["resolves_dispute"] == dispute["dispute_id"] and backend.disputes[0]["status"] == "resolved"
    callback = await backend.schedule_callback({"account_id": "ACC-4729-18", "date": "2026-12-15"}, state)
    assert callback["weekday"] == "Tuesday"
    await backend.update_case({"already_attempted": "tried the app"}, state)
    effects = (backend.disputes, backend.credits, backend.callbacks, backend.case_notes)
    assert [len(e) for e in effects] == [1, 1, 1, 1]
    assert BillingBackend.from_directory().credits == []
    with pytest.raises(ToolError, match="exceeds"):
        await backend.issue_credit({"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "amount": 90}, state)


async def test_dispute_without_a_matching_line_covers_the_whole_invoice(
    backend: BillingBackend, state: CallState
) -> None:
    result = await backend.open_dispute(
        {"account_id": "ACC-6051-07", "invoice_id": "INV-2026-1207", "reason": "this bill is wrong"}, state
    )
    assert result["disputed_amount"] == 71.0 and "whole invoice" in result["disputed_item"]
    fee = await backend.open_dispute(
        {"account_id": "ACC-6051-07", "invoice_id": "INV-2026-1055", "reason": "the broadband 500 line"}, state
    )
    assert fee["disputed_amount"] == 59.0


# --- harvest --------------------------------------------------------------------------------------------------------


async def _run(domain_backend: BillingBackend, state: CallState, tool: str, arguments: dict[str, Any]) -> Any:
    domain = billing_domain(domain_backend)
    spec = domain.tool(tool)
    assert spec is not None
    result = await domain.handlers[tool](arguments, state)
    harvested = harvest_result(spec, result, state.ledger, state.slots, state.turn)
    assert harvested.errors == ()
    return harvested


async def test_harvest_fills_ledger_and_slots_from_each_tool(backend: BillingBackend, state: CallState) -> None:
    await _run(backend, state, "lookup_account", {"account_id": "ACC-4729-18"})
    assert state.ledger.get("account", "ACC-4729-18") is not None
    assert state.slots.model.account_id == "ACC-4729-18"
    await _run(backend, state, "list_invoices", {"account_id": "ACC-4729-18"})
    assert state.ledger.get("invoice_2026-10", "INV-2026-1018") is not None
    await _run(backend, state, "get_invoice", {"invoice_id": "INV-2026-1143"})
    assert state.ledger.get("order", "ORD-7K4M2P") is not None
    await _run(backend, state, "open_dispute", {
        "account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "reason": "CloudVault Pro charged twice",
        "category": "duplicate_charge",
    })
    assert state.ledger.get("disputed_invoice", "INV-2026-1018") is not None
    assert state.slots.model.disputed_items == ["INV-2026-1018 duplicate_charge: CloudVault Pro 19.99"]
    assert state.slots.model.dispute_id == "DSP-2026-1018-01"
    await _run(backend, state, "issue_credit", {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018",
                                                "amount": 19.99})
    assert state.slots.model.credit_amount == 19.99 and state.ledger.by_role("credit")
    await _run(backend, state, "schedule_callback", {"account_id": "ACC-4729-18", "date": "2026-12-15"})
    assert state.slots.model.callback_date == "2026-12-15"
    await _run(backend, state, "update_case", {
        "requested_resolution": "credit to my account", "already_attempted": "the app",
        "timing_constraint": "travelling until the 14th",
    })
    model = state.slots.model
    assert model.requested_resolution == "credit to my account" and model.already_attempted == ["the app"]
    assert model.timing_constraints == ["travelling until the 14th"]
    assert all(e.verified for e in state.ledger.entries)


async def test_harvest_gives_each_disputed_order_its_role(backend: BillingBackend, state: CallState) -> None:
    base = {"account_id": "ACC-3318-52", "reason": "see category"}
    await _run(backend, state, "open_dispute", {**base, "invoice_id": "INV-2026-1143", "order_id": "ORD-7K4M2P",
                                                "category": "damaged_item"})
    await _run(backend, state, "open_dispute", {**base, "invoice_id": "INV-2026-0871", "order_id": "ORD-7K4M2R",
                                                "category": "duplicate_charge"})
    assert [e.value for e in state.ledger.by_role("damaged_item_order")] == ["ORD-7K4M2P"]
    assert [e.value for e in state.ledger.by_role("duplicate_charge_order")] == ["ORD-7K4M2R"]
    assert state.slots.model.disputed_items == [
        "INV-2026-1143 ORD-7K4M2P damaged_item: Electric Kettle 49.00",
        "INV-2026-0871 ORD-7K4M2R duplicate_charge: Wireless Headphones 89.00",
    ]


# --- handoff card ---------------------------------------------------------------------------------------------------


async def test_handoff_card_carries_slots_ledger_summary_and_open_items(
    backend: BillingBackend, state: CallState
) -> None:
    domain = billing_domain(backend)
    await _run(backend, state, "lookup_account", {"account_id": "ACC-4729-18"})
    dispute_args = {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018", "reason": "CloudVault Pro twice",
                    "category": "duplicate_charge"}
    state.transcript.append_tool_call(state.turn, "open_dispute", "c1", dispute_args)
    result = await domain.handlers["open_dispute"](dispute_args, state)
    spec = domain.tool("open_dispute")
    assert spec is not None
    harvest_result(spec, result, state.ledger, state.slots, state.turn)
    state.transcript.append_tool_result(state.turn, "open_dispute", "c1", result, ToolOutcome.COMPLETED)
    await _run(backend, state, "update_case", {"already_attempted": "I tried the CloudVault app's chat"})
    state.transcript.append_tool_call(state.turn, "get_invoice", "c2", {"invoice_id": "INV-2026-1102"})
    state.summary = EpisodeSummary(
        established=["the caller disputes a duplicate charge on the disputed_invoice"],
        pending=["confirm the credit once approved"],
        commitments=[Commitment(text="I'll make sure a specialist calls you back", turn=1)],
    )
    state.transcript.append_tool_call(state.turn, "transfer_to_human", "c3", {"reason": "wants a person"})

    card = handoff_card(state)
    assert card["slots"]["already_attempted"]["value"] == ["I tried the CloudVault app's chat"]
    assert card["slots"]["account_id"] == {"value": "ACC-4729-18", "turn": 1, "source": "lookup_account.account_id"}
    assert {"role": "account", "value": "ACC-4729-18", "verified": True, "source": "lookup_account.account_id",
            "first_seen": 1, "last_used": 1} in card["ledger"]
    assert card["summary"] == state.summary.render()
    open_items = card["open_items"]
    assert open_items["pending_tool_calls"] == [{"tool": "get_invoice", "arguments": {"invoice_id": "INV-2026-1102"},
                                                 "turn": 1}]
    assert open_items["summary_pending"] == ["confirm the credit once approved"]
    assert [d["dispute_id"] for d in open_items["unresolved_disputes"]] == ["DSP-2026-1018-01"]

    text = render_handoff_card(card)
    for verbatim in ("ACC-4729-18", "INV-2026-1018 duplicate_charge: CloudVault Pro 19.99",
                     "I tried the CloudVault app's chat", "confirm the credit once approved",
                     "I'll make sure a specialist calls you back", "DSP-2026-1018-01"):
        assert verbatim in text

    transferred = await domain.handlers["transfer_to_human"]({"reason": "wants a person"}, state)
    assert transferred["status"] == "transferred" and "Reason: wants a person" in transferred["handoff"]
    assert backend.transfers[0]["reason"] == "wants a person"


def test_empty_handoff_card_renders() -> None:
    call = CallState(slot_model=BillingSlots)
    text = render_handoff_card(handoff_card(call))
    assert "(no summary yet)" in text and "none" in text
