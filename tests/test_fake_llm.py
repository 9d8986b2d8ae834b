"""Lanes, guards and the recorder on the billing domain, driven by the scripted FakeLLM (no reference brain)."""

from __future__ import annotations

import datetime as dt

from voice_agent.call.factory import build_call
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.recording.record import CallRecorder, WatchedFact
from voice_agent.services.fake_llm import FakeLLM, FakeReply, FakeToolCall
from voice_agent.settings import Settings, with_overrides

SETTINGS = with_overrides(Settings(), policy={"keep": 2, "every": 2}, call={"reference_date": dt.date(2026, 11, 30)})
ACCOUNT = WatchedFact("account_id", ("ACC-4729-18",), stated_turn=1, needed_turn=6, ask_cues=("account number",))


def call(fake: FakeLLM) -> tuple[CallRecorder, object]:
    parts = build_call(SETTINGS, "fake-1", llm_factory=lambda _domain: fake)
    return CallRecorder(parts.session, [ACCOUNT]), parts


def lookup(account: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall("lookup_account", {"account_id": account}),))


def credit(account: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall("issue_credit", {"account_id": account, "invoice_id": "INV-2026-1018",
                                                               "amount": 19.99}),))


LINES = ["it's acc 4729 18", "the October one", "chit chat", "more chit chat", "and more", "credit it please"]


async def test_a_spaced_id_the_caller_said_is_looked_up_and_the_lanes_keep_it_past_the_window() -> None:
    fake = FakeLLM({1: [lookup("ACC-4729-18"), FakeReply(text="Found you.")],
                    2: [FakeReply(tool_calls=(FakeToolCall("list_invoices", {"account_id": "ACC-4729-18"}),)),
                        FakeReply(text="I see the invoices.")],
                    6: [credit("ACC-4729-18"), FakeReply(text="Done.")]})
    recorder, parts = call(fake)
    session = parts.session  # type: ignore[attr-defined]
    await run_text_call(session, fake, [CallerLine(i + 1, t) for i, t in enumerate(LINES)], recorder=recorder)
    last = recorder.turns[5]
    assert last.facts_present == {"account_id": True} and last.executed == ["issue_credit"]
    assert last.unledgered == [] and last.rejections == []
    # What the fake model received on turn 6 held the account only in KNOWN FACTS: the raw turn left.
    turn6 = fake.received[-2]
    holders = [m["role"] for m in turn6 if "ACC-4729-18" in str(m.get("content") or "")]
    assert holders == ["developer"]


async def test_a_mutated_id_is_refused_before_it_reaches_another_customer() -> None:
    fake = FakeLLM({1: [lookup("ACC-4729-18"), FakeReply(text="Found you.")],
                    6: [credit("ACC-4729-19"), FakeReply(text="Sorry, could you read me your account number again?")]})
    recorder, parts = call(fake)
    session = parts.session  # type: ignore[attr-defined]
    await run_text_call(session, fake, [CallerLine(i + 1, t) for i, t in enumerate(LINES)], recorder=recorder)
    last = recorder.turns[5]
    assert last.executed == [] and [r["verdict"] for r in last.rejections] == ["mutated"]
    assert last.reasks == ["account_id"]  # the agent's question after the refusal counts as a re-ask
    backend = parts.extra["domain"].extra["backend"]  # type: ignore[attr-defined]
    assert backend.credits == []
