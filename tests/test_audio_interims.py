"""Interims in the default audio stack (partial Whisper decodes) and the speculation budget they are searched on."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.tests.utils import SleepFrame

from processors.speculative_retrieval import KnowledgeFrame, SpeculativeRetrieval
from processors.whisper_interims import WhisperInterims
from tests.fakes.pipecat_run import run_test
from voice_agent.audio.codec import resample
from voice_agent.audio.interims import FinalHandoff, GrowingSegment, InterimSettings, Partial
from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.audio.whisper_stt import FinalResult, make_whisper_stt
from voice_agent.harness.simulation.report import retrieval_summary
from voice_agent.retrieval.index import RetrievalResult, ScoredChunk
from voice_agent.retrieval.knowledge import Chunk
from voice_agent.retrieval.speculative import (
    BUDGETED_SPECULATION,
    SEARCH_BUDGET_PER_TURN,
    SpeculativeConfig,
    SpeculativeRetriever,
    TurnRetrieval,
)

RATE = 16000
SECOND = RATE * 2  # bytes of 16-bit mono PCM


class Searcher:
    """One chunk per query; records the queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def search(self, query: str) -> RetrievalResult:
        self.queries.append(query)
        chunk = Chunk(id="kb/hours", document="kb", heading="hours", text="Lines open 8 to 8.", source="kb.md")
        return RetrievalResult(query, (ScoredChunk(chunk, 0.9, 0.9, 1.0),))


# -- the schedule of partial decodes ----------------------------------------------------------------------------------


def _loud(secs: float) -> bytes:
    t = np.arange(int(secs * RATE)) / RATE
    return (8000 * np.sin(2 * np.pi * 200 * t)).astype("<i2").tobytes()


def test_partials_run_at_pauses_and_on_a_timer_for_long_turns_never_two_at_once() -> None:
    settings = InterimSettings(interval_secs=1.0, timed_after_secs=2.0, min_secs=1.5, preroll_secs=1.0)
    segment = GrowingSegment(settings, RATE)
    segment.add(bytes(3 * SECOND))  # quiet: only the 1 s pre-roll is kept
    segment.start()
    segment.add(_loud(0.5))
    assert not segment.due()  # 1.5 s, no pause, under the timer's start
    segment.add(_loud(0.5))
    assert segment.due()  # 2 s: the timer
    first = segment.take()
    assert len(first.audio) == 2 * SECOND  # the pre-roll and the speech (the decoder pads it as the final)
    assert first.heard == first.audio + bytes(SECOND // 2)  # decoded as if the VAD's 0.5 s of quiet followed
    segment.add(_loud(2.0))
    assert not segment.due()  # one is running
    assert segment.finish(first) and segment.due()
    second = segment.take()
    segment.add(_loud(0.5))
    assert segment.finish(second) and not segment.due()  # half a second new: under the interval
    segment.add(bytes(SECOND // 5))
    assert not segment.due()  # 0.2 s quiet: not yet a pause
    segment.add(bytes(SECOND // 10))
    assert segment.due()  # a pause after new speech: decode now, the caller may be done
    last = segment.take()
    assert last.silence == SECOND // 5  # 0.3 s of the VAD's 0.5 s of quiet already heard
    assert segment.finish(last)
    segment.add(bytes(SECOND // 2))
    assert not segment.due()  # still quiet: nothing new to hear
    assert segment.stop() is last  # nothing voiced after it: it covers the segment
    assert not segment.due() and segment.decodes == 3
    segment.start()
    segment.add(_loud(2.0))
    late = segment.take()
    assert segment.stop() is late
    assert not segment.finish(late)  # it covers the segment, but after the stop the final carries its text
    segment.start()
    segment.add(_loud(2.0))
    stale = segment.take()
    segment.add(_loud(0.1))
    assert segment.stop() is None  # speech after it: the final decodes the segment
    assert not segment.finish(stale)  # and its older text is no news after the stop
    segment.start()
    segment.add(_loud(2.0))
    running = segment.take()
    segment.stop()
    segment.start()
    assert not segment.finish(running)  # the next utterance began: stale, dropped
    with pytest.raises(ValueError):
        InterimSettings(interval_secs=0)


def test_short_turns_get_a_partial_only_at_the_pause() -> None:
    segment = GrowingSegment(InterimSettings(), RATE)
    segment.add(bytes(SECOND))
    segment.start()
    segment.add(_loud(1.2))
    assert not segment.due()  # 2.2 s: under the timer's start, and no pause yet
    segment.add(bytes(SECOND // 4))
    assert segment.due()


def test_the_handoff_gives_a_result_only_to_the_segment_that_starts_with_its_audio() -> None:
    segment = GrowingSegment(InterimSettings(), RATE)
    segment.add(bytes(SECOND))
    segment.start()
    segment.add(_loud(1.0))
    partial = segment.take()
    handoff: FinalHandoff[str] = FinalHandoff()
    handoff.offer(partial, "hello")
    other = bytes(SECOND) + _loud(0.5) + bytes(SECOND)  # another pre-roll or another utterance's audio
    assert handoff.claim(other) is None
    assert partial.silence == SECOND // 2  # decoded as if the VAD's half second of quiet followed
    longer = partial.audio + bytes(SECOND // 2 + 5 * 1024) + bytes(SECOND)  # the VAD waited longer: it heard more
    assert handoff.claim(longer, padding=SECOND) is None
    assert handoff.claim(partial.audio + bytes(SECOND // 2 + 1024) + bytes(SECOND), padding=SECOND) == "hello"
    assert handoff.claim(partial.audio + bytes(SECOND)) is None  # claimed once
    assert (handoff.offered, handoff.claimed) == (1, 1)


def test_the_pause_level_is_the_vads_speech_level_or_lower() -> None:
    from pipecat.audio.vad.vad_analyzer import VAD_MIN_VOLUME

    from voice_agent.audio.interims import VAD_MIN_VOLUME as OURS
    from voice_agent.audio.interims import pause_dbfs_for

    assert OURS == VAD_MIN_VOLUME and InterimSettings().pause_dbfs == pause_dbfs_for(VAD_MIN_VOLUME) == -50.0
    assert pause_dbfs_for(0.4) == -70.0 and pause_dbfs_for(0.8) == -50.0


def test_partials_wait_their_own_decode_time_and_the_timer_stops_on_long_segments() -> None:
    settings = InterimSettings(interval_secs=1.0, timed_after_secs=2.0, timed_until_secs=5.0)
    segment = GrowingSegment(settings, RATE)
    segment.start()
    segment.add(_loud(2.0))
    first = segment.take()
    segment.add(_loud(1.5))
    segment.finish(first, decode_secs=1.0)  # a slow decode: the model is shared, give it a second
    segment.add(_loud(0.5))
    assert not segment.due()  # 1.5 s new audio, but only 0.5 s idle since the last partial
    segment.add(bytes(SECOND // 4))
    assert segment.due()  # a pause's partial (it may stand for the final) does not wait
    segment.add(_loud(0.25))
    assert segment.due()  # a second idle: the timer's partial may run
    segment.finish(segment.take())
    segment.add(_loud(1.5))
    assert not segment.due()  # 6 s: past timed_until, no more timed partials
    segment.add(bytes(SECOND // 4))
    assert segment.due()  # a pause still starts one


# -- the final reuses a covering partial (the real service's code, a fake model) --------------------------------------


@dataclass(frozen=True)
class _Segment:
    text: str
    no_speech_prob: float = 0.0


class CountingModel:
    """Stands in for faster-whisper: its text says how much voiced audio it heard; counts its decodes."""

    def __init__(self, secs_per_decode: float = 0.0) -> None:
        self.decodes = 0
        self.secs_per_decode = secs_per_decode
        self.kwargs: list[dict[str, Any]] = []

    def transcribe(self, audio: Any, **kwargs: Any) -> tuple[list[_Segment], None]:
        self.decodes += 1
        self.kwargs.append(kwargs)
        if self.secs_per_decode:
            time.sleep(self.secs_per_decode)
        frames = np.asarray(audio)[: len(audio) // 320 * 320].reshape(-1, 320)
        voiced = int(np.count_nonzero(np.sqrt(np.mean(frames**2, axis=1)) > 0.01))
        return [_Segment(f" {voiced} voiced frames.")], None


def _audio(pcm: bytes) -> list[Frame]:
    return [InputAudioRawFrame(pcm[i : i + 640], RATE, 1) for i in range(0, len(pcm), 640)]


async def _call(frames: list[Frame], model: CountingModel, reuse: bool = True,
                reuse_wait_secs: float = 3.0) -> tuple[list[str], list[str]]:
    """Runs the interims processor and the real Whisper service (its model replaced); interims and finals."""
    handoff: FinalHandoff[FinalResult] | None = FinalHandoff() if reuse else None
    stt = make_whisper_stt(handoff=handoff, reuse_wait_secs=reuse_wait_secs)
    stt._model = model
    interims = WhisperInterims(stt.final_text, handoff)
    down, _ = await run_test(Pipeline([interims, stt]), frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=RATE))
    texts = [f.text for f in down if isinstance(f, InterimTranscriptionFrame)]
    finals = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    return texts, finals


def _turn(*parts: list[Frame]) -> list[Frame]:
    """A second of quiet pre-roll, the VAD start, the parts, the VAD stop, and time for the final."""
    return [*_audio(bytes(SECOND)), VADUserStartedSpeakingFrame(), *[f for part in parts for f in part],
            VADUserStoppedSpeakingFrame(), SleepFrame(0.6)]


async def test_the_final_reuses_a_partial_that_covers_the_segment_one_decode_fewer_same_text() -> None:
    turn = _turn(_audio(_loud(1.0) + bytes(SECOND * 3 // 10)), [SleepFrame(0.2)],  # a pause: the partial
                 _audio(bytes(SECOND * 2 // 10)))  # then only the quiet the partial was padded with
    reused, fresh = CountingModel(), CountingModel()
    interims, finals = await _call(turn, reused)
    _, fresh_finals = await _call(turn, fresh, reuse=False)
    assert (reused.decodes, fresh.decodes) == (1, 2)
    assert finals == fresh_finals == [" 50 voiced frames. "] and interims == ["50 voiced frames."]
    assert reused.kwargs[0] == fresh.kwargs[1]  # the partial ran the final's decode: same options


@pytest.mark.parametrize("stale", [False, True])
async def test_new_speech_after_the_partial_gets_a_fresh_decode_and_a_stale_partial_no_interim(stale: bool) -> None:
    # Margins no scheduler comes near, either way: stale, the partial's decode (1 s) outlasts pushing the new
    # speech and the VAD stop (no wait between them); fresh, the test waits 1 s for a 0.05 s decode before the new
    # speech (a 0.3 s decode against a 0.4 s wait failed on a busy machine).
    model = CountingModel(secs_per_decode=1.0 if stale else 0.05)
    pause = _audio(_loud(1.0) + bytes(SECOND * 3 // 10))
    more = _audio(_loud(0.4) + bytes(SECOND // 10))  # too short a quiet for another partial
    wait: list[Frame] = [] if stale else [SleepFrame(1.0)]  # stale: the partial is still decoding at the VAD stop
    interims, finals = await _call(_turn(pause, wait, more), model)
    assert model.decodes == 2 and finals == [" 70 voiced frames. "]
    assert interims == ([] if stale else ["50 voiced frames."])  # its older text is dropped after the stop


async def test_a_covering_partial_still_decoding_at_the_stop_is_awaited_not_decoded_twice() -> None:
    model = CountingModel(secs_per_decode=0.4)
    started = time.perf_counter()
    interims, finals = await _call(_turn(_audio(_loud(1.0) + bytes(SECOND * 4 // 10))), model, reuse_wait_secs=10.0)
    assert model.decodes == 1 and finals == [" 50 voiced frames. "]
    assert interims == []  # it ended after the stop: its text comes as the final, never as an interim after it
    # Awaited until the partial ends (0.4 s), not for the whole wait it is allowed (10 s): a bound no load comes near.
    assert time.perf_counter() - started < 5.0


async def test_a_covering_partial_stuck_past_the_wait_gives_way_to_a_fresh_decode() -> None:
    model = CountingModel(secs_per_decode=0.4)
    _, finals = await _call(_turn(_audio(_loud(1.0) + bytes(SECOND * 4 // 10))), model, reuse_wait_secs=0.05)
    assert model.decodes == 2 and finals == [" 50 voiced frames. "]  # waited 50 ms, then decoded the segment


def _at_dbfs(secs: float, dbfs: float) -> bytes:
    t = np.arange(int(secs * RATE)) / RATE
    amplitude = 32768 * 10 ** (dbfs / 20) * np.sqrt(2)  # a sine's RMS is its peak over sqrt 2
    return bytes((amplitude * np.sin(2 * np.pi * 200 * t)).astype("<i2"))


async def test_quiet_trailing_speech_the_vad_still_hears_gets_a_fresh_final() -> None:
    model = CountingModel()
    pause = _audio(_loud(1.0) + bytes(SECOND * 3 // 10))
    soft = _audio(_at_dbfs(0.6, -48.0))  # over the VAD's min_volume: speech to it, however quiet
    _, finals = await _call(_turn(pause, [SleepFrame(0.2)], soft), model)
    assert model.decodes == 2 and len(finals) == 1  # the partial before the soft words is not the final


async def test_a_partial_is_skipped_while_another_calls_final_holds_the_model() -> None:
    from voice_agent.audio.whisper_stt import decoding, whisper_busy

    decoded: list[bytes] = []

    def decode(pcm: bytes) -> str:
        decoded.append(pcm)
        return "hi"

    turn = _turn(_audio(_loud(1.0) + bytes(SECOND * 3 // 10)))
    with decoding():  # another call's final is decoding on the shared model
        assert whisper_busy()
        interims = WhisperInterims(decode)
        await run_test(Pipeline([interims]), frames_to_send=turn,
                       pipeline_params=PipelineParams(audio_in_sample_rate=RATE))
    assert not whisper_busy() and interims.decodes == 0 and interims.skipped > 0 and decoded == []
    free = WhisperInterims(decode)
    await run_test(Pipeline([free]), frames_to_send=turn, pipeline_params=PipelineParams(audio_in_sample_rate=RATE))
    assert free.decodes == 1 and free.skipped == 0 and len(decoded) == 1


@pytest.mark.parametrize("how", ["raises", "cancelled"])
async def test_a_failed_or_cancelled_partial_leaves_no_partial_in_flight(how: str) -> None:
    def decode(pcm: bytes) -> str:
        if how == "raises":
            raise RuntimeError("model broke")
        time.sleep(0.3)
        return "late"

    interims = WhisperInterims(decode)
    segment = interims._segment
    segment.start()
    segment.add(_loud(2.0))
    partial = segment.take()
    result: FinalResult = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(interims._decode(partial, result))
    if how == "cancelled":
        await asyncio.sleep(0.05)
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert result.done() and result.result() is None  # a final waiting on it decodes the segment itself
    segment.add(_loud(0.5))
    segment.add(bytes(SECOND // 4))
    assert segment.due()  # the next partial may run (at the caller's next pause)
    assert interims.interims == 0


# -- the speculation budget ------------------------------------------------------------------------------------------

LINES = [
    "hi I was wondering what hours your phone lines are open on saturdays",
    "and can I pay my bill by direct debit instead of a card payment every month",
    "how long does a refund usually take to come back to my account",
]


async def _replay(config: SpeculativeConfig, step: int) -> list[TurnRetrieval]:
    """Each line as growing interims ``step`` words apart (1: a streaming recogniser's word by word, 3: about
    one partial decode a second), the final after the last."""
    retriever = SpeculativeRetriever(Searcher(), config)
    for line in LINES:
        words = line.split()
        for n in range(step, len(words) + 1, step):
            retriever.on_interim(" ".join(words[:n]))
            await asyncio.sleep(config.debounce_s + 0.02)
        await retriever.on_final(line)
    return retriever.turns


async def test_unbudgeted_word_by_word_speculation_is_over_the_search_budget_and_the_metric_says_so() -> None:
    turns = await _replay(SpeculativeConfig(debounce_s=0.01), step=1)
    summary = retrieval_summary([t.to_dict() for t in turns])
    assert summary is not None
    assert summary["searches_per_turn"] > SEARCH_BUDGET_PER_TURN and summary["over_budget"]
    assert summary["searches_per_turn"] == sum(t.searches for t in turns) / len(turns)


async def test_the_audio_budget_searches_only_new_content_words_and_stays_within_it() -> None:
    turns = await _replay(replace(BUDGETED_SPECULATION, debounce_s=0.01), step=3)
    summary = retrieval_summary([t.to_dict() for t in turns])
    assert summary is not None and not summary["over_budget"]
    assert summary["searches_per_turn"] <= SEARCH_BUDGET_PER_TURN and summary["hit_rate"] == 1.0
    retriever = SpeculativeRetriever(Searcher(), replace(BUDGETED_SPECULATION, debounce_s=0.01, requery_below=1.0))
    retriever.on_interim("what hours are your lines")
    await asyncio.sleep(0.05)
    retriever.on_interim("what hours are your lines open")  # one new content word: not worth a search
    await asyncio.sleep(0.05)
    retriever.on_interim("what hours are your lines open on saturdays")  # two: searched
    await asyncio.sleep(0.05)
    record = await retriever.on_final("what hours are your lines open on saturdays")
    assert record.speculative_retrievals == 2 and record.searches == 2 and retriever.skipped == 1


# -- the default stack, real audio, real models ------------------------------------------------------------------------


@pytest.mark.timeout(300)
async def test_default_stack_pushes_interims_while_the_caller_speaks_and_speculation_runs_on_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    offered: list[Partial] = []
    claimed: list[bytes] = []
    offer, claim = FinalHandoff.offer, FinalHandoff.claim

    def recording_offer(self: FinalHandoff[Any], partial: Partial, result: Any) -> None:
        offered.append(partial)
        offer(self, partial, result)

    def recording_claim(self: FinalHandoff[Any], segment: bytes, padding: int = 0) -> Any:
        result = claim(self, segment, padding)
        if result is not None:
            claimed.append(segment)
        return result

    monkeypatch.setattr(FinalHandoff, "offer", recording_offer)
    monkeypatch.setattr(FinalHandoff, "claim", recording_claim)
    voice = caller_voice("piper")
    speech, rate = await asyncio.to_thread(
        voice, "I would like to know what hours your phone lines are open on Saturdays and Sundays.")
    pcm = resample(speech, rate, RATE).astype(np.int16).tobytes()
    stack = AudioStack()
    await asyncio.to_thread(stack.warm_up)
    audio = await asyncio.to_thread(stack.build)
    retrieval = SpeculativeRetrieval("call-1", Searcher(), BUDGETED_SPECULATION)
    chunk = 640  # 20 ms
    frames: list[Frame] = [InputAudioRawFrame(bytes(chunk), RATE, 1) for _ in range(25)]
    for i in range(0, len(pcm), chunk * 10):  # real time, 200 ms at a time
        frames += [InputAudioRawFrame(pcm[j : j + chunk], RATE, 1) for j in range(i, min(i + chunk * 10, len(pcm)),
                                                                                        chunk)]
        frames.append(SleepFrame(0.2))
    frames += [InputAudioRawFrame(bytes(chunk), RATE, 1) for _ in range(50)] + [SleepFrame(3.0)]
    down, _ = await run_test(Pipeline([*audio.before_user, retrieval]), frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=RATE))
    kinds = [type(f) for f in down if not isinstance(f, InputAudioRawFrame)]
    assert InterimTranscriptionFrame in kinds, "partial decodes give interims"
    assert kinds.index(InterimTranscriptionFrame) < kinds.index(VADUserStoppedSpeakingFrame), \
        "the first interim arrives while the caller is still speaking"
    finals = [f for f in down if isinstance(f, TranscriptionFrame) and not isinstance(f, InterimTranscriptionFrame)]
    assert len(finals) == 1 and "saturday" in finals[0].text.lower()  # Whisper stays the final
    assert len(claimed) == 1 and claimed[0].startswith(offered[-1].audio), "a partial covered the segment"
    # The final is that partial's decode, and it is pipecat's own decode of the audio the partial heard (Whisper's
    # text also depends on the segment's length, so a fresh decode of the longer segment can differ in a word).
    stt = audio.before_user[2]
    assert isinstance(stt, WhisperSTTService)
    padded = offered[-1].heard + bytes(int(RATE * stt._trailing_silence_secs) * 2)
    fresh = [f async for f in WhisperSTTService.run_stt(stt, padded)]
    assert [f.text for f in fresh if isinstance(f, TranscriptionFrame)] == [finals[0].text]
    record = retrieval.retriever.turns[0]
    assert record.interims >= 1 and record.speculative_retrievals >= 1
    knowledge = [f for f in down if isinstance(f, KnowledgeFrame)]
    assert len(knowledge) == 1 and down.index(knowledge[0]) < down.index(finals[0])  # ahead of the caller's words
    assert knowledge[0].record["searches"] == record.searches


async def test_a_partial_landing_after_the_final_is_not_charged_to_the_next_turn() -> None:
    searcher = Searcher()
    retrieval = SpeculativeRetrieval("call-1", searcher, BUDGETED_SPECULATION)
    frames: list[Frame] = [
        VADUserStartedSpeakingFrame(),
        InterimTranscriptionFrame("what hours are your lines open", "", "t"), SleepFrame(0.1),
        VADUserStoppedSpeakingFrame(), TranscriptionFrame("What hours are your lines open?", "", "t"), SleepFrame(0.1),
        InterimTranscriptionFrame("what hours are your lines open today then", "", "t"), SleepFrame(0.1),  # late
        VADUserStartedSpeakingFrame(), VADUserStoppedSpeakingFrame(),  # the caller again, before the final
        VADUserStartedSpeakingFrame(), TranscriptionFrame("Okay.", "", "t"),
        InterimTranscriptionFrame("and can i pay by direct debit", "", "t"), SleepFrame(0.1),  # the third one's
        TranscriptionFrame("And can I pay by direct debit?", "", "t"),
    ]
    await run_test(retrieval, frames_to_send=frames)
    first, second, third = retrieval.retriever.turns
    assert first.status == "hit" and first.searches == 1
    assert second.interims == 0 and second.searches == 1  # the late partial was dropped, not counted here
    assert third.interims == 1 and third.status == "hit"
    assert searcher.queries == ["what hours are your lines open", "Okay.", "and can i pay by direct debit"]


async def test_a_segment_with_no_final_does_not_turn_the_late_interim_guard_off() -> None:
    searcher = Searcher()
    retrieval = SpeculativeRetrieval("call-1", searcher, BUDGETED_SPECULATION)
    frames: list[Frame] = [
        VADUserStartedSpeakingFrame(), VADUserStoppedSpeakingFrame(), SleepFrame(0.1),  # a cough: no final at all
        VADUserStartedSpeakingFrame(), InterimTranscriptionFrame("what hours are your lines open", "", "t"),
        SleepFrame(0.1), VADUserStoppedSpeakingFrame(), TranscriptionFrame("What hours are your lines open?", "", "t"),
        SleepFrame(0.1),
        InterimTranscriptionFrame("can i pay my bill by direct debit", "", "t"), SleepFrame(0.1),  # late: dropped
        VADUserStartedSpeakingFrame(), VADUserStoppedSpeakingFrame(), TranscriptionFrame("Okay.", "", "t"),
    ]
    await run_test(retrieval, frames_to_send=frames)
    first, second = retrieval.retriever.turns
    assert first.interims == 1 and second.interims == 0
    assert searcher.queries == ["what hours are your lines open", "Okay."]


def test_the_new_word_gate_counts_an_account_id_but_not_filler() -> None:
    from voice_agent.retrieval.speculative import content_words, normalise_tokens

    said = frozenset(normalise_tokens("Hi hello, I don't know what's my account ID? Yeah, sure, thanks"))
    assert content_words(said) == {"account", "id"}
    filler = frozenset(normalise_tokens("I can't get one, that's why I want and need it, you're sure when, where"))
    assert content_words(filler) == frozenset()
