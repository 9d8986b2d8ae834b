"""Every figure the main job prints can fail: in each test the bad thing happens and the figure shows it.

The calls are driven by the scripted FakeLLM (no reference brain), observed by the recorder from outside.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.toy_domain import TOY
from voice_agent.call.session import CallSession
from voice_agent.cli import app
from voice_agent.core.call_state import CallState
from voice_agent.core.dates.reading import DateReading
from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.tool_gate import GateDecision
from voice_agent.core.transcript import TranscriptEntry
from voice_agent.domains.base import Domain
from voice_agent.harness.scenarios import load_scenario
from voice_agent.harness.simulation.runner import SimulationPlan, run_plan
from voice_agent.harness.simulation.text_call import CallerLine, TurnTimeout, run_text_call
from voice_agent.policies import PolicyName
from voice_agent.policies.base import PolicySummarizer
from voice_agent.recording.record import CallRecorder, WatchedFact
from voice_agent.services.fake_llm import FakeLLM, FakeReply, FakeToolCall
from voice_agent.settings import CallConfig, PolicyConfig, Settings, with_overrides
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TODAY = dt.date(2026, 11, 30)
ACCOUNT = WatchedFact("account", ("ACC-1000-01",), stated_turn=1, needed_turn=7, ask_cues=("account number",))


class ForgetsAccounts:
    """A summarizer that loses every account number (what a bad summary pass does)."""

    def __init__(self) -> None:
        self.base = ExtractiveSummarizer()

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        summary = await self.base.summarize(request)
        return summary.map_text(lambda t: t.replace("ACC-1000-01", "the account"))

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        return (await self.base.summarize_text(previous, turns)).replace("ACC-1000-01", "the account")


async def play(
    script: Mapping[int, Sequence[FakeReply]], lines: Sequence[str], *, policy: PolicyName = PolicyName.LANES,
    summarizer: PolicySummarizer | None = None, facts: Sequence[WatchedFact] = (ACCOUNT,), bypass: bool = False,
) -> tuple[CallSession, CallRecorder]:
    settings = Settings(policy=PolicyConfig(name=policy, keep=2, every=2), call=CallConfig(reference_date=TODAY))
    session = CallSession(TOY, settings, summarizer or ExtractiveSummarizer())
    if bypass:  # the defect under test: a guard that lets every call through
        def let_through(state: CallState, tool_name: str, arguments: Mapping[str, Any],
                        reading: DateReading | None = None) -> GateDecision:
            return GateDecision(tool_name)

        session.gate.review = let_through  # type: ignore[method-assign]
    recorder = CallRecorder(session, facts)
    await run_text_call(session, FakeLLM(script), [CallerLine(i + 1, t) for i, t in enumerate(lines)],
                        recorder=recorder)
    return session, recorder


def test_a_call_the_tool_cap_stopped_is_not_counted_as_done() -> None:
    recorder = CallRecorder(CallSession(TOY, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer()))
    arguments = {"account_id": "ACC-1000-01", "date": "2026-12-16"}
    recorder.tool_result("schedule_callback", "c1", arguments,
                         {"status": "stopped", "reason": "Stopped: refused 2 times in this turn."})
    assert recorder.done == []  # it never ran: the callback is not booked
    recorder.tool_result("schedule_callback", "c2", arguments, {"status": "scheduled", "date": "2026-12-16"})
    assert recorder.done == [("schedule_callback", arguments)]


LOOKUP = FakeReply(tool_calls=(FakeToolCall("lookup_account", {"account_id": "ACC-1000-01"}),))
FOUND = FakeReply(text="Found it.")
FROM_NOWHERE = FakeReply(text="One moment.", tool_calls=(FakeToolCall("issue_credit", {"account_id": "ACC-1000-02"}),))


@pytest.mark.parametrize("bypass", [False, True])
async def test_an_identifier_from_nowhere_shows_as_unledgered_when_the_guard_lets_it_run(bypass: bool) -> None:
    _, recorder = await play({1: [LOOKUP, FOUND], 2: [FROM_NOWHERE, FOUND]},
                             ["my account is ACC-1000-01", "credit me please"], bypass=bypass)
    turn = recorder.turns[1]
    if bypass:
        assert turn.executed == ["issue_credit"] and turn.unledgered == [{"tool": "issue_credit",
                                                                         "argument": "account_id"}]
        assert turn.rejections == []
    else:
        assert turn.executed == [] and turn.unledgered == [] and turn.rejections[0]["guard"] == "id"


async def test_an_identifier_the_caller_said_in_pieces_is_not_unledgered() -> None:
    credit = FakeReply(tool_calls=(FakeToolCall("issue_credit", {"account_id": "ACC-1000-01"}),))
    _, recorder = await play({1: [credit, FOUND]}, ["it's acc 1000 01, credit me"], bypass=True)
    assert recorder.turns[0].executed == ["issue_credit"] and recorder.turns[0].unledgered == []
    truncated = FakeReply(tool_calls=(FakeToolCall("issue_credit", {"account_id": "ACC-1000-0"}),))
    _, recorder = await play({1: [truncated, FOUND]}, ["it's ACC-1000-01, credit me"], bypass=True)
    assert recorder.turns[0].unledgered, "a truncated identifier is not what the caller said"


CHATTER = ["my account is ACC-1000-01", "one", "two", "three", "four", "five", "credit me please"]


async def test_a_summarizer_that_drops_the_account_shows_as_absent_under_rolling() -> None:
    _, kept = await play({1: [LOOKUP, FOUND]}, CHATTER, policy=PolicyName.ROLLING)
    assert kept.turns[6].facts_present == {"account": True}
    _, lost = await play({1: [LOOKUP, FOUND]}, CHATTER, policy=PolicyName.ROLLING, summarizer=ForgetsAccounts())
    assert lost.turns[6].facts_present == {"account": False}
    assert not any(t.facts_in_memory["account"] for t in lost.turns)  # never captured
    # The lanes keep it in the ledger whatever the summary does.
    _, lanes = await play({1: [LOOKUP, FOUND]}, CHATTER, summarizer=ForgetsAccounts())
    assert lanes.turns[6].facts_present == {"account": True} and lanes.turns[6].facts_in_memory == {"account": True}


async def test_a_question_for_a_fact_already_given_is_a_reask_and_a_first_ask_is_not() -> None:
    ask = FakeReply(text="Could you give me your account number, please?")
    _, recorder = await play({1: [ask], 3: [ask]}, ["hello", "my account is ACC-1000-01", "credit me"])
    assert [t.reasks for t in recorder.turns] == [[], [], ["account"]]


async def test_offering_an_option_the_caller_ruled_out_is_counted() -> None:
    email = WatchedFact("not_email", ("email",), stated_turn=1, rejected_option="email")
    script = {2: [FakeReply(text="Shall I send the confirmation by email?")],
              3: [FakeReply(text="Not by email, of course. Would a letter do?")]}
    _, recorder = await play(script, ["not by email please, I never read it", "send me a confirmation", "hm"],
                             facts=(email,))
    assert [t.rejected_offers for t in recorder.turns] == [[], ["not_email"], []]


async def test_a_ruled_out_day_the_output_guard_stops_is_never_heard_so_never_counted() -> None:
    tuesday = WatchedFact("not_tuesday", ("Tuesday",), stated_turn=1, rejected_option="Tuesday")
    script = {2: [FakeReply(text="I can call you on Tuesday the 1st of December. Does that work?")]}
    session, recorder = await play(script, ["not a Tuesday, that's the school run", "call me back"],
                                   facts=(tuesday,))
    assert session.output_blocks and recorder.turns[1].rejected_offers == []


async def test_tokens_are_counted_on_what_the_model_received() -> None:
    llm = FakeLLM({})
    session = CallSession(TOY, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
    recorder = CallRecorder(session)
    await run_text_call(session, llm, [CallerLine(1, "hello " * 200)], recorder=recorder)
    received = sum(len(str(m.get("content") or "")) for m in llm.received[0])
    assert recorder.turns[0].tokens >= received // 4 - 5 and recorder.turns[0].tokens > 200


async def test_an_llm_that_hangs_ends_the_turn_with_a_timeout_not_a_traceback() -> None:
    session = CallSession(TOY, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
    with pytest.raises(TurnTimeout):
        await run_text_call(session, FakeLLM({1: [FakeReply(hang=True)]}), [CallerLine(1, "hello")],
                            turn_timeout=0.5)


def _erroring_llm(_domain: Domain) -> Any:
    return FakeLLM({1: [FakeReply(error="vendor answered 500")]})


def _hanging_llm(_domain: Domain) -> Any:
    return FakeLLM({1: [FakeReply(hang=True)]})


@pytest.mark.parametrize(("factory", "said"), [(_erroring_llm, "500"), (_hanging_llm, "no answer")])
def test_a_failing_llm_is_reported_as_failed_calls(factory: Any, said: str) -> None:
    # The LLM watchdog (not the driver's turn timeout) deals with the failure: it retries, the call goes on,
    # and a call with any LLM failure still counts as failed.
    settings = with_overrides(Settings(), policy={"keep": 2, "every": 2},
                              llm={"first_token_timeout_secs": 0.2, "total_timeout_secs": 1.0})
    plan = SimulationPlan(load_scenario("bridge_smoke"), [], TOY_FREE_BILLING, [PolicyName.LANES], settings, runs=3,
                          llm_factory=factory, turn_timeout=5.0)
    report = run_plan(plan)
    lanes = report["policies"]["lanes"]
    assert report["failed_runs"] == 1 and lanes["failed_runs"] == 1 and said in lanes["first_failure"]
    assert lanes["first_failure"].startswith("LLM ")  # an LLM failure, whether seen in a frame or logged


def TOY_FREE_BILLING() -> Domain:
    from voice_agent.domains.billing import billing_domain

    return billing_domain()


async def test_simulate_against_an_llm_answering_500_exits_non_zero(fake_openai: FakeOpenAIServer) -> None:
    from aiohttp import web

    async def broken(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return web.json_response({"error": {"message": "internal error", "type": "server_error"}}, status=500)

    fake_openai.reply = broken
    env = {"VOICE_AGENT_LLM__VENDOR": "openai", "VOICE_AGENT_LLM__BASE_URL": fake_openai.base_url,
           "VOICE_AGENT_LLM__MODEL": "fake-model",
           "OPENAI_API_KEY": "sk-test-not-a-real-key"}
    result = await asyncio.to_thread(
        CliRunner().invoke, app,
        ["simulate", "bridge_smoke", "--llm", "openai", "--runs", "2", "--quiet", "--no-knowledge",
         "--scripted-only", "--keep", "2", "--every", "2", "--jobs", "1"], env=env,
    )
    assert result.exit_code == 1, result.output
    assert "failed" in result.output and fake_openai.requests


def test_zero_retention_loses_the_account_under_rolling_in_the_main_job() -> None:
    plan = SimulationPlan(load_scenario("billing_dispute"), [], TOY_FREE_BILLING,
                          [PolicyName.LANES, PolicyName.ROLLING], Settings(), runs=1, retention=0.0)
    report = run_plan(plan)
    account = {name: p["facts"][0] for name, p in report["policies"].items()}
    assert account["rolling"]["key"] == "account_id" and account["rolling"]["present_at_need"] == 0.0
    assert account["lanes"]["present_at_need"] == 1.0
    assert report["policies"]["rolling"]["reasks"] >= 1


async def test_a_slow_answer_is_a_failure_on_the_recorders_own_clock() -> None:
    session = CallSession(TOY, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
    recorder = CallRecorder(session, slow_answer_ms=100)
    slow = FakeLLM({1: [FakeReply(text="Sorry for the wait.", delay=0.4)]})
    await run_text_call(session, slow, [CallerLine(1, "hello")], recorder=recorder)
    assert recorder.errors and "waited" in recorder.errors[0]
    settings = Settings(call=CallConfig(reference_date=TODAY))
    quick = CallRecorder(session := CallSession(TOY, settings, ExtractiveSummarizer()), slow_answer_ms=5000)
    await run_text_call(session, FakeLLM({}), [CallerLine(1, "hello")], recorder=quick)
    assert quick.errors == []
