"""The output guard stage, before TTS: checks each sentence the agent is about to speak."""

from __future__ import annotations

import re
from typing import Any, Protocol

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from voice_agent.core.guards.output_guard import OutputVerdict

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class OutputSession(Protocol):
    """What the output guard stage uses of the call (:class:`voice_agent.call.session.CallSession`)."""

    def review_output(self, text: str) -> OutputVerdict:
        """The guard's verdict on one sentence the agent is about to speak."""
        ...


class OutputGuardProcessor(FrameProcessor):
    """Buffers streamed LLM text to sentence boundaries, reviews each sentence, speaks the verdict.

    Event handlers:
        on_output_blocked(processor, verdict): an utterance was replaced.

    Args:
        session: The call (its output guard, ledger and transcript).
    """

    def __init__(self, session: OutputSession, **kwargs: Any) -> None:
        # Direct mode: frames are handled in the pushing processor's task, not queued for a task of this
        # one's own (two queue hops and task switches per frame saved; nothing here waits on anything).
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(**kwargs)
        self._session = session
        self._buffer = ""
        self._register_event_handler("on_output_blocked")

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Holds LLMTextFrames until a sentence is complete; forwards everything else."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame) and direction is FrameDirection.DOWNSTREAM:
            self._buffer += frame.text
            *complete, self._buffer = _SENTENCE_END.split(self._buffer)
            for sentence in complete:
                await self._speak(sentence + " ")
            return
        if isinstance(frame, LLMFullResponseStartFrame):
            self._buffer = ""
        elif isinstance(frame, LLMFullResponseEndFrame) and self._buffer:
            await self._speak(self._buffer)
            self._buffer = ""
        elif isinstance(frame, InterruptionFrame):
            self._buffer = ""  # nothing unspoken survives a barge-in
        await self.push_frame(frame, direction)

    async def _speak(self, text: str) -> None:
        verdict = self._session.review_output(text.strip())
        if not verdict.allowed:
            await self._call_event_handler("on_output_blocked", verdict)
            text = verdict.text + " "
        await self.push_frame(LLMTextFrame(text))
