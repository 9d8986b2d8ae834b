"""The model reader: a second reading of the caller's words about dates, checked by code.

At a date-bearing action a model (the configured LLM, or the local one) reads the caller's turns
and returns, as JSON constrained by :data:`READING_SCHEMA`, each statement about when the caller can
or cannot be reached or when something may happen: its exact quote, turn, subject, polarity and the
date expressions as said. The model never decides anything. Code here:

* checks every quote verbatim (case and spacing aside) against the caller's own utterance of that
  turn in the transcript lane; a quote not found is dropped and counted;
* resolves each date expression with the cue-word engine, against the call's day;
* says which dates a statement excludes (:meth:`ReadStatement.excludes`).

The judgement (run, confirm or refuse) is the contract's (:mod:`voice_agent.core.guards.date_contract`).
Pure Python; the completion itself is a callable the adapters supply.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import Any, Protocol

from voice_agent.core.dates import signals
from voice_agent.core.dates.extract import extract_constraints
from voice_agent.core.dates.model import DateConstraint
from voice_agent.core.transcript import EntryKind, TranscriptEntry

JsonCompleter = Callable[[str, str, dict[str, Any]], Awaitable[str]]
"""``complete(instructions, user_text, schema) -> reply text`` (JSON); raises on an LLM vendor error."""


class Polarity(StrEnum):
    """What a statement says about its dates."""

    AVAILABLE = "available"
    """The caller can be reached then, or asks for it."""
    UNAVAILABLE = "unavailable"
    """The caller cannot be reached then (away, busy, ruled out)."""
    REPLACED = "replaced"
    """The caller took back a date they had given (the dates are the old ones)."""


READING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "statements": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "turn": {"type": "integer"},
                    "quote": {"type": "string"},
                    "about": {"type": "string", "enum": ["callback", "other"]},
                    "polarity": {"type": "string", "enum": [p.value for p in Polarity]},
                    "when": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["turn", "quote", "about", "polarity", "when"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["statements"],
    "additionalProperties": False,
}
"""The JSON the model must return (strict form: every property required, nothing else allowed)."""

INSTRUCTIONS = (
    "You read a phone call between a billing agent and a caller. Find each thing the CALLER says about days "
    "when they can or cannot be called back: absences, shifts, trips, appointments, days ruled out, days asked "
    "for, and days they take back. Skip dates of bills, payments and past events.\n"
    "For each, give: turn (the number in [turn N]), quote (the caller's exact words for it, copied character "
    "for character, at most 12 words), about ('callback' if it limits when to call them, else 'other'), polarity "
    "('available' = they can be called then or ask for it; 'unavailable' = they cannot be called then or rule "
    "it out; 'replaced' = a day they gave before and now take back), when (the date words exactly as said).\n"
    "Example: '[turn 3] CALLER: I'm on nights till the 20th, then free' gives "
    "{\"turn\": 3, \"quote\": \"I'm on nights till the 20th\", \"about\": \"callback\", "
    "\"polarity\": \"unavailable\", \"when\": [\"till the 20th\"]}.\n"
    "Return JSON only, with every such statement."
)


@dataclass(frozen=True)
class ReadStatement:
    """One statement the model read, with a verified quote and its dates resolved by code.

    Attributes:
        turn: The caller turn it quotes.
        quote: The caller's words, as found in that turn.
        about: ``callback`` or ``other``.
        polarity: See :class:`Polarity`.
        when: The date expressions as the model copied them.
        spans: Their resolution by the cue-word engine (empty when none resolved).
    """

    turn: int
    quote: str
    about: str
    polarity: Polarity
    when: tuple[str, ...]
    spans: tuple[DateConstraint, ...]

    def excludes(self, d: date) -> bool:
        """Whether this statement rules ``d`` out for a callback."""
        if self.about != "callback" or self.polarity is Polarity.AVAILABLE:
            return False
        return any(c.covers(d) for c in self.spans)


class ReadingStatus(StrEnum):
    """How the model reading went."""

    OK = "ok"
    FAILED = "failed"
    """The model erred, or its reply was not the JSON asked for."""
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class DateReading:
    """The model's reading of a call at one action, after code checked it.

    Attributes:
        status: See :class:`ReadingStatus`.
        statements: The statements whose quotes were found.
        quotes: Quotes the model returned.
        dropped: Quotes not found in the caller's utterance of their turn (dropped).
        seconds: How long the model took.
        error: What went wrong, when the status is not ``ok``.
        reply: The model's raw reply (kept so an evaluation can check it again without asking again).
    """

    status: ReadingStatus
    statements: tuple[ReadStatement, ...] = ()
    quotes: int = 0
    dropped: int = 0
    seconds: float = 0.0
    error: str = ""
    reply: str = ""

    @property
    def ok(self) -> bool:
        """Whether the model answered with usable JSON."""
        return self.status is ReadingStatus.OK

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "status": self.status.value, "quotes": self.quotes, "dropped": self.dropped,
            "seconds": round(self.seconds, 3), "error": self.error,
            "statements": [
                {"turn": s.turn, "quote": s.quote, "about": s.about, "polarity": s.polarity.value, "when": list(s.when)}
                for s in self.statements
            ],
        }


_SPACE = re.compile(r"\s+")


def _squash(text: str) -> str:
    return _SPACE.sub(" ", text.replace("’", "'").replace("‘", "'")).strip().casefold()


def _strip_ends(text: str) -> str:
    return text.strip(" \t\n\"'“”‘’.,;:!?")


def render_call(entries: Sequence[TranscriptEntry]) -> str:
    """The call as the model reads it: the caller's lines that say anything about when, with their turn number.

    A line without a time word (see :data:`~voice_agent.core.dates.signals.TIME_WORD`) cannot state a date, so
    it only lengthens the prompt; an agent question with a time word is kept before the caller's answer, which
    may be a bare "yes".
    """
    lines = []
    question = ""
    for e in entries:
        if e.kind is EntryKind.AGENT:
            question = e.text if "?" in e.text and signals.has_time_word(e.text) else ""
        elif e.kind is EntryKind.CALLER:
            if question:
                lines.append(f"AGENT: {question}")
            if question or signals.has_time_word(e.text):
                lines.append(f"[turn {e.turn}] CALLER: {e.text}")
            question = ""
    return "\n".join(lines) or "(the caller has said nothing about days)"


def prompt_version() -> str:
    """A short hash of what the model is asked (instructions and schema): cached replies to another prompt differ."""
    import hashlib

    blob = INSTRUCTIONS + json.dumps(READING_SCHEMA, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:8]


def quoted_items(reply: str, key: str) -> list[dict[str, Any]]:
    """The items of a model's JSON reply ``{key: [{"quote": ...}, ...]}``, each a dict with a string quote.

    Raises:
        ValueError: Not JSON (``json.JSONDecodeError``).
        KeyError: No ``key``.
        TypeError: ``key`` is not a list, or an item is not a dict with a string ``quote``.
    """
    raw = json.loads(reply)[key]
    if not isinstance(raw, list):
        raise TypeError(f"{key} is not a list")
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("quote"), str):
            raise TypeError(f"an item of {key} without a quote")
    return raw


def verify(reply: str, entries: Sequence[TranscriptEntry], reference: date, seconds: float = 0.0) -> DateReading:
    """Checks a model reply against the transcript and resolves its dates.

    Args:
        reply: The model's JSON text.
        entries: The transcript entries the model read.
        reference: The call's day.
        seconds: How long the model took (reported).

    Returns:
        The reading: ``failed`` when the reply is not the JSON asked for (any statement of the wrong shape
        included: a reading that is half garbage is not a clean one); otherwise every statement whose quote is
        in the caller's utterance of its turn (any caller turn, when the turn number is off), the rest counted
        as dropped.
    """
    try:
        raw = quoted_items(reply, "statements")
        for item in raw:
            if not isinstance(item.get("when"), list) or not all(isinstance(w, str) for w in item["when"]):
                raise TypeError("'when' is not a list of strings")
            if item.get("polarity") not in {p.value for p in Polarity}:
                raise TypeError(f"unknown polarity {item.get('polarity')!r}")
    except (ValueError, KeyError, TypeError) as exc:
        return DateReading(ReadingStatus.FAILED, seconds=seconds, error=f"not the JSON asked for ({exc})", reply=reply)
    callers = [(e.turn, e.text, _squash(e.text)) for e in entries if e.kind is EntryKind.CALLER]
    found: list[ReadStatement] = []
    quotes = dropped = 0
    for item in raw:
        if not isinstance(item, dict):
            continue
        quote = _strip_ends(str(item.get("quote") or ""))
        if not quote:
            continue
        quotes += 1
        squashed = _squash(quote)
        turn = item.get("turn")
        home = [c for c in callers if c[0] == turn and squashed in c[2]] or [c for c in callers if squashed in c[2]]
        if not home:
            dropped += 1
            continue
        polarity = Polarity(str(item.get("polarity")))
        when = tuple(w for w in item["when"] if w.strip())
        spans: list[DateConstraint] = []
        for expression in when:
            spans.extend(extract_constraints(expression, reference))
        about = "callback" if item.get("about") == "callback" else "other"
        found.append(ReadStatement(home[-1][0], quote, about, polarity, when, tuple(spans)))
    return DateReading(ReadingStatus.OK, tuple(found), quotes, dropped, seconds, reply=reply)


class DateReader(Protocol):
    """Reads a call's dates with a model at a date-bearing action (what a session is given)."""

    name: str

    async def read(self, entries: Sequence[TranscriptEntry], reference: date) -> DateReading:
        """The reading of ``entries``, checked by code; never raises for a model fault."""
        ...


@dataclass
class ModelDateReader:
    """Reads a call's dates with a model at an action; implements :class:`DateReader`.

    Args:
        complete: The completion (see :data:`JsonCompleter`): the configured LLM through pipecat, or the
            local model.
        timeout_secs: Longest the reading may take; past it the reading is ``timeout``.
        name: Shown in reports and logs.
    """

    complete: JsonCompleter
    timeout_secs: float = 8.0
    name: str = "model"

    def __post_init__(self) -> None:
        if self.timeout_secs <= 0:
            raise ValueError(f"timeout_secs must be positive, got {self.timeout_secs}")

    async def read(self, entries: Sequence[TranscriptEntry], reference: date) -> DateReading:
        """Reads ``entries`` (the transcript up to the action); never raises for a model fault."""
        user = f"Today is {reference.isoformat()} ({reference.strftime('%A')}).\n\n{render_call(entries)}"
        started = time.monotonic()
        try:
            reply = await asyncio.wait_for(self.complete(INSTRUCTIONS, user, READING_SCHEMA), self.timeout_secs)
        except TimeoutError:
            reading = DateReading(ReadingStatus.TIMEOUT, seconds=time.monotonic() - started,
                                  error=f"no reply within {self.timeout_secs:g} s")
        except Exception as exc:  # an LLM vendor error must not end the call: the rules and the confirm rule stand
            reading = DateReading(ReadingStatus.FAILED, seconds=time.monotonic() - started,
                                  error=f"{type(exc).__name__}: {exc}")
        else:
            try:
                reading = verify(reply or "", entries, reference, time.monotonic() - started)
            except Exception as exc:  # whatever the model sent, the call goes on: a reading that fails
                reading = DateReading(ReadingStatus.FAILED, seconds=time.monotonic() - started,
                                      error=f"reply not checked ({type(exc).__name__}: {exc})", reply=str(reply)[:2000])
        return reading
