"""The offline default LLM: a deterministic brain behind pipecat's LLMService interface.

It sees only what a real model sees, the LLMContext handed to it (messages and
tools), so a fact missing from the assembled context becomes a re-ask.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pipecat.frames.frames import (
    FunctionCallFromLLM,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext

from voice_agent.agent.brain import Brain
from voice_agent.services.offline_llm import OfflineLLMService


def tool_names(context: LLMContext) -> list[str]:
    """Names of the tools a context advertises."""
    tools: Any = context.tools
    standard = getattr(tools, "standard_tools", None)
    if standard is None:
        return []
    return [str(getattr(t, "name", None) or getattr(t, "__name__", "")) for t in standard]


class ReferenceLLMService(OfflineLLMService):
    """Runs a :class:`~voice_agent.agent.brain.Brain` as a pipecat LLM service.

    Args:
        brain: The deterministic brain.
        stream_delay: Seconds between streamed words (0 sends the reply at once); a
            delay lets a scripted barge-in cut the agent mid-sentence.
    """

    def __init__(self, brain: Brain, *, stream_delay: float = 0.0, **kwargs: Any) -> None:
        super().__init__("reference-agent", **kwargs)
        self._brain = brain
        self._stream_delay = stream_delay

    async def respond(self, context: LLMContext) -> None:
        """Asks the brain and streams its reply, running its tool calls."""
        await self.push_frame(LLMFullResponseStartFrame())
        await self.start_ttfb_metrics()
        messages = cast(Sequence[Mapping[str, Any]], context.get_messages())
        instruction = self._settings.system_instruction
        if isinstance(instruction, str) and instruction:
            # Like the hosted adapters: the system instruction goes first, then the context.
            messages = [{"role": "system", "content": instruction}, *messages]
        reply = self._brain.respond(messages, tool_names(context))
        await self.stop_ttfb_metrics()
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
                    tool_call_id=self.next_call_id("ref"),
                    arguments=dict(call.arguments),
                    context=context,
                )
                for call in reply.tool_calls
            ]
            await self.run_function_calls(calls)
        await self.push_frame(LLMFullResponseEndFrame())
