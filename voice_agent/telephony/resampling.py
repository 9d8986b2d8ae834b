"""A low-latency resampler for the caller's audio (8 kHz phone audio up to the pipeline's rate).

pipecat's serializers resample inbound audio with a very-high-quality SoX stream. Its filter holds
back tens of milliseconds and releases them in bursts (measured: the last 20 ms frame of a caller's
speech reaches the pipeline 40-100 ms after it arrived), and every millisecond of that is added to
the time the VAD needs to see the caller's silence, so to every reply. Phone audio is band-limited
to 3.4 kHz, so a short linear-phase FIR interpolator keeps it intact (flat to 3.4 kHz, images of
that band more than 85 dB down) with a fixed delay of about 3 ms and no buffering. Integer up-ratios
(8 -> 16 kHz) take that path; any other conversion goes to pipecat's stream resampler.
"""

from __future__ import annotations

import numpy as np
from pipecat.audio.resamplers.base_audio_resampler import BaseAudioResampler
from pipecat.audio.utils import create_stream_resampler

TAPS_PER_PHASE = 48
"""Filter taps per output phase: 96 taps at 16 kHz, a delay of 47.5 samples (3 ms)."""

_KAISER_BETA = 8.0
"""About 80 dB stopband."""


def interpolation_filter(factor: int, taps_per_phase: int = TAPS_PER_PHASE) -> np.ndarray:
    """Windowed-sinc low-pass at the input Nyquist frequency, scaled for zero-stuffing by ``factor``."""
    length = factor * taps_per_phase
    n = np.arange(length) - (length - 1) / 2
    taps = np.sinc(n / factor) * np.kaiser(length, _KAISER_BETA)
    taps *= factor / taps.sum()
    return taps


class LowLatencyResampler(BaseAudioResampler):
    """Streams integer up-sampling through a short FIR; delegates anything else.

    Args:
        fallback: Used for other rate pairs (pipecat's stream resampler when None).
    """

    def __init__(self, fallback: BaseAudioResampler | None = None) -> None:
        self._fallback = fallback
        self._factor = 0
        self._taps = np.zeros(0)
        self._history = np.zeros(0)

    async def resample(self, audio: bytes, in_rate: int, out_rate: int) -> bytes:
        """Resamples one chunk of 16-bit mono PCM, keeping the filter state between chunks."""
        if in_rate == out_rate:
            return audio
        if out_rate % in_rate:
            if self._fallback is None:
                self._fallback = create_stream_resampler()
            result: bytes = await self._fallback.resample(audio, in_rate, out_rate)
            return result
        factor = out_rate // in_rate
        if factor != self._factor:
            self._factor = factor
            self._taps = interpolation_filter(factor)
            self._history = np.zeros(len(self._taps) - 1)
        samples = np.frombuffer(audio, dtype="<i2")
        if not samples.size:
            return b""
        stuffed = np.zeros(samples.size * factor)
        stuffed[::factor] = samples
        extended = np.concatenate((self._history, stuffed))
        self._history = extended[-(len(self._taps) - 1):]
        out = np.convolve(extended, self._taps, mode="valid")
        return np.clip(np.rint(out), -32768, 32767).astype("<i2").tobytes()

    async def reset(self) -> None:
        """Forgets the filter history."""
        self._history = np.zeros(len(self._taps) - 1) if self._factor else np.zeros(0)
        if self._fallback is not None:
            await self._fallback.reset()  # type: ignore[no-untyped-call]  # untyped in pipecat


def use_low_latency_input(serializer: object) -> None:
    """Swaps a pipecat telephony serializer's inbound resampler for :class:`LowLatencyResampler`.

    The serializers keep it as ``_input_resampler`` (Twilio, Telnyx, Plivo in pipecat 1.14); a serializer
    without one is left alone.
    """
    if isinstance(getattr(serializer, "_input_resampler", None), BaseAudioResampler):
        serializer._input_resampler = LowLatencyResampler()  # type: ignore[attr-defined]
