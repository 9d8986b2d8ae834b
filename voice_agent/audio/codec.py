"""Telephone audio helpers: G.711 µ-law, resampling, levels and WAV files (numpy, no audioop)."""

from __future__ import annotations

import importlib
import io
import wave
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

PHONE_RATE = 8000
"""Twilio, Telnyx and Plivo media streams: 8 kHz mono µ-law."""

FRAME_MS = 20
"""One media message carries 20 ms of audio (160 µ-law bytes)."""

Int16Array = npt.NDArray[np.int16]

_soxr: Any = importlib.import_module("soxr")  # untyped; a pipecat core dependency


def _build_tables() -> tuple[npt.NDArray[np.uint8], Int16Array]:
    # Encoder: the CCITT G.711 segment search (as audioop.lin2ulaw), for every 16-bit sample.
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 2
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(pcm), 8159) + (0x84 >> 2)
    seg_end = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
    seg = np.searchsorted(seg_end, mag, side="left")
    uval = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | ((mag >> (np.minimum(seg, 7) + 1)) & 0xF))
    encode = ((uval ^ mask) & 0xFF).astype(np.uint8)
    # Decoder: the standard expansion (as audioop.ulaw2lin).
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (u >> 4) & 0x07
    sample = (((u & 0x0F) << 3) + 0x84) << exponent
    decode = np.where(u & 0x80, 0x84 - sample, sample - 0x84).astype(np.int16)
    return encode, decode


_ENCODE, _DECODE = _build_tables()


def pcm16_to_ulaw(pcm: bytes | Int16Array) -> bytes:
    """Encodes 16-bit signed little-endian PCM as G.711 µ-law, one byte per sample."""
    samples = np.frombuffer(pcm, dtype="<i2") if isinstance(pcm, (bytes, bytearray, memoryview)) else pcm
    return bytes(_ENCODE[samples.astype(np.int32) + 32768])


def ulaw_to_pcm16(ulaw: bytes) -> Int16Array:
    """Decodes G.711 µ-law bytes into 16-bit samples."""
    return _DECODE[np.frombuffer(ulaw, dtype=np.uint8)]


def resample(samples: Int16Array, rate_in: int, rate_out: int) -> Int16Array:
    """Resamples 16-bit mono audio (soxr, high quality)."""
    if rate_in == rate_out or samples.size == 0:
        return samples.astype(np.int16, copy=False)
    out = _soxr.resample(samples.astype(np.int16, copy=False), rate_in, rate_out)
    return np.asarray(out, dtype=np.int16)


def rms_dbfs(samples: Int16Array) -> float:
    """Level of a block in dBFS (-120 for digital silence)."""
    if samples.size == 0:
        return -120.0
    power = float(np.mean(np.square(samples.astype(np.float64))))
    return -120.0 if power <= 0 else 10.0 * float(np.log10(power / (32768.0**2)))


def to_wav_bytes(samples: Int16Array, rate: int) -> bytes:
    """A mono 16-bit WAV file in memory."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()


def write_wav(path: Path | str, samples: Int16Array, rate: int) -> Path:
    """Writes a mono 16-bit WAV file; returns its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(to_wav_bytes(samples, rate))
    return target


def read_wav(path: Path | str) -> tuple[Int16Array, int]:
    """Reads a mono 16-bit WAV file: (samples, rate)."""
    with wave.open(str(path), "rb") as handle:
        if handle.getsampwidth() != 2 or handle.getnchannels() != 1:
            raise ValueError(f"{path}: expected 16-bit mono WAV")
        data = handle.readframes(handle.getnframes())
        return np.frombuffer(data, dtype="<i2").astype(np.int16), handle.getframerate()
