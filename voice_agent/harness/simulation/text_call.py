"""Drives one scripted call through the pipecat pipeline in text modality."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat.frames.frames import EndFrame, InterimTranscriptionFrame, InterruptionWorkerFrame, LLMMessagesAppendFrame
from pipecat.observers.base_observer import BaseObserver
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.utils.time import time_now_iso8601
from pipecat.workers.runner import WorkerRunner

from voice_agent.call.pipeline import CallPipeline, build_call_pipeline, text_turns
from voice_agent.call.session import CallSession
from voice_agent.recording.observer import RecorderObserver
from voice_agent.recording.record import CallRecorder

USER_ID = "caller"


class TurnTimeout(RuntimeError):
    """The agent did not finish a turn in time."""


class CallFailed(RuntimeError):
    """The pipeline reported an error (an LLM that failed, a service that broke) during a turn."""


@dataclass(frozen=True)
class CallerLine:
    """One scripted caller utterance.

    Attributes:
        turn: The turn it opens.
        text: The words.
        barge_in_after: When set, the line is sent this many seconds after the agent
            starts answering the previous turn instead of after it finishes (a barge-in).
    """

    turn: int
    text: str
    barge_in_after: float | None = None


async def run_text_call(
    session: CallSession,
    llm: LLMService[Any],
    lines: Sequence[CallerLine],
    *,
    recorder: CallRecorder | None = None,
    words_per_second: float = 0.0,
    turn_timeout: float = 15.0,
    before_user: Sequence[FrameProcessor] = (),
    on_turn: Callable[[int], Awaitable[None] | None] | None = None,
) -> CallPipeline:
    """Plays ``lines`` into a fresh pipeline built around ``session`` and ``llm``.

    Each line arrives as interim transcripts, word by word (paced at ``words_per_second``
    when it is above 0), then as the final text, as the eval harness's text modality sends it.

    Args:
        session: The call.
        llm: The LLM service (the reference agent, a scripted fake or a real model).
        lines: The caller's script.
        recorder: Observes the call from outside (attached as a pipeline observer); its turn is
            closed before ``on_turn`` runs.
        words_per_second: Pace of interim transcripts; 0 sends them without waiting.
        turn_timeout: Longest wait for the agent to finish a turn.
        before_user: Extra processors before the user aggregator (e.g. retrieval).
        on_turn: Called with each completed turn's number.

    A failing LLM does not end the call: the pipeline's LLM watchdog retries, then answers the caller
    itself, and the call goes on; each failure is in ``session.llm_failures`` and in the recorder's
    ``errors`` (a simulation counts such a call as failed).

    Raises:
        TurnTimeout: a turn did not complete within ``turn_timeout`` seconds.
        CallFailed: a processor other than the LLM reported an error (needs ``recorder``, whose observer
            sees it).
    """
    call = build_call_pipeline(session, llm, before_user=before_user, user_params=text_turns())
    completed = asyncio.Event()
    failures: list[str] = []

    def _failed(message: str) -> None:
        failures.append(message)
        completed.set()

    observers: list[BaseObserver] = []
    if recorder is not None:
        observers.append(RecorderObserver(recorder, call.llm, call.output_guard, on_error=_failed))

    async def _completed(_: Any, turn: int) -> None:
        if recorder is not None:
            recorder.close_turn()
        completed.set()
        if on_turn is not None:
            result = on_turn(turn)
            if result is not None:
                await result

    call.turn_log.add_event_handler("on_turn_completed", _completed)
    interrupted = asyncio.Event()

    async def _interrupted(_: Any) -> None:
        interrupted.set()

    call.turn_log.add_event_handler("on_interrupted", _interrupted)

    worker = PipelineWorker(
        call.pipeline, params=PipelineParams(), enable_rtvi=False, idle_timeout_secs=None,
        enable_turn_tracking=False, check_dangling_tasks=False, observers=observers,
    )
    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        for i, line in enumerate(lines):
            completed.clear()
            if line.barge_in_after is not None and i > 0:
                # The caller starts talking over the agent: the pipeline is interrupted first,
                # as the user aggregator does when a user turn starts.
                interrupted.clear()
                await worker.queue_frame(InterruptionWorkerFrame(), FrameDirection.UPSTREAM)
                # Frames queued behind an interruption can be flushed with it: speak once it has passed.
                await asyncio.wait_for(interrupted.wait(), turn_timeout)
            words = line.text.split()
            for n in range(1, len(words)):
                await worker.queue_frame(InterimTranscriptionFrame(" ".join(words[:n]), USER_ID, time_now_iso8601()))
                if words_per_second > 0:
                    await asyncio.sleep(1 / words_per_second)
            await worker.queue_frame(LLMMessagesAppendFrame([{"role": "user", "content": line.text}], run_llm=True))
            following = lines[i + 1] if i + 1 < len(lines) else None
            if following is not None and following.barge_in_after is not None:
                await asyncio.sleep(following.barge_in_after)
                continue
            try:
                await asyncio.wait_for(completed.wait(), turn_timeout)
            except TimeoutError as exc:
                raise TurnTimeout(f"turn {line.turn}: no answer within {turn_timeout:.0f} s") from exc
            if failures:
                raise CallFailed(f"turn {line.turn}: {failures[0]}")
            if session.uses_pipeline_context and not session.summary_in_background and following:
                # pipecat summarizes off the turn; measured inline, the next line waits for it as for our passes
                # (after the last line nothing can use it: the call's end cancels it).
                try:
                    await asyncio.wait_for(call.summary_settled(), turn_timeout)
                except TimeoutError as exc:
                    raise TurnTimeout(f"turn {line.turn}: pipecat's summary not done within {turn_timeout:.0f} s") \
                        from exc
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, turn_timeout)
    finally:
        if not running.done():
            await worker.cancel()
            await asyncio.gather(running, return_exceptions=True)
        session.close()
        if recorder is not None:
            recorder.close_turn()
    return call
