"""The base of the offline LLM services (the reference agent, the scripted fake): no network, no key."""

from __future__ import annotations

import itertools
from abc import abstractmethod
from typing import Any

from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings


class OfflineLLMService(LLMService):
    """A pipecat LLM service that answers each LLMContextFrame itself, in :meth:`respond`.

    Subclasses see only what a hosted model sees (the context: messages and tools) and run tools
    through pipecat's own function-calling machinery, so the guarded tool layer cannot tell them
    from a real model.

    Args:
        model: The model name it reports.
        system_instruction: The system prompt, as a hosted service takes it (``Settings(system_instruction=...)``).
    """

    def __init__(self, model: str, *, system_instruction: str | None = None, **kwargs: Any) -> None:
        settings = LLMSettings(
            model=model, system_instruction=system_instruction, temperature=None, max_tokens=None, top_p=None,
            top_k=None, frequency_penalty=None, presence_penalty=None, seed=None,
            filter_incomplete_user_turns=None, user_turn_completion_config=None,
        )
        super().__init__(settings=settings, **kwargs)
        self._call_ids = itertools.count(1)

    def can_generate_metrics(self) -> bool:
        """Reports TTFB and processing metrics like any LLM service."""
        return True

    @property
    def system_instruction(self) -> str | None:
        """The system prompt a hosted model would be sent now (the service's own and any appended)."""
        instruction = self._settings.system_instruction
        return instruction if isinstance(instruction, str) else None

    def next_call_id(self, prefix: str) -> str:
        """A fresh tool-call id (``prefix-1``, ``prefix-2``...)."""
        return f"{prefix}-{next(self._call_ids)}"

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Answers every LLMContextFrame; forwards everything else."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self.respond(frame.context)
        else:
            await self.push_frame(frame, direction)

    @abstractmethod
    async def respond(self, context: LLMContext) -> None:
        """Answers one inference: pushes the response frames and runs any tool calls."""
