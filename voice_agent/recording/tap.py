"""The served call's recorder feed: event handlers on the three processors a recorder judges by.

:class:`~voice_agent.recording.observer.RecorderObserver` sees every frame, but a pipecat observer
costs the call on every frame of every processor: the worker hands each push and each processed
frame to the observer's queue, and the observer's task wakes up for it. On the telephone that is
five or more queue hops per 20 ms of caller audio, for a recorder that reads a few frames a turn
(measured with ``scripts/loadtest.py --profile``). :class:`RecorderTap` gets the same frames from
synchronous event handlers (``on_before_process_frame``, ``on_before_push_frame``) of the LLM and
of the output guard, which never see the audio, and errors from the worker's
``on_pipeline_error``. It changes nothing in the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pipecat.frames.frames import ErrorFrame, Frame, FunctionCallResultFrame, LLMContextFrame, LLMTextFrame
from pipecat.processors.frame_processor import FrameProcessor

from voice_agent.recording.record import CallRecorder


class RecorderTap:
    """Feeds a :class:`CallRecorder` from the LLM's and the output guard's event handlers.

    Args:
        recorder: The recorder to feed.
        llm: The LLM: each context it starts on is what the model received; its tool results are the
            tool calls' outcomes. Its own errors are left to the call's LLM watchdog (recorded here too).
        spoken_from: The processor whose text output is what the caller is given (the output guard).
        clock: Seconds, for the recorder's times (``first_response_ms``); ``time.perf_counter`` by default.
    """

    def __init__(self, recorder: CallRecorder, llm: FrameProcessor, spoken_from: FrameProcessor,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.recorder = recorder
        self._llm = llm
        self._clock = clock
        self._errors_seen: set[int] = set()
        llm.add_event_handler("on_before_process_frame", self._llm_processing)
        llm.add_event_handler("on_before_push_frame", self._llm_pushing)
        spoken_from.add_event_handler("on_before_push_frame", self._spoken)

    def attach(self, worker: Any) -> None:
        """Records the errors that reach the pipeline's start (``worker``: the call's PipelineWorker)."""
        worker.add_event_handler("on_pipeline_error", self._pipeline_error)

    def _llm_processing(self, _llm: FrameProcessor, frame: Frame) -> None:
        if isinstance(frame, LLMContextFrame):
            messages = [m for m in frame.context.get_messages() if isinstance(m, dict)]
            self.recorder.context_received(messages, self._clock())

    def _llm_pushing(self, _llm: FrameProcessor, frame: Frame) -> None:
        if isinstance(frame, FunctionCallResultFrame):
            self.recorder.tool_result(frame.function_name, frame.tool_call_id, dict(frame.arguments or {}),
                                      frame.result)

    def _spoken(self, _guard: FrameProcessor, frame: Frame) -> None:
        # The handler is not told the direction: LLMTextFrame is what the guard releases downstream (it passes
        # other text frames on either way, e.g. a transcription or the TTS's words going upstream).
        if isinstance(frame, LLMTextFrame):
            self.recorder.agent_words(self._clock())

    async def _pipeline_error(self, _worker: Any, frame: ErrorFrame) -> None:
        if frame.id in self._errors_seen:
            return
        self._errors_seen.add(frame.id)
        prefix = "LLM error: " if frame.processor is self._llm else ""
        # Against the call's turn in progress (opened by the caller's final words), which may be ahead of the
        # recorder's open record when the error comes before the LLM's context (the recognizer, retrieval).
        self.recorder.error(f"{prefix}{frame.error}", max(self.recorder.session.turn, 1))
