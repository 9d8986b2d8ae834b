"""In-process espeak-ng (the library and data bundled in ``espeakng-loader``), and a pipecat TTS on it.

The light TTS: 6-10 ms per sentence, 21 MB, no apt package. The library keeps global state,
so one process-wide synthesizer serialises calls behind a lock; synthesis runs in a worker
thread so the event loop never waits on it.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import numpy as np
from pipecat.frames.frames import ErrorFrame, Frame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TTSService

from voice_agent.audio.codec import Int16Array
from voice_agent.audio.manifest import AudioModelError, verify_model

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_ESPEAK_CHARS_UTF8 = 1
_ESPEAK_RATE = 1
_SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class EspeakSynthesizer:
    """espeak-ng loaded in this process through ctypes.

    Use :meth:`shared` rather than the constructor: the library can be initialised once per process.

    Args:
        model_dir: The verified ``espeakng_loader`` directory (library and ``espeak-ng-data``).
    """

    _instance: EspeakSynthesizer | None = None
    _instance_lock = threading.Lock()

    def __init__(self, model_dir: Path) -> None:
        library = model_dir / "libespeak-ng.so.1.52.0"
        try:
            self._lib = ctypes.CDLL(str(library))
        except OSError as exc:
            raise AudioModelError(f"espeak-ng: cannot load {library}: {exc}") from exc
        self._lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self._lib.espeak_Initialize.restype = ctypes.c_int
        self._lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self._lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._lib.espeak_Synth.argtypes = [
            ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
            ctypes.c_void_p, ctypes.c_void_p,
        ]
        rate = int(self._lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, str(model_dir).encode(), 0))
        if rate <= 0:
            raise AudioModelError(f"espeak-ng: initialisation failed with data in {model_dir}")
        self.sample_rate = rate
        self._chunks: list[bytes] = []
        self._callback = _SYNTH_CALLBACK(self._collect)  # kept alive: the library holds the pointer
        self._lib.espeak_SetSynthCallback(self._callback)
        self._lock = threading.Lock()
        self._voice = ""

    @classmethod
    def shared(cls) -> EspeakSynthesizer:
        """The process-wide synthesizer (verifies the model files on first use).

        Raises:
            AudioModelError: espeakng-loader is missing, another version, or its files changed.
        """
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls(verify_model("espeak-ng"))
            return cls._instance

    def _collect(self, wav: Any, count: int, _events: Any) -> int:
        if count > 0:
            self._chunks.append(ctypes.string_at(wav, count * 2))
        return 0

    def synthesize(self, text: str, *, voice: str = "en-us", words_per_minute: int = 160) -> Int16Array:
        """Speaks ``text``; returns 16-bit samples at :attr:`sample_rate`."""
        data = text.encode("utf-8")
        with self._lock:
            if voice != self._voice:
                if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
                    raise ValueError(f"espeak-ng: unknown voice {voice!r}")
                self._voice = voice
            self._lib.espeak_SetParameter(_ESPEAK_RATE, int(words_per_minute), 0)
            self._chunks = []
            self._lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_UTF8, None, None)
            self._lib.espeak_Synchronize()
            pcm = b"".join(self._chunks)
            self._chunks = []
        return np.frombuffer(pcm, dtype="<i2").astype(np.int16)


class EspeakTTSService(TTSService):
    """pipecat TTS on in-process espeak-ng: robotic but tiny and fast (the light/CI option).

    Args:
        voice: espeak-ng voice name.
        words_per_minute: Speaking rate.
        **kwargs: Passed to ``TTSService`` (``sample_rate`` defaults to the pipeline's output rate).
    """

    def __init__(self, *, voice: str = "en-us", words_per_minute: int = 160, **kwargs: Any) -> None:
        super().__init__(
            push_start_frame=True, push_stop_frames=True,
            settings=TTSSettings(model="espeak-ng", voice=voice, language="en"), **kwargs,
        )
        self._voice_name = voice
        self._wpm = words_per_minute
        self._synth = EspeakSynthesizer.shared()

    def can_generate_metrics(self) -> bool:
        """TTFB and usage metrics are reported."""
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Synthesises ``text`` and streams it as audio frames at the output rate."""
        await self.start_tts_usage_metrics(text)
        try:
            samples = await asyncio.to_thread(self._synth.synthesize, text, voice=self._voice_name,
                                              words_per_minute=self._wpm)
        except Exception as exc:  # a synthesis failure must not end the call
            yield ErrorFrame(error=f"espeak-ng failed: {exc}")
            return

        async def once() -> AsyncGenerator[bytes, None]:
            yield samples.tobytes()

        async for frame in self._stream_audio_frames_from_iterator(
            once(), in_sample_rate=self._synth.sample_rate, context_id=context_id
        ):
            await self.stop_ttfb_metrics()
            yield frame
