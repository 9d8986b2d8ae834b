"""The ``pipecat`` policy: pipecat's own LLMContextSummarizer on the pipeline's context, through its real classes.

The summarizing model is the local summarizer's engine: scripted here (what it keeps is up to the test),
the packaged model in one real pass. The call is the simulation's (the reference agent, the call factory),
observed by the recorder, so "present at need" is measured as for every other policy.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from typing import Any

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.utils.context.llm_context_summarization import DEFAULT_SUMMARIZATION_PROMPT

from voice_agent.call.factory import build_call
from voice_agent.core.transcript import EntryKind
from voice_agent.domains.billing import billing_domain
from voice_agent.harness.scenarios import Scenario, load_scenario
from voice_agent.harness.simulation.runner import SimulationPlan, run_once
from voice_agent.policies import PolicyName
from voice_agent.policies.base import PolicySummarizer
from voice_agent.services.local_llm import LocalModelLLM
from voice_agent.settings import SettingsError, SummarizerConfig, load_settings, with_overrides
from voice_agent.summarizers.local import Completion, LocalSummarizer

SKIP_REAL = os.environ.get("VOICE_AGENT_SKIP_LOCAL_MODEL") == "1"
HAVE_RUNTIME = importlib.util.find_spec("llama_cpp") is not None


class ScriptedEngine:
    """Summarizes by keeping the lines of the transcript that contain any of ``keep`` (nothing else)."""

    def __init__(self, keep: tuple[str, ...] = ()) -> None:
        self.keep = keep
        self.prompts: list[list[dict[str, str]]] = []

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, *, max_tokens: int,
                 temperature: float, seed: int, stop: threading.Event) -> Completion:
        self.prompts.append(messages)
        lines = [line for line in messages[-1]["content"].splitlines() if any(k in line for k in self.keep)]
        return Completion(" ".join(lines) or "The caller is calling about a bill.", 10, 10, 0.0)


def _call(scenario: Scenario, engine: ScriptedEngine, **pipecat: Any) -> tuple[Any, list[LocalSummarizer]]:
    made: list[LocalSummarizer] = []

    def local(_script: Scenario, _run: int) -> PolicySummarizer:
        made.append(LocalSummarizer(SummarizerConfig(), engine=engine))
        return made[-1]

    settings = with_overrides(load_settings(), summarizer={"background": False}, pipecat_summarizer=pipecat)
    plan = SimulationPlan(scenario, [], billing_domain, [PolicyName.PIPECAT], settings, retention=None,
                          summarizer_factory=local)
    return asyncio.run(run_once(plan, PolicyName.PIPECAT, 0)), made


def _short(scenario: Scenario) -> Scenario:
    needs = [n for n in (scenario.fact_needed_turn(f) for f in scenario.facts) if n is not None]
    return scenario.model_copy(update={"turns": scenario.turns[: 2 * max(needs)]})


def test_pipecat_summarizes_with_its_own_prompt_and_a_lost_fact_is_missing_at_need() -> None:
    scenario = _short(load_scenario("billing_dispute"))
    account = next(f for f in scenario.facts if f.key == "account_id")
    # The engine keeps nothing of the caller's words: every fact stated before the last summary is lost.
    outcome, made = _call(scenario, ScriptedEngine())
    assert outcome.failure is None
    passes = made[0].passes
    assert len(passes) >= 2 and {p.kind for p in passes} == {"pipecat"}
    engine = made[0].engine
    assert isinstance(engine, ScriptedEngine)
    # pipecat's own request: its default prompt as the system message, its own transcript as the user message.
    assert engine.prompts[0][0] == {"role": "system", "content": DEFAULT_SUMMARIZATION_PROMPT}
    assert engine.prompts[0][1]["content"].startswith("Conversation history:\nUSER: ")
    assert outcome.present_at_need["account_id"] is False
    assert outcome.reasks >= 1
    # Kept by the summary, the same fact is there at need: the metric follows what the summary holds.
    kept, _ = _call(scenario, ScriptedEngine(keep=(account.value,)))
    assert kept.present_at_need["account_id"] is True


def test_turns_are_counted_from_the_callers_words_even_after_summaries() -> None:
    scenario = _short(load_scenario("refund_orders"))
    caller_turns = sum(1 for t in scenario.turns if t.speaker == "caller")
    made: list[LocalSummarizer] = []
    settings = with_overrides(load_settings(), policy={"name": "pipecat"}, summarizer={"background": False},
                              pipecat_summarizer={"max_unsummarized_messages": 6})

    def local(_call_id: str, _domain: Any) -> PolicySummarizer:
        made.append(LocalSummarizer(SummarizerConfig(), engine=ScriptedEngine()))
        return made[-1]

    parts = build_call(settings, "t", domain_factory=billing_domain, summarizer_factory=local)
    from voice_agent.harness.simulation.runner import caller_lines
    from voice_agent.harness.simulation.text_call import run_text_call

    call = asyncio.run(run_text_call(parts.session, parts.llm, caller_lines(scenario)))
    assert len(call.summaries_applied) >= 3
    # The summary is a user message too; it must not open a turn, and folded messages must not hide new ones.
    assert parts.session.turn == caller_turns
    texts = [e.text for e in parts.session.state.transcript.entries if e.kind is EntryKind.CALLER]
    assert not any(t.startswith("Conversation summary:") for t in texts)


def test_full_history_needs_no_summarizer_and_keeps_every_fact() -> None:
    scenario = _short(load_scenario("billing_dispute"))
    settings = with_overrides(load_settings(), summarizer={"kind": "extractive"},
                              pipecat_summarizer={"summarize": False})
    plan = SimulationPlan(scenario, [], billing_domain, [PolicyName.PIPECAT], settings, retention=None)
    outcome = asyncio.run(run_once(plan, PolicyName.PIPECAT, 0))
    assert outcome.failure is None and all(outcome.present_at_need.values())
    assert outcome.tokens[-1] > outcome.tokens[0] * 3  # never summarized: it only grows


def test_a_summarizer_that_is_not_a_model_is_a_one_line_settings_error() -> None:
    settings = with_overrides(load_settings(), policy={"name": "pipecat"}, summarizer={"kind": "extractive"})
    with pytest.raises(SettingsError, match=r"summarizer\.kind to local or llm"):
        build_call(settings, "t", domain_factory=billing_domain)
    with pytest.raises(SettingsError, match="max_context_tokens or max_unsummarized_messages"):
        with_overrides(load_settings(), pipecat_summarizer={"max_context_tokens": 0, "max_unsummarized_messages": 0})


class FailingEngine:
    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, *, max_tokens: int,
                 temperature: float, seed: int, stop: threading.Event) -> Completion:
        raise RuntimeError("model crashed")


def test_a_failed_model_pass_is_none_for_pipecat_and_counted() -> None:
    summarizer = LocalSummarizer(SummarizerConfig(), engine=FailingEngine())
    service = LocalModelLLM(summarizer)
    context = LLMContext(messages=[{"role": "user", "content": "Conversation history:\nUSER: hi"}])
    assert asyncio.run(service.run_inference(context, system_instruction="summarize")) is None
    assert summarizer.failures == 1 and service.in_flight == 0
    # The call goes on with its context unchanged: every fact is then in the raw messages pipecat kept.
    scenario = _short(load_scenario("refund_orders"))
    made: list[LocalSummarizer] = []

    def failing(_script: Scenario, _run: int) -> PolicySummarizer:
        made.append(LocalSummarizer(SummarizerConfig(), engine=FailingEngine()))
        return made[-1]

    settings = with_overrides(load_settings(), summarizer={"background": False})
    plan = SimulationPlan(scenario, [], billing_domain, [PolicyName.PIPECAT], settings, retention=None,
                          summarizer_factory=failing)
    outcome = asyncio.run(run_once(plan, PolicyName.PIPECAT, 0))
    assert outcome.failure is None and outcome.summaries_applied == 0 and made[0].failures >= 1
    assert all(outcome.present_at_need.values())


class SlowEngine(ScriptedEngine):
    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, *, max_tokens: int,
                 temperature: float, seed: int, stop: threading.Event) -> Completion:
        stop.wait(0.4)  # slower than a scripted turn: without the inline wait the next turns outrun it
        return super().complete(messages, schema, max_tokens=max_tokens, temperature=temperature, seed=seed,
                                stop=stop)


def test_inline_the_next_turn_waits_for_pipecats_summary() -> None:
    scenario = _short(load_scenario("billing_dispute"))
    account = next(f for f in scenario.facts if f.key == "account_id")
    instant, _ = _call(scenario, ScriptedEngine(keep=(account.value,)))
    slow, made = _call(scenario, SlowEngine(keep=(account.value,)))
    # Every pass lands before the caller's next line: as many applied as with an instant model, none dropped.
    assert slow.summaries_applied == instant.summaries_applied >= 2
    assert len([p for p in made[0].passes if p.outcome == "ok"]) == slow.summaries_applied
    assert slow.present_at_need == instant.present_at_need


def test_the_summary_is_memory_to_the_recorder_and_summary_to_the_agent_never_the_callers_words() -> None:
    from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

    from voice_agent.domains.billing.brain import _parse
    from voice_agent.policies.pipecat_builtin import SUMMARY_TEMPLATE

    assert LLMContextSummaryConfig().summary_message_template == SUMMARY_TEMPLATE  # pipecat's own default
    scenario = _short(load_scenario("billing_dispute"))
    account = next(f for f in scenario.facts if f.key == "account_id")
    outcome, _ = _call(scenario, ScriptedEngine(keep=(account.value,)))
    # Kept only by pipecat's summary at need: captured into memory (the summary), as for our policies.
    assert outcome.captured["account_id"] is True
    summary = {"role": "user", "content": SUMMARY_TEMPLATE.format(summary="Account AC-1 was charged twice.")}
    ctx = _parse([summary, {"role": "user", "content": "hello"}])
    assert ctx.user_texts == ["hello"] and "charged twice" in ctx.summary


@pytest.mark.timeout(900)
def test_one_real_pass_of_pipecats_request_on_the_packaged_model() -> None:
    if not HAVE_RUNTIME and SKIP_REAL:
        pytest.skip("llama_cpp is not installed and VOICE_AGENT_SKIP_LOCAL_MODEL=1")
    assert HAVE_RUNTIME, "the local-summarizer extra is not installed (scripts/test installs it)"
    service = LocalModelLLM(LocalSummarizer(SummarizerConfig(max_tokens=48, local_timeout_secs=300)))
    context = LLMContext(messages=[{"role": "user", "content": (
        "Conversation history:\nUSER: Hi, my account number is AC-7741-QZ and I was charged twice.\n\n"
        "ASSISTANT: Sorry about that. Which charge was doubled?\n\nUSER: The router rental in March.")}])
    text = asyncio.run(service.run_inference(context, max_tokens=6000,
                                             system_instruction=DEFAULT_SUMMARIZATION_PROMPT))
    assert text and len(text.split()) >= 5
    stats = service.summarizer.passes[-1]
    assert stats.kind == "pipecat" and stats.outcome == "ok" and stats.completion_tokens <= 48


def test_the_served_pipeline_gets_pipecats_own_summarizer_with_the_configured_thresholds() -> None:
    from voice_agent.call.pipeline import build_call_pipeline

    made: list[LocalSummarizer] = []

    def local(_call_id: str, _domain: Any) -> PolicySummarizer:
        made.append(LocalSummarizer(SummarizerConfig(), engine=ScriptedEngine()))
        return made[-1]

    # serve builds every call with build_call, then build_call_pipeline, as here.
    settings = with_overrides(load_settings(), policy={"name": "pipecat"},
                              pipecat_summarizer={"max_unsummarized_messages": 14, "max_context_tokens": 0})
    parts = build_call(settings, "served", domain_factory=billing_domain, summarizer_factory=local)
    call = build_call_pipeline(parts.session, parts.llm)
    summarizer = call.assistant_aggregator._summarizer  # pipecat's own instance
    assert summarizer is not None
    config = summarizer._auto_config
    assert (config.max_unsummarized_messages, config.max_context_tokens) == (14, None)
    assert isinstance(config.summary_config.llm, LocalModelLLM) and config.summary_config.llm.summarizer is made[0]
    assert summarizer._auto_trigger is True
    described = parts.session.describe()["pipecat_summarizer"]  # the call record names the thresholds too
    assert (described["max_unsummarized_messages"], described["max_context_tokens"]) == (14, None)
    # Under our own policies pipecat's summarizer exists (pipecat always creates it) but never triggers.
    lanes = build_call(with_overrides(load_settings(), summarizer={"kind": "extractive"}), "lanes",
                       domain_factory=billing_domain)
    other = build_call_pipeline(lanes.session, lanes.llm).assistant_aggregator._summarizer
    assert other is not None and other._auto_trigger is False


async def test_a_restored_history_has_the_shapes_pipecats_own_aggregator_gives_tool_calls() -> None:
    """A completed call, one with an empty result and one a barge-in cancelled, as pipecat 1.14 stores them."""
    from pipecat.frames.frames import FunctionCallCancelFrame, FunctionCallInProgressFrame, FunctionCallResultFrame
    from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
    from pipecat.tests.utils import SleepFrame

    from tests.fakes.pipecat_run import run_test
    from voice_agent.core.transcript import ToolOutcome, TranscriptLane
    from voice_agent.policies.pipecat_builtin import pipecat_history

    calls: list[tuple[str, str, dict[str, Any], dict[str, Any] | None]] = [
        ("lookup_account", "t1", {"account_id": "ACC-4729-18"}, {"status": "open", "owner": "Zoë"}),
             ("schedule_callback", "t2", {"date": "2026-12-14"}, None),
             ("issue_credit", "t3", {"amount": 19.99}, {"status": "cancelled"})]
    context = LLMContext()
    frames: list[Any] = []
    lane = TranscriptLane()
    for name, call_id, arguments, result in calls:
        frames.append(FunctionCallInProgressFrame(function_name=name, tool_call_id=call_id, arguments=arguments,
                                                  cancel_on_interruption=True))
        lane.append_tool_call(1, name, call_id, arguments)
        if call_id == "t3":  # the caller spoke over it (a system frame: once the call is in progress)
            frames += [SleepFrame(sleep=0.5), FunctionCallCancelFrame(function_name=name, tool_call_id=call_id)]
            lane.append_tool_result(1, name, call_id, result, ToolOutcome.CANCELLED)
        else:
            frames.append(FunctionCallResultFrame(function_name=name, tool_call_id=call_id, arguments=arguments,
                                                  result=result, run_llm=False))
            lane.append_tool_result(1, name, call_id, result, ToolOutcome.COMPLETED)
    await run_test(LLMAssistantAggregator(context), frames_to_send=frames)
    assert pipecat_history(lane.entries) == context.get_messages()
