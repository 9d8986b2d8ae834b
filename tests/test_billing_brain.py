"""The billing reference brain: routing, value sources, re-asks, callback dates, and full scenario replays."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from voice_agent.agent.brain import BrainReply
from voice_agent.core.assembler import KNOWN_FACTS_HEADER, AssemblerConfig, ContextAssembler
from voice_agent.core.call_state import CallState
from voice_agent.core.guards.id_guard import IdGuard
from voice_agent.core.harvest import harvest_result, record_caller_arguments
from voice_agent.core.policy import ContextPolicy
from voice_agent.core.transcript import ToolOutcome
from voice_agent.domains.base import ToolError
from voice_agent.domains.billing import SYSTEM_PROMPT, BillingBackend, BillingReferenceBrain, billing_domain
from voice_agent.domains.billing import choose_callback_date as choose
from voice_agent.harness.scenarios import load_scenario

Message = dict[str, Any]
TOOLS = [
    "lookup_account", "list_invoices", "get_invoice", "lookup_order", "open_dispute", "issue_credit",
    "schedule_callback", "transfer_to_human", "update_case",
]
ID_PATTERN = re.compile(r"\b(?:ACC|INV|ORD|DSP|CRD|CBK)-[A-Z0-9-]+")
brain = BillingReferenceBrain()


def system(today: str = "2026-11-30") -> Message:
    return {"role": "system", "content": SYSTEM_PROMPT.format(reference_date=today)}


def facts(*lines: str) -> Message:
    return {"role": "system", "content": KNOWN_FACTS_HEADER + "\n" + "\n".join(f"- {line}" for line in lines)}


def summary(text: str) -> Message:
    return {"role": "system", "content": "SUMMARY of earlier turns:\n" + text}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def call(call_id: str, name: str, arguments: dict[str, Any]) -> Message:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function",
                                                                   "function": function}]}


def result(call_id: str, body: dict[str, Any]) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(body)}


def respond(*messages: Message) -> BrainReply:
    # Hard constraints close every assembled context; the brain must look past them.
    return brain.respond([*messages, {"role": "system", "content": "HARD CONSTRAINTS (never break these):\n- x"}],
                         TOOLS)


def only_call(reply: BrainReply) -> tuple[str, dict[str, Any]]:
    assert len(reply.tool_calls) == 1, reply
    return reply.tool_calls[0].name, reply.tool_calls[0].arguments


# --- value sources --------------------------------------------------------------------------------------------------


def test_fills_account_from_known_facts_before_older_caller_text() -> None:
    reply = respond(system(), facts("account: ACC-4729-18 (verified; since turn 4)"),
                    user("My old account was ACC-4729-19."), user("Can you pull up my invoices?"))
    assert only_call(reply) == ("list_invoices", {"account_id": "ACC-4729-18"})


def test_slot_line_also_counts_as_known_fact() -> None:
    reply = respond(system(), facts("account_id: ACC-3318-52 (turn 2, from lookup_account.account_id)"),
                    user("Could you list my bills?"))
    assert only_call(reply) == ("list_invoices", {"account_id": "ACC-3318-52"})


def test_asks_for_the_account_when_the_context_has_none() -> None:
    reply = respond(system(), user("Can you pull up my invoices?"))
    assert reply.tool_calls == () and reply.asks_for == "account_id"
    assert not ID_PATTERN.search(reply.text)


def test_uses_a_mutated_id_from_the_summary_like_a_model_would() -> None:
    reply = respond(system(), summary("- Caller (account ACC-4729-19) disputes a double charge."),
                    user("Right, can you go ahead and issue the credit now? It's 19.99 on INV-2026-1018."))
    name, arguments = only_call(reply)
    assert name == "issue_credit" and arguments["account_id"] == "ACC-4729-19"
    assert arguments["invoice_id"] == "INV-2026-1018" and arguments["amount"] == 19.99


def test_truncated_id_in_summary_means_asking_again() -> None:
    reply = respond(system(), summary("Caller's account ACC-4729-1... has a disputed charge."),
                    user("Right, can you go ahead and issue the credit now?"))
    assert reply.asks_for == "account_id" and reply.tool_calls == ()


def test_tool_results_beat_summary_and_caller_text() -> None:
    reply = respond(
        system(), summary("account ACC-1111-11"), user("It's ACC-2222-22."),
        call("c1", "lookup_account", {"account_id": "ACC-4729-18"}),
        result("c1", {"account_id": "ACC-4729-18", "name": "x"}), {"role": "assistant", "content": "Found it."},
        user("Could you pull up my statements?"),
    )
    assert only_call(reply) == ("list_invoices", {"account_id": "ACC-4729-18"})


def test_credit_picks_the_disputed_item_by_role() -> None:
    known = facts(
        "disputed_items: INV-2026-1143 ORD-7K4M2P damaged_item: Electric Kettle 49.00, "
        "INV-2026-0871 ORD-7K4M2R duplicate_charge: Wireless Headphones 89.00"
        " (turn 5, from open_dispute.disputed_item)",
        "account: ACC-3318-52 (verified; since turn 2)",
    )
    damaged = respond(system(), known, user("Please go ahead and issue the credit for the damaged kettle."))
    assert only_call(damaged) == ("issue_credit", {"account_id": "ACC-3318-52", "invoice_id": "INV-2026-1143",
                                                   "amount": 49.0, "order_id": "ORD-7K4M2P"})
    duplicate = respond(system(), known, user("And put through the refund for the duplicate charge."))
    assert only_call(duplicate)[1]["order_id"] == "ORD-7K4M2R"


def test_dispute_finds_the_invoice_by_month_role() -> None:
    reply = respond(
        system(),
        facts("account: ACC-4729-18 (verified; since turn 4)",
              "invoice_2026-10: INV-2026-1018 (verified; since turn 5)",
              "invoice_2026-11: INV-2026-1102 (verified; since turn 5)"),
        user("The October bill has CloudVault Pro twice. I want to dispute it."),
    )
    name, arguments = only_call(reply)
    assert name == "open_dispute" and arguments["invoice_id"] == "INV-2026-1018"
    assert arguments["category"] == "duplicate_charge"


def test_dispute_without_known_invoices_lists_them_first() -> None:
    reply = respond(system(), facts("account: ACC-4729-18 (verified; since turn 4)"),
                    user("Please open a dispute on the October invoice."))
    assert only_call(reply) == ("list_invoices", {"account_id": "ACC-4729-18"})


# --- routing --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    ["How long does a dispute usually take to resolve?", "Can I pay by bank transfer instead of direct debit?",
     "Could it affect my credit score?", "How long do you keep old bills available online?"],
)
def test_knowledge_questions_call_no_tool(question: str) -> None:
    reply = respond(system(), facts("account: ACC-4729-18 (verified; since turn 4)"), user(question))
    assert reply.tool_calls == () and reply.text


def test_knowledge_chunk_answers_a_question() -> None:
    chunk = {"role": "system", "content": "KNOWLEDGE (may help with this question):\n[1] Statements close on the "
                                          "5th. Payment is due 20 days later."}
    reply = respond(system(), user("When does my statement close?"), chunk)
    assert reply.text == "Statements close on the 5th."
    # An earlier question's knowledge stays where its turn put it; it does not answer the next question.
    later = respond(system(), user("When does my statement close?"), chunk, user("When does my statement close?"))
    assert later.text != "Statements close on the 5th."


def test_case_notes_record_the_callers_words() -> None:
    reply = respond(system(), user("I already tried the app. What I'd like is the charge credited back to me."))
    assert only_call(reply) == ("update_case", {
        "requested_resolution": "What I'd like is the charge credited back to me.",
        "already_attempted": "I already tried the app.",
    })
    timing = respond(system(), user("I'm away until the 14th, so please don't ring me before then."))
    name, arguments = only_call(timing)
    assert name == "update_case" and "until the 14th" in arguments["timing_constraint"]


def test_transfer_and_lookups() -> None:
    assert only_call(respond(system(), user("Can you put me through to a person?")))[0] == "transfer_to_human"
    assert only_call(respond(system(), user("It's ACC 4729 18.")))[1] == {"account_id": "ACC-4729-18"}
    orders = respond(system(), user("The orders are ORD-7K4M2P and ORD-7K4M2R."))
    assert [c.arguments["order_id"] for c in orders.tool_calls] == ["ORD-7K4M2P", "ORD-7K4M2R"]


def test_unavailable_tool_is_not_called() -> None:
    reply = brain.respond([system(), user("Can you put me through to a person?")], ["lookup_account"])
    assert reply.tool_calls == () and reply.text


# --- after tool results ---------------------------------------------------------------------------------------------

CREDIT_ARGS = {"account_id": "ACC-4729-19", "invoice_id": "INV-2026-1018", "amount": 19.99}


def test_rejected_id_is_asked_for_again_without_echoing_it() -> None:
    reason = ("Rejected: account_id='ACC-4729-19' is not a known identifier; it looks like a corrupted copy of the "
              "account (ACC-4729-18).")
    reply = respond(system(), user("Go ahead and issue the credit."), call("c1", "issue_credit", CREDIT_ARGS),
                    result("c1", {"status": "rejected", "guard": "id", "verdict": "mutated", "reason": reason}))
    assert reply.asks_for == "account_id" and reply.tool_calls == ()
    assert not ID_PATTERN.search(reply.text)


def test_unverified_id_is_looked_up_then_the_call_retried() -> None:
    reason = "Rejected: issue_credit changes the account, and account_id has only been stated by the caller."
    history = [
        system(), user("Go ahead and issue the credit for ACC-4729-19 on INV-2026-1018, 19.99."),
        call("c1", "issue_credit", CREDIT_ARGS),
        result("c1", {"status": "rejected", "guard": "id", "verdict": "unverified", "reason": reason}),
    ]
    lookup = respond(*history)
    assert only_call(lookup) == ("lookup_account", {"account_id": "ACC-4729-19"})
    history += [call("c2", "lookup_account", {"account_id": "ACC-4729-19"}),
                result("c2", {"account_id": "ACC-4729-19", "name": "x"})]
    retry = respond(*history)
    assert only_call(retry) == ("issue_credit", CREDIT_ARGS)
    history += [call("c3", "issue_credit", CREDIT_ARGS),
                result("c3", {"status": "rejected", "guard": "id", "verdict": "unverified", "reason": reason})]
    assert respond(*history).asks_for == "account_id"  # no lookup loop


def test_date_rejection_asks_for_another_day() -> None:
    reply = respond(system(), user("Call me back on Monday."),
                    call("c1", "schedule_callback", {"account_id": "ACC-4729-18", "date": "2026-12-07"}),
                    result("c1", {"status": "rejected", "guard": "date", "verdict": "conflict", "reason": "turn 8"}))
    assert reply.asks_for == "date" and reply.tool_calls == ()


def test_tool_error_apologises_and_asks() -> None:
    reply = respond(system(), user("It's ACC-9999-99."), call("c1", "lookup_account", {"account_id": "ACC-9999-99"}),
                    result("c1", {"status": "error", "error": "No account ACC-9999-99 exists."}))
    assert reply.text.startswith("Sorry") and reply.asks_for == "account_id"
    assert not ID_PATTERN.search(reply.text)


def test_error_naming_an_invoice_asks_for_the_invoice() -> None:
    arguments = {"account_id": "ACC-4729-18", "invoice_id": "INV-2026-1143", "reason": "x"}
    reply = respond(system(), user("Please dispute it."), call("c1", "open_dispute", arguments),
                    result("c1", {"status": "error", "error": "Invoice INV-2026-1143 does not belong to account "
                                                              "ACC-4729-18."}))
    assert reply.asks_for == "invoice_id"


def test_success_is_confirmed_without_repeating_identifiers() -> None:
    reply = respond(system(), user("It's ACC-4729-18."), call("c1", "lookup_account", {"account_id": "ACC-4729-18"}),
                    result("c1", {"account_id": "ACC-4729-18", "name": "Dana Whitfield"}))
    assert reply.tool_calls == () and reply.text and not ID_PATTERN.search(reply.text)
    assert "Dana" not in reply.text


# --- callback dates -------------------------------------------------------------------------------------------------


def test_callback_date_respects_constraints_in_the_context() -> None:
    reply = respond(
        system("2026-12-08"), facts("account: ACC-6051-07 (verified; since turn 2)"),
        user("I'm travelling until the 14th."), user("And not a Tuesday, that's the school run."),
        user("Could someone call me back next week sometime?"),
    )
    assert not reply.tool_calls and "Wednesday the 16th of December" in reply.text


def test_callback_date_reads_constraints_from_known_facts_and_summary() -> None:
    known = facts("account: ACC-6051-07 (verified; since turn 2)",
                  "timing_constraints: I'm travelling until the 14th (turn 3, from update_case.timing_constraint)")
    reply = respond(system("2026-12-08"), known, summary("- Caller said: not Tuesdays, school run."),
                    user("Could someone call me back next week sometime?"))
    assert not reply.tool_calls and "Wednesday the 16th of December" in reply.text


def test_callback_without_constraints_takes_the_first_weekday() -> None:
    reply = respond(system("2026-12-04"), facts("account: ACC-6051-07 (verified; since turn 2)"),
                    user("Can someone call me back? Any day is fine."))
    assert "Monday the 7th of December" in reply.text  # Friday the 4th -> Monday the 7th


def test_callback_is_booked_only_after_the_caller_agrees() -> None:
    proposal = {"role": "assistant", "content": "I can book a callback for Monday the 7th of December. Does that work?"}
    known = facts("account: ACC-6051-07 (verified; since turn 2)")
    asked = user("Can someone call me back? Any day is fine.")
    agreed = respond(system("2026-12-04"), known, asked, proposal, user("Perfect, thank you."))
    assert only_call(agreed) == ("schedule_callback", {"account_id": "ACC-6051-07", "date": "2026-12-07"})
    declined = respond(system("2026-12-04"), known, asked, proposal, user("Hmm, what else is on my bill?"))
    assert not any(c.name == "schedule_callback" for c in declined.tool_calls)


def test_callback_takes_a_named_day_as_said() -> None:
    reply = respond(system("2026-12-08"), facts("account: ACC-6051-07 (verified; since turn 2)"),
                    user("I'm travelling until the 14th."), user("Call me back on the 11th please."))
    assert only_call(reply)[1]["date"] == "2026-12-11"  # the date guard, not the brain, judges this


def test_callback_without_todays_date_asks() -> None:
    reply = brain.respond([{"role": "system", "content": "You are an agent."},
                           facts("account: ACC-6051-07 (verified; since turn 2)"), user("Please call me back.")], TOOLS)
    assert reply.asks_for == "date"


def test_choose_callback_date_directly() -> None:
    ref = dt.date(2026, 11, 30)
    assert choose("any day", ["I'm travelling until the 14th"], ref) == dt.date(2026, 12, 15)
    assert choose("any day", ["please don't call before the 14th"], ref) == dt.date(2026, 12, 14)
    corrected = ["I'm away until the 14th", "Actually I'm only away until the 9th"]
    assert choose("any day", corrected, ref) == dt.date(2026, 12, 10)


# --- full replays ---------------------------------------------------------------------------------------------------


@dataclass
class Replay:
    """What a replay produced."""

    actions: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    asks: list[tuple[int, str]] = field(default_factory=list)
    spoken: list[str] = field(default_factory=list)
    backend: BillingBackend | None = None


async def replay(name: str, view: Callable[[list[Message]], list[Message]] = lambda m: m) -> Replay:
    """Plays the scenario's caller turns through lanes, ID guard, tools and harvest (no summarizer: K raw turns)."""
    scenario = load_scenario(name)
    assert scenario.reference_date is not None
    backend = BillingBackend.from_directory()
    domain = billing_domain(backend)
    state = CallState(call_id=name, reference_date=scenario.reference_date, policy=ContextPolicy(keep=6, every=5),
                      slot_model=domain.slot_model)
    prompt = domain.system_prompt.format(reference_date=scenario.reference_date.isoformat())
    assembler = ContextAssembler(AssemblerConfig(system_prompt=prompt, hard_constraints=domain.hard_constraints))
    guard, the_brain, names = IdGuard(), domain.brain(), [t.name for t in domain.tools]
    out = Replay(backend=backend)
    counter = 0
    for exchange, text in scenario.caller_turns():
        state.start_turn(text)
        state.tracker.on_turn_start(state.turn)  # nothing is summarized: older turns simply leave the window
        for _ in range(6):
            reply = the_brain.respond(view(assembler.build(state).messages), names)
            if reply.asks_for:
                out.asks.append((exchange, reply.asks_for))
            if not reply.tool_calls:
                state.record_agent(reply.text)
                out.spoken.append(reply.text)
                break
            ids = []
            for request in reply.tool_calls:
                counter += 1
                ids.append(f"call{counter}")
                state.transcript.append_tool_call(state.turn, request.name, ids[-1], request.arguments)
            for request, call_id in zip(reply.tool_calls, ids, strict=True):
                spec = domain.tool(request.name)
                assert spec is not None
                out.actions.append((exchange, request.name, dict(request.arguments)))
                refused = [c for c in guard.check(spec, request.arguments, state.ledger, state.recent_entries())
                           if not c.accepted]
                body: Any
                if refused:
                    body = {"status": "rejected", "guard": "id", "verdict": refused[0].verdict.value,
                            "reason": refused[0].reason}
                    outcome = ToolOutcome.REJECTED
                else:
                    record_caller_arguments(spec, request.arguments, state.ledger, state.turn)
                    try:
                        body = await domain.handlers[request.name](dict(request.arguments), state)
                        harvest_result(spec, body, state.ledger, state.slots, state.turn)
                        outcome = ToolOutcome.COMPLETED
                    except ToolError as exc:
                        body, outcome = {"status": "error", "error": str(exc)}, ToolOutcome.FAILED
                state.transcript.append_tool_result(state.turn, request.name, call_id, body, outcome)
    return out


@pytest.mark.parametrize("name", ["billing_dispute", "refund_orders", "callback_constraints"])
async def test_scenario_replays_with_lanes_match_the_recorded_actions(name: str) -> None:
    scenario = load_scenario(name)
    run = await replay(name)
    expected = [((a.turn - 1) // 2 + 1, a.tool, a.args) for a in scenario.actions]
    assert run.actions == expected
    # The only asks are for values the caller had not given yet.
    assert all(asked == "account_id" and exchange <= 2 for exchange, asked in run.asks)
    assert not any(ID_PATTERN.search(text) for text in run.spoken)


async def test_without_known_facts_the_account_is_asked_for_again_on_31() -> None:
    def no_known_facts(messages: list[Message]) -> list[Message]:
        return [m for m in messages if not str(m.get("content") or "").startswith("KNOWN FACTS")]

    run = await replay("billing_dispute", no_known_facts)
    assert (31, "account_id") in run.asks
    assert not any(tool == "issue_credit" and exchange == 31 for exchange, tool, _ in run.actions)


def test_dispute_request_survives_an_asr_slip() -> None:
    known = facts("account: ACC-4729-18", "invoice_2026-10: INV-2026-1018")
    said = user("On need October invoice, Cloudball Pro was charged twice, 1999 each time. "
                "I went to dispute the duplicate charge.")
    reply = respond(system(), known, said)
    assert "open_dispute" in [c.name for c in reply.tool_calls]
    question = respond(system(), known, user("How long does a dispute usually take to resolve?"))
    assert "open_dispute" not in [c.name for c in question.tool_calls]


def test_reads_the_callers_quoted_date_limits_in_known_facts_as_the_assembler_writes_them() -> None:
    # Under lanes the limits reach the model only as quoted KNOWN FACTS lines with their turn: no summary, no
    # caller text. The offered day must respect both ("travelling until the 14th", "not a Tuesday").
    reply = respond(system("2026-12-08"),
                    facts("account: ACC-6051-07 (verified; since turn 2)",
                          'timing_constraint (turn 3): "I\'m travelling until the 14th, so no calls before then"',
                          'caller said (turn 4): "And not a Tuesday either, that\'s the school run."'),
                    user("Could someone call me back next week sometime?"))
    assert reply.text.startswith("I can book a callback for Wednesday the 16th"), reply


def test_follows_the_date_contract_reading_back_then_booking_after_the_yes() -> None:
    say = 'Before I book it: you said "not before the 3rd". Shall I still book the callback for Friday 4 December?'
    history = [system(), facts("account: ACC-4729-18 (verified; since turn 1)"), user("Call me on the 4th I guess."),
               call("c1", "schedule_callback", {"account_id": "ACC-4729-18", "date": "2026-12-04"}),
               result("c1", {"status": "confirm", "guard": "date", "verdict": "confirm", "reason": "r", "say": say})]
    asked = respond(*history)
    assert asked.text == say and asked.tool_calls == () and asked.asks_for == "date"
    booked = respond(system(), facts("account: ACC-4729-18 (verified; since turn 1)"), user("Call me on the 4th."),
                     {"role": "assistant", "content": say}, user("yes please"))
    assert only_call(booked) == ("schedule_callback", {"account_id": "ACC-4729-18", "date": "2026-12-04"})


def test_a_wish_keeps_the_fragment_that_completes_it_in_the_callers_words() -> None:
    reply = respond(system(), user("Store credit, please. Not back on the card, it's closed."))
    notes = [c.arguments for c in reply.tool_calls if c.name == "update_case"]
    assert notes and notes[0]["requested_resolution"] == "Store credit, please. Not back on the card, it's closed."


def test_spelled_out_identifiers_are_read_as_the_identifiers_they_are() -> None:
    account = respond(system(), user("um the account is a c c 33 18 52 yeah"))
    assert [(c.name, c.arguments) for c in account.tool_calls] == [("lookup_account", {"account_id": "ACC-3318-52"})]
    order = respond(system(), user("the order is o r d 7 k 4 m 2 p"))
    assert [(c.name, c.arguments) for c in order.tool_calls] == [("lookup_order", {"order_id": "ORD-7K4M2P"})]


def test_asking_for_it_to_be_logged_as_a_category_opens_a_dispute() -> None:
    assert only_call(respond(system(), facts("account: ACC-4729-18"), user("The toaster arrived cracked. "
                                                                             "Log that as damaged, please.")))[0] \
        == "list_invoices"
    plain = respond(system(), facts("account: ACC-4729-18"), user("Can you put the money back as a credit?"))
    assert not any(c.name in ("open_dispute", "list_invoices") for c in plain.tool_calls)


def test_a_dispute_wished_opened_is_a_request_and_a_question_about_one_is_not() -> None:
    context = (system(), facts("account: ACC-4729-18"))
    assert any(c.name == "list_invoices" for c in respond(*context, user("I want a dispute raised on it.")).tool_calls)
    assert not respond(*context, user("Has the dispute been opened yet?")).tool_calls
