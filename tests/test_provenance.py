"""Provenance as a type: only tool fields and the caller's own words stand as KNOWN FACTS."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel

from voice_agent.call.factory import build_call
from voice_agent.core.assembler import KNOWN_FACTS_HEADER, MODEL_NOTES_HEADER, known_facts_block
from voice_agent.core.call_state import CallState
from voice_agent.core.guards.quote_guard import find_quote
from voice_agent.core.harvest import harvest_result
from voice_agent.core.provenance import CallerSpan, ModelOutput, ToolField
from voice_agent.core.tool_spec import HarvestField, ToolParam, ToolSpec
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.recording.record import CallRecorder
from voice_agent.services.fake_llm import FakeLLM, FakeReply, FakeToolCall
from voice_agent.settings import Settings, with_overrides

SETTINGS = with_overrides(Settings(), policy={"keep": 2, "every": 2}, call={"reference_date": dt.date(2026, 11, 30)})
SAID = "I'd like it credited back to my account, not refunded to my card."


async def play(script: dict[int, list[FakeReply]], lines: list[str]) -> tuple[object, CallRecorder]:
    fake = FakeLLM(script)
    parts = build_call(SETTINGS, "prov", llm_factory=lambda _d: fake)
    recorder = CallRecorder(parts.session)
    await run_text_call(parts.session, fake, [CallerLine(i + 1, t) for i, t in enumerate(lines)], recorder=recorder)
    return parts.session, recorder


def note(**arguments: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall("update_case", arguments),))


async def test_a_model_paraphrase_of_the_caller_is_refused_and_never_becomes_a_fact() -> None:
    session, recorder = await play({1: [note(requested_resolution="a refund to the card"), FakeReply(text="Sorry.")]},
                                   [SAID])
    assert [r["guard"] for r in recorder.turns[0].rejections] == ["quote"]
    assert session.state.slots.get("requested_resolution") is None  # type: ignore[attr-defined]
    assert "refund to the card" not in (known_facts_block(session.state) or "")  # type: ignore[attr-defined]


async def test_the_callers_exact_words_fill_the_slot_as_a_caller_span() -> None:
    quote = "credited back to my account, not refunded to my card"
    session, _ = await play({2: [note(requested_resolution=quote), FakeReply(text="Noted.")]},
                                   [SAID, "and please note that down"])
    slot = session.state.slots.get("requested_resolution")  # type: ignore[attr-defined]
    assert slot is not None and slot.provenance == CallerSpan(1, quote)
    block = known_facts_block(session.state) or ""  # type: ignore[attr-defined]
    assert block.startswith(KNOWN_FACTS_HEADER) and f'requested_resolution (turn 1): "{quote}"' in block


def test_quotes_match_on_word_boundaries_and_need_two_words() -> None:
    state = CallState()
    state.start_turn("I'm travelling until the 14th, so don't call me.")
    assert find_quote("travelling until the 14th", state.transcript) == 1
    assert find_quote("  “I'm TRAVELLING until the 14th,”  ", state.transcript) == 1
    assert find_quote("travelling until the 4th", state.transcript) is None
    assert find_quote("travel", state.transcript) is None and find_quote("14th", state.transcript) is None


class NoteSlots(BaseModel):
    note: str | None = None
    account: str | None = None


def test_a_value_the_model_wrote_is_marked_and_kept_apart_from_the_verbatim_block() -> None:
    state = CallState(slot_model=NoteSlots)
    tool = ToolSpec("jot", "Write a note.", (ToolParam("text", "Any text."),),
                    harvest=(HarvestField("text", slot="note", from_param="text"), HarvestField("account",
                                                                                                  slot="account")))
    harvest_result(tool, {"text": "caller wants a refund", "account": "ACC-1000-01"}, state.ledger, state.slots, 3)
    assert state.slots.get("note") is not None and state.slots.get("note").provenance == ModelOutput("jot", 3)  # type: ignore[union-attr]
    assert state.slots.get("account").provenance == ToolField("jot", "account", 3)  # type: ignore[union-attr]
    block = known_facts_block(state) or ""
    facts, _, noted = block.partition(MODEL_NOTES_HEADER)
    assert "ACC-1000-01" in facts and "caller wants a refund" not in facts and "caller wants a refund" in noted


async def test_a_caller_stated_id_enters_the_ledger_unverified_and_a_tool_verifies_it() -> None:
    lookup = FakeReply(tool_calls=(FakeToolCall("lookup_account", {"account_id": "ACC-4729-18"}),))
    session, _ = await play({3: [lookup, FakeReply(text="Found it.")]},
                            ["my account number is a c c four seven two nine one eight", "hm", "look it up"])
    entry = session.state.ledger.get("account", "ACC-4729-18")  # type: ignore[attr-defined]
    assert entry is not None and entry.first_seen == 1 and entry.provenance == CallerSpan(
        1, "my account number is a c c four seven two nine one eight")
    assert entry.verified  # lookup_account returned it on turn 3


LATE = ["my account number is ACC-4729-18", "one", "two", "three", "four", "five", "six", "credit the October one"]


def credit(account: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall("lookup_account", {"account_id": account}),))


async def test_the_late_first_use_of_a_caller_stated_id_is_accepted_and_a_mutated_one_refused() -> None:
    _, good = await play({8: [credit("ACC-4729-18"), FakeReply(text="Found it.")]}, LATE)
    assert good.turns[7].executed == ["lookup_account"] and good.turns[7].rejections == []
    _, bad = await play({8: [credit("ACC-4729-19"), FakeReply(text="Sorry?")]}, LATE)
    assert bad.turns[7].executed == [] and [r["verdict"] for r in bad.turns[7].rejections] == ["mutated"]


def test_late_first_use_through_the_main_job_with_a_scripted_model() -> None:
    from voice_agent.domains.billing import billing_domain
    from voice_agent.harness.paraphrases import variants
    from voice_agent.harness.scenarios import load_scenario
    from voice_agent.harness.simulation.runner import SimulationPlan, run_plan
    from voice_agent.policies import PolicyName

    scenario = load_scenario("late_first_use")
    plan = SimulationPlan(scenario, variants(scenario), billing_domain, [PolicyName.LANES, PolicyName.ROLLING],
                          Settings(), runs=12, retention=0.9, scripted_llm=True)
    report = run_plan(plan)
    for side in ("scripted", "paraphrased"):
        lanes, rolling = report["sides"][side]["lanes"], report["sides"][side]["rolling"]
        assert lanes["facts"][0]["present_at_need"] == 1.0 and lanes["facts"][0]["captured"] == 1.0
        assert lanes["guard_rejections"] == 0 and lanes["unledgered_executed"] == 0 and lanes["executed_calls"] > 0
        assert rolling["facts"][0]["present_at_need"] < 1.0  # three rewrites at R=0.9 lose it in some calls


def test_a_span_the_caller_negated_is_not_their_words() -> None:
    state = CallState()
    state.start_turn("I really don't want a refund to the card, credit my account instead.")
    assert find_quote("a refund to the card", state.transcript) is None
    assert find_quote("want a refund to the card", state.transcript) is None
    assert find_quote("don't want a refund to the card", state.transcript) == 1
    assert find_quote("credit my account instead", state.transcript) == 1


def test_a_scripted_model_on_a_paraphrase_quotes_the_reworded_line_and_nothing_is_refused() -> None:
    from voice_agent.domains.billing import billing_domain
    from voice_agent.harness.paraphrases import variants
    from voice_agent.harness.scenarios import load_scenario
    from voice_agent.harness.simulation.runner import SimulationPlan, run_plan
    from voice_agent.policies import PolicyName

    scenario = load_scenario("billing_dispute")
    plan = SimulationPlan(scenario, variants(scenario), billing_domain, [PolicyName.LANES], Settings(), runs=3,
                          retention=None, scripted_llm=True)
    lanes = run_plan(plan)["sides"]["paraphrased"]["lanes"]
    assert lanes["guard_rejections"] == 0 and lanes["unledgered_executed"] == 0
    assert all(f["present_at_need"] == 1.0 for f in lanes["facts"])
