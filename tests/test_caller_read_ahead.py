"""Reading the caller's words ahead at an interim: exactly what a fresh read gives, bounded, never stale."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    TextFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
)

from processors.caller_read_ahead import CallerReadAhead
from tests.fakes.lanes import lane
from tests.fakes.pipecat_run import run_test
from voice_agent.call.session import CallSession
from voice_agent.core.dates import DateConstraint, clear_cache
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.read_ahead import READ_AHEAD_ENTRIES, ReadAhead
from voice_agent.core.spoken_ids import find_identifiers
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing import billing_domain
from voice_agent.settings import CallConfig, Settings
from voice_agent.summarizers.extractive import ExtractiveSummarizer

SENTENCES = Path(__file__).resolve().parents[1] / "config" / "evals" / "dates" / "sentences.yaml"


def _items() -> list[tuple[str, dt.date, str]]:
    data = yaml.safe_load(SENTENCES.read_text())
    default = dt.date.fromisoformat(str(data["reference_date"]))
    out = []
    for item in data["items"]:
        reference = dt.date.fromisoformat(str(item["reference_date"])) if "reference_date" in item else default
        out.append((str(item["text"]), reference, str(item.get("agent", ""))))
    return out


def _fresh(text: str, reference: dt.date, agent: str) -> tuple[DateConstraint, ...]:
    """The caller's constraints as a guard reads them with nothing read ahead and every cache dropped."""
    clear_cache()
    transcript = lane(("agent", agent), ("caller", text)) if agent else lane(("caller", text))
    return DateGuard(reference)._read(transcript)[-1].constraints


def _final(guard: DateGuard, transcript: TranscriptLane, text: str) -> tuple[DateConstraint, ...]:
    transcript.append_caller(2, text)
    return guard._read(transcript)[-1].constraints


def _read_ahead(reference: dt.date, agent: str, interim: str) -> tuple[DateGuard, TranscriptLane]:
    transcript = lane(("agent", agent)) if agent else TranscriptLane()
    guard = DateGuard(reference)
    guard.read_ahead(transcript)
    guard.read_ahead_caller(interim, transcript)
    return guard, transcript


def test_the_sentences_read_ahead_give_exactly_what_a_fresh_read_gives() -> None:
    items = _items()
    assert len(items) == 340
    for text, reference, agent in items:
        guard, transcript = _read_ahead(reference, agent, text)
        assert _final(guard, transcript, text) == _fresh(text, reference, agent), text
        assert (guard.caller_ahead.hits, guard.caller_ahead.misses) == (1, 0)


def test_a_final_that_differs_from_the_interim_is_read_again() -> None:
    differing = 0
    for text, reference, agent in _items():
        words = text.split()
        if len(words) < 2:
            continue
        guard, transcript = _read_ahead(reference, agent, " ".join(words[:-1]))  # the last word still unsaid
        assert _final(guard, transcript, text) == _fresh(text, reference, agent), text
        assert (guard.caller_ahead.hits, guard.caller_ahead.misses) == (0, 1)
        differing += 1
    assert differing > 300


def test_a_read_ahead_under_another_reference_date_is_not_taken() -> None:
    text = "not before the 14th please"
    guard, transcript = _read_ahead(dt.date(2026, 11, 18), "", text)
    ahead = next(iter(guard.caller_ahead._reads.values()))
    guard.reference = dt.date(2026, 12, 20)  # past the 14th: "the 14th" is now January's
    read = _final(guard, transcript, text)
    assert read == _fresh(text, dt.date(2026, 12, 20), "") and read != ahead
    assert read[0].start == dt.date(2027, 1, 14) and ahead[0].start == dt.date(2026, 12, 14)
    assert (guard.caller_ahead.hits, guard.caller_ahead.misses) == (0, 1)


def test_a_read_ahead_before_the_agent_asked_is_not_taken() -> None:
    # The caller starts answering while the agent is still speaking; the agent's question lands in the lane
    # between the interim and the final, and gives the bare day its topic.
    question = "And when will you drop the car off?"
    guard = DateGuard(dt.date(2026, 11, 18))
    transcript = TranscriptLane()
    guard.read_ahead_caller("the 24th", transcript)
    ahead = next(iter(guard.caller_ahead._reads.values()))
    transcript.append_agent(1, question)
    read = _final(guard, transcript, "the 24th")
    assert read == _fresh("the 24th", dt.date(2026, 11, 18), question)
    assert read != ahead and read[0].topic == "car" and ahead[0].topic is None
    assert guard.caller_ahead.misses == 1


def test_the_read_ahead_is_bounded_and_an_evicted_interim_is_read_again() -> None:
    guard = DateGuard(dt.date(2026, 11, 18))
    transcript = TranscriptLane()
    interims = [f"call me on the {day}th" for day in range(4, 14)]
    for interim in interims:
        guard.read_ahead_caller(interim, transcript)
    assert len(guard.caller_ahead) == READ_AHEAD_ENTRIES
    transcript.append_caller(1, interims[0])
    assert guard._read(transcript)[-1].constraints == _fresh(interims[0], dt.date(2026, 11, 18), "")
    assert guard.caller_ahead.misses == 1
    with pytest.raises(ValueError):
        ReadAhead(0)


def _session() -> CallSession:
    settings = Settings(call=CallConfig(reference_date=dt.date(2026, 11, 30)))
    return CallSession(billing_domain(), settings, ExtractiveSummarizer())


async def test_a_session_takes_the_interim_read_at_the_final_and_rereads_a_differing_one() -> None:
    session = _session()
    said = "  my account is ACC-1234-56 and I'm away until the 14th of December  "
    session.read_ahead_caller(said)
    await session.begin_turn(said)
    session.assemble()
    assert (session.identifiers_ahead.hits, session.date_guard.caller_ahead.hits) == (1, 1)
    session.record_agent("Thanks. Anything else?")
    session.read_ahead_caller("the invoice is INV-2026")  # the caller had not finished the number
    final = "the invoice is INV-2026-0042"
    await session.begin_turn(final)
    session.assemble()
    assert (session.identifiers_ahead.misses, session.date_guard.caller_ahead.misses) == (1, 1)
    assert {"ACC-1234-56", "INV-2026-0042"} <= set(session.state.ledger.values())
    assert [v for v, _ in find_identifiers(final, session._id_shapes)] == ["INV-2026-0042"]
    session.read_ahead_caller("   ")  # nothing said yet: nothing read
    assert len(session.identifiers_ahead) == 1


class _Reader:
    call_id = "call"

    def __init__(self, fail: bool = False) -> None:
        self.read: list[str] = []
        self.fail = fail

    def read_ahead_caller(self, text: str) -> None:
        self.read.append(text)
        if self.fail:
            raise RuntimeError("broken read")


@pytest.mark.parametrize(("fail", "audio"), [(False, True), (True, True), (False, False)])
async def test_the_processor_reads_each_interim_of_an_audio_call_and_forwards_every_frame(
    fail: bool, audio: bool
) -> None:
    reader = _Reader(fail)
    frames: list[Any] = [InterimTranscriptionFrame("not on", "u", ""),
                         InterimTranscriptionFrame("not on a Tuesday", "u", ""),
                         TranscriptionFrame("not on a Tuesday", "u", "")]
    vad: list[Any] = [VADUserStartedSpeakingFrame()] if audio else []  # text mode: no VAD, nothing read
    down, _ = await run_test(CallerReadAhead(reader), frames_to_send=vad + frames,
                             expected_down_frames=[type(f) for f in vad + frames])
    assert reader.read == (["not on", "not on a Tuesday"] if audio else [])
    assert [cast(TextFrame, f).text for f in down if not isinstance(f, VADUserStartedSpeakingFrame)] == [
        "not on", "not on a Tuesday", "not on a Tuesday"]
