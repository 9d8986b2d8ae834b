"""The billing backend: seeded fake records plus the tool handlers that act on them.

Handlers take ``(arguments, state)`` and return a structured result; bad input
(unknown records, malformed identifiers, impossible amounts or dates) raises
``ToolError`` with a message meant for the model. Everything a mutating tool
creates is kept per backend instance, so tests can assert the effects.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voice_agent.core.call_state import CallState
from voice_agent.core.effects import running_effect
from voice_agent.core.transfer import CALLBACK_INSTEAD, NOT_TRANSFERRED, TRANSFERRED, CallTransfer, TransferError
from voice_agent.datafiles import data_path
from voice_agent.domains.base import ToolError, ToolHandler
from voice_agent.domains.billing.handoff import handoff_card, render_handoff_card
from voice_agent.domains.billing.tools import DISPUTE_CATEGORIES

DEFAULT_DATA_DIR = data_path("billing")
"""Where ``scripts/seed_billing.py`` writes the seeded records."""

ACCOUNT_RE = re.compile(r"^ACC-\d{4}-\d{2}$")
INVOICE_RE = re.compile(r"^INV-\d{4}-\d{4}$")
ORDER_RE = re.compile(r"^ORD-[A-Z0-9]{6}$")
CALLBACK_HORIZON_DAYS = 90
"""Callbacks are booked at most this many days ahead."""

Record = dict[str, Any]

EFFECT_LISTS = ("disputes", "credits", "callbacks", "case_notes", "transfers")
"""The backend's effect lists (:meth:`BillingBackend.effects`)."""

_EFFECT = "effect"
"""The field of a created record that holds the effect key of the call that created it."""


def _load(path: Path) -> list[Record]:
    records = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of records")
    return records


def _text_arg(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ToolError(f"{name} is required.")
    return str(value).strip()


@dataclass
class BillingBackend:
    """Seeded billing records and the effects of this backend's tool calls.

    Args:
        accounts: Account records keyed by ``account_id``.
        invoices: Invoice records (with ``lines``) keyed by ``invoice_id``.
        orders: Order records keyed by ``order_id``.

    Attributes:
        disputes: Disputes opened through ``open_dispute``.
        credits: Credits applied through ``issue_credit``.
        callbacks: Callbacks booked through ``schedule_callback``.
        case_notes: Notes recorded through ``update_case``.
        transfers: Handoff cards produced by ``transfer_to_human`` (each with its ``status``, and its ``target``
            when the call was moved).
        transfer: A served call's line to its provider (:mod:`voice_agent.core.transfer`); None outside a
            served call, where ``transfer_to_human`` only builds the handoff card.
    """

    accounts: dict[str, Record]
    invoices: dict[str, Record]
    orders: dict[str, Record]
    disputes: list[Record] = field(default_factory=list)
    credits: list[Record] = field(default_factory=list)
    callbacks: list[Record] = field(default_factory=list)
    case_notes: list[Record] = field(default_factory=list)
    transfers: list[Record] = field(default_factory=list)
    transfer: CallTransfer | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_directory(cls, data_dir: Path | str = DEFAULT_DATA_DIR) -> BillingBackend:
        """Loads ``accounts.json``, ``invoices.json`` and ``orders.json`` from ``data_dir``.

        Raises:
            FileNotFoundError: A file is missing (run ``scripts/seed_billing.py``).
        """
        base = Path(data_dir)
        return cls(
            accounts={r["account_id"]: r for r in _load(base / "accounts.json")},
            invoices={r["invoice_id"]: r for r in _load(base / "invoices.json")},
            orders={r["order_id"]: r for r in _load(base / "orders.json")},
        )

    # --- effects, for a call that moves to another worker ----------------------------------------------------------

    def effects(self) -> dict[str, list[Record]]:
        """What this backend's tool calls created, as plain data (a resumed call carries it to its new worker).

        The seeded records stand in for a shared system of record; these lists are the part a real
        backend would keep itself, so the call store carries them instead. A record a mutating call created
        carries that call's effect key (``effect``), which the backend dedupes by.
        """
        return {name: [dict(r) for r in getattr(self, name)] for name in EFFECT_LISTS}

    def restore_effects(self, effects: Mapping[str, Any]) -> None:
        """Replaces the effects with ``effects`` (from :meth:`effects`); unknown names are ignored."""
        for name in EFFECT_LISTS:
            records = effects.get(name)
            if isinstance(records, list):
                setattr(self, name, [dict(r) for r in records if isinstance(r, Mapping)])

    def _made_with(self, key: str) -> Record | None:
        """The record the mutating call with effect ``key`` created, as its handler returned it."""
        for name in EFFECT_LISTS:
            for record in getattr(self, name):
                if record.get(_EFFECT) == key:
                    return {k: copy.deepcopy(v) for k, v in record.items() if k != _EFFECT}
        return None

    async def outcome_of(self, tool: str, key: str) -> Any:
        """The result of the mutating call made with effect ``key``, or None when this backend never received
        it (:data:`~voice_agent.core.effects.OutcomeLookup`)."""
        return self._made_with(key)

    def _deduped(self, handler: ToolHandler) -> ToolHandler:
        """``handler``, applied once per effect key (:func:`~voice_agent.core.effects.running_effect`): the record
        it creates is marked with the key, and a call made again with that key gets the record back."""

        async def run(arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
            key = running_effect()
            if key is None:
                return await handler(arguments, state)
            made = self._made_with(key)
            if made is not None:
                return made
            sizes = {name: len(getattr(self, name)) for name in EFFECT_LISTS}
            result = await handler(arguments, state)
            for name in EFFECT_LISTS:
                for record in getattr(self, name)[sizes[name]:]:
                    record[_EFFECT] = key
            return result

        return run

    def use_transfer(self, transfer: CallTransfer) -> None:
        """``transfer_to_human`` moves the call through ``transfer`` from now on (a served call's provider line)."""
        self.transfer = transfer

    # --- record access --------------------------------------------------------------------------------------------

    def account(self, account_id: str) -> Record:
        """The account ``account_id``.

        Raises:
            ToolError: Malformed or unknown account number.
        """
        if not ACCOUNT_RE.match(account_id):
            raise ToolError(f"{account_id!r} is not a valid account number (expected ACC-dddd-dd).")
        record = self.accounts.get(account_id)
        if record is None:
            raise ToolError(f"No account {account_id} exists. Ask the caller to repeat their account number.")
        return record

    def invoice(self, invoice_id: str, account_id: str | None = None) -> Record:
        """The invoice ``invoice_id``, checked to belong to ``account_id`` when given.

        Raises:
            ToolError: Malformed, unknown, or another account's invoice.
        """
        if not INVOICE_RE.match(invoice_id):
            raise ToolError(f"{invoice_id!r} is not a valid invoice number (expected INV-yyyy-dddd).")
        record = self.invoices.get(invoice_id)
        if record is None:
            raise ToolError(f"No invoice {invoice_id} exists.")
        if account_id is not None and record["account_id"] != account_id:
            raise ToolError(f"Invoice {invoice_id} does not belong to account {account_id}.")
        return record

    def order(self, order_id: str) -> Record:
        """The order ``order_id``.

        Raises:
            ToolError: Malformed or unknown order number.
        """
        if not ORDER_RE.match(order_id):
            raise ToolError(f"{order_id!r} is not a valid order number (expected ORD- and six letters or digits).")
        record = self.orders.get(order_id)
        if record is None:
            raise ToolError(f"No order {order_id} exists.")
        return record

    def invoices_of(self, account_id: str) -> list[Record]:
        """The account's invoices, oldest month first."""
        return sorted((r for r in self.invoices.values() if r["account_id"] == account_id), key=lambda r: r["month"])

    def credited(self, invoice_id: str, order_id: str | None = None) -> float:
        """Total already credited against an invoice (or one order on it) by this backend."""
        amounts = [
            float(c["amount"]) for c in self.credits
            if c["invoice_id"] == invoice_id and (order_id is None or c.get("order_id") == order_id)
        ]
        return round(sum(amounts), 2)

    # --- handlers -------------------------------------------------------------------------------------------------

    async def lookup_account(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``lookup_account``."""
        acc = self.account(_text_arg(arguments, "account_id"))
        invoices = self.invoices_of(acc["account_id"])
        balance = round(sum(i["total"] for i in invoices if i["status"] != "paid"), 2)
        return {
            "account_id": acc["account_id"], "name": acc["name"], "plan": acc["plan"], "status": acc["status"],
            "balance": balance, "statement_day": acc["statement_day"], "payment_method": acc["payment_method"],
        }

    async def list_invoices(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``list_invoices``."""
        acc = self.account(_text_arg(arguments, "account_id"))
        return {
            "account_id": acc["account_id"],
            "invoices": [
                {"invoice_id": i["invoice_id"], "month": i["month"], "total": i["total"], "status": i["status"]}
                for i in self.invoices_of(acc["account_id"])
            ],
        }

    async def get_invoice(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``get_invoice``."""
        inv = self.invoice(_text_arg(arguments, "invoice_id"))
        return {k: inv[k] for k in ("invoice_id", "account_id", "month", "issued", "due", "total", "status", "lines")}

    async def lookup_order(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``lookup_order``."""
        order = self.order(_text_arg(arguments, "order_id"))
        return dict(order)

    async def open_dispute(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``open_dispute``: one open dispute per invoice and order (retries return it)."""
        acc = self.account(_text_arg(arguments, "account_id"))
        inv = self.invoice(_text_arg(arguments, "invoice_id"), acc["account_id"])
        reason = _text_arg(arguments, "reason")
        category = str(arguments.get("category") or "other")
        if category not in DISPUTE_CATEGORIES:
            raise ToolError(f"category must be one of {', '.join(DISPUTE_CATEGORIES)}.")
        order_id = str(arguments["order_id"]).strip() if arguments.get("order_id") else None
        if order_id is not None:
            order = self.order(order_id)
            if order["invoice_id"] != inv["invoice_id"]:
                raise ToolError(f"Order {order_id} was not billed on invoice {inv['invoice_id']}.")
        for existing in self.disputes:
            if existing["invoice_id"] == inv["invoice_id"] and existing.get("order_id") == order_id:
                return {**existing, "already_open": True}
        description, amount = _disputed_charge(inv, category, reason, order_id)
        dispute: Record = {
            "dispute_id": f"DSP-{inv['invoice_id'][4:]}-{len(self.disputes) + 1:02d}",
            "account_id": acc["account_id"],
            "invoice_id": inv["invoice_id"],
            "category": category,
            "reason": reason,
            "disputed_amount": amount,
            "disputed_item": " ".join(
                p for p in (inv["invoice_id"], order_id, f"{category}:", description, f"{amount:.2f}") if p
            ),
            "status": "open",
            "opened_turn": state.turn,
        }
        if order_id is not None:
            dispute["order_id"] = order_id
        self.disputes.append(dispute)
        return dict(dispute)

    async def issue_credit(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``issue_credit``: the amount must be positive and within what is still creditable."""
        acc = self.account(_text_arg(arguments, "account_id"))
        inv = self.invoice(_text_arg(arguments, "invoice_id"), acc["account_id"])
        try:
            amount = round(float(_text_arg(arguments, "amount")), 2)
        except ValueError:
            raise ToolError(f"amount must be a number, got {arguments.get('amount')!r}.") from None
        if amount <= 0:
            raise ToolError("amount must be greater than zero.")
        order_id = str(arguments["order_id"]).strip() if arguments.get("order_id") else None
        if order_id is not None:
            order = self.order(order_id)
            if order["invoice_id"] != inv["invoice_id"]:
                raise ToolError(f"Order {order_id} was not billed on invoice {inv['invoice_id']}.")
            ceiling = sum(line["amount"] for line in inv["lines"] if line.get("order_id") == order_id)
            limit = round(ceiling - self.credited(inv["invoice_id"], order_id), 2)
        else:
            limit = round(inv["total"] - self.credited(inv["invoice_id"]), 2)
        if amount > limit:
            raise ToolError(f"amount {amount:.2f} exceeds what can still be credited here ({limit:.2f}).")
        resolved = next(
            (
                d for d in self.disputes
                if d["invoice_id"] == inv["invoice_id"] and d["status"] == "open"
                and (order_id is None or d.get("order_id") == order_id)
            ),
            None,
        )
        credit: Record = {
            "credit_id": f"CRD-{inv['invoice_id'][4:]}-{len(self.credits) + 1:02d}",
            "account_id": acc["account_id"],
            "invoice_id": inv["invoice_id"],
            "amount": amount,
            "status": "applied",
        }
        if order_id is not None:
            credit["order_id"] = order_id
        # What was credited, as one line the call keeps (a slot): the agent must know what it already did.
        credit["credited_item"] = " ".join(p for p in (inv["invoice_id"], order_id, f"{amount:.2f}") if p)
        if resolved is not None:
            resolved["status"] = "resolved"
            credit["resolves_dispute"] = resolved["dispute_id"]
        self.credits.append(credit)
        return dict(credit)

    async def schedule_callback(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``schedule_callback``: a weekday after the call's day, within the booking horizon."""
        acc = self.account(_text_arg(arguments, "account_id"))
        raw = _text_arg(arguments, "date")
        try:
            day = dt.date.fromisoformat(raw)
        except ValueError:
            raise ToolError(f"date must be an ISO date (YYYY-MM-DD), got {raw!r}.") from None
        today = state.reference_date
        if day <= today:
            raise ToolError(f"A callback must be after today ({today.isoformat()}).")
        if (day - today).days > CALLBACK_HORIZON_DAYS:
            raise ToolError(f"Callbacks can be booked at most {CALLBACK_HORIZON_DAYS} days ahead.")
        if day.weekday() >= 5:
            raise ToolError("Specialists call back on weekdays only; pick a Monday to Friday.")
        callback: Record = {
            "callback_id": f"CBK-{day.strftime('%m%d')}-{len(self.callbacks) + 1:02d}",
            "account_id": acc["account_id"],
            "date": day.isoformat(),
            "weekday": day.strftime("%A"),
            "status": "scheduled",
        }
        self.callbacks.append(callback)
        return dict(callback)

    async def update_case(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``update_case``: records the caller's words; at least one field is required."""
        fields = ("requested_resolution", "already_attempted", "timing_constraint")
        note = {k: str(arguments[k]).strip() for k in fields if arguments.get(k) and str(arguments[k]).strip()}
        if not note:
            raise ToolError(f"update_case needs at least one of {', '.join(fields)}.")
        self.case_notes.append({**note, "turn": state.turn})
        return {"status": "noted", **note}

    async def transfer_to_human(self, arguments: dict[str, Any], state: CallState) -> dict[str, Any]:
        """Handler of ``transfer_to_human``: builds the handoff card, then moves a served call to its target.

        Outside a served call (no :attr:`transfer`) the card is the whole transfer, as before. In a served
        call without a transfer target nothing is moved and the result says so (:data:`NOT_TRANSFERRED`),
        so the agent offers a callback instead of pretending.

        Raises:
            ToolError: The provider did not move the call; the message tells the model to offer a callback.
        """
        reason = _text_arg(arguments, "reason")
        card = handoff_card(state)
        card["reason"] = reason
        rendered = render_handoff_card(card)
        line = self.transfer
        if line is None:
            self.transfers.append({**card, "status": TRANSFERRED})
            return {"status": TRANSFERRED, "queue": "billing_specialists", "handoff": rendered}
        if line.target is None:
            self.transfers.append({**card, "status": NOT_TRANSFERRED})
            return {"status": NOT_TRANSFERRED, "why": "No transfer target is configured for this line.",
                    "instead": CALLBACK_INSTEAD}
        try:
            await line.transfer(card)
        except TransferError as exc:
            self.transfers.append({**card, "status": "failed", "target": line.target, "error": str(exc)})
            raise ToolError(f"The transfer failed ({exc}). {CALLBACK_INSTEAD}") from None
        self.transfers.append({**card, "status": TRANSFERRED, "target": line.target})
        return {"status": TRANSFERRED, "target": line.target, "handoff": rendered}

    def handlers(self) -> dict[str, ToolHandler]:
        """Tool name -> handler, for every billing tool."""
        return {
            "lookup_account": self.lookup_account,
            "list_invoices": self.list_invoices,
            "get_invoice": self.get_invoice,
            "lookup_order": self.lookup_order,
            "open_dispute": self._deduped(self.open_dispute),
            "issue_credit": self._deduped(self.issue_credit),
            "schedule_callback": self._deduped(self.schedule_callback),
            "update_case": self.update_case,
            "transfer_to_human": self.transfer_to_human,
        }


def _disputed_charge(inv: Record, category: str, reason: str, order_id: str | None) -> tuple[str, float]:
    """(description, amount) of the charge a dispute is about.

    The order's lines when an order is named; for a duplicate charge, the repeated
    line; else a line whose description the reason mentions; else the whole invoice.
    """
    lines: list[Record] = inv["lines"]
    if order_id is not None:
        lines = [line for line in lines if line.get("order_id") == order_id]
    if category == "duplicate_charge":
        seen: set[tuple[str, float]] = set()
        for line in lines:
            key = (line["description"], line["amount"])
            if key in seen:
                return str(line["description"]), float(line["amount"])
            seen.add(key)
    if order_id is not None and lines:
        return str(lines[0]["description"]), float(lines[0]["amount"])
    mentioned = [line for line in lines if line["description"].lower() in reason.lower()]
    if mentioned:
        return str(mentioned[-1]["description"]), float(mentioned[-1]["amount"])
    return "whole invoice", float(inv["total"])
