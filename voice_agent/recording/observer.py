"""The pipecat side of a recorder: an observer that hands it what crosses the pipeline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pipecat.frames.frames import ErrorFrame, FunctionCallResultFrame, LLMContextFrame, TextFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from voice_agent.recording.record import CallRecorder


class RecorderObserver(BaseObserver):
    """Feeds a :class:`~voice_agent.recording.record.CallRecorder` from frame pushes; changes nothing.

    Args:
        recorder: The recorder to feed.
        llm: The LLM processor: a context frame pushed *to* it is what the model received. Its own
            errors are left to the call's LLM watchdog, which answers the caller and logs them.
        spoken_from: The processor whose text output is what the caller is given (the output guard).
        on_error: Called with each error message (of any processor but the LLM), e.g. so a scripted
            driver stops waiting.
    """

    def __init__(
        self,
        recorder: CallRecorder,
        llm: FrameProcessor,
        spoken_from: FrameProcessor,
        on_error: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.recorder = recorder
        self._llm = llm
        self._spoken_from = spoken_from
        self._on_error = on_error
        self._errors_seen: set[int] = set()

    async def on_push_frame(self, data: FramePushed) -> None:
        """Dispatches the frames a recorder judges by."""
        frame = data.frame
        if isinstance(frame, LLMContextFrame):
            if data.destination is self._llm:
                messages = [m for m in frame.context.get_messages() if isinstance(m, dict)]
                self.recorder.context_received(messages, time.perf_counter())
        elif isinstance(frame, FunctionCallResultFrame):
            self.recorder.tool_result(frame.function_name, frame.tool_call_id, dict(frame.arguments or {}),
                                      frame.result)
        elif isinstance(frame, TextFrame):
            if data.source is self._spoken_from and data.direction is FrameDirection.DOWNSTREAM:
                self.recorder.agent_words(time.perf_counter())
        elif isinstance(frame, ErrorFrame) and frame.id not in self._errors_seen:
            self._errors_seen.add(frame.id)
            if frame.processor is self._llm:
                # Seen here, from the frame itself: the call's LLM watchdog deals with it (retry, then a line
                # for the caller), so the scripted call goes on, but the record has it either way.
                self.recorder.error(f"LLM error: {frame.error}")
                return
            self.recorder.error(str(frame.error))
            if self._on_error is not None:
                self._on_error(str(frame.error))
