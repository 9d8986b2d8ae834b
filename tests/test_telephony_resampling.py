"""The caller-audio resampler: flat in the phone band, a fixed short delay, no held-back audio."""

from __future__ import annotations

import numpy as np

from voice_agent.telephony.resampling import LowLatencyResampler


def tone(freq: float, rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (np.sin(2 * np.pi * freq * t) * 8000).astype(np.int16)


async def upsample(samples: np.ndarray, chunk: int = 160) -> np.ndarray:
    resampler = LowLatencyResampler()
    out = b"".join([await resampler.resample(samples[i : i + chunk].tobytes(), 8000, 16000)
                    for i in range(0, len(samples), chunk)])
    return np.frombuffer(out, dtype=np.int16)


async def test_every_input_frame_comes_out_at_once_doubled() -> None:
    resampler = LowLatencyResampler()
    frame = tone(440, 8000, 0.02)  # one 20 ms Twilio frame
    out = await resampler.resample(frame.tobytes(), 8000, 16000)
    assert len(out) == 2 * len(frame.tobytes())  # nothing held back for a later frame


async def test_phone_band_passes_at_the_same_level_across_chunk_boundaries() -> None:
    for freq in (300.0, 1000.0, 3000.0):
        out = (await upsample(tone(freq, 8000, 0.5))).astype(float)
        steady = out[800:-800]
        assert abs(np.sqrt(np.mean(steady**2)) / (8000 / np.sqrt(2)) - 1) < 0.02
        spectrum = np.abs(np.fft.rfft(steady * np.hanning(len(steady))))
        peak = np.argmax(spectrum) * 16000 / len(steady)
        assert abs(peak - freq) < 10


async def test_delay_is_a_few_milliseconds() -> None:
    click = np.zeros(800, dtype=np.int16)
    click[400] = 20000
    out = await upsample(click)
    delay_ms = (int(np.argmax(np.abs(out))) - 800) / 16
    assert 0 <= delay_ms <= 5
