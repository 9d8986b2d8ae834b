"""Interim transcripts beside a segmented Whisper: partial decodes of the speech segment while the caller speaks.

A thin adapter over :class:`voice_agent.audio.interims.GrowingSegment`. Placed between the VAD and the Whisper
service: it keeps the audio of the utterance, and when a partial is due decodes it in a worker thread (a task of
this processor) as the final would be decoded, and pushes the text downstream as an
``InterimTranscriptionFrame``, which speculative retrieval acts on. Partials are opportunistic: one due while the
process's Whisper model is busy (another call's final, or any decode) is skipped until the model is free, since
the model runs one decode at a time and a partial must never hold up a final.

At the VAD stop, a partial that covers the segment (nothing voiced after its audio) is offered to the Whisper
service through the call's :class:`~voice_agent.audio.interims.FinalHandoff`: the service's final is then that
partial's text, awaited if it is still decoding, and the segment is not decoded twice. Otherwise the service
decodes the segment as it always did. A partial still running at the stop without covering the segment cannot be
stopped (the model's call is not interruptible; the model runs one call at a time, so the final's decode starts
when that call ends), but its text is dropped: no interim, no search competing with the final. A covering
partial ending after the stop pushes no interim either: the final, pushed from the service's own task, carries
its text, and an interim arriving after its final would be news of a turn already over. Every frame is
forwarded unchanged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.time import time_now_iso8601

from voice_agent.audio.interims import FinalHandoff, GrowingSegment, InterimSettings, Partial
from voice_agent.audio.whisper_stt import DECODE_RATE, FinalResult, whisper_busy


class WhisperInterims(FrameProcessor):
    """Pushes interim transcripts from partial decodes of the growing speech segment.

    Args:
        decode: 16 kHz PCM (unpadded) -> the final's text for it, blocking (the Whisper service's
            ``final_text``); runs in a worker thread.
        handoff: Where a partial covering the segment leaves the final for the Whisper service; None: the
            service decodes every segment itself.
        settings: When partials are decoded.
        busy: Whether the shared model is decoding now (a due partial then waits); the process's counter.
        **kwargs: Passed to ``FrameProcessor``.

    Attributes:
        interims: Interim transcripts pushed.
        skipped: Audio frames at which a due partial was put off because the model was busy.
    """

    def __init__(
        self,
        decode: Callable[[bytes], str],
        handoff: FinalHandoff[FinalResult] | None = None,
        settings: InterimSettings | None = None,
        busy: Callable[[], bool] = whisper_busy,
        **kwargs: Any,
    ) -> None:
        # Direct mode: every audio frame passes here; the work per frame is a buffer append.
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(**kwargs)
        self._decode_final = decode
        self._busy = busy
        self.skipped = 0
        self._handoff = handoff
        self._segment = GrowingSegment(settings or InterimSettings(), DECODE_RATE)
        self._task: asyncio.Task[None] | None = None
        self._result: tuple[Partial, FinalResult] | None = None  # the last partial and its text to come
        self._last_text = ""
        self._wrong_rate_logged = False
        self.interims = 0

    @property
    def decodes(self) -> int:
        """Partial decodes started."""
        return self._segment.decodes

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Follows the VAD and the input audio; starts partial decodes; offers a covering one; forwards all."""
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            self._audio(frame)
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._segment.start()
            self._last_text = ""
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._stop()
        elif isinstance(frame, EndFrame | CancelFrame):
            await self._cancel()
        await self.push_frame(frame, direction)

    def _stop(self) -> None:
        covering = self._segment.stop()
        if covering is not None and self._handoff is not None and self._result is not None:
            partial, result = self._result
            if partial is covering:  # before the frame goes on to the service, which claims it
                self._handoff.offer(covering, result)

    def _audio(self, frame: InputAudioRawFrame) -> None:
        if frame.sample_rate != DECODE_RATE or frame.num_channels != 1:
            if not self._wrong_rate_logged:  # once per call: the final recogniser still works, only interims stop
                self._wrong_rate_logged = True
                logger.warning("{}: input audio is {} Hz x{}, not 16 kHz mono: no interims", self,
                               frame.sample_rate, frame.num_channels)
            return
        self._segment.add(frame.audio)
        if self._segment.due():
            if self._busy():  # another decode holds the model: try again at the next frame
                self.skipped += 1
                return
            partial = self._segment.take()
            result: FinalResult = asyncio.get_running_loop().create_future()
            self._result = (partial, result)
            self._task = self.create_task(self._decode(partial, result), "whisper-interim")

    async def _decode(self, partial: Partial, result: FinalResult) -> None:
        text: str | None = None
        started = time.monotonic()
        news = False
        try:
            text = await asyncio.to_thread(self._decode_final, partial.heard)
        except Exception:  # a failed partial costs only this interim; the final decodes the segment itself
            logger.exception("{}: partial decode failed", self)
        finally:  # cancelled too: the segment must not think a partial still runs
            news = self._segment.finish(partial, time.monotonic() - started)
            self._task = None
            if not result.done():  # resolved even when cancelled: a final waiting on it then decodes itself
                result.set_result(text)
        interim = (text or "").strip()
        if news and interim and interim != self._last_text:  # news only before the VAD stop: ahead of the final
            self._last_text = interim
            self.interims += 1
            await self.push_frame(InterimTranscriptionFrame(interim, "", time_now_iso8601()))

    async def _cancel(self) -> None:
        task = self._task
        self._task = None
        if task is not None and not task.done():
            await self.cancel_task(task)

    async def cleanup(self) -> None:
        """Cancels a partial decode still waiting when the processor is torn down."""
        await self._cancel()
        await super().cleanup()  # type: ignore[no-untyped-call]
