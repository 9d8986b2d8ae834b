"""Assembler invariants, property-tested with hypothesis."""

from __future__ import annotations

import asyncio
import datetime as dt
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from voice_agent.core.assembler import (
    CONSTRAINTS_REMINDER,
    LANE_ORDER,
    AssemblerConfig,
    ContextAssembler,
    entries_to_messages,
)
from voice_agent.core.call_state import CallState
from voice_agent.core.passes import PassScheduler
from voice_agent.core.policy import ContextPolicy
from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.tokens import estimate_message_tokens
from voice_agent.core.transcript import EntryKind, ToolOutcome

ID_ALPHABET = "ACDEFHJKMNPQRTUVWXY0123456789"
ids = st.text(ID_ALPHABET, min_size=6, max_size=12)
words = st.text("abcdefghijklmnop rstuvw", min_size=1, max_size=80)


class Slots(BaseModel):
    account_id: str | None = None
    disputed_items: list[str] = []


class LossySummarizer:
    """A test fake that keeps one line per caller utterance (so the summary keeps growing)."""

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        lines = [e.text for e in request.turns if e.kind is EntryKind.CALLER]
        return request.previous.model_copy(update={"established": request.previous.established + lines})


def build_call(turns: list[tuple[str, str]], ledger_values: list[str], keep: int, every: int) -> CallState:
    state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(keep, every), slot_model=Slots)
    pass_scheduler = PassScheduler(LossySummarizer())
    for i, value in enumerate(ledger_values):
        state.ledger.record_from_tool(f"role{i}", value, 1, "lookup", "id")
    if ledger_values:
        state.slots.apply_harvest("account_id", ledger_values[0], 1, "lookup.id")
    for n, (caller, agent) in enumerate(turns, start=1):
        state.start_turn(caller)
        asyncio.run(pass_scheduler.on_turn_start(state))
        if n % 3 == 0:
            state.transcript.append_tool_call(state.turn, "lookup", f"c{n}", {"q": caller[:5]})
            state.transcript.append_tool_result(state.turn, "lookup", f"c{n}", {"ok": n}, ToolOutcome.COMPLETED)
        state.record_agent(agent)
    return state


call_shapes = st.tuples(
    st.lists(st.tuples(words, words), min_size=1, max_size=40),
    st.lists(ids, max_size=12, unique=True),
    st.integers(1, 8),
    st.integers(1, 8),
)


Shape = tuple[list[tuple[str, str]], list[str], int, int]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call_shapes)
def test_known_values_appear_verbatim_and_never_altered(shape: Shape) -> None:
    turns, values, keep, every = shape
    state = build_call(turns, values, keep, every)
    ctx = ContextAssembler().build(state)
    text = ctx.text()
    for value in values + state.slots.values():
        assert value in text
    # Any ID-shaped run that resembles a ledger value must be exactly that value.
    for run in re.findall(f"[{ID_ALPHABET}]{{4,}}", text):
        for value in values:
            near = run != value and (value.startswith(run) or (len(run) == len(value) and sum(
                a != b for a, b in zip(run, value, strict=True)) <= 2))
            assert not near or run in values, (run, value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call_shapes)
def test_last_k_turns_verbatim_and_in_order(shape: Shape) -> None:
    turns, values, keep, every = shape
    state = build_call(turns, values, keep, every)
    messages = ContextAssembler().build(state).messages
    first = max(1, state.turn - keep)
    expected = entries_to_messages(state.transcript.in_turns(first, state.turn))
    # They form a contiguous, ordered tail just before the (absent) constraints lane.
    assert messages[len(messages) - len(expected):] == expected


def test_lane_order_matches_design() -> None:
    state = build_call([("my account is here", "ok")] * 12, ["ACC47291"], 3, 5)
    config = AssemblerConfig(system_prompt="SYS", hard_constraints=("never read a card number",))
    ctx = ContextAssembler(config).build(state, retrieved=["chunk one", "chunk two", "c3", "c4"])
    contents = [str(m.get("content")) for m in ctx.messages]
    assert contents[0] == "SYS"
    # The hard constraints never change in a call: stated in full before anything a pass rewrites.
    assert contents[1] == "HARD CONSTRAINTS (never break these):\n- never read a card number"
    assert contents[2].startswith("KNOWN FACTS") and "ACC47291" in contents[2]
    assert contents[3].startswith("SUMMARY")
    # The turn's knowledge follows the caller's words it answers, inside the stable prefix.
    knowledge = next(i for i, c in enumerate(contents) if c.startswith("KNOWLEDGE"))
    assert ctx.messages[knowledge - 1]["role"] == "user" and knowledge < ctx.stable_count
    assert "c3" in contents[knowledge] and "c4" not in contents[knowledge]
    # The tail ends with one line that recalls them near the question.
    assert contents[-1] == CONSTRAINTS_REMINDER and ctx.stable_count == len(contents) - 1
    assert list(ctx.lane_tokens) == list(LANE_ORDER) and all(v > 0 for v in ctx.lane_tokens.values())


def test_size_stays_bounded_as_the_call_grows() -> None:
    keep, every, line = 6, 5, "x" * 200
    config = AssemblerConfig(summary_max_tokens=300)
    state = build_call([], [f"ACC{i:05d}" for i in range(20)], keep, every)
    pass_scheduler = PassScheduler(LossySummarizer())
    assembler = ContextAssembler(config)
    sizes = []
    for _ in range(300):
        state.start_turn(line)
        asyncio.run(pass_scheduler.on_turn_start(state))
        state.record_agent(line)
        sizes.append(assembler.build(state).total_tokens)
    per_turn = 2 * estimate_message_tokens(line)
    fixed = assembler.build(state).lane_tokens
    # The caller's own lines may take the summary lane past its budget, never past its ceiling.
    bound = fixed["system"] + fixed["known_facts"] + config.summary_ceiling + 40 + (keep + every) * per_turn
    assert max(sizes) <= bound
    assert max(sizes[100:]) == max(sizes[50:100])  # flat, not creeping


def test_tool_calls_stay_paired_with_results() -> None:
    state = build_call([("a", "b")] * 9, [], 2, 4)
    state.transcript.append_tool_call(state.turn, "get_invoice", "live", {"invoice_id": "X"})
    messages = ContextAssembler().build(state).messages
    for i, m in enumerate(messages):
        for j, call in enumerate(m.get("tool_calls", [])):
            result = messages[i + 1 + j]
            assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "live", "content": "IN_PROGRESS"}
