"""The cache-aware layout: between summary passes a request only appends to the one before it (except the
tail), every fact is on every request verbatim, and a turn's knowledge stays where the turn put it."""

from __future__ import annotations

import asyncio
import datetime as dt
from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from voice_agent.core.assembler import (
    CONSTRAINTS_REMINDER,
    FACTS_SINCE_HEADER,
    KNOWN_FACTS_HEADER,
    LANE_ROLE,
    AssembledContext,
    AssemblerConfig,
    ContextAssembler,
    known_facts_lines,
)
from voice_agent.core.call_state import CallState
from voice_agent.core.passes import PassScheduler
from voice_agent.core.policy import ContextPolicy, Trigger
from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.tokens import estimate_message_tokens
from voice_agent.core.transcript import EntryKind, ToolOutcome

ID_ALPHABET = "ACDEFHJKMNPQRTUVWXY0123456789"


class Slots(BaseModel):
    account_id: str | None = None
    callback_time: str | None = None


class LineSummarizer:
    """Keeps one line per caller utterance, so every pass rewrites the summary."""

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        lines = [e.text for e in request.turns if e.kind is EntryKind.CALLER]
        return request.previous.model_copy(update={"established": request.previous.established + lines})


Step = tuple[str, str | None, bool, bool]
"""(caller words, a new account value or None, a tool call in the turn, knowledge retrieved)."""

steps = st.lists(st.tuples(st.text("abcdefgh ", min_size=1, max_size=30),
                           st.one_of(st.none(), st.text(ID_ALPHABET, min_size=6, max_size=10)),
                           st.booleans(), st.booleans()), min_size=1, max_size=40)


def play(call: list[Step], keep: int, every: int, reference: bool = False
         ) -> tuple[list[AssembledContext], list[bool], CallState]:
    """Plays the call turn by turn with one assembler; returns every request and whether a pass ran before it.

    Each reply repeats its turn's knowledge (so it is kept); ``reference``: the reference trigger, which holds
    turns a later one refers to (an account said again) and folds those around them.
    """
    policy = (ContextPolicy(keep, every, trigger=Trigger.REFERENCE, floor=1, batch=1) if reference
              else ContextPolicy(keep, every))
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=policy, slot_model=Slots)
    pass_scheduler = PassScheduler(LineSummarizer())
    config = AssemblerConfig(system_prompt="SYS", hard_constraints=("never read a card number",))
    assembler = ContextAssembler(config)
    requests: list[AssembledContext] = []
    passes: list[bool] = []
    for n, (words, account, tool, knowledge) in enumerate(call, start=1):
        state.start_turn(words)
        ran = asyncio.run(pass_scheduler.on_turn_start(state)) is not None
        if account is not None:
            state.ledger.record_from_tool("account", account, n, "lookup", "id")
            state.slots.apply_harvest("account_id", account, n, "lookup.id")
        retrieved = [f"chunk for turn {n}"] if knowledge else []
        requests.append(assembler.build(state, retrieved))
        passes.append(ran)
        if tool:
            state.transcript.append_tool_call(n, "lookup", f"c{n}", {"q": words[:4]})
            state.transcript.append_tool_result(n, "lookup", f"c{n}", {"ok": n}, ToolOutcome.COMPLETED)
            requests.append(assembler.build(state, retrieved))
            passes.append(False)
        state.record_agent(f"reply {n}: chunk for turn {n} indeed" if knowledge else f"reply {n}")
    return requests, passes, state


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 6), st.integers(1, 6))
def test_a_request_without_a_pass_extends_the_stable_prefix_of_the_one_before(
    call: list[Step], keep: int, every: int
) -> None:
    requests, passes, _ = play(call, keep, every)
    for before, after, ran in zip(requests, requests[1:], passes[1:], strict=False):
        if not ran:
            # Knowledge the turn's reply did not use leaves once the turn is over; nothing else changes.
            kept = [m for m in before.messages[: before.stable_count]
                    if not str(m.get("content")).startswith("KNOWLEDGE") or m in after.messages]
            assert after.messages[: len(kept)] == kept


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 6), st.integers(1, 6), st.booleans())
def test_lane_tokens_count_what_the_request_holds(call: list[Step], keep: int, every: int, reference: bool) -> None:
    requests, _, _ = play(call, keep, every, reference)
    for request in requests:
        assert all(v >= 0 for v in request.lane_tokens.values()), request.lane_tokens
        shown = [m for m in request.messages if str(m.get("content")).startswith("KNOWLEDGE")]
        assert request.lane_tokens["retrieved"] == sum(estimate_message_tokens(str(m["content"])) for m in shown)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 6), st.integers(1, 6))
def test_every_fact_line_is_on_every_request_verbatim(call: list[Step], keep: int, every: int) -> None:
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(keep, every), slot_model=Slots)
    pass_scheduler = PassScheduler(LineSummarizer())
    assembler = ContextAssembler(AssemblerConfig(system_prompt="SYS"))
    for n, (words, account, _tool, _knowledge) in enumerate(call, start=1):
        state.start_turn(words)
        asyncio.run(pass_scheduler.on_turn_start(state))
        if account is not None:
            state.ledger.record_from_tool("account", account, n, "lookup", "id")
            state.slots.apply_harvest("account_id", account, n, "lookup.id")
        messages = [str(m.get("content") or "") for m in assembler.build(state).messages]
        lines, noted = known_facts_lines(state)
        for line in lines + noted:
            assert any(line in m.splitlines() for m in messages if m.startswith("KNOWN FACTS")), line
        state.record_agent(f"reply {n}")


def test_a_changed_fact_goes_to_the_tail_and_wins() -> None:
    call: list[Step] = [("hello", "ACC111111", False, False), ("more", None, False, False),
                        ("wait", "ACC222222", False, False)]
    requests, _, _ = play(call, 6, 5)
    last = requests[-1]
    tail = [str(m["content"]) for m in last.messages[last.stable_count:]]
    assert tail[0].startswith(FACTS_SINCE_HEADER) and "ACC222222" in tail[0]
    prefix_facts = str(last.messages[2]["content"])  # after the system prompt and the hard constraints
    assert prefix_facts.startswith(KNOWN_FACTS_HEADER) and "ACC111111" in prefix_facts


def test_knowledge_stays_with_its_turn_if_the_reply_used_it() -> None:
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(6, 5), slot_model=Slots)
    assembler = ContextAssembler(AssemblerConfig(system_prompt="SYS"))
    chunks = {1: "Refunds reach your card within five working days of approval.",
              2: "The app shows every invoice under Billing, newest first."}
    replies = {1: "Refunds reach your card within five working days.", 2: "I don't have that detail to hand."}
    for n in (1, 2):
        state.start_turn("how do refunds work" if n == 1 else "and the app")
        during = assembler.build(state, [chunks[n]])
        at = next(i for i, m in enumerate(during.messages) if chunks[n] in str(m["content"]))
        assert during.messages[at - 1]["role"] == "user" and at < during.stable_count
        state.record_agent(replies[n])
    state.start_turn("thanks")
    final: list[dict[str, Any]] = assembler.build(state).messages
    texts = [str(m.get("content")) for m in final]
    used = next(i for i, t in enumerate(texts) if chunks[1] in t)
    assert final[used - 1] == {"role": "user", "content": "how do refunds work"}  # used: kept where it was
    assert not any(chunks[2] in t for t in texts)  # unused: gone once its turn was over


def test_a_pass_rebuilds_the_prefix_once() -> None:
    call: list[Step] = [(f"line {n}", None, False, False) for n in range(12)]
    requests, passes, _ = play(call, 2, 3)
    broken = [i for i, (before, after) in enumerate(pairwise(requests), start=1)
              if after.messages[: before.stable_count] != before.messages[: before.stable_count]]
    assert broken and broken == [i for i in range(1, len(requests)) if passes[i]]


def test_a_changed_model_note_in_the_tail_says_it_replaces_the_one_above() -> None:
    from voice_agent.core.provenance import ModelOutput

    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(6, 5), slot_model=Slots)
    assembler = ContextAssembler(AssemblerConfig(system_prompt="SYS"))
    state.start_turn("hi")
    state.ledger.record_from_tool("account", "ACC111111", 1, "lookup", "id")
    state.slots.apply_harvest("callback_time", "after lunch", 1, "note.time", ModelOutput("note", 1))
    assembler.build(state)  # the prefix: the account, and the note
    state.slots.apply_harvest("callback_time", "before noon", 1, "note.time", ModelOutput("note", 1))
    request = assembler.build(state)
    tail = str(request.messages[request.stable_count]["content"])
    assert tail.startswith(FACTS_SINCE_HEADER) and "before noon" in tail


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 6), st.integers(1, 6), st.booleans())
def test_the_hard_constraints_open_every_request_and_a_one_line_reminder_closes_it(
    call: list[Step], keep: int, every: int, reference: bool
) -> None:
    requests, _, _ = play(call, keep, every, reference)
    full = {"role": LANE_ROLE, "content": "HARD CONSTRAINTS (never break these):\n- never read a card number"}
    for request in requests:
        # The same first messages on every request of the call, passes or not: always served from the cache.
        assert request.messages[:2] == [{"role": "system", "content": "SYS"}, full]
        assert request.messages[-1] == {"role": LANE_ROLE, "content": CONSTRAINTS_REMINDER}
        assert request.stable_count < len(request.messages)


def test_a_pass_drops_the_knowledge_of_earlier_turns_and_keeps_the_current_turns() -> None:
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(1, 3), slot_model=Slots)
    pass_scheduler = PassScheduler(LineSummarizer())
    assembler = ContextAssembler(AssemblerConfig(system_prompt="SYS"))
    chunk = {n: f"Fact number {n} about the plan is written right here." for n in (1, 2, 3)}
    texts: list[str] = []
    for n in (1, 2, 3):
        state.start_turn(f"question {n}")
        ran = asyncio.run(pass_scheduler.on_turn_start(state)) is not None
        assert ran is (n == 3)
        texts = [str(m.get("content")) for m in assembler.build(state, [chunk[n]]).messages]
        state.record_agent(f"Yes: fact number {n} about the plan is written right here.")  # the reply uses it
    # Turn 2 is still raw, its reply still there; the knowledge it used left with the pass. Turn 3's is there.
    assert "question 2" in texts and not any(chunk[2] in t for t in texts)
    assert any(chunk[3] in t for t in texts)


def _stated_above(line: str, request: AssembledContext) -> bool:
    """Whether every value of the fact ``line`` is verbatim in a message of the request's stable prefix that stays
    there until the next pass (the caller's words, a tool call or result, the summary; not knowledge)."""
    body = line[2:]
    name_and_value = body.split(": ", 1)
    if len(name_and_value) != 2:
        return False
    value = name_and_value[1]
    values = value[1:-1].split('"; "') if value.startswith('"') and value.endswith('"') else [value]
    texts = []
    for m in request.messages[: request.stable_count]:
        if not str(m.get("content") or "").startswith(("KNOWLEDGE", "KNOWN FACTS", "HARD CONSTRAINTS")):
            texts.append(str(m.get("content") or ""))
            texts += [c["function"]["arguments"] for c in m.get("tool_calls", [])]
    return all(any(v in t for t in texts) for v in values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 6), st.integers(1, 6), st.booleans(), st.booleans())
def test_every_fact_is_in_known_facts_or_its_value_verbatim_in_the_prefix_on_every_request(
    call: list[Step], keep: int, every: int, reference: bool, said: bool
) -> None:
    """The layout's guarantee with tool results and caller words that carry the values: a fact's line is in KNOWN
    FACTS (the prefix's list or the tail), or, new since the pass, its every value is verbatim in the prefix."""
    policy = (ContextPolicy(keep, every, trigger=Trigger.REFERENCE, floor=1, batch=1) if reference
              else ContextPolicy(keep, every))
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=policy, slot_model=Slots)
    pass_scheduler = PassScheduler(LineSummarizer())
    assembler = ContextAssembler(AssemblerConfig(system_prompt="SYS", hard_constraints=("never read a card number",)))
    for n, (words, account, tool, _knowledge) in enumerate(call, start=1):
        state.start_turn(f"{words} my number is {account}" if said and account else words)
        asyncio.run(pass_scheduler.on_turn_start(state))
        if account is not None:
            if tool:  # the value comes in a tool result the request carries
                state.transcript.append_tool_call(n, "lookup", f"c{n}", {"q": words[:4]})
                state.transcript.append_tool_result(n, "lookup", f"c{n}", {"account_id": account},
                                                    ToolOutcome.COMPLETED)
                state.ledger.record_from_tool("account", account, n, "lookup", "account_id")
                state.slots.apply_harvest("account_id", account, n, "lookup.account_id")
            elif said:  # the caller said it: caller-stated, flagged unverified
                state.ledger.record_from_caller("account", account, n, f"my number is {account}")
        request = assembler.build(state, [f"chunk {n}"])
        facts = [line for m in request.messages if str(m.get("content")).startswith("KNOWN FACTS")
                 for line in str(m["content"]).splitlines()]
        lines, noted = known_facts_lines(state)
        for line in lines + noted:
            assert line in facts or _stated_above(line, request), line
        state.record_agent(f"reply {n}")


def test_a_new_fact_already_verbatim_above_stays_out_of_the_tail_until_the_pass_lists_it() -> None:
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(1, 3), slot_model=Slots)
    pass_scheduler = PassScheduler(LineSummarizer())
    assembler = ContextAssembler(AssemblerConfig(system_prompt="SYS"))

    def turn(n: int, words: str, account: str | None = None, said: bool = False) -> AssembledContext:
        state.start_turn(words)
        asyncio.run(pass_scheduler.on_turn_start(state))
        if account and said:
            state.ledger.record_from_caller("account", account, n, words)
        elif account:
            state.transcript.append_tool_call(n, "lookup", f"c{n}", {})
            state.transcript.append_tool_result(n, "lookup", f"c{n}", {"account_id": account}, ToolOutcome.COMPLETED)
            state.ledger.record_from_tool("account", account, n, "lookup", "account_id")
        request = assembler.build(state)
        state.record_agent(f"reply {n}")
        return request

    def tail(request: AssembledContext) -> str:
        return "\n".join(str(m["content"]) for m in request.messages[request.stable_count:])

    turn(1, "hello")  # the prefix is built: no facts yet
    second = turn(2, "more", "ACC111111")  # in the tool result of the request: not repeated in the tail
    assert "ACC111111" not in tail(second) and "- account: ACC111111" not in second.text()
    third = turn(3, "the pass")  # the pass folds turn 1 and lists the account in the prefix
    assert "- account: ACC111111" in str(third.messages[1]["content"]) and "ACC111111" not in tail(third)
    # A second value under the same role is a change to the list: the tail says it, verbatim above or not.
    fourth = turn(4, "another one", "ACC222222")
    assert "- account: ACC222222" in tail(fourth)
    # A value the caller said is flagged unverified: the flag is in no message above, so the tail says it.
    fifth = turn(5, "mine is ACC333333", "ACC333333", said=True)
    assert "ACC333333 (UNVERIFIED, caller-stated)" in tail(fifth)


def test_the_priced_trigger_of_lanes_reads_what_the_assembler_shows() -> None:
    from voice_agent.core.guards.date_guard import DateGuard
    from voice_agent.policies.lanes import LanesPolicy

    policy = LanesPolicy(AssemblerConfig(system_prompt="SYS"), LineSummarizer(), DateGuard(dt.date(2026, 12, 3)))
    assert policy.pass_scheduler.trigger.shown == policy.assembler.shown_sizes
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(1, 3), slot_model=Slots)
    assert policy.assembler.shown_sizes(state).summary == 0  # another call: nothing shown yet
    for n in (1, 2, 3):
        state.start_turn(f"question {n}")
        asyncio.run(policy.on_turn_start(state))
        request = policy.build(state, [f"Fact number {n} about the plan is written right here."])
        state.record_agent(f"Yes: fact number {n} about the plan is written right here.")
    shown = policy.assembler.shown_sizes(state)
    assert shown.knowledge == {3: request.lane_tokens["retrieved"]}  # the pass at turn 3 took out 1's and 2's
    assert 0 < shown.summary <= request.lane_tokens["summary"]
