"""Billing tool specs: identifier and date parameters marked, harvest rules by field name."""

from __future__ import annotations

from voice_agent.core.tool_spec import HarvestField, ParamKind, ToolParam, ToolSpec

DISPUTE_CATEGORIES = ("duplicate_charge", "damaged_item", "not_received", "wrong_amount", "other")
"""Why a charge is disputed; the category also names the ledger role of a disputed order."""

_ACCOUNT = ToolParam(
    "account_id", "The caller's account number, e.g. ACC-4729-18.", kind=ParamKind.IDENTIFIER, role="account"
)

LOOKUP_ACCOUNT = ToolSpec(
    name="lookup_account",
    description="Look up a customer account by its account number.",
    params=(_ACCOUNT,),
    harvest=(HarvestField("account_id", role="account", slot="account_id"),),
)

LIST_INVOICES = ToolSpec(
    name="list_invoices",
    description="List the recent invoices of an account, one per billing month.",
    params=(_ACCOUNT,),
    harvest=(
        HarvestField("account_id", role="account", slot="account_id"),
        HarvestField("invoices[].invoice_id", role="invoice_{month}"),
    ),
)

GET_INVOICE = ToolSpec(
    name="get_invoice",
    description="Get one invoice with its line items.",
    params=(ToolParam("invoice_id", "Invoice number, e.g. INV-2026-1018.", kind=ParamKind.IDENTIFIER, role="invoice"),),
    harvest=(
        HarvestField("invoice_id", role="invoice_{month}"),
        HarvestField("lines[].order_id", role="order"),
    ),
)

LOOKUP_ORDER = ToolSpec(
    name="lookup_order",
    description="Look up a shop order by its order number, with the invoice it was billed on.",
    params=(ToolParam("order_id", "Order number, e.g. ORD-7K4M2P.", kind=ParamKind.IDENTIFIER, role="order"),),
    harvest=(HarvestField("order_id", role="order"), HarvestField("invoice_id", role="invoice")),
)

OPEN_DISPUTE = ToolSpec(
    name="open_dispute",
    description="Open a billing dispute on an invoice, optionally for one order billed on it.",
    params=(
        _ACCOUNT,
        ToolParam("invoice_id", "The invoice holding the disputed charge.", kind=ParamKind.IDENTIFIER, role="invoice"),
        ToolParam("reason", "Why the caller disputes the charge, briefly."),
        ToolParam("category", "Kind of problem.", enum=DISPUTE_CATEGORIES, required=False),
        ToolParam(
            "order_id", "The disputed order, when the charge is for a shop order.",
            kind=ParamKind.IDENTIFIER, role="order", required=False,
        ),
    ),
    mutates=True,
    harvest=(
        HarvestField("invoice_id", role="disputed_invoice"),
        HarvestField("order_id", role="{category}_order"),
        HarvestField("dispute_id", role="dispute", slot="dispute_id"),
        HarvestField("disputed_item", slot="disputed_items"),
    ),
)

ISSUE_CREDIT = ToolSpec(
    name="issue_credit",
    description="Apply a credit to the account against an invoice (and optionally one order on it).",
    params=(
        _ACCOUNT,
        ToolParam("invoice_id", "The invoice the credit is for.", kind=ParamKind.IDENTIFIER, role="invoice"),
        ToolParam("amount", "Credit amount in the account currency.", type="number"),
        ToolParam(
            "order_id", "The order the credit is for, if any.", kind=ParamKind.IDENTIFIER, role="order", required=False
        ),
    ),
    mutates=True,
    harvest=(
        HarvestField("credit_id", role="credit"),
        HarvestField("amount", slot="credit_amount"),
        HarvestField("credited_item", slot="credited_items"),
    ),
)

SCHEDULE_CALLBACK = ToolSpec(
    name="schedule_callback",
    description="Book a callback from a billing specialist on a given weekday.",
    params=(_ACCOUNT, ToolParam("date", "Callback day, ISO format YYYY-MM-DD.", kind=ParamKind.DATE,
                                binds=("availability",), topic="callback")),
    mutates=True,
    harvest=(
        HarvestField("callback_id", role="callback"),
        HarvestField("date", slot="callback_date"),
    ),
)

TRANSFER_TO_HUMAN = ToolSpec(
    name="transfer_to_human",
    description="Hand the call to a human billing specialist, with a card of everything known so far.",
    params=(ToolParam("reason", "Why the caller needs a person."),),
)

# update_case is not ``mutates``: it changes nothing on the customer's account (it records
# what the caller said in this call's case note) and takes no identifier for the guard to check.
_SPAN = "the shortest exact span of the caller's words that says it."
"""How a ``caller_quote`` argument is asked for: quoted, and short (KNOWN FACTS goes with every request)."""

UPDATE_CASE = ToolSpec(
    name="update_case",
    description=(
        "Record, in the caller's own words, what they want to happen, what they have already tried, "
        "and when they can or cannot be reached. Call it as soon as the caller says any of these."
    ),
    params=(
        ToolParam("requested_resolution", "What the caller wants done: " + _SPAN, required=False,
                  kind=ParamKind.CALLER_QUOTE),
        ToolParam("already_attempted", "What the caller already tried: " + _SPAN, required=False,
                  kind=ParamKind.CALLER_QUOTE),
        ToolParam("timing_constraint", "When the caller can or cannot be reached: " + _SPAN,
                  required=False, kind=ParamKind.CALLER_QUOTE),
    ),
    # The result hands the quotes back: each slot's source is the caller span the guard found.
    harvest=(
        HarvestField("requested_resolution", slot="requested_resolution", from_param="requested_resolution"),
        HarvestField("already_attempted", slot="already_attempted", from_param="already_attempted"),
        HarvestField("timing_constraint", slot="timing_constraints", from_param="timing_constraint"),
    ),
)

BILLING_TOOLS: tuple[ToolSpec, ...] = (
    LOOKUP_ACCOUNT,
    LIST_INVOICES,
    GET_INVOICE,
    LOOKUP_ORDER,
    OPEN_DISPUTE,
    ISSUE_CREDIT,
    SCHEDULE_CALLBACK,
    TRANSFER_TO_HUMAN,
    UPDATE_CASE,
)
"""Every billing tool, in the order they are offered to the model."""
