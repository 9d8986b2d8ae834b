"""The billing domain's slots: the typed facts a billing call must never lose."""

from __future__ import annotations

from pydantic import BaseModel, Field


class BillingSlots(BaseModel):
    """Must-keep facts of a billing call, written only by the tool layer's harvest.

    Every field has a default, so an empty call validates.

    Attributes:
        account_id: The caller's account, as a tool confirmed it.
        disputed_items: One line per disputed charge: invoice, order (if any), category,
            description and amount, as ``open_dispute`` returned them.
        requested_resolution: What the caller wants to happen, in their words.
        already_attempted: What the caller has already tried, in their words.
        timing_constraints: When the caller can and cannot be reached, in their words.
        dispute_id: The most recent dispute opened.
        credit_amount: The most recent credit applied.
        credited_items: One line per credit applied: invoice, order (if any) and amount, as ``issue_credit``
            returned them (so a credit asked for again is known to be done).
        callback_date: The scheduled callback day (ISO date).
    """

    account_id: str | None = None
    disputed_items: list[str] = Field(default_factory=list)
    requested_resolution: str | None = None
    already_attempted: list[str] = Field(default_factory=list)
    timing_constraints: list[str] = Field(default_factory=list)
    dispute_id: str | None = None
    credit_amount: float | None = None
    credited_items: list[str] = Field(default_factory=list)
    callback_date: str | None = None
