"""The public API (``voice_agent.LongCall`` and friends) and the traps it removed, each at its root."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import LLMContextFrame, LLMMessagesAppendFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.services.llm_service import FunctionCallParams
from pipecat.tests.utils import SleepFrame
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

import voice_agent
from processors.context_assembly import ContextAssembly
from processors.tool_layer import registered_tools
from tests.fakes.pipecat_run import run_test
from tests.fakes.toy_domain import TOY
from voice_agent import FakeLLM, FakeReply, FakeToolCall, LongCall, guarded_tool, with_overrides
from voice_agent.call.factory import build_call
from voice_agent.call.pipeline import build_call_pipeline, text_turns
from voice_agent.call.session import CallSession
from voice_agent.core.tool_spec import ParamKind
from voice_agent.core.transcript import EntryKind
from voice_agent.services.factory import make_llm
from voice_agent.settings import CallConfig, Settings, SettingsError
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TODAY = dt.date(2026, 11, 30)
SETTINGS = with_overrides(Settings(), summarizer={"kind": "extractive"}, call={"reference_date": TODAY})
LOOKUP = FunctionSchema("lookup_order", "Look up an order.", {"order_id": {"type": "string"}}, ["order_id"])
HOURS = FunctionSchema("opening_hours", "The shop's opening hours.", {}, [])


async def lookup_order(params: FunctionCallParams) -> None:
    await params.result_callback({"order_id": params.arguments["order_id"], "status": "shipped"})


async def opening_hours(params: FunctionCallParams) -> None:
    await params.result_callback({"hours": "9-5"})


def test_the_public_names_resolve_and_importing_the_package_loads_no_pipecat() -> None:
    assert len(voice_agent.__all__) <= 13
    for name in voice_agent.__all__:
        assert getattr(voice_agent, name) is not None
    assert set(voice_agent.__all__) <= set(dir(voice_agent))  # completion finds them before their first use
    code = "import sys, voice_agent; print(sorted(m for m in sys.modules if m.split('.')[0] == 'pipecat'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_guarded_tool_marks_the_schemas_parameters_and_leaves_the_schema_alone() -> None:
    schema = FunctionSchema("book", "Book.", {"order_id": {"type": "string"}, "day": {"type": "string"},
                                              "note": {"type": "string"}}, ["order_id", "day"])
    before = schema.to_default_dict()
    tool = guarded_tool(schema, identifiers=["order_id"], dates=["day"], mutates=True)
    assert tool.schema is schema and schema.to_default_dict() == before
    kinds = {p.name: (p.kind, p.role, p.required) for p in tool.spec.params}
    assert kinds == {"order_id": (ParamKind.IDENTIFIER, "order", True), "day": (ParamKind.DATE, None, True),
                     "note": (ParamKind.PLAIN, None, False)}
    assert tool.spec.mutates and [h.path for h in tool.spec.harvest] == ["order_id"]
    with pytest.raises(ValueError, match="no parameter order in its schema"):
        guarded_tool(schema, identifiers=["order"])


# -- trap: the prompt went through str.format ------------------------------------------------------------

def test_a_domain_prompt_with_braces_survives_and_only_the_date_placeholders_are_filled() -> None:
    prompt = 'Today is {today}. Answer as {"say": "..."} and never {reference_date} twice: {x}.'
    domain = TOY.__class__(**{**TOY.__dict__, "system_prompt": prompt})
    session = CallSession(domain, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
    assert session.system_prompt == ('Today is 2026-11-30. Answer as {"say": "..."} and never 2026-11-30 twice: '
                                     '{x}.')


# -- trap: a domain needed a reference brain ------------------------------------------------------------

def test_a_long_call_needs_no_reference_brain_and_the_reference_vendor_says_so() -> None:
    domain = LongCall([guarded_tool(LOOKUP, identifiers=["order_id"])]).domain()
    assert domain.make_brain is None and domain.system_prompt == ""
    with pytest.raises(SettingsError, match="reference brain"):
        make_llm(SETTINGS, domain)
    llm = FakeLLM({})
    llm.register_function("lookup_order", lookup_order)
    call = LongCall([guarded_tool(LOOKUP, identifiers=["order_id"])], settings=SETTINGS).attach(llm)
    assert call.session.domain.make_brain is None and call.session.system_prompt == ""


# -- trap: no turn strategy became external turns; the aggregator parameters were dropped ---------------

def test_build_call_pipeline_hands_the_aggregator_parameters_on_as_given() -> None:
    parts = build_call(SETTINGS, "params")
    user_params = LLMUserAggregatorParams(user_turn_stop_timeout=7.5)
    assistant_params = LLMAssistantAggregatorParams(enable_auto_context_summarization=False)
    call = build_call_pipeline(parts.session, parts.llm, user_params=user_params, assistant_params=assistant_params)
    assert call.user_aggregator._params is user_params and call.assistant_aggregator._params is assistant_params
    assert call.user_aggregator._params.user_turn_stop_timeout == 7.5
    # Not set means pipecat's own (VAD and transcription start a turn, an analyzer ends it), never external turns.
    default = build_call_pipeline(build_call(SETTINGS, "default").session, build_call(SETTINGS, "d").llm)
    assert default.user_aggregator._params.user_turn_strategies is None  # the aggregator's UserTurnStrategies()
    assert isinstance(text_turns().user_turn_strategies, ExternalUserTurnStrategies)


# -- trap: messages other processors add never reached the model ---------------------------------------

async def test_the_history_messages_no_turn_holds_reach_the_model_first_in_their_order() -> None:
    session = CallSession(TOY, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
    tools = ToolsSchema([LOOKUP])
    history: list[Any] = [{"role": "system", "content": 'Reply as {"say": ...}'},
                          {"role": "user", "content": "hello"},
                          {"role": "developer", "content": "The caller is on a mobile."}]
    down, _ = await run_test(ContextAssembly(session), frames_to_send=[LLMContextFrame(LLMContext(history, tools))],
                             expected_down_frames=[LLMContextFrame])
    assert isinstance(down[0], LLMContextFrame)
    sent = down[0].context
    # The system and developer messages first, as they stand; then the turn, rebuilt from the lanes.
    assert sent.get_messages() == [history[0], history[2], {"role": "user", "content": "hello"}]
    assert sent.tools is tools


# -- the user's own tools: declared or not, all run behind the guards and stay in the lanes ------------

async def test_an_undeclared_tool_runs_as_a_plain_tool_and_its_result_stays_in_the_lanes() -> None:
    llm = FakeLLM({1: [FakeReply(tool_calls=(FakeToolCall("opening_hours"),)), FakeReply("Nine to five.")],
                   2: [FakeReply(tool_calls=(FakeToolCall("lookup_order", {"order_id": "ORD-111111"}),)),
                       FakeReply("Done.")]})
    llm.register_function("lookup_order", lookup_order, timeout_secs=3.0)
    llm.register_function("opening_hours", opening_hours)
    call = LongCall([guarded_tool(LOOKUP, identifiers=["order_id"])], settings=SETTINGS).attach(llm, call_id="t")
    assert llm._functions["lookup_order"].timeout_secs == 3.0  # the handler's own options are kept
    user, assistant = LLMContextAggregatorPair(LLMContext(tools=ToolsSchema([LOOKUP, HOURS])),
                                               user_params=text_turns())
    pipeline = Pipeline([user, *call.before_llm, llm, *call.after_llm, *call.after_output, assistant])
    frames = [LLMMessagesAppendFrame([{"role": "user", "content": "When are you open?"}], run_llm=True),
              SleepFrame(0.6),
              LLMMessagesAppendFrame([{"role": "user", "content": "Order ORD-222222 please."}], run_llm=True),
              SleepFrame(0.6)]
    await run_test(pipeline, frames_to_send=frames)
    entries = [(e.kind, e.tool_name) for e in call.session.state.transcript if e.kind is EntryKind.TOOL_RESULT]
    assert entries == [(EntryKind.TOOL_RESULT, "opening_hours"), (EntryKind.TOOL_RESULT, "lookup_order")]
    # The re-run after the tool saw its result (rebuilt from the lanes): the model is not left to call it again.
    assert {"hours": "9-5"} in [json.loads(m["content"]) for m in llm.received[1] if m["role"] == "tool"]
    # ORD-111111 was never said: the guard refused it and the handler never ran (nothing entered the ledger).
    refused = [e for e in call.session.guard_events if e.rejection is not None]
    assert [(e.tool, (e.rejection or {})["guard"]) for e in refused] == [("lookup_order", "id")]
    assert "ORD-111111" not in call.session.state.ledger.values()


def test_attach_refuses_what_it_cannot_guard() -> None:
    llm = FakeLLM({})
    with pytest.raises(ValueError, match="no handler registered on the LLM for lookup_order"):
        LongCall([guarded_tool(LOOKUP, identifiers=["order_id"])], settings=SETTINGS).attach(llm)
    llm.register_function(None, opening_hours)
    with pytest.raises(ValueError, match="catch-all"):
        registered_tools(llm)
    with pytest.raises(SettingsError, match=r"policy\.name=pipecat"):
        LongCall(settings=with_overrides(SETTINGS, policy={"name": "pipecat"})).attach(FakeLLM({}))


def test_attach_reads_pipecats_handler_registry_by_its_private_name() -> None:
    # pipecat lists registered handlers only as LLMService._functions; this pins the name and its fields.
    llm = FakeLLM({})
    llm.register_function("lookup_order", lookup_order, cancel_on_interruption=False)
    item = llm._functions["lookup_order"]
    assert item.handler is lookup_order and item.cancel_on_interruption is False
    assert registered_tools(llm) == ["lookup_order"]


# -- SDK retries of a user-built LLM -------------------------------------------------------------------

def test_attach_turns_off_the_sdk_retries_of_the_bots_own_openai_service() -> None:
    from pipecat.services.openai.llm import OpenAILLMService

    llm = OpenAILLMService(api_key="sk-test-not-a-real-key")
    assert llm._client.max_retries > 0
    llm.register_function("lookup_order", lookup_order)
    LongCall([guarded_tool(LOOKUP, identifiers=["order_id"])], settings=SETTINGS).attach(llm)
    assert llm._client.max_retries == 0
    assert llm._client.timeout == SETTINGS.llm.total_timeout_secs + 5.0


async def test_attach_makes_a_stream_cut_before_its_finish_reason_an_error_of_the_bots_own_openai_service() -> None:
    from pipecat.services.openai.llm import OpenAILLMService

    from voice_agent.services.cut_streams import CutStream

    llm = OpenAILLMService(api_key="sk-test-not-a-real-key")
    cut = [SimpleNamespace(choices=[SimpleNamespace(finish_reason=None)])]

    async def provider_stream(*_: Any) -> Any:
        async def chunks() -> Any:
            for part in cut:
                yield part
        return chunks()

    llm.get_chat_completions = provider_stream  # type: ignore[method-assign,assignment]
    llm.register_function("lookup_order", lookup_order)
    LongCall([guarded_tool(LOOKUP, identifiers=["order_id"])], settings=SETTINGS).attach(llm)
    with pytest.raises(CutStream):
        async for _ in await llm.get_chat_completions(LLMContext()):
            pass
    cut.append(SimpleNamespace(choices=[SimpleNamespace(finish_reason="stop")]))
    assert len([c async for c in await llm.get_chat_completions(LLMContext())]) == 2
