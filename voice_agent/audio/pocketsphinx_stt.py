"""Streaming STT on pocketsphinx: interim hypotheses while the caller speaks, a final one at VAD stop.

The light, streaming option (38 MB, real partials, RTF 0.2-0.3 on two cores). Accuracy with the
generic language model is poor on synthetic voices; see ``docs`` in the report for measurements.
Audio is decoded continuously from the VAD's start (plus a pre-roll that covers the VAD's start
delay), in a worker thread so the event loop never waits on the decoder.
"""

from __future__ import annotations

import asyncio
import importlib
from collections import deque
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from pipecat.frames.frames import (
    Frame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import STTService
from pipecat.utils.time import time_now_iso8601

from voice_agent.audio.manifest import verify_model

DECODER_RATE = 16000
"""The en-us acoustic model is trained on 16 kHz audio."""


class PocketsphinxSTTService(STTService):
    """Streaming pocketsphinx recogniser driven by VAD frames from upstream (a ``VADProcessor``).

    Args:
        interim_interval_secs: Least audio between two interim transcripts, in seconds of the caller's speech
            (audio time, not the clock's: the same interims whether the audio arrives live or faster).
        preroll_secs: Audio kept before the VAD start and decoded with the utterance.
        **kwargs: Passed to ``STTService``.
    """

    def __init__(self, *, interim_interval_secs: float = 0.25, preroll_secs: float = 0.6, **kwargs: Any) -> None:
        kwargs.setdefault("ttfs_p99_latency", 0.3)
        kwargs.setdefault("audio_passthrough", False)
        if kwargs.setdefault("sample_rate", DECODER_RATE) != DECODER_RATE:
            raise ValueError(f"pocketsphinx decodes {DECODER_RATE} Hz audio")
        super().__init__(
            settings=STTSettings(model="pocketsphinx-en-us", language="en"),
            **kwargs,
        )
        self._model_dir: Path = verify_model("pocketsphinx-en-us")
        self._interim_interval_bytes = int(interim_interval_secs * DECODER_RATE) * 2
        self._preroll_bytes = int(preroll_secs * DECODER_RATE) * 2
        self._preroll: deque[bytes] = deque()
        self._preroll_size = 0
        self._decoder: Any = None
        self._lock = asyncio.Lock()
        self._in_utterance = False
        self._last_interim = ""
        self._audio_since_interim = 0

    def can_generate_metrics(self) -> bool:
        """Processing metrics are reported per utterance."""
        return True

    def _make_decoder(self) -> Any:
        decoder_class = importlib.import_module("pocketsphinx").Decoder
        base = self._model_dir
        return decoder_class(
            hmm=str(base / "en-us"), lm=str(base / "en-us.lm.bin"), dict=str(base / "cmudict-en-us.dict"),
            samprate=DECODER_RATE, loglevel="FATAL",
        )

    async def start(self, frame: StartFrame) -> None:
        """Loads the decoder off the event loop."""
        await super().start(frame)
        if self._decoder is None:
            self._decoder = await asyncio.to_thread(self._make_decoder)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Starts an utterance at VAD start and finalises it at VAD stop."""
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            await self._begin_utterance()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            await self._end_utterance()

    async def _begin_utterance(self) -> None:
        if self._decoder is None or self._in_utterance:
            return
        preroll = b"".join(self._preroll)
        self._preroll.clear()
        self._preroll_size = 0
        async with self._lock:
            await asyncio.to_thread(self._start_and_feed, preroll)
        self._in_utterance = True
        self._last_interim = ""
        self._audio_since_interim = 0

    def _start_and_feed(self, audio: bytes) -> None:
        self._decoder.start_utt()
        if audio:
            self._decoder.process_raw(audio, False, False)

    def _feed_and_hyp(self, audio: bytes) -> str:
        self._decoder.process_raw(audio, False, False)
        hyp = self._decoder.hyp()
        return str(hyp.hypstr) if hyp is not None else ""

    def _finish(self) -> str:
        self._decoder.end_utt()
        hyp = self._decoder.hyp()
        return str(hyp.hypstr) if hyp is not None else ""

    async def _end_utterance(self) -> None:
        if not self._in_utterance:
            return
        self._in_utterance = False
        await self.start_processing_metrics()
        async with self._lock:
            text = (await asyncio.to_thread(self._finish)).strip()
        await self.stop_processing_metrics()
        if text:
            await self.push_frame(TranscriptionFrame(text, self._user_id, time_now_iso8601(), finalized=True))

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """Keeps a pre-roll while the caller is quiet; decodes and yields interims while they speak."""
        if not self._in_utterance or self._decoder is None:
            self._preroll.append(audio)
            self._preroll_size += len(audio)
            while self._preroll_size > self._preroll_bytes and self._preroll:
                self._preroll_size -= len(self._preroll.popleft())
            yield None
            return
        async with self._lock:
            hyp = (await asyncio.to_thread(self._feed_and_hyp, audio)).strip()
        self._audio_since_interim += len(audio)
        if hyp and hyp != self._last_interim and self._audio_since_interim >= self._interim_interval_bytes:
            self._last_interim = hyp
            self._audio_since_interim = 0
            yield InterimTranscriptionFrame(hyp, self._user_id, time_now_iso8601())
        else:
            yield None
