"""The caller-span extractor: a model proposes slot values as quotes of the caller, the quote guard checks them,
and what it finds lands as the next turn's context without the turn ever waiting for it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest
from loguru import logger

from voice_agent.call.session import CallSession
from voice_agent.core.caller_spans import (
    CallerSpanExtractor,
    caller_slots,
    render_turns,
    span_schema,
    verify,
)
from voice_agent.core.dates.reading import ReadingStatus
from voice_agent.core.provenance import CallerSpan
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing import billing_domain
from voice_agent.domains.billing.tools import BILLING_TOOLS
from voice_agent.services.caller_spans import extractor_choice, make_caller_span_extractor
from voice_agent.settings import CallConfig, Settings, SettingsError, with_overrides
from voice_agent.summarizers.extractive import ExtractiveSummarizer


@pytest.fixture(autouse=True)
def extractor_as_shipped(no_caller_spans: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extractor as the settings ship it (the suite turns it off for every other test)."""
    monkeypatch.delenv("VOICE_AGENT_CALLER_SPANS__EXTRACTOR")


TODAY = dt.date(2026, 11, 18)
SLOTS = caller_slots(BILLING_TOOLS)


def reply(*spans: tuple[str, int, str]) -> str:
    return json.dumps({"spans": [{"slot": s, "turn": t, "quote": q} for s, t, q in spans]})


def lane(*lines: tuple[str, str]) -> TranscriptLane:
    return TranscriptLane.of_lines(lines)


def test_the_slots_are_the_ones_a_caller_quote_argument_feeds() -> None:
    assert [s.slot for s in SLOTS] == ["requested_resolution", "already_attempted", "timing_constraints"]
    schema = span_schema(SLOTS)
    item = schema["properties"]["spans"]["items"]
    assert item["properties"]["slot"]["enum"] == [s.slot for s in SLOTS]
    assert sorted(item["required"]) == sorted(item["properties"]) and item["additionalProperties"] is False


def test_the_model_reads_only_new_caller_lines_each_after_the_agents_line_before_it() -> None:
    transcript = lane(("caller", "Hello there."), ("agent", "How would you like it settled?"),
                      ("caller", "Against next month, honestly."), ("agent", "Noted."), ("caller", "Fine."))
    text, last = render_turns(transcript.entries, after=1)
    assert text == ("AGENT: How would you like it settled?\n[turn 2] CALLER: Against next month, honestly.\n"
                    "AGENT: Noted.\n[turn 3] CALLER: Fine.")
    assert last == 3
    assert render_turns(transcript.entries, after=3) == ("", 3)


def test_a_quote_found_in_the_callers_words_is_kept_and_a_made_up_one_is_dropped_and_counted() -> None:
    transcript = lane(("caller", "Honestly I'd sooner the money just sat on the account till next bill."),
                      ("agent", "Okay."), ("caller", "The chat on the website got me nowhere last week."))
    reading = verify(reply(("requested_resolution", 1, "the money just sat on the account"),
                           ("already_attempted", 2, "I already contacted support by chat"),   # made up
                           ("already_attempted", 9, "The chat on the website got me nowhere")),  # wrong turn
                     transcript, SLOTS, 1, 2)
    assert reading.ok and reading.quotes == 3 and reading.dropped == 1
    assert reading.spans == (("requested_resolution", CallerSpan(1, "the money just sat on the account")),
                             ("already_attempted", CallerSpan(2, "The chat on the website got me nowhere")))


def test_a_negated_span_a_one_word_quote_and_an_unknown_slot_are_dropped() -> None:
    transcript = lane(("caller", "I really don't want a refund to the card, yes."))
    reading = verify(reply(("requested_resolution", 1, "a refund to the card"), ("requested_resolution", 1, "yes"),
                           ("favourite_colour", 1, "refund to the card")), transcript, SLOTS, 1, 1)
    assert reading.ok and reading.spans == () and reading.dropped == 3


@pytest.mark.parametrize("garbage", ["the caller wants a credit", '{"spans": "none"}', '{"spans": [{"slot": 1}]}'])
def test_a_reply_that_is_not_the_json_asked_for_is_a_failed_reading(garbage: str) -> None:
    reading = verify(garbage, lane(("caller", "Hi.")), SLOTS, 1, 1)
    assert reading.status is ReadingStatus.FAILED and reading.spans == ()


def session_with(complete: Any, timeout: float = 5.0) -> CallSession:
    extractor = CallerSpanExtractor(complete, SLOTS, timeout, "fake")
    return CallSession(billing_domain(), Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer(),
                       caller_spans=extractor)


async def test_what_a_reading_finds_lands_when_the_next_turn_opens_as_a_caller_span() -> None:
    asked: list[str] = []

    async def complete(instructions: str, user: str, schema: dict[str, Any]) -> str:
        asked.append(user)
        return reply(("requested_resolution", 1, "the money just sat on the account"))

    session = session_with(complete)
    await session.begin_turn("Honestly I'd sooner the money just sat on the account.")
    await session.settle_caller_spans()
    assert session.state.slots.get("requested_resolution") is None  # not during the turn it was said in
    await session.begin_turn("Anyway.")
    slot = session.state.slots.get("requested_resolution")
    assert slot is not None and slot.value == "the money just sat on the account"
    assert slot.provenance == CallerSpan(1, "the money just sat on the account") and slot.verbatim
    facts = next(m["content"] for m in session.assemble().messages if str(m["content"]).startswith("KNOWN FACTS"))
    assert 'requested_resolution (turn 1): "the money just sat on the account"' in facts
    await session.settle_caller_spans()
    assert len(asked) == 2 and "[turn 2]" in asked[1] and "[turn 1]" not in asked[1]  # each turn read once
    assert session.caller_spans is not None and session.caller_spans.counts.written == 1


async def test_turns_that_open_while_a_reading_runs_are_read_together_by_the_next() -> None:
    release = asyncio.Event()
    asked: list[str] = []

    async def complete(instructions: str, user: str, schema: dict[str, Any]) -> str:
        asked.append(user)
        await release.wait()
        return reply()

    session = session_with(complete)
    await session.begin_turn("One.")
    await asyncio.sleep(0)
    await session.begin_turn("Two.")
    await session.begin_turn("Three.")
    release.set()
    await session.settle_caller_spans()
    assert len(asked) == 2 and "[turn 1]" in asked[0]
    assert "[turn 2]" in asked[1] and "[turn 3]" in asked[1]


async def test_words_already_in_the_slot_or_a_later_statement_are_not_written_again() -> None:
    async def complete(instructions: str, user: str, schema: dict[str, Any]) -> str:
        return reply(("requested_resolution", 1, "credit on the account"), ("already_attempted", 1, "rang the shop"))

    session = session_with(complete)
    await session.begin_turn("Put the credit on the account please, I rang the shop already.")
    session.state.slots.apply_harvest("already_attempted", "I rang the shop already", 1,
                                      "update_case.already_attempted", CallerSpan(1, "I rang the shop already"))
    session.state.start_turn("Actually a refund to the card instead.")
    session.state.slots.apply_harvest("requested_resolution", "a refund to the card instead", 2,
                                      "update_case.requested_resolution", CallerSpan(2, "a refund to the card instead"))
    await session.settle_caller_spans()
    await session.begin_turn("Okay.")
    assert session.state.slots.model.requested_resolution == "a refund to the card instead"
    assert session.state.slots.model.already_attempted == ["I rang the shop already"]
    assert session.caller_spans is not None and session.caller_spans.counts.kept == 2


@pytest.mark.parametrize("fault", ["error", "timeout"])
async def test_a_model_that_fails_or_times_out_changes_nothing_but_a_counted_log_line(fault: str) -> None:
    async def complete(instructions: str, user: str, schema: dict[str, Any]) -> str:
        if fault == "error":
            raise ConnectionError("vendor down")
        await asyncio.sleep(10)
        return reply()

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{message}")
    try:
        session = session_with(complete, timeout=0.05)
        await session.begin_turn("I'd sooner it sat on the account.")
        await session.settle_caller_spans()
        await session.begin_turn("Right.")
    finally:
        logger.remove(sink)
    assert session.state.slots.filled() == {}
    assert session.caller_spans is not None
    counts = session.caller_spans.counts
    assert (counts.failed, counts.timeouts) == ((1, 0) if fault == "error" else (0, 1))
    assert any("caller-span extractor" in line and "slots unchanged" in line for line in lines)
    session.close()


def test_on_by_default_only_with_a_hosted_llm_and_off_offline() -> None:
    assert extractor_choice(Settings()) == "off"
    assert make_caller_span_extractor(Settings(), BILLING_TOOLS) is None
    hosted = with_overrides(Settings(), llm={"vendor": "openai"})
    assert extractor_choice(hosted) == "llm"
    assert make_caller_span_extractor(hosted, BILLING_TOOLS, None) is None  # unset and no model to read with
    assert extractor_choice(with_overrides(hosted, caller_spans={"extractor": "off"})) == "off"
    with pytest.raises(SettingsError, match="hosted"):
        make_caller_span_extractor(with_overrides(Settings(), caller_spans={"extractor": "llm"}), BILLING_TOOLS)
