"""The served call's recorder feed (:class:`RecorderTap`): first words, tool results and errors, per turn."""

from __future__ import annotations

import asyncio
import datetime as dt

from pipecat.frames.frames import ErrorFrame, LLMContextFrame, LLMTextFrame, TranscriptionFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.utils.base_object import BaseObject

from tests.fakes.toy_domain import TOY
from voice_agent.call.session import CallSession
from voice_agent.recording.record import CallRecorder
from voice_agent.recording.tap import RecorderTap
from voice_agent.settings import CallConfig, Settings
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TODAY = dt.date(2026, 11, 30)


class _Worker(BaseObject):
    """Stands in for the call's PipelineWorker: only its ``on_pipeline_error`` event."""

    def __init__(self) -> None:
        super().__init__()
        self._register_event_handler("on_pipeline_error")


class Clock:
    """Seconds that move only when the test sets them."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tapped(clock: Clock | None = None) -> tuple[CallSession, CallRecorder, FrameProcessor, FrameProcessor, _Worker]:
    session = CallSession(TOY, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
    recorder = CallRecorder(session)
    llm, guard, worker = FrameProcessor(name="llm"), FrameProcessor(name="guard"), _Worker()
    RecorderTap(recorder, llm, guard, clock=clock or Clock()).attach(worker)
    return session, recorder, llm, guard, worker


async def inference(llm: FrameProcessor, text: str) -> None:
    frame = LLMContextFrame(LLMContext([{"role": "user", "content": text}]))
    await llm._call_event_handler("on_before_process_frame", frame)


async def report(worker: _Worker, frame: ErrorFrame) -> None:
    await worker._call_event_handler("on_pipeline_error", frame)
    await asyncio.sleep(0.01)  # an async handler runs in a task of its own


async def test_first_response_counts_the_guards_released_words_not_other_text_passing_it() -> None:
    clock = Clock()
    session, recorder, llm, guard, _worker = tapped(clock)
    await session.begin_turn("hello")
    await inference(llm, "hello")  # at 100 s
    clock.now = 100.5
    # A transcription passing the guard (it forwards every other frame, either way) is not the agent speaking.
    await guard._call_event_handler("on_before_push_frame", TranscriptionFrame("hello", "caller", "now"))
    assert recorder.turns[0].first_response_ms is None
    clock.now = 101.25
    await guard._call_event_handler("on_before_push_frame", LLMTextFrame("Hi there. "))
    assert recorder.turns[0].first_response_ms == 1250  # from the context to the first released words
    clock.now = 103.0
    await guard._call_event_handler("on_before_push_frame", LLMTextFrame("Anything else? "))
    assert recorder.turns[0].first_response_ms == 1250  # the first words only


async def test_an_error_before_the_turns_context_is_recorded_on_that_turn_not_the_previous_one() -> None:
    session, recorder, llm, _guard, worker = tapped()
    await session.begin_turn("hello")
    await inference(llm, "hello")
    llm_error = ErrorFrame("model timed out")
    llm_error.processor = llm
    await report(worker, llm_error)
    await report(worker, llm_error)  # the same frame seen twice counts once
    assert recorder.turns[0].errors == ["LLM error: model timed out"]
    await session.begin_turn("my account number is 12345")  # turn 2 opened by the caller's final words
    await report(worker, ErrorFrame("retrieval failed"))  # before its context
    assert recorder.turns[0].errors == ["LLM error: model timed out"]
    await inference(llm, "my account number is 12345")
    assert [t.turn for t in recorder.turns] == [1, 2] and recorder.turns[1].errors == ["retrieval failed"]
    assert recorder.errors == ["LLM error: model timed out", "retrieval failed"]


async def test_the_served_calls_record_has_each_turns_first_response_and_no_errors() -> None:
    from voice_agent.audio.stack import AudioStack, caller_voice
    from voice_agent.call.factory import call_factory
    from voice_agent.settings import Settings, with_overrides
    from voice_agent.telephony.config import ServerConfig
    from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator
    from voice_agent.telephony.process import running_bridge

    lines = ["Hi, is this the billing line?", "Thanks, that is all."]
    config = ServerConfig(port=0, stack=AudioStack.named("fake").with_script(lines), idle_timeout_secs=None,
                          knowledge=False)
    settings = with_overrides(Settings(), call={"reference_date": TODAY})
    async with running_bridge(config, call_factory(settings)) as (bridge, url):
        emulator = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(speed=8.0, silence_secs=0.2))
        result = await emulator.dial(f"{url}/voice", lines)
        assert result.status == "completed", result.render()
        for _ in range(100):  # the record is written as the call ends on the server's side
            records = [r for r in bridge.registry.all() if r.turns]
            if records:
                break
            await asyncio.sleep(0.05)
    (record,) = records
    assert [t["turn"] for t in record.turns] == [1, 2]
    for turn, heard in zip(record.turns, result.turns, strict=True):
        assert turn["errors"] == [] and turn["first_response_ms"] is not None
        assert heard.latency_ms is not None and 0 < turn["first_response_ms"] < heard.latency_ms + 1000


def test_lane_messages_sent_as_user_are_memory_not_the_callers_words() -> None:
    # llm.lane_role = "user": a lane reaches the model as a user message; the recorder must still know it.
    from voice_agent.recording.record import WatchedFact

    session = CallSession(TOY, Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
    fact = WatchedFact("account", ("ACC-1",), 1, 2, (), None)
    recorder = CallRecorder(session, [fact])
    session.state.start_turn("hello")
    recorder.context_received([
        {"role": "user", "content": "KNOWN FACTS (tool values; quotes are the caller's words; copy exactly):\n"
                                    "- account: ACC-1"},
        {"role": "user", "content": "hello"},
        {"role": "user", "content": "HARD CONSTRAINTS (never break these):\n- be kind"},
    ])
    record = recorder.turns[-1] if recorder.turns else recorder.current
    assert record is not None and record.facts_in_memory == {"account": True}
    assert list(recorder._caller_texts) == ["hello"]
