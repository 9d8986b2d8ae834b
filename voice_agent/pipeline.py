"""Builds the pipecat pipeline for one call around a :class:`~voice_agent.session.CallSession`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregator,
    LLMContextAggregatorPair,
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies, UserTurnStrategies

from processors.context_assembly import ContextAssembly
from processors.llm_watchdog import LLMWatchdog
from processors.output_guard import OutputGuardProcessor
from processors.tool_layer import register_guarded_tools, tools_schema
from processors.turn_log import TurnLog
from voice_agent.session import CallSession

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


def build_call_pipeline(
    session: CallSession,
    llm: LLMService,
    *,
    before_user: Sequence[FrameProcessor] = (),
    tts: Sequence[FrameProcessor] = (),
    user_turn_strategies: UserTurnStrategies | None = None,
    user_turn_stop_timeout: float = 5.0,
) -> CallPipeline:
    """Wires STT side -> user aggregator -> context assembly -> LLM -> output guard -> TTS -> turn log.

    The LLM sits between the two sides of its watchdog (:mod:`processors.llm_watchdog`), which applies
    ``session.config.llm_recovery`` (the ``llm`` settings' timeouts and retries) to every inference and
    answers the caller itself when the LLM fails.

    Args:
        session: The call's core state.
        llm: Any pipecat LLM service; its handlers are registered behind the guards here.
        before_user: Processors between the input (transport/STT) and the user aggregator,
            e.g. the transport input and STT, then speculative retrieval.
        tts: Processors after the output guard (TTS and the transport output), empty in text mode.
        user_turn_strategies: How user turns start and stop; text mode drives turns externally.
        user_turn_stop_timeout: Longest wait for a transcript after the caller stops speaking; a slow
            offline STT needs more than pipecat's 5 s default, or a turn ends with no words.
    """
    register_guarded_tools(llm, session)
    llm.append_system_instruction(session.system_prompt)
    context = LLMContext(tools=tools_schema(session))
    strategies = user_turn_strategies or ExternalUserTurnStrategies()
    user_agg, assistant_agg = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            user_turn_strategies=strategies, user_turn_stop_timeout=user_turn_stop_timeout
        ),
    )
    output_guard = OutputGuardProcessor(session, name="output-guard")
    turn_log = TurnLog(session, name="turn-log")
    watchdog = LLMWatchdog(session, llm, session.config.llm_recovery)
    processors: list[FrameProcessor] = [
        *before_user,
        user_agg,
        ContextAssembly(session, name="context-assembly-in"),
        watchdog.inlet,
        llm,
        watchdog.outlet,
        ContextAssembly(session, name="context-assembly-rerun"),
        output_guard,
        *tts,
        turn_log,
        assistant_agg,
    ]
    return CallPipeline(Pipeline(processors), session, llm, user_agg, assistant_agg, output_guard, turn_log,
                        watchdog)
