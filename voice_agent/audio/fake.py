"""Instant stand-ins for VAD, STT and TTS, to measure the pipeline's own overhead (load tests, fast tests).

They still move real audio: the energy VAD reads the caller's samples, the scripted STT answers
each VAD-delimited utterance with the next scripted line (no model), and the tone TTS returns a
tone whose length follows the text, so the far end hears speech-shaped bursts and silences.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import numpy as np
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams
from pipecat.frames.frames import Frame, TranscriptionFrame, VADUserStoppedSpeakingFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings, TTSSettings
from pipecat.services.stt_service import STTService
from pipecat.services.tts_service import TTSService
from pipecat.utils.time import time_now_iso8601

from voice_agent.audio.codec import rms_dbfs


class EnergyVADAnalyzer(VADAnalyzer):
    """A level-threshold VAD: speech when a 20 ms block is louder than ``threshold_dbfs``.

    Args:
        threshold_dbfs: Level above which a block counts as speech.
        start_secs: Speech needed to start.
        stop_secs: Silence needed to stop.
        sample_rate: Input rate (set by the pipeline when omitted).
    """

    def __init__(
        self, *, threshold_dbfs: float = -45.0, start_secs: float = 0.1, stop_secs: float = 0.3,
        sample_rate: int | None = None,
    ) -> None:
        super().__init__(
            sample_rate=sample_rate,
            params=VADParams(confidence=0.5, start_secs=start_secs, stop_secs=stop_secs, min_volume=0.0),
        )
        self._threshold = threshold_dbfs

    def num_frames_required(self) -> int:
        """20 ms blocks."""
        return max(1, int(self.sample_rate * 0.02))

    def voice_confidence(self, buffer: bytes) -> float:
        """1.0 for a block above the threshold, else 0.0."""
        samples = np.frombuffer(buffer, dtype="<i2")
        return 1.0 if rms_dbfs(samples) > self._threshold else 0.0


class ScriptedSTTService(STTService):
    """Answers each utterance (VAD stop) with the next scripted caller line, instantly.

    Args:
        lines: The caller's lines in order; after the last one, utterances are ignored.
        **kwargs: Passed to ``STTService``.
    """

    def __init__(self, lines: Sequence[str], **kwargs: Any) -> None:
        kwargs.setdefault("ttfs_p99_latency", 0.05)
        kwargs.setdefault("audio_passthrough", False)
        super().__init__(settings=STTSettings(model="scripted", language="en"), **kwargs)
        self._lines = list(lines)
        self._line_index = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Emits the next line as a final transcript when the caller stops speaking."""
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStoppedSpeakingFrame) and self._line_index < len(self._lines):
            text = self._lines[self._line_index]
            self._line_index += 1
            await self.push_frame(TranscriptionFrame(text, self._user_id, time_now_iso8601(), finalized=True))

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """Audio is not decoded."""
        yield None


class ToneTTSService(TTSService):
    """Speaks any text as a 440 Hz tone, ``secs_per_word`` per word (at least ``min_secs``), instantly.

    Args:
        secs_per_word: Tone length per word.
        min_secs: Shortest tone.
        level_dbfs: Tone level.
        **kwargs: Passed to ``TTSService``.
    """

    def __init__(
        self, *, secs_per_word: float = 0.05, min_secs: float = 0.3, level_dbfs: float = -12.0, **kwargs: Any
    ) -> None:
        super().__init__(
            push_start_frame=True, push_stop_frames=True,
            settings=TTSSettings(model="tone", voice="tone", language="en"), **kwargs,
        )
        self._per_word = secs_per_word
        self._min = min_secs
        self._amplitude = 32767 * math.pow(10, level_dbfs / 20)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """One tone per text."""
        rate = self.sample_rate
        secs = max(self._min, self._per_word * len(text.split()))
        t = np.arange(int(rate * secs)) / rate
        samples = (self._amplitude * np.sin(2 * np.pi * 440 * t)).astype("<i2")

        async def once() -> AsyncGenerator[bytes, None]:
            yield samples.tobytes()

        async for frame in self._stream_audio_frames_from_iterator(once(), in_sample_rate=rate, context_id=context_id):
            await self.stop_ttfb_metrics()
            yield frame
