"""The pipeline on pipecat: processors with run_test, and whole text calls with a toy domain."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pipecat.frames.frames import (
    FunctionCallsStartedFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame

from processors.context_assembly import ContextAssembly
from processors.output_guard import OutputGuardProcessor
from processors.speculative_retrieval import KnowledgeFrame
from processors.turn_log import TurnLog
from tests.fakes.pipecat_run import run_test
from tests.fakes.toy_domain import TOY
from voice_agent.call.session import CallSession
from voice_agent.core.transcript import EntryKind, ToolOutcome
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.policies import PolicyName
from voice_agent.recording.record import CallRecorder, WatchedFact
from voice_agent.services.reference_llm import ReferenceLLMService
from voice_agent.settings import CallConfig, PolicyConfig, Settings
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TODAY = dt.date(2026, 11, 30)
ACCOUNT = WatchedFact("account", ("ACC-1000-01",), stated_turn=1, ask_cues=("account number",))
"""The toy caller's account, stated on turn 1; the toy brain asks for it as "your account number?"."""


def session(policy: PolicyName = PolicyName.LANES, **kw: int) -> CallSession:
    settings = Settings(policy=PolicyConfig(name=policy, **kw), call=CallConfig(reference_date=TODAY))
    return CallSession(TOY, settings, ExtractiveSummarizer())


def toy_llm(stream_delay: float = 0.0) -> ReferenceLLMService:
    return ReferenceLLMService(TOY.brain(), stream_delay=stream_delay)


async def test_context_assembly_replaces_context_and_leaves_history_alone() -> None:
    s = session()
    s.state.ledger.record_from_tool("account", "ACC-1000-01", 1, "lookup_account", "account_id")
    canonical = LLMContext([{"role": "user", "content": "hi, credit my account"}])
    down, _ = await run_test(ContextAssembly(s), frames_to_send=[LLMContextFrame(canonical)],
                             expected_down_frames=[LLMContextFrame])
    assert isinstance(down[0], LLMContextFrame)
    messages: list[Any] = down[0].context.get_messages()
    # The prompt travels as the LLM's system instruction; the context starts with the lanes.
    assert "KNOWN FACTS" in messages[0]["content"] and "ACC-1000-01" in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "hi, credit my account"}
    assert canonical.get_messages() == [{"role": "user", "content": "hi, credit my account"}]
    assert s.state.turn == 1 and s.requests_by_turn == {1: 1}


async def test_the_context_stage_gives_the_knowledge_ahead_of_the_caller_to_the_session_and_no_further() -> None:
    s = session()
    knowledge = KnowledgeFrame(texts=["Disputes take up to 10 working days."], record={"status": "hit"})
    assert not knowledge.interruptible  # a barge-in keeps the caller's words, and so their knowledge
    canonical = LLMContext([{"role": "user", "content": "how long does a dispute take"}])
    down, _ = await run_test(ContextAssembly(s), frames_to_send=[knowledge, LLMContextFrame(canonical)],
                             expected_down_frames=[LLMContextFrame])
    # The turn those words open records the retrieval, and its context injects the chunk.
    assert s.retrieval_by_turn == {1: {"status": "hit"}} and s.pending_retrieval == {}
    assert isinstance(down[0], LLMContextFrame)
    assert any("Disputes take up to 10 working days." in str(m) for m in down[0].context.get_messages())


async def test_output_guard_replaces_a_card_number_sentence() -> None:
    s = session()
    await s.begin_turn("what card do you have")
    frames = [LLMFullResponseStartFrame(), LLMTextFrame("Sure. The card is 4111 1111 "),
              LLMTextFrame("1111 1234. Anything else?"), LLMFullResponseEndFrame()]
    down, _ = await run_test(OutputGuardProcessor(s), frames_to_send=frames)
    spoken = "".join(f.text for f in down if isinstance(f, LLMTextFrame))
    assert "4111" not in spoken and "ends in 1234" in spoken and "Anything else?" in spoken
    assert s.output_blocks == [(1, "card_number")]


async def test_turn_log_records_an_interrupted_utterance_as_heard() -> None:
    s = session()
    await s.begin_turn("hello")
    # The interruption is a system frame: the sleep lets the text reach the log first, as it would live.
    frames = [LLMFullResponseStartFrame(), LLMTextFrame("Let me explain the whole "), SleepFrame(0.05),
              InterruptionFrame()]
    await run_test(TurnLog(s), frames_to_send=frames)
    agent = [e for e in s.state.transcript if e.kind is EntryKind.AGENT]
    assert [(e.text, e.interrupted) for e in agent] == [("Let me explain the whole", True)]


async def test_turn_log_closes_a_turn_only_when_its_response_calls_no_tool() -> None:
    s = session()
    await s.begin_turn("hello")
    closed: list[int] = []
    frames = [LLMFullResponseStartFrame(), FunctionCallsStartedFrame(function_calls=[]), LLMFullResponseEndFrame(),
              LLMFullResponseStartFrame(), LLMTextFrame("Hello there."), LLMFullResponseEndFrame()]
    await run_test(TurnLog(s, closed.append), frames_to_send=frames)
    assert closed == [1]


async def test_text_call_keeps_order_harvests_and_rejects_from_memory() -> None:
    s = session()
    recorder = CallRecorder(s)
    lines = [CallerLine(1, "hello"), CallerLine(2, "my account is ACC-1000-01"), CallerLine(3, "credit me please")]
    await run_text_call(s, toy_llm(), lines, recorder=recorder)
    kinds = [(e.turn, e.kind.value) for e in s.state.transcript]
    assert kinds[:4] == [(1, "caller"), (1, "agent"), (2, "caller"), (2, "tool_call")]
    assert s.state.ledger.get("account", "ACC-1000-01") is not None
    assert [r.turn for r in recorder.turns] == [1, 2, 3]
    assert recorder.turns[1].executed == ["lookup_account"]
    assert recorder.turns[2].executed == ["issue_credit"] and recorder.turns[2].unledgered == []
    assert all(r.first_response_ms is not None for r in recorder.turns)


async def test_broken_tool_gets_an_error_result_and_the_call_goes_on() -> None:
    s = session()
    recorder = CallRecorder(s)
    await run_text_call(s, toy_llm(), [CallerLine(1, "explode please"), CallerLine(2, "hello again")],
                        recorder=recorder)
    results = [e for e in s.state.transcript if e.kind is EntryKind.TOOL_RESULT]
    assert results[0].outcome is ToolOutcome.FAILED and "failed" in results[0].result["error"]
    assert recorder.turns[1].agent == ["Okay."] and recorder.errors == []


async def test_window_policy_forgets_and_reasks() -> None:
    s = session(PolicyName.WINDOW, keep=2)
    recorder = CallRecorder(s, [ACCOUNT])
    lines = [CallerLine(1, "my account is ACC-1000-01")] + [CallerLine(t, "chit chat") for t in range(2, 6)]
    await run_text_call(s, toy_llm(), [*lines, CallerLine(6, "credit me please")], recorder=recorder)
    last = recorder.turns[-1]
    assert last.turn == 6 and last.agent == ["What is your account number?"]
    assert last.reasks == ["account"] and last.facts_present == {"account": False}
    assert last.executed == []


async def test_lanes_policy_keeps_the_account_and_does_not_reask() -> None:
    # The same call under lanes: the ledger still holds the account, so nothing is asked again.
    s = session(PolicyName.LANES, keep=2, every=2)
    recorder = CallRecorder(s, [ACCOUNT])
    lines = [CallerLine(1, "my account is ACC-1000-01")] + [CallerLine(t, "chit chat") for t in range(2, 6)]
    await run_text_call(s, toy_llm(), [*lines, CallerLine(6, "credit me please")], recorder=recorder)
    last = recorder.turns[-1]
    assert last.turn == 6 and last.reasks == []
    assert last.facts_present == {"account": True} and last.facts_in_memory == {"account": True}
    assert last.executed == ["issue_credit"] and last.unledgered == []


async def test_scripted_barge_in_cuts_the_agent_and_keeps_order() -> None:
    s = session()
    lines = [CallerLine(1, "tell me about my card"), CallerLine(2, "wait, stop", barge_in_after=0.05),
             CallerLine(3, "hello")]
    await run_text_call(s, toy_llm(stream_delay=0.02), lines)
    agent = [e for e in s.state.transcript if e.kind is EntryKind.AGENT]
    assert agent[0].interrupted and agent[0].turn == 1
    full = "Okay. For your security I won't read out the full card number."
    assert len(agent[0].text.split()) < len(full.split(" "))
    turns = [e.turn for e in s.state.transcript]
    assert turns == sorted(turns) and s.state.transcript.pending_tool_calls() == []


async def test_an_identifier_from_nowhere_is_rejected_live() -> None:
    s = session()
    await s.begin_turn("please credit me")
    result = await s.execute_tool("issue_credit", "c1", {"account_id": "ACC-9999-99"})
    assert result["status"] == "rejected" and result["verdict"] == "unknown"
    assert [e.kind for e in s.state.transcript][-2:] == [EntryKind.TOOL_CALL, EntryKind.TOOL_RESULT]
