"""Offline models: manifest pins and hashes, codec, and each light service on real synthesised audio."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.tests.utils import SleepFrame

from tests.fakes.pipecat_run import run_test
from voice_agent.audio.codec import pcm16_to_ulaw, read_wav, resample, rms_dbfs, ulaw_to_pcm16, write_wav
from voice_agent.audio.espeak import EspeakSynthesizer, EspeakTTSService
from voice_agent.audio.manifest import AudioModelError, load_manifest, verify_model, verify_spec
from voice_agent.audio.stack import AudioStack, agent_ears, caller_voice


def test_every_manifest_model_is_installed_pinned_and_intact() -> None:
    manifest = load_manifest()
    assert set(manifest) == {"whisper-tiny-en", "piper-joe-medium", "pocketsphinx-en-us", "espeak-ng", "silero-vad"}
    for name in manifest:
        assert verify_model(name).is_dir()


def test_hash_mismatch_is_a_one_line_error(tmp_path: Path) -> None:
    spec = load_manifest()["silero-vad"]
    bad = type(spec)(spec.name, spec.package, spec.version, spec.module, spec.root,
                     {"silero_vad.onnx": "0" * 64})
    with pytest.raises(AudioModelError) as err:
        verify_spec(bad)
    assert "sha256 of silero_vad.onnx" in str(err.value) and "\n" not in str(err.value)
    other_version = type(spec)(spec.name, spec.package, "0.0.1", spec.module, spec.root, spec.files)
    with pytest.raises(AudioModelError, match=r"manifest pins 0\.0\.1"):
        verify_spec(other_version)
    missing = type(spec)("ghost", "no-such-package-xyz", "1.0", "no_such_module", ".", {})
    with pytest.raises(AudioModelError, match="is not installed"):
        verify_spec(missing)
    with pytest.raises(AudioModelError, match="not in the manifest"):
        verify_model("kokoro")
    broken = tmp_path / "m.toml"
    broken.write_text("[models.x]\npackage = 'p'\n", encoding="utf-8")
    with pytest.raises(AudioModelError, match="lacks"):
        load_manifest(broken)


def test_ulaw_matches_g711_and_round_trips(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop

    samples = np.arange(-32768, 32768, 7, dtype=np.int16)
    assert pcm16_to_ulaw(samples) == audioop.lin2ulaw(samples.tobytes(), 2)
    codes = bytes(range(256))
    assert np.array_equal(ulaw_to_pcm16(codes), np.frombuffer(audioop.ulaw2lin(codes, 2), dtype="<i2"))
    tone = (8000 * np.sin(np.arange(8000) / 8000 * 2 * np.pi * 440)).astype(np.int16)
    assert len(resample(tone, 8000, 16000)) == 16000
    assert rms_dbfs(np.zeros(160, np.int16)) == -120.0
    path = write_wav(tmp_path / "a.wav", tone, 8000)
    back, rate = read_wav(path)
    assert rate == 8000 and np.array_equal(back, tone)


def test_espeak_in_process_synthesises_speech() -> None:
    synth = EspeakSynthesizer.shared()
    samples = synth.synthesize("hello, you are through to billing")
    assert synth.sample_rate == 22050
    assert 0.8 < len(samples) / synth.sample_rate < 4.0
    assert rms_dbfs(samples) > -40


async def test_espeak_tts_service_streams_audio_at_the_output_rate() -> None:
    tts = EspeakTTSService(sample_rate=8000)
    frames = [
        LLMFullResponseStartFrame(), LLMTextFrame("Thanks, I have found your account."), LLMFullResponseEndFrame()
    ]
    down, _ = await run_test(tts, frames_to_send=frames, expected_down_frames=None)
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert audio and all(f.sample_rate == 8000 for f in audio)
    assert sum(len(f.audio) for f in audio) / 2 / 8000 > 1.0


async def test_pocketsphinx_streams_interims_then_a_final_transcript() -> None:
    from voice_agent.audio.pocketsphinx_stt import PocketsphinxSTTService

    voice = caller_voice("piper")
    speech, rate = await asyncio.to_thread(voice, "hello I would like to check my balance")
    pcm = resample(speech, rate, 16000).tobytes()
    chunk = 640  # 20 ms at 16 kHz
    frames: list[Frame] = [InputAudioRawFrame(bytes(chunk * 10), 16000, 1), VADUserStartedSpeakingFrame()]
    for i in range(0, len(pcm), chunk):
        frames.append(InputAudioRawFrame(pcm[i : i + chunk], 16000, 1))
        if i % (chunk * 10) == 0:
            frames.append(SleepFrame(0.02))
    frames += [VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(1.0)]
    stt = PocketsphinxSTTService(sample_rate=16000)
    down, _ = await run_test(stt, frames_to_send=frames, expected_down_frames=None)
    interims = [f for f in down if isinstance(f, InterimTranscriptionFrame)]
    finals = [f for f in down if isinstance(f, TranscriptionFrame)]
    assert interims, "a streaming recogniser gives partial results while the caller speaks"
    assert len(finals) == 1 and finals[0].finalized
    assert {"check", "balance"} & set(finals[0].text.split())


def test_stacks_name_their_services_and_verify_models() -> None:
    assert AudioStack.named("light").stt.value == "pocketsphinx"
    assert AudioStack.named("fake").tts.value == "tone"
    with pytest.raises(ValueError):
        AudioStack.named("cloud")
    for name in ("default", "light", "fake"):
        AudioStack.named(name).check()
    with pytest.raises(ValueError):
        agent_ears("deepgram")
    assert agent_ears("none") is None


async def test_pocketsphinx_paces_interims_by_audio_time_and_starts_again_each_utterance() -> None:
    from voice_agent.audio.pocketsphinx_stt import PocketsphinxSTTService

    class GrowingDecoder:
        """Stands in for pocketsphinx: a new word per 20 ms chunk fed, so every chunk changes the hypothesis."""

        def __init__(self) -> None:
            self.words: list[str] = []

        def start_utt(self) -> None:
            self.words = []

        def process_raw(self, audio: bytes, _no_search: bool, _full: bool) -> None:
            self.words.append(f"w{len(self.words)}")

        def hyp(self) -> object:
            return type("Hyp", (), {"hypstr": " ".join(self.words)})()

        def end_utt(self) -> None:
            pass

    stt = PocketsphinxSTTService(sample_rate=16000, interim_interval_secs=0.25)
    stt._decoder = GrowingDecoder()
    chunk = bytes(640)  # 20 ms at 16 kHz

    async def utterance(chunks: int) -> list[int]:
        await stt._begin_utterance()
        at = []
        for n in range(1, chunks + 1):
            async for frame in stt.run_stt(chunk):
                if isinstance(frame, InterimTranscriptionFrame):
                    at.append(n)
        await stt._end_utterance()
        return at

    # However fast the audio arrives, an interim needs 0.25 s of speech since the last (12.5 chunks -> 13).
    assert await utterance(40) == [13, 26, 39]
    assert await utterance(20) == [13]  # counted again from the new utterance's start
