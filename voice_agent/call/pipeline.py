"""Builds the pipecat pipeline for one call around a :class:`~voice_agent.call.session.CallSession`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from loguru import logger
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_context_summarizer import SummaryAppliedEvent
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregator,
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from processors.caller_read_ahead import CallerReadAhead
from processors.context_assembly import CallerMessages, ContextAssembly
from processors.llm_watchdog import LLMWatchdog
from processors.output_guard import OutputGuardProcessor
from processors.tool_layer import register_guarded_tools, tools_schema
from processors.turn_log import TurnLog
from voice_agent.call.session import CallSession
from voice_agent.call.telemetry import emit_turn_span
from voice_agent.core.caller_history import CallerHistoryReader
from voice_agent.policies.pipecat_builtin import SUMMARY_TEMPLATE, PipecatBuiltinPolicy, pipecat_threshold
from voice_agent.services.vendor_hooks import message_dialect

AUDIO_TURN_STOP_TIMEOUT = 10.0
"""Seconds the user aggregator waits for a transcript after speech stops, with an offline STT."""


@dataclass
class CallPipeline:
    """The processors of one call, in order, with handles the driver and tests need."""

    pipeline: Pipeline
    session: CallSession
    llm: LLMService
    user_aggregator: LLMUserAggregator
    assistant_aggregator: LLMAssistantAggregator
    output_guard: OutputGuardProcessor
    turn_log: TurnLog
    watchdog: LLMWatchdog
    summaries_applied: list[dict[str, int]] = field(default_factory=list)
    """Under ``pipecat``: each summary pipecat applied (its message counts), in order."""

    @property
    def summarizing(self) -> bool:
        """pipecat's summarizer has a summary in flight, or its model is still on one (never under our policies).

        pipecat clears its own flag on an interruption while the pass runs on, so the model's count is read too.
        """
        summarizer = self.assistant_aggregator._summarizer
        # pipecat exposes no public flag; this is the one its own trigger checks (a test pins its name).
        requested = summarizer is not None and summarizer._summarization_in_progress
        policy = self.session.policy
        model = policy.summary_llm if isinstance(policy, PipecatBuiltinPolicy) else None
        return bool(requested or getattr(model, "in_flight", 0))

    async def summary_settled(self, poll_secs: float = 0.05) -> None:
        """Returns once no pipecat summary is in flight.

        A scripted driver measuring with inline passes waits here, so the next turn sees the summary as
        our inline passes are seen.

        Args:
            poll_secs: How often to look.
        """
        while self.summarizing:
            await asyncio.sleep(poll_secs)


def pipecat_summarization(policy: PipecatBuiltinPolicy) -> LLMAssistantAggregatorParams:
    """pipecat's own config objects for the ``pipecat`` policy.

    Args:
        policy: Its thresholds and the LLM service it summarizes with.

    Returns:
        The assistant aggregator's parameters: auto summarization on those thresholds (off with ``summarize`` off).
    """
    config = policy.config  # the pipecat_summarizer settings
    if not config.summarize:
        return LLMAssistantAggregatorParams()
    return LLMAssistantAggregatorParams(
        enable_auto_context_summarization=True,
        auto_context_summarization_config=LLMAutoContextSummarizationConfig(
            max_context_tokens=pipecat_threshold(config.max_context_tokens),
            max_unsummarized_messages=pipecat_threshold(config.max_unsummarized_messages),
            summary_config=LLMContextSummaryConfig(
                target_context_tokens=config.target_context_tokens,
                min_messages_after_summary=config.min_messages_after_summary,
                llm=policy.summary_llm,
                summarization_timeout=config.timeout_secs,
                summary_message_template=SUMMARY_TEMPLATE,
            ),
        ),
    )


def text_turns() -> LLMUserAggregatorParams:
    """The user aggregator of a text call: the driver says when a turn ends (no VAD, no transcription timing).

    A new object per call: pipecat's aggregator may write to its parameters.
    """
    return LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies())


@dataclass
class CallProcessors:
    """The processors that make a pipecat pipeline long-call safe, to splice around its LLM.

    ``[transport.input(), stt, *before_user, user_aggregator, *before_llm, llm, *after_llm, tts,
    transport.output(), *after_output, assistant_aggregator]``: the pipeline's own aggregators, prompt,
    tools, turn strategies and services stay as they are.

    Attributes:
        session: The call's lanes, policy and guards.
        before_user: Reads the caller's interim transcripts ahead (an optimisation for audio calls; optional).
        before_llm: Context assembly (each request built from the lanes), then the LLM watchdog's inlet.
        after_llm: The watchdog's outlet, context assembly for re-runs after tool results, the output guard.
        after_output: The turn log (records what the agent said as heard and closes each turn).
        output_guard: The output guard (its ``on_output_blocked`` event).
        turn_log: The turn log (its ``on_turn_completed`` and ``on_interrupted`` events).
        watchdog: The LLM watchdog (timeouts, retries, the recovery lines).
    """

    session: CallSession
    before_user: list[FrameProcessor]
    before_llm: list[FrameProcessor]
    after_llm: list[FrameProcessor]
    after_output: list[FrameProcessor]
    output_guard: OutputGuardProcessor
    turn_log: TurnLog
    watchdog: LLMWatchdog


def call_processors(session: CallSession, llm: LLMService[Any], restored: Sequence[Any] = ()) -> CallProcessors:
    """The call's processors around ``llm`` (its tool handlers are not touched here).

    ``restored``: the messages a resumed ``pipecat``-policy call's context starts with (the very objects);
    said on an earlier leg, they open no turn here.

    The LLM sits between the two sides of its watchdog (:mod:`processors.llm_watchdog`), which applies
    ``session.settings.llm`` (the ``llm`` settings' timeouts and retries) to every inference and
    answers the caller itself when the LLM fails. The context stages hand ``llm`` the messages in its vendor's
    dialect (:func:`~voice_agent.services.vendor_hooks.message_dialect`: the lane role, the prompt cache).
    """
    caller_messages, history = CallerMessages(), CallerHistoryReader()
    caller_messages.new(list(restored))
    dialect = message_dialect(llm, session.settings.llm.lane_role)
    output_guard = OutputGuardProcessor(session, name="output-guard")
    turn_log = TurnLog(session, partial(emit_turn_span, session), name="turn-log")
    watchdog = LLMWatchdog(session, llm, session.settings.llm)
    assembly_in = ContextAssembly(session, caller_messages, history, dialect, name="context-assembly-in")
    assembly_rerun = ContextAssembly(session, caller_messages, history, dialect, name="context-assembly-rerun")
    return CallProcessors(
        session,
        before_user=[CallerReadAhead(session, name="caller-read-ahead")],
        before_llm=[assembly_in, watchdog.inlet],
        after_llm=[watchdog.outlet, assembly_rerun, output_guard],
        after_output=[turn_log],
        output_guard=output_guard, turn_log=turn_log, watchdog=watchdog,
    )


def build_call_pipeline(
    session: CallSession,
    llm: LLMService,
    *,
    before_user: Sequence[FrameProcessor] = (),
    tts: Sequence[FrameProcessor] = (),
    user_params: LLMUserAggregatorParams | None = None,
    assistant_params: LLMAssistantAggregatorParams | None = None,
) -> CallPipeline:
    """Wires STT -> caller read-ahead -> user aggregator -> context assembly -> LLM -> output guard -> TTS -> turn log.

    The domain's tools are registered on ``llm`` behind the guards and advertised in the context; the domain's
    prompt is appended to the LLM's system instruction. The processors are :func:`call_processors`'.

    Args:
        session: The call's core state.
        llm: Any pipecat LLM service; its handlers are registered behind the guards here.
        before_user: Processors between the input (transport/STT) and the user aggregator,
            e.g. the transport input and STT, then speculative retrieval.
        tts: Processors after the output guard (TTS and the transport output), empty in text mode.
        user_params: The user aggregator's parameters, as given (turn strategies, VAD, stop timeout); None:
            pipecat's defaults. A text call, whose driver ends each turn itself, passes :func:`text_turns`.
        assistant_params: The assistant aggregator's parameters, as given; under the ``pipecat`` policy its
            summarization settings are the policy's.
    """
    register_guarded_tools(llm, session)
    if session.system_prompt:
        llm.append_system_instruction(session.system_prompt)
    restored = cast(list[Any], session.pipeline_history())  # a resumed pipecat-policy call's earlier turns
    context = LLMContext(messages=restored, tools=tools_schema(session))
    policy = session.policy
    assistant_params = assistant_params or LLMAssistantAggregatorParams()
    if isinstance(policy, PipecatBuiltinPolicy):
        summarization = pipecat_summarization(policy)
        assistant_params = dataclasses.replace(
            assistant_params, enable_auto_context_summarization=summarization.enable_auto_context_summarization,
            auto_context_summarization_config=summarization.auto_context_summarization_config)
    user_agg, assistant_agg = LLMContextAggregatorPair(
        context, user_params=user_params or LLMUserAggregatorParams(), assistant_params=assistant_params,
    )
    parts = call_processors(session, llm, restored)
    processors: list[FrameProcessor] = [
        *before_user, *parts.before_user, user_agg, *parts.before_llm, llm, *parts.after_llm, *tts,
        *parts.after_output, assistant_agg,
    ]
    call = CallPipeline(Pipeline(processors), session, llm, user_agg, assistant_agg, parts.output_guard,
                        parts.turn_log, parts.watchdog)

    async def on_summary_applied(_aggregator: Any, _summarizer: Any, event: SummaryAppliedEvent) -> None:
        counts = {"messages_before": event.original_message_count, "messages_after": event.new_message_count,
                  "summarized": event.summarized_message_count}
        call.summaries_applied.append(counts)
        logger.info("call {}: pipecat summary applied at turn {} ({} messages -> {})", session.call_id,
                    session.turn, event.original_message_count, event.new_message_count)

    assistant_agg.add_event_handler("on_summary_applied", on_summary_applied)
    return call
