"""The quote guard: a tool argument that claims to be the caller's words must be the caller's words.

``update_case`` records what the caller wants, tried or ruled out "in their words"; those words
then stand in KNOWN FACTS as the caller's. So before such a tool runs, every ``caller_quote``
argument is looked up in the transcript lane: it must be a span of one caller utterance (case,
spacing, curly quotes and the punctuation at its ends aside). A model that paraphrases ("refund to
the card") is refused with a reason it can act on, and nothing it made up is ever rendered as the
caller's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from voice_agent.core.tool_spec import ParamKind, ToolSpec
from voice_agent.core.transcript import TranscriptLane

MIN_QUOTE_WORDS = 2
"""A one-word "quote" ("yes") says nothing about what the caller meant."""
_EDGE = re.compile(r"^[\s\"'“”‘’.,;:!?()\-]+|[\s\"'“”‘’.,;:!?()\-]+$")
_CURLY = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})


def normalise(text: str) -> str:
    """Lower case, straight quotes, single spaces, no punctuation at the ends."""
    flat = " ".join(text.translate(_CURLY).lower().split())
    return _EDGE.sub("", flat)


@dataclass(frozen=True)
class QuoteCheck:
    """The verdict on one ``caller_quote`` argument.

    Attributes:
        argument: The parameter.
        turn: The turn of the caller utterance it quotes (None when it quotes none).
        reason: For a refusal, what the model should do instead.
    """

    argument: str
    turn: int | None
    reason: str = ""

    @property
    def accepted(self) -> bool:
        """The argument quotes the caller."""
        return self.turn is not None


_NEGATION = re.compile(r"\b(?:not|no|never|don't|do not|doesn't|won't|can't|cannot|without|rather than|instead of)\s*$"
                       r"|n't\s*(?:\w+\s+){0,2}$")
"""A span the caller negated just before it ("I don't want *a refund to the card*") says the opposite."""


def find_quote(quote: str, transcript: TranscriptLane) -> int | None:
    """The latest turn whose caller utterance contains ``quote`` on word boundaries, not negated, or None.

    A span cut out right after a negation of the same clause is refused: quoting "a refund to the
    card" from "I really don't want a refund to the card" turns the caller's words around.
    """
    wanted = normalise(quote)
    if len(wanted.split()) < MIN_QUOTE_WORDS:
        return None
    pattern = re.compile(rf"(?<!\w){re.escape(wanted)}(?!\w)")
    for entry in reversed(transcript.caller_utterances()):
        said = normalise(entry.text)
        for match in pattern.finditer(said):
            clause = re.split(r"[.,;:!?]", said[: match.start()])[-1]
            if not _NEGATION.search(clause.rstrip() + " " if clause.strip() else ""):
                return entry.turn
    return None


class QuoteGuard:
    """Checks the ``caller_quote`` arguments of a tool call against the transcript lane."""

    def check(self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane) -> list[QuoteCheck]:
        """One check per ``caller_quote`` argument present in ``arguments``."""
        checks = []
        for param in tool.params_of(ParamKind.CALLER_QUOTE):
            value = arguments.get(param.name)
            if not isinstance(value, str) or not value.strip():
                continue
            turn = find_quote(value, transcript)
            reason = "" if turn is not None else (
                f"Rejected: {param.name} must be the caller's own words, copied exactly from something they said "
                f"(at least {MIN_QUOTE_WORDS} words); this text is not in what the caller said. Quote their words, "
                "or leave the field out."
            )
            checks.append(QuoteCheck(param.name, turn, reason))
        return checks
