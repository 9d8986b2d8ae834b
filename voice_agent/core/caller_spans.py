"""The caller-span extractor: a model proposes slot values as exact quotes of the caller, code checks them.

The offline cue rules fill a slot only when the caller's wording matches a rule. With a model configured, the
model reads the caller's new lines after each turn opens and returns, as JSON constrained by a schema built
from the domain's tools, each thing the caller said that belongs in a slot a ``caller_quote`` argument feeds
(what they want done, what they already tried, when they can be reached): the slot and the caller's exact
words. The model never writes a slot. Code here:

* checks every quote with the quote guard (:func:`~voice_agent.core.guards.quote_guard.find_quote`: a span of
  one caller utterance, case, spacing and end punctuation aside, at least two words, not negated), as
  ``update_case``'s arguments are checked; a quote not found is dropped and counted;
* writes what is found through the harvest API as a caller span (turn and exact words), so it stands in
  KNOWN FACTS like any quote-checked caller span.

It runs off the turn (:class:`CallerSpanExtraction`): a reading starts when the caller's words open a turn and
nobody waits for it; what it found lands when the next turn opens, before that turn's context is built. One
reading at a time: turns that open while one runs are read together by the next. A model that fails or takes
too long changes nothing but a counted log line. Pure Python; the completion itself is a callable the adapters
supply (:data:`~voice_agent.core.dates.reading.JsonCompleter`, the date reader's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from voice_agent.core.call_state import CallState
from voice_agent.core.dates.reading import JsonCompleter, ReadingStatus, quoted_items
from voice_agent.core.guards.quote_guard import MIN_QUOTE_WORDS, find_quote, normalise
from voice_agent.core.harvest import Harvested, harvest_caller_spans
from voice_agent.core.provenance import CallerSpan
from voice_agent.core.tool_spec import ParamKind, ToolSpec
from voice_agent.core.transcript import EntryKind, TranscriptEntry, TranscriptLane

MAX_TURNS_PER_READING = 8
"""Most caller turns one reading takes (the newest): a resumed call does not send its whole history at once."""


@dataclass(frozen=True)
class CallerSlot:
    """A slot the caller's own words may fill: a tool's ``caller_quote`` parameter and the slot it feeds.

    Attributes:
        slot: The slot's name (what the model answers with).
        description: What belongs in it, as the tool describes the parameter to the model.
    """

    slot: str
    description: str


def caller_slots(tools: Sequence[ToolSpec]) -> tuple[CallerSlot, ...]:
    """The slots of ``tools`` that a ``caller_quote`` argument feeds (through a harvest field handing it back)."""
    found: dict[str, CallerSlot] = {}
    for tool in tools:
        for param in tool.params_of(ParamKind.CALLER_QUOTE):
            for spec in tool.harvest:
                if spec.from_param == param.name and spec.slot is not None and spec.slot not in found:
                    found[spec.slot] = CallerSlot(spec.slot, param.description)
    return tuple(found.values())


def span_schema(slots: Sequence[CallerSlot]) -> dict[str, Any]:
    """The JSON the model must return (strict form: every property required, nothing else allowed)."""
    return {
        "type": "object",
        "properties": {
            "spans": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "slot": {"type": "string", "enum": [s.slot for s in slots]},
                        "turn": {"type": "integer"},
                        "quote": {"type": "string"},
                    },
                    "required": ["slot", "turn", "quote"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["spans"],
        "additionalProperties": False,
    }


def instructions(slots: Sequence[CallerSlot]) -> str:
    """What the model is asked: the slots, by what the tools say of them, and the quoting rule."""
    listed = "\n".join(f"- {s.slot}: {s.description}" for s in slots)
    return (
        "You read the newest lines a CALLER said on a phone call with an agent (the agent's line before each is "
        "shown only so you understand short answers). Find what the caller says that belongs in one of these "
        f"slots:\n{listed}\n"
        "For each, give: slot, turn (the number in [turn N]) and quote: the caller's exact words for it, copied "
        f"character for character from that one caller line (at least {MIN_QUOTE_WORDS} words, never the "
        "agent's words, never reworded, never a span the caller negates). Whatever the wording: a wish said as a "
        "preference, an attempt said in any tense, a short answer to the agent's question.\n"
        "Skip small talk, questions and anything that fits no slot. Return JSON only, with every such span "
        "(none: {\"spans\": []})."
    )


def render_turns(entries: Sequence[TranscriptEntry], after: int) -> tuple[str, int]:
    """The caller lines of the turns after ``after`` as the model reads them, each after the agent's line before it.

    Returns:
        The text, and the last turn it holds (``after`` when there is none). At most the newest
        :data:`MAX_TURNS_PER_READING` turns with caller words.
    """
    agent_before: dict[int, str] = {}
    callers: dict[int, list[str]] = {}
    for e in entries:
        if e.kind is EntryKind.AGENT and e.text.strip():
            agent_before[e.turn + 1] = e.text.strip()
        elif e.kind is EntryKind.CALLER and e.turn > after and e.text.strip():
            callers.setdefault(e.turn, []).append(e.text.strip())
    turns = sorted(callers)[-MAX_TURNS_PER_READING:]
    lines: list[str] = []
    for turn in turns:
        if turn in agent_before:
            lines.append(f"AGENT: {agent_before[turn]}")
        lines.append(f"[turn {turn}] CALLER: {' '.join(callers[turn])}")
    return "\n".join(lines), (turns[-1] if turns else after)


@dataclass(frozen=True)
class SpanReading:
    """One reading of the caller's new lines, after code checked it.

    Attributes:
        status: ``ok``, ``failed`` (the model erred or its reply was not the JSON asked for) or ``timeout``.
        first_turn: The first turn read.
        last_turn: The last turn read.
        spans: (slot, caller span) for every quote found in the caller's words.
        quotes: Quotes the model returned.
        dropped: Quotes not found in the caller's words (dropped).
        seconds: How long the model took.
        error: What went wrong, when the status is not ``ok``.
    """

    status: ReadingStatus
    first_turn: int
    last_turn: int
    spans: tuple[tuple[str, CallerSpan], ...] = ()
    quotes: int = 0
    dropped: int = 0
    seconds: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        """Whether the model answered with usable JSON."""
        return self.status is ReadingStatus.OK


def verify(reply: str, transcript: TranscriptLane, slots: Sequence[CallerSlot], first_turn: int, last_turn: int,
           seconds: float = 0.0) -> SpanReading:
    """Checks a model reply with the quote guard.

    Returns:
        ``failed`` when the reply is not the JSON asked for (a span of the wrong shape included); otherwise every
        span whose quote the quote guard finds in a caller utterance (at the turn it finds), the rest counted as
        dropped. A quote for a slot the schema does not name counts as dropped too.
    """
    try:
        raw = quoted_items(reply, "spans")
    except (ValueError, KeyError, TypeError) as exc:
        return SpanReading(ReadingStatus.FAILED, first_turn, last_turn, seconds=seconds,
                           error=f"not the JSON asked for ({exc})")
    names = {s.slot for s in slots}
    found: list[tuple[str, CallerSpan]] = []
    quotes = dropped = 0
    for item in raw:
        quote = str(item["quote"]).strip()
        if not quote:
            continue
        quotes += 1
        turn = find_quote(quote, transcript) if item.get("slot") in names else None
        if turn is None:
            dropped += 1
            continue
        span = (str(item["slot"]), CallerSpan(turn, quote.strip(" \t\n\"'“”‘’.,;:!?")))
        if span not in found:
            found.append(span)
    return SpanReading(ReadingStatus.OK, first_turn, last_turn, tuple(found), quotes, dropped, seconds)


@dataclass
class CallerSpanExtractor:
    """Asks a model for caller spans and checks them.

    Args:
        complete: The completion (the configured LLM through pipecat, or the local model).
        slots: The slots it may fill (:func:`caller_slots` of the domain's tools).
        timeout_secs: Longest one reading may take; past it the reading is ``timeout`` and changes nothing.
        name: Shown in logs and reports (``llm``, ``local``).
    """

    complete: JsonCompleter
    slots: tuple[CallerSlot, ...]
    timeout_secs: float = 10.0
    name: str = "model"

    def __post_init__(self) -> None:
        if self.timeout_secs <= 0:
            raise ValueError(f"timeout_secs must be positive, got {self.timeout_secs}")
        if not self.slots:
            raise ValueError("a caller-span extractor needs at least one slot a caller_quote argument feeds")

    async def read(self, transcript: TranscriptLane, after: int) -> SpanReading:
        """Reads the caller's turns after ``after``; never raises for a model fault."""
        # Only the turns it reads (and the agent's line that ends the turn before): a long call's history is not
        # walked again at every turn.
        text, last = render_turns(transcript.in_turns(max(after, 1), transcript.last_turn), after)
        first = after + 1
        if not text:
            return SpanReading(ReadingStatus.OK, first, last)
        started = time.monotonic()
        try:
            reply = await asyncio.wait_for(
                self.complete(instructions(self.slots), text, span_schema(self.slots)), self.timeout_secs)
        except TimeoutError:
            return SpanReading(ReadingStatus.TIMEOUT, first, last, seconds=time.monotonic() - started,
                               error=f"no reply within {self.timeout_secs:g} s")
        except Exception as exc:  # an LLM vendor error must not touch the call: the slots stay as they are
            return SpanReading(ReadingStatus.FAILED, first, last, seconds=time.monotonic() - started,
                               error=f"{type(exc).__name__}: {exc}")
        try:
            return verify(reply or "", transcript, self.slots, first, last, time.monotonic() - started)
        except Exception as exc:  # whatever the model sent, the call goes on
            return SpanReading(ReadingStatus.FAILED, first, last, seconds=time.monotonic() - started,
                               error=f"reply not checked ({type(exc).__name__}: {exc})")


@dataclass
class ExtractionCounts:
    """What a call's extractor did (counts only, no caller words): for logs, call records and reports."""

    readings: int = 0
    failed: int = 0
    timeouts: int = 0
    quotes: int = 0
    dropped: int = 0
    written: int = 0
    kept: int = 0
    """Spans found but not written: the slot already holds those words, or a later statement."""

    def to_json(self) -> dict[str, int]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


def _already_held(state: CallState, slot: str, span: CallerSpan) -> bool:
    """Whether ``slot`` already holds these words (either way round), or, for a one-value slot, a later statement."""
    current = state.slots.get(slot)
    if current is None:
        return False
    values = current.value if isinstance(current.value, list) else [current.value]
    said = normalise(span.quote)
    if any(said in normalise(str(v)) or normalise(str(v)) in said for v in values):
        return True
    return not isinstance(current.value, list) and current.turn > span.turn


@dataclass
class CallerSpanExtraction:
    """Runs a call's caller-span readings off the turn and lands them when the next turn opens.

    Args:
        extractor: The model reading.
        state: The call's lanes.
        call_id: Names the call in logs.
    """

    extractor: CallerSpanExtractor
    state: CallState
    call_id: str = "call"
    readings: list[SpanReading] = field(default_factory=list)
    counts: ExtractionCounts = field(default_factory=ExtractionCounts)
    read_to: int = 0
    """The last turn a reading has taken (read or being read)."""
    _done: list[SpanReading] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Reads the turns not read yet, off the turn; returns at once (a no-op while a reading runs: it reads
        them next)."""
        if self._task is not None and not self._task.done():
            return
        if self.read_to >= self.state.turn:
            return
        self._task = asyncio.create_task(self._run(), name=f"caller-spans-{self.call_id}")

    async def _run(self) -> None:
        while self.read_to < self.state.turn:
            after, self.read_to = self.read_to, self.state.turn
            reading = await self.extractor.read(self.state.transcript, after)
            self._done.append(reading)

    def land(self) -> list[Harvested]:
        """Writes what finished readings found into the slots (call it when a turn opens, before its context).

        Returns:
            What each span wrote.
        """
        done, self._done = self._done, []
        written: list[Harvested] = []
        for reading in done:
            self.readings.append(reading)
            self._count(reading)
            fresh = [(slot, span) for slot, span in reading.spans if not _already_held(self.state, slot, span)]
            self.counts.kept += len(reading.spans) - len(fresh)
            if fresh:
                harvested = harvest_caller_spans(fresh, self.state.slots, f"caller_spans.{self.extractor.name}")
                self.counts.written += len(harvested.slots)
                written.append(harvested)
        return written

    def _count(self, reading: SpanReading) -> None:
        counts = self.counts
        counts.readings += 1
        counts.quotes += reading.quotes
        counts.dropped += reading.dropped
        turns = f"turns {reading.first_turn}-{reading.last_turn}"
        if reading.status is ReadingStatus.TIMEOUT:
            counts.timeouts += 1
            logger.warning("call {}: caller-span extractor ({}) timed out on {} ({}); slots unchanged "
                           "[{} failed, {} timed out of {}]", self.call_id, self.extractor.name, turns, reading.error,
                           counts.failed, counts.timeouts, counts.readings)
        elif not reading.ok:
            counts.failed += 1
            logger.warning("call {}: caller-span extractor ({}) failed on {} ({}); slots unchanged "
                           "[{} failed, {} timed out of {}]", self.call_id, self.extractor.name, turns, reading.error,
                           counts.failed, counts.timeouts, counts.readings)
        elif reading.dropped:
            logger.info("call {}: caller-span extractor quoted {} span(s) not in the caller's words on {} "
                        "(dropped; {} of {} quotes dropped in the call)", self.call_id, reading.dropped, turns,
                        counts.dropped, counts.quotes)

    async def settle(self) -> None:
        """Waits for the reading in flight (tests, the end of a scripted call); what it found lands at the next
        :meth:`land`."""
        if self._task is not None:
            await asyncio.wait([self._task])

    def cancel(self) -> None:
        """Cancels the reading in flight (the call ended)."""
        if self._task is not None:
            self._task.cancel()
