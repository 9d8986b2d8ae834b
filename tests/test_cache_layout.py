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
    FACTS_SINCE_HEADER,
    KNOWN_FACTS_HEADER,
    AssembledContext,
    AssemblerConfig,
    ContextAssembler,
    known_facts_lines,
)
from voice_agent.core.call_state import CallState
from voice_agent.core.compaction import Compactor
from voice_agent.core.policy import ContextPolicy
from voice_agent.core.summary import EpisodeSummary, SummaryRequest
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


def play(call: list[Step], keep: int, every: int) -> tuple[list[AssembledContext], list[bool], CallState]:
    """Plays the call turn by turn with one assembler; returns every request and whether a pass ran before it."""
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(keep, every), slot_model=Slots)
    compactor = Compactor(LineSummarizer())
    config = AssemblerConfig(system_prompt="SYS", hard_constraints=("never read a card number",))
    assembler = ContextAssembler(config)
    requests: list[AssembledContext] = []
    passes: list[bool] = []
    for n, (words, account, tool, knowledge) in enumerate(call, start=1):
        state.start_turn(words)
        ran = asyncio.run(compactor.on_turn_start(state)) is not None
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
        state.record_agent(f"reply {n}")
    return requests, passes, state


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 6), st.integers(1, 6))
def test_a_request_without_a_pass_extends_the_stable_prefix_of_the_one_before(
    call: list[Step], keep: int, every: int
) -> None:
    requests, passes, _ = play(call, keep, every)
    for before, after, ran in zip(requests, requests[1:], passes[1:], strict=False):
        if not ran:
            assert after.messages[: before.stable_count] == before.messages[: before.stable_count]
            assert after.stable_count >= before.stable_count


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 6), st.integers(1, 6))
def test_every_fact_line_is_on_every_request_verbatim(call: list[Step], keep: int, every: int) -> None:
    state = CallState(reference_date=dt.date(2026, 12, 3), policy=ContextPolicy(keep, every), slot_model=Slots)
    compactor = Compactor(LineSummarizer())
    assembler = ContextAssembler(AssemblerConfig(system_prompt="SYS"))
    for n, (words, account, _tool, _knowledge) in enumerate(call, start=1):
        state.start_turn(words)
        asyncio.run(compactor.on_turn_start(state))
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
    prefix_facts = str(last.messages[1]["content"])
    assert prefix_facts.startswith(KNOWN_FACTS_HEADER) and "ACC111111" in prefix_facts


def test_knowledge_stays_with_its_turn() -> None:
    call: list[Step] = [("how do refunds work", None, False, True), ("and the app", None, True, True),
                        ("thanks", None, False, False)]
    requests, _, _ = play(call, 6, 5)
    final: list[dict[str, Any]] = requests[-1].messages
    texts = [str(m.get("content")) for m in final]
    for n in (1, 2):
        at = texts.index(f"KNOWLEDGE (may help with this question):\n[1] chunk for turn {n}")
        assert final[at - 1]["role"] == "user" and at < requests[-1].stable_count
    assert not any("chunk for turn 3" in t for t in texts)


def test_a_pass_rebuilds_the_prefix_once() -> None:
    call: list[Step] = [(f"line {n}", None, False, False) for n in range(12)]
    requests, passes, _ = play(call, 2, 3)
    broken = [i for i, (before, after) in enumerate(pairwise(requests), start=1)
              if after.messages[: before.stable_count] != before.messages[: before.stable_count]]
    assert broken and broken == [i for i in range(1, len(requests)) if passes[i]]
