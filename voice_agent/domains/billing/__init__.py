"""The billing domain: account lookups, invoices, disputes, credits, callbacks and handoff."""

from __future__ import annotations

from voice_agent.domains.base import Domain
from voice_agent.domains.billing.backend import BillingBackend
from voice_agent.domains.billing.brain import SPOKEN_ID_SHAPES, BillingReferenceBrain, choose_callback_date
from voice_agent.domains.billing.handoff import handoff_card, render_handoff_card
from voice_agent.domains.billing.slots import BillingSlots
from voice_agent.domains.billing.tools import BILLING_TOOLS

SYSTEM_PROMPT = """\
You are the billing support agent of Northwind Broadband, speaking with a customer on the phone.
Today is {reference_date}.
Help with account questions, invoices, disputes, credits and callbacks. Use the tools to look things up
and to act; take identifiers only from KNOWN FACTS, tool results or what the caller has just said.
Record what the caller wants, what they already tried, and when they can be reached with update_case
as soon as they say it. Keep replies short and natural for speech."""
"""The agent's instructions; the pipeline formats ``{reference_date}`` with the call's ISO date."""

HARD_CONSTRAINTS = (
    "Never read account, invoice, order or dispute numbers back to the caller; say 'your account' or 'that invoice'.",
    "Use an identifier only if it is in KNOWN FACTS, a tool result, or what the caller said in the recent turns.",
    "Never book a callback on a day the caller ruled out; check every timing constraint they gave.",
    "Issue a credit only against an invoice the caller disputed, for no more than the disputed amount.",
)
"""Rules restated at the end of every context."""


def billing_domain(backend: BillingBackend | None = None) -> Domain:
    """Builds the billing domain.

    Args:
        backend: The records and effects store; the seeded data under ``config/billing/`` by default.
            Pass a fresh backend per call to keep each call's effects separate.

    Returns:
        The domain, with the backend under ``extra["backend"]`` and the handoff card
        builder under ``extra["handoff_card"]``.
    """
    store = backend if backend is not None else BillingBackend.from_directory()
    return Domain(
        name="billing",
        slot_model=BillingSlots,
        tools=BILLING_TOOLS,
        handlers=store.handlers(),
        make_brain=BillingReferenceBrain,
        system_prompt=SYSTEM_PROMPT,
        hard_constraints=HARD_CONSTRAINTS,
        outcome_of=store.outcome_of,
        extra={
            "backend": store,
            "handoff_card": handoff_card,
            "render_handoff_card": render_handoff_card,
            # A served call's line to its provider: transfer_to_human then moves the phone call.
            "use_transfer": store.use_transfer,
            # How callers spell identifiers out loud (# digit, X letter or digit), for the audio path.
            "spoken_id_shapes": SPOKEN_ID_SHAPES,
            # The ledger role of an identifier the caller states, by its shape (the tools' own roles).
            "spoken_id_roles": {"ACC-####-##": "account", "INV-####-####": "invoice", "ORD-XXXXXX": "order"},
            "recognizer_topic": "A billing support call about an account, invoices, a disputed charge, credits "
            "and callbacks.",
            # What a resumed call says it was on, by its latest tool call (voice_agent.core.resume).
            "resume_topics": {
                "lookup_account": "your account", "list_invoices": "your invoices", "get_invoice": "your invoice",
                "lookup_order": "your order", "open_dispute": "the dispute on your invoice",
                "issue_credit": "the credit for your invoice", "schedule_callback": "your callback",
                "transfer_to_human": "your transfer to a colleague",
            },
        },
    )


_shared: Domain | None = None


def __getattr__(name: str) -> Domain:
    """``BILLING``: the billing domain over the seeded data, one shared backend (build your own with
    :func:`billing_domain` for isolated effects). Built on first use: importing the package reads no file."""
    global _shared
    if name != "BILLING":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _shared is None:
        _shared = billing_domain()
    return _shared

__all__ = [
    "BILLING",
    "HARD_CONSTRAINTS",
    "SYSTEM_PROMPT",
    "BillingBackend",
    "BillingReferenceBrain",
    "BillingSlots",
    "billing_domain",
    "choose_callback_date",
    "handoff_card",
    "render_handoff_card",
]
