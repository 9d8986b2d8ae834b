"""The summary lane: the extractive default, role scrubbing, and one fault model for every policy."""

from __future__ import annotations

import datetime as dt
import random

from voice_agent.core.role_scrub import scrub_text
from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.transcript import EntryKind, TranscriptEntry
from voice_agent.harness.scenarios import load_scenario
from voice_agent.harness.simulation.fault_summarizer import FaultInjectingSummarizer
from voice_agent.harness.simulation.faults import FaultShape
from voice_agent.harness.simulation.runner import SimulationPlan, caller_lines, fault_tracked, scenario_facts
from voice_agent.harness.simulation.text_call import run_text_call
from voice_agent.policies import PolicyName
from voice_agent.settings import Settings, SummarizerConfig, with_overrides
from voice_agent.summarizers.extractive import ExtractiveSummarizer, parse_text_summary
from voice_agent.summarizers.sections import classify


def caller(turn: int, text: str) -> TranscriptEntry:
    return TranscriptEntry(index=turn, turn=turn, kind=EntryKind.CALLER, text=text)


def agent(turn: int, text: str) -> TranscriptEntry:
    return TranscriptEntry(index=100 + turn, turn=turn, kind=EntryKind.AGENT, text=text)


def request(entries: list[TranscriptEntry], previous: EpisodeSummary | None = None) -> SummaryRequest:
    return SummaryRequest(previous=previous or EpisodeSummary(), turns=entries, ledger_roles=(), slot_names=(),
                          pass_turn=10)


def test_all_five_sections_are_produced_from_ordinary_words() -> None:
    sections = classify([
        caller(1, "I was charged twice for the October bill."),
        caller(2, "Not a Tuesday either, that's the school run."),
        caller(3, "I'd like the late fee removed."),
        agent(3, "I've opened a dispute for that charge."),
        agent(4, "You'll get the reference by email within two days."),
    ])
    assert sections.established == ["turn 1: caller said: I was charged twice for the October bill."]
    # A ruling keeps the caller's words whole; its reason is the clause that gives it.
    assert [(r.item, r.reason) for r in sections.rejected] == [
        ("Not a Tuesday either, that's the school run", "the school run")]
    assert sections.pending == ["turn 3: caller asked: I'd like the late fee removed."]
    assert sections.decided == ["turn 3: agent: I've opened a dispute for that charge."]
    assert [(c.turn, c.text) for c in sections.commitments] == [
        (4, "You'll get the reference by email within two days.")]


async def test_extractive_keeps_the_newest_lines_and_says_so_by_clipping_the_agents() -> None:
    summarizer = ExtractiveSummarizer(SummarizerConfig(max_lines=2, max_words=5))
    summary = await summarizer.summarize(request([agent(t, f"I have done step number {t} of the plan here") for t in
                                                  range(1, 5)]))
    assert summary.decided == ["turn 3: agent: I have ...", "turn 4: agent: I have ..."]


async def test_extractive_keeps_a_callers_fact_whole_however_short_or_long() -> None:
    """Two sentences stay one line, a two-word answer stays, a rambling line is not clipped; the caller's
    questions leave a full section before their statements do."""
    summarizer = ExtractiveSummarizer(SummarizerConfig(max_lines=3, max_words=5))
    rambling = ("so yeah um what i was going to say is i did have a go at sorting it on the website first "
                "and it just kept timing out on me so here i am")
    summary = await summarizer.summarize(request([
        caller(1, "Store credit. Not the card."),
        caller(2, "Store credit."),
        caller(3, rambling),
        caller(4, "Okay."),
        caller(5, "How long do refunds take?"),
        caller(6, "Is there a fee for paper bills?"),
    ]))
    lines = summary.render()
    assert "Store credit. Not the card" in lines
    assert "turn 2: caller said: Store credit." in lines
    assert rambling in lines
    assert "Okay" not in lines
    assert "How long do refunds take?" not in lines  # the oldest question left first
    assert "Is there a fee for paper bills?" in lines


async def test_the_text_summary_reads_back_into_the_same_sections() -> None:
    summarizer = ExtractiveSummarizer()
    text = await summarizer.summarize_text("", [caller(1, "Not on Friday, because I work late."),
                                                agent(1, "I'll call you on Monday.")])
    again = parse_text_summary(text)
    assert [(r.item, r.reason) for r in again.rejected] == [("Not on Friday, because I work late", "")]
    assert again.commitments[0].turn == 1 and again.render() == text


def test_ledger_values_and_their_near_misses_become_roles() -> None:
    ids = {"ACC-4729-18": "account", "INV-2026-1018": "disputed_invoice"}
    text = ("caller gave ACC-4729-18, then acc 4729 18, a summary wrote ACC-4729-19 and ACC-47..., "
            "invoice INV20261018; the 14th and 19.99 stay")
    out = scrub_text(text, ids)
    assert "4729" not in out and "2026" not in out and out.count("[the account]") == 4
    assert "[the disputed_invoice]" in out and "the 14th and 19.99 stay" in out


async def test_a_damaged_value_persists_until_a_later_pass_damages_it_the_same_for_both_policies() -> None:
    tracked = {"account": "ACC-4729-18"}
    first = [caller(1, "My account is ACC-4729-18 and it is wrong.")]
    later = [caller(2, "Some more words about the weather today.")]
    for seed in range(50):
        shape = _first_shape(seed)
        if shape is FaultShape.MUTATE:
            break
    lanes = FaultInjectingSummarizer(0.0, tracked, seed)
    rolling = FaultInjectingSummarizer(0.0, tracked, seed)
    structured = await lanes.summarize(request(first))
    text = await rolling.summarize_text("", first)
    damaged = lanes.carried["account"]
    assert damaged is not None and damaged != "ACC-4729-18" and damaged == rolling.carried["account"]
    assert damaged in structured.render() and damaged in text and "ACC-4729-18" not in text
    lanes.retention = rolling.retention = 1.0  # later passes keep whatever they carry
    structured = await lanes.summarize(request(later, structured))
    text = await rolling.summarize_text(text, later)
    assert damaged in structured.render() and damaged in text
    assert "[account]" not in text and "account_id" not in text  # no scoring keys in what the model reads


def _first_shape(seed: int) -> FaultShape:
    rng = random.Random(f"{seed}:account:0")  # the fault model's stream of the fact "account" at its first pass
    rng.random()
    return rng.choice(list(FaultShape))


async def test_the_rejected_day_stays_in_the_lanes_summary_with_its_reason() -> None:
    scenario = load_scenario("callback_constraints")
    settings = with_overrides(Settings(), call={"reference_date": scenario.reference_date or dt.date.today()})
    from voice_agent.domains.billing import billing_domain

    plan = SimulationPlan(scenario, [], billing_domain, [PolicyName.LANES], settings, retention=None)
    parts = plan.call(scenario, PolicyName.LANES, 0)
    await run_text_call(parts.session, parts.llm, caller_lines(scenario))
    summary = parts.session.state.summary
    rejected = [(r.item, r.reason) for r in summary.rejected]
    assert any("Tuesday" in item and "school run" in why for item, why in rejected), rejected
    assert summary.decided and summary.established
    assert "ACC-6051-07" not in summary.render()  # the summary names the ledger role, never the value


def test_fault_tracked_follows_every_form_apart() -> None:
    facts = scenario_facts(load_scenario("billing_dispute"))
    tracked = fault_tracked(facts)
    assert tracked["account_id"] == "ACC-4729-18" and tracked["disputed_item#2"] == "INV-2026-1018"


async def test_every_pass_is_scrubbed_and_the_substitutions_are_counted_per_entry() -> None:
    from voice_agent.core.call_state import CallState
    from voice_agent.core.passes import PassScheduler
    from voice_agent.core.policy import ContextPolicy

    class WritesIds:
        async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
            return EpisodeSummary(established=["orders ORD-7K4M2P and ord 7k4m2r, and ORD-7K4M2P again"])

    state = CallState(policy=ContextPolicy(keep=1, every=2))
    state.ledger.record_from_tool("order", "ORD-7K4M2P", 1, "lookup_order", "order_id")
    state.ledger.record_from_tool("order", "ORD-7K4M2R", 1, "lookup_order", "order_id")
    pass_scheduler, passes = PassScheduler(WritesIds()), []
    for text in ("one", "two", "three", "four"):
        state.start_turn(text)
        passes.append(await pass_scheduler.on_turn_start(state))
    summary_pass = next(p for p in passes if p is not None)
    assert state.summary.established == ["orders [the order] and [the order], and [the order] again"]
    assert dict(summary_pass.event.scrubbed) == {"ledger:order": 2, "ledger:order#2": 1}
    assert summary_pass.event.span_attributes()["summary.scrubbed"] == ["ledger:order=2", "ledger:order#2=1"]


async def test_each_facts_fate_is_its_own_so_a_fact_leaving_the_summary_changes_no_other_fate() -> None:
    """Under lanes an identifier leaves the summary for the ledger; the prose fact is dealt the same fates."""
    tracked = {"account": "ACC-4729-18", "wish": "credit it to my account"}
    turns = [[caller(1, "It's ACC-4729-18, and please credit it to my account.")],
             *[[caller(t, f"Some more words about the weather on day {t}.")] for t in range(2, 8)]]
    for seed in range(20):
        alone = FaultInjectingSummarizer(0.5, {"wish": tracked["wish"]}, seed)
        both = FaultInjectingSummarizer(0.5, tracked, seed)
        text_alone = text_both = ""
        for batch in turns:
            text_alone = await alone.summarize_text(text_alone, batch)
            text_both = await both.summarize_text(text_both, batch)
            assert alone.carried["wish"] == both.carried["wish"], seed
