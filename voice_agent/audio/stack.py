"""Choosing and building the offline audio services of a call, and the voices and ears of the emulator.

Three stacks:

- ``default``: Silero VAD, Whisper tiny.en STT (segmented; interim transcripts from partial decodes of the
  growing segment, ``processors/whisper_interims.py``), Piper joe TTS: best quality (extra ``audio``).
- ``light``: Silero VAD, streaming pocketsphinx STT (interims), in-process espeak-ng TTS: small and fast,
  poor recognition of synthetic voices (extra ``audio-light``).
- ``fake``: energy VAD, scripted STT, tone TTS: no model at all, for the pipeline's own overhead.

Every model is checked against ``config/audio_models.toml`` before use; a missing one is a one-line
:class:`~voice_agent.audio.manifest.AudioModelError`.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from voice_agent.audio.codec import Int16Array, resample
from voice_agent.audio.manifest import AudioModelError, verify_model


class SttKind(StrEnum):
    """Speech recognisers."""

    WHISPER = "whisper"
    POCKETSPHINX = "pocketsphinx"
    SCRIPTED = "scripted"


class TtsKind(StrEnum):
    """Speech synthesisers."""

    PIPER = "piper"
    ESPEAK = "espeak"
    TONE = "tone"


class VadKind(StrEnum):
    """Voice activity detectors."""

    SILERO = "silero"
    ENERGY = "energy"


@dataclass
class CallAudio:
    """The audio processors of one call.

    Attributes:
        before_user: Input-side processors after the transport input: VAD, STT (then the caller adds
            the spoken-identifier normaliser).
        tts: The TTS service (the caller appends the transport output).
        turn_strategies: How user turns start (VAD) and stop (speech timeout after VAD stop).
    """

    before_user: list[FrameProcessor]
    tts: FrameProcessor
    turn_strategies: UserTurnStrategies


INTERIMS_HELP = ("Audio, default stack: interim transcripts from partial Whisper decodes while the caller speaks, "
                 "for speculative retrieval (about 0.5 s of CPU per partial, at pauses and every 1.5 s); off: "
                 "every retrieval at the final.")
"""The ``--interims/--no-interims`` help of every command that plays audio (serve, simulate)."""


@dataclass(frozen=True)
class AudioStack:
    """Which services a call uses.

    Attributes:
        stt: Recogniser.
        tts: Synthesiser.
        vad: Voice activity detector.
        vad_stop_secs: Silence that ends an utterance.
        user_speech_timeout: Extra wait after the VAD stop before the turn ends.
        script: Caller lines for the scripted STT.
        tone_secs_per_word: Length of the tone TTS's output per word.
        interims: Whisper only: interim transcripts while the caller speaks (partial decodes of the growing
            segment at each pause and every 1.5 s of a long turn up to 25 s, about 0.5 s of CPU each, skipped
            while the process's model is busy), for speculative retrieval; a partial covering the whole segment
            stands for the final (no second decode: its decode of the audio up to the pause, which can differ
            slightly from a fresh decode of the longer segment, e.g. "ours" for "hours"). False leaves
            Whisper's final alone and every retrieval on the critical path.
    """

    stt: SttKind = SttKind.WHISPER
    tts: TtsKind = TtsKind.PIPER
    vad: VadKind = VadKind.SILERO
    vad_stop_secs: float = 0.5
    user_speech_timeout: float = 0.2
    script: tuple[str, ...] = field(default=())
    tone_secs_per_word: float = 0.05
    interims: bool = True

    @classmethod
    def named(cls, name: str) -> AudioStack:
        """``default``, ``light`` or ``fake``.

        Raises:
            ValueError: Another name.
        """
        if name == "default":
            return cls()
        if name == "light":
            return cls(stt=SttKind.POCKETSPHINX, tts=TtsKind.ESPEAK)
        if name == "fake":
            return cls(stt=SttKind.SCRIPTED, tts=TtsKind.TONE, vad=VadKind.ENERGY, vad_stop_secs=0.3,
                       user_speech_timeout=0.0)
        raise ValueError(f"audio stack {name!r}: use default, light or fake")

    def with_script(self, lines: Sequence[str]) -> AudioStack:
        """The same stack with the scripted STT's lines."""
        return replace(self, script=tuple(lines))

    def with_interims(self, on: bool) -> AudioStack:
        """The same stack with Whisper's partial-decode interims on or off."""
        return replace(self, interims=on)

    def check(self) -> None:
        """Verifies every model this stack loads (fail fast at start-up).

        Raises:
            AudioModelError: One line naming the missing or mismatched model.
        """
        if self.vad is VadKind.SILERO:
            verify_model("silero-vad")
        if self.stt is SttKind.WHISPER:
            verify_model("whisper-tiny-en")
            _require("faster_whisper", "faster-whisper==1.2.1", "whisper STT")
        elif self.stt is SttKind.POCKETSPHINX:
            verify_model("pocketsphinx-en-us")
        if self.tts is TtsKind.PIPER:
            verify_model("piper-joe-medium")
            _require("piper", "piper-tts==1.8.0", "piper TTS")
        elif self.tts is TtsKind.ESPEAK:
            verify_model("espeak-ng")

    def warm_up(self) -> None:
        """Loads the process-wide models now (blocking), so the first call does not wait for them."""
        self.check()
        if self.stt is SttKind.WHISPER:
            from voice_agent.audio.whisper_stt import transcribe

            transcribe(np.zeros(8000, dtype=np.int16))  # loads the model and runs its first inference
        if self.tts is TtsKind.PIPER:
            from voice_agent.audio.piper_tts import shared_piper_voice

            shared_piper_voice()
        elif self.tts is TtsKind.ESPEAK:
            from voice_agent.audio.espeak import EspeakSynthesizer

            EspeakSynthesizer.shared()

    def make_vad(self) -> VADAnalyzer:
        """A fresh VAD analyser (per call: it keeps state)."""
        if self.vad is VadKind.ENERGY:
            from voice_agent.audio.fake import EnergyVADAnalyzer

            return EnergyVADAnalyzer(stop_secs=self.vad_stop_secs)
        from pipecat.audio.vad.silero import SileroVADAnalyzer

        return SileroVADAnalyzer(params=VADParams(stop_secs=self.vad_stop_secs))

    def build(self, prompt: str | None = None, script_from: int = 0) -> CallAudio:
        """Builds the services of one call (blocking: run it in a thread when models may load).

        Args:
            prompt: A hint for recognisers that take one (Whisper's initial prompt).
            script_from: The scripted STT starts at this caller line (a resumed call already heard the
                lines before it).

        Raises:
            AudioModelError: A model is missing or does not match the manifest.
        """
        stt: FrameProcessor
        interims: list[FrameProcessor] = []
        if self.stt is SttKind.WHISPER:
            from voice_agent.audio.interims import FinalHandoff, InterimSettings, pause_dbfs_for
            from voice_agent.audio.whisper_stt import FinalResult, make_whisper_stt

            handoff: FinalHandoff[FinalResult] | None = FinalHandoff() if self.interims else None
            whisper = make_whisper_stt(prompt=prompt, handoff=handoff, name="stt")
            stt = whisper
            if self.interims:
                from processors.whisper_interims import WhisperInterims

                # Partials decode as the final does, so one covering the segment stands for the final (decoded
                # once); quiet to them is what is quiet to the VAD (its min_volume), or soft last words are lost.
                settings = InterimSettings(vad_stop_secs=self.vad_stop_secs,
                                           pause_dbfs=pause_dbfs_for(VADParams().min_volume))
                interims.append(WhisperInterims(whisper.final_text, handoff, settings, name="interims"))
        elif self.stt is SttKind.POCKETSPHINX:
            from voice_agent.audio.pocketsphinx_stt import PocketsphinxSTTService

            stt = PocketsphinxSTTService(name="stt")
        else:
            from voice_agent.audio.fake import ScriptedSTTService

            stt = ScriptedSTTService(self.script[script_from:], name="stt")
        tts: FrameProcessor
        if self.tts is TtsKind.PIPER:
            from voice_agent.audio.piper_tts import make_piper_tts

            tts = make_piper_tts(name="tts")
        elif self.tts is TtsKind.ESPEAK:
            from voice_agent.audio.espeak import EspeakTTSService

            tts = EspeakTTSService(name="tts")
        else:
            from voice_agent.audio.fake import ToneTTSService

            tts = ToneTTSService(secs_per_word=self.tone_secs_per_word, name="tts")
        vad = VADProcessor(vad_analyzer=self.make_vad(), name="vad")
        strategies = UserTurnStrategies(
            start=[VADUserTurnStartStrategy()],
            stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=self.user_speech_timeout)],
        )
        return CallAudio(before_user=[vad, *interims, stt], tts=tts, turn_strategies=strategies)


def _require(module: str, pip_spec: str, what: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise AudioModelError(f"{what} needs {module} (pip install '{pip_spec}')")


# --- the emulator's voice and ears -----------------------------------------------------------------------------------

Synthesizer = Callable[[str], tuple[Int16Array, int]]
"""text -> (16-bit samples, rate); blocking."""

Transcriber = Callable[[Int16Array], str]
"""16 kHz 16-bit samples -> text; blocking."""


def caller_voice(kind: TtsKind | str) -> Synthesizer:
    """A synthesiser for the emulated caller: ``piper`` (natural), ``espeak`` (robotic) or ``tone``.

    Raises:
        AudioModelError: The model is missing.
    """
    choice = TtsKind(kind)
    if choice is TtsKind.PIPER:
        from voice_agent.audio.piper_tts import shared_piper_voice, synthesize

        shared_piper_voice()
        return synthesize
    if choice is TtsKind.ESPEAK:
        from voice_agent.audio.espeak import EspeakSynthesizer

        synth = EspeakSynthesizer.shared()
        return lambda text: (synth.synthesize(text, words_per_minute=150), synth.sample_rate)

    def tone(text: str) -> tuple[Int16Array, int]:
        rate = 16000
        secs = max(0.4, 0.08 * len(text.split()))
        t = np.arange(int(rate * secs)) / rate
        # A two-tone burst with a little amplitude movement, loud enough for any VAD threshold.
        wave = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 330 * t)
        return (wave * 32767 * (0.8 + 0.2 * np.sin(2 * np.pi * 3 * t))).astype(np.int16), rate

    return tone


def agent_ears(kind: SttKind | str | None) -> Transcriber | None:
    """A whole-utterance transcriber for the emulator: ``whisper``, ``pocketsphinx`` or None (none).

    Raises:
        AudioModelError: The model is missing.
    """
    if kind is None or kind == "none":
        return None
    choice = SttKind(kind)
    if choice is SttKind.WHISPER:
        from voice_agent.audio.whisper_stt import shared_whisper_model, transcribe

        shared_whisper_model()
        return transcribe
    if choice is SttKind.POCKETSPHINX:
        base = verify_model("pocketsphinx-en-us")
        decoder = importlib.import_module("pocketsphinx").Decoder(
            hmm=str(base / "en-us"), lm=str(base / "en-us.lm.bin"), dict=str(base / "cmudict-en-us.dict"),
            samprate=16000, loglevel="FATAL",
        )

        def decode(samples: Int16Array) -> str:
            decoder.start_utt()
            decoder.process_raw(samples.astype("<i2").tobytes(), False, True)
            decoder.end_utt()
            hyp = decoder.hyp()
            return str(hyp.hypstr) if hyp is not None else ""

        return decode
    raise ValueError(f"transcriber {kind!r}: use whisper, pocketsphinx or none")


async def synthesize_at(voice: Synthesizer, text: str, rate: int) -> Int16Array:
    """Runs ``voice`` off the event loop and resamples its output to ``rate``."""
    samples, source_rate = await asyncio.to_thread(voice, text)
    return await asyncio.to_thread(resample, samples, source_rate, rate)


def describe(stack: AudioStack) -> dict[str, Any]:
    """The stack as plain data, for logs and reports."""
    return {"stt": stack.stt.value, "tts": stack.tts.value, "vad": stack.vad.value,
            "vad_stop_secs": stack.vad_stop_secs, "user_speech_timeout": stack.user_speech_timeout,
            "interims": stack.stt is SttKind.POCKETSPHINX or (stack.stt is SttKind.WHISPER and stack.interims)}
