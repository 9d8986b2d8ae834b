"""Sorts transcript entries into the five episode-summary sections, without a model.

A deterministic reading of who said what: the caller ruling something out is
*rejected* (with the words that give the reason), a tool that completed or an agent
saying it has done something is *decided*, the agent promising something is a
*commitment* (verbatim, with its turn), a caller request not yet acted on is
*pending*, and every other caller statement with content is *established*. It knows
nothing of any scenario: the cues are ordinary English function words.

A caller's turn is one line, whole: a fact said over two sentences ("Account credit,
please. Not the card.") is not cut in two, and a short answer that carries a content
word ("Account credit.") is kept; the line goes to the section of its strongest
sentence (a ruling, then a request, then a statement).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from voice_agent.core.casefree import CaseFree
from voice_agent.core.summary import Commitment, RejectedItem
from voice_agent.core.summary_budget import content_words
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry

_NEGATION = CaseFree(
    r"\b(?:not|never|no|don'?t|doesn'?t|won'?t|can'?t|cannot|rather not|instead of|anything but|except)\b"
)
_REASON = re.compile(r"(?:,|;|\s-\s|\u2014)?\s*\b(?:because|since|that's|that is|it's|it is)\b\s*(.+)$", re.I)
_REQUEST = CaseFree(
    r"\b(?:i(?:'d| would) like|i want|i need|please|could you|can you|would you|i'd prefer|i would prefer)\b"
)
_DONE = CaseFree(r"\b(?:i've|i have|we've|we have|has been|have been|is now|are now|done)\b")
_PROMISE = CaseFree(r"\b(?:i'll|i will|we'll|we will|you'll|you will|someone will|expect)\b")
_SMALL_TALK_WORDS = 4
"""Caller lines this short ("Okay.", "Thanks, bye") carry no fact worth a summary line, unless they hold a number
or a content word ("Account credit.")."""

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (a caller turn often says two things)."""
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def _rejected(sentence: str) -> RejectedItem | None:
    """A sentence ruling something out, split into what and why; None when it rules nothing out."""
    if not _NEGATION.found(sentence):
        return None
    reason = _REASON.search(sentence)
    if reason is not None and reason.start() > 0:
        item = sentence[: reason.start()].strip(" ,;.")
        why = reason.group(1).strip(" .")
        if item and why:
            return RejectedItem(item=item, reason=why)
    return RejectedItem(item=sentence.strip(" ."), reason="the caller ruled it out")


def _caller_line(turn: int, text: str) -> tuple[str, str | RejectedItem] | None:
    """One caller turn as (section, line), whole and verbatim; None for a line with no fact in it.

    A ruling keeps the caller's words whole as its item; its reason is the clause that gives it, which the
    item then already holds (the summary renders it once).
    """
    whole = " ".join(text.split())
    said = sentences(whole)
    if not said:
        return None
    for sentence in said:
        rejected = _rejected(sentence)
        if rejected is not None:
            return "rejected", RejectedItem(item=whole.strip(" ."), reason=rejected.reason)
    if any(_REQUEST.found(sentence) for sentence in said):
        return "pending", f"turn {turn}: caller asked: {whole}"
    if len(whole.split()) > _SMALL_TALK_WORDS or any(c.isdigit() for c in whole) or content_words(whole):
        return "established", f"turn {turn}: caller said: {whole}"
    return None


@dataclass
class Sections:
    """The five sections as plain lists, oldest first."""

    established: list[str] = field(default_factory=list)
    rejected: list[RejectedItem] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    commitments: list[Commitment] = field(default_factory=list)


def classify(entries: Sequence[TranscriptEntry]) -> Sections:
    """Sorts ``entries`` (turns that left the window) into the five sections.

    Args:
        entries: Transcript entries in order.

    Returns:
        The sections; every line names its turn, so a later reader can go back to the transcript.
    """
    out = Sections()
    for entry in entries:
        if entry.kind is EntryKind.CALLER:
            found = _caller_line(entry.turn, entry.text)
            if found is None:
                continue
            section, line = found
            if isinstance(line, RejectedItem):
                out.rejected.append(line)
            else:
                (out.pending if section == "pending" else out.established).append(line)
        elif entry.kind is EntryKind.AGENT and entry.text:
            for sentence in sentences(entry.text):
                if _PROMISE.found(sentence):
                    out.commitments.append(Commitment(text=sentence, turn=entry.turn))
                elif _DONE.found(sentence):
                    out.decided.append(f"turn {entry.turn}: agent: {sentence}")
        elif entry.kind is EntryKind.TOOL_RESULT and entry.outcome is ToolOutcome.COMPLETED and entry.tool_name:
            out.decided.append(f"turn {entry.turn}: {entry.tool_name} completed")
    return out
