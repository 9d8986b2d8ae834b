"""Wrong actions the offline agent took on paraphrased calls, fixed by class and checked on wordings written here
(none copied from a paraphrase set):

* a charge refused without the word "dispute" ("I'm not paying for the second one") is a dispute, when the
  words name what is wrong with it; a yes to the agent's own offer of a dispute opens it;
* a credit or a dispute asked for again after the call already made it is not made twice: the lanes keep what was
  done (the ``credited_items`` and ``disputed_items`` slots), and the agent says so.

The third, a callback booked on the 14th after "away until then", is the date engine's: tests/test_dates_until_then.py.
"""

from __future__ import annotations

import pytest

from tests.test_billing_brain import call, facts, respond, result, system, user

ACCOUNT = "account: ACC-4729-18"
INVOICES = "invoice_2026-10: INV-2026-1018"

OBJECTIONS = [
    "The router rental shows up twice this month and I'm not paying for the second one.",
    "My blender arrived cracked and I won't accept being charged for it.",
    "That double charge shouldn't be on my bill at all.",
    "i got billed two times for the same thing and im not having it",
    "The speaker came smashed, and frankly I'm not okay with paying full price for that.",
]
NOT_OBJECTIONS = [
    "I'm not happy with how long I waited on hold.",           # no charge named
    "It says I was billed twice, is that normal?",             # a question, no refusal
    "I'm not paying by card any more, I've switched to direct debit.",
    "I'm not having much luck with the app, and it still shows the charge twice.",
    "I can't pay online, the page is broken.",
    "Was the duplicate charge on the September bill too?",
]


def _opens_dispute(*messages: dict[str, object]) -> bool:
    reply = respond(system(), facts(ACCOUNT, INVOICES), *messages)
    return any(c.name in ("open_dispute", "list_invoices") for c in reply.tool_calls)


@pytest.mark.parametrize("text", OBJECTIONS)
def test_a_charge_refused_without_the_word_dispute_is_disputed(text: str) -> None:
    assert _opens_dispute(user(text)), text


@pytest.mark.parametrize("text", NOT_OBJECTIONS)
def test_a_complaint_or_a_question_without_a_refused_charge_opens_none(text: str) -> None:
    assert not _opens_dispute(user(text)), text


def test_a_yes_to_the_agents_offer_of_a_dispute_opens_it_for_what_the_caller_described() -> None:
    described = "On the October invoice the router rental is on there two times."
    offer = {"role": "assistant", "content": "I'm sorry about that. Would you like me to open a dispute for it?"}
    reply = respond(system(), facts(ACCOUNT, INVOICES), user(described), offer, user("Yes please, go on."))
    (opened,) = [c for c in reply.tool_calls if c.name == "open_dispute"]
    assert opened.arguments["invoice_id"] == "INV-2026-1018" and opened.arguments["category"] == "duplicate_charge"
    assert opened.arguments["reason"] == described


CREDITED = "credited_items: INV-2026-1018 19.99"
DISPUTED = "disputed_items: INV-2026-1018 duplicate_charge: Router rental 19.99"


@pytest.mark.parametrize("ask", ["Could you process that credit for me now?", "ok go ahead and put the credit through"])
def test_a_credit_already_applied_in_the_call_is_not_issued_again(ask: str) -> None:
    reply = respond(system(), facts(ACCOUNT, DISPUTED, CREDITED), user(ask))
    assert not [c for c in reply.tool_calls if c.name == "issue_credit"]
    assert "already been applied" in reply.text
    # Without the credit in the lanes the same words issue it (the check reads what was done, not the words).
    fresh = respond(system(), facts(ACCOUNT, DISPUTED), user(ask))
    assert [c.name for c in fresh.tool_calls] == ["issue_credit"]


def test_a_credit_for_another_order_on_the_same_invoice_is_still_issued() -> None:
    reply = respond(system(), facts(ACCOUNT, "disputed_items: INV-2026-1018 ORD-7K4M2R duplicate_charge: Cable 9.00",
                                    "credited_items: INV-2026-1018 ORD-7K4M2P 19.99"),
                    user("Please apply the credit for ORD-7K4M2R now."))
    assert [c.name for c in reply.tool_calls] == ["issue_credit"]


def test_a_charge_already_disputed_in_the_call_is_not_disputed_again() -> None:
    reply = respond(system(), facts(ACCOUNT, INVOICES, DISPUTED),
                    user("Just to be clear, I want the October duplicate disputed."))
    assert not [c for c in reply.tool_calls if c.name == "open_dispute"]
    assert "already under dispute" in reply.text


def test_the_credit_made_in_this_turn_is_confirmed_not_called_already_done() -> None:
    ask = user("Could you process that credit for me now?")
    made = {"credit_id": "CRD-2026-1018-01", "invoice_id": "INV-2026-1018", "amount": 19.99, "status": "applied",
            "credited_item": "INV-2026-1018 19.99"}
    reply = respond(system(), facts(ACCOUNT, DISPUTED, CREDITED), ask,
                    call("c1", "issue_credit", {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1018",
                                                "amount": 19.99}), result("c1", made))
    assert reply.tool_calls == () and "already" not in reply.text and "credit" in reply.text
