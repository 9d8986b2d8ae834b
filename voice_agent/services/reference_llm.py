"""The offline default LLM: a deterministic brain behind pipecat's LLMService interface.

It sees only what a real model sees, the LLMContext handed to it (messages and
tools), so a fact missing from the assembled context becomes a re-ask.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pipecat.frames.frames import (
    Frame,
    FunctionCallFromLLM,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings

from voice_agent.agent.brain import Brain


def tool_names(context: LLMContext) -> list[str]:
    """Names of the tools a context advertises."""
    tools: Any = context.tools
    standard = getattr(tools, "standard_tools", None)
    if standard is None:
        return []
    return [str(getattr(t, "name", None) or getattr(t, "__name__", "")) for t in standard]


class ReferenceLLMService(LLMService):
    """Runs a :class:`~voice_agent.agent.brain.Brain` as a pipecat LLM service.

    Event handlers:
        on_reask(service, argument): the reply asks the caller for ``argument``.

    Args:
        brain: The deterministic brain.
        stream_delay: Seconds between streamed words (0 sends the reply at once); a
            delay lets a scripted barge-in cut the agent mid-sentence.
    """

    def __init__(self, brain: Brain, *, stream_delay: float = 0.0, **kwargs: Any) -> None:
        settings = LLMSettings(
            model="reference-agent", system_instruction=None, temperature=None, max_tokens=None, top_p=None,
            top_k=None, frequency_penalty=None, presence_penalty=None, seed=None,
            filter_incomplete_user_turns=None, user_turn_completion_config=None,
        )
        super().__init__(settings=settings, **kwargs)
        self._brain = brain
        self._stream_delay = stream_delay
        self._call_ids = itertools.count(1)
        self._register_event_handler("on_reask")

    def can_generate_metrics(self) -> bool:
        """Reports TTFB and processing metrics like any LLM service."""
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Answers every LLMContextFrame; forwards everything else."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self._respond(frame.context)
        else:
            await self.push_frame(frame, direction)

    async def _respond(self, context: LLMContext) -> None:
        await self.push_frame(LLMFullResponseStartFrame())
        await self.start_ttfb_metrics()
        messages = cast(Sequence[Mapping[str, Any]], context.get_messages())
        instruction = self._settings.system_instruction
        if isinstance(instruction, str) and instruction:
            # Like the hosted adapters: the system instruction goes first, then the context.
            messages = [{"role": "system", "content": instruction}, *messages]
        reply = self._brain.respond(messages, tool_names(context))
        await self.stop_ttfb_metrics()
        if reply.asks_for:
            await self._call_event_handler("on_reask", reply.asks_for)
        if reply.text and self._stream_delay > 0:
            for word in reply.text.split(" "):
                await self.push_frame(LLMTextFrame(word + " "))
                await asyncio.sleep(self._stream_delay)
        elif reply.text:
            await self.push_frame(LLMTextFrame(reply.text))
        if reply.tool_calls:
            calls = [
                FunctionCallFromLLM(
                    function_name=call.name,
                    tool_call_id=f"ref-{next(self._call_ids)}",
                    arguments=dict(call.arguments),
                    context=context,
                )
                for call in reply.tool_calls
            ]
            await self.run_function_calls(calls)
        await self.push_frame(LLMFullResponseEndFrame())
