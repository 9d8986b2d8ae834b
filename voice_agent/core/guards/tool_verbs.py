"""A tool's own action is not a word against the day: "please cancel it on the 31st" asks a cancellation tool
for the 31st.

The contract reads doubt from broad word classes, and some of its retraction words ("cancel", "skip",
"drop", "scrap") are the verbs of real date tools (``cancel_subscription``, ``skip_delivery``). For such a
tool those verbs are masked in the words the contract reads (caller and agent alike, so a read-back still
matches what it reads back), and every quote it returns is unmasked against the words as said: citations and
the read-back stay verbatim. For any other tool ("cancel the callback on the 9th") they keep their meaning.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from functools import lru_cache

from voice_agent.core.dates import signals
from voice_agent.core.dates.model import ConstraintKind
from voice_agent.core.guards.date_guard import Citation, SaidDates

MASK = signals.ACTION
"""What the contract reads in place of the tool's verb: a word only the request cues know."""

FROM_MASK = "zzfrom"
"""What the contract reads in place of "from" in an utterance that says the tool's action."""

_FROM = re.compile(r"\b(?:with\seffect\sfrom|effective(?:\sfrom)?|as\s(?:of|from)|starting(?:\sfrom)?|from)\b",
                   re.I)

_SAYING_SO = r"(?:(?:i|we)(?:'m|'re|'ll|\s(?:am|are|will))(?:\s(?:be|just|going\sto|gonna))?\s)?"
"""What may come before the caller's verb of the action: "we're moving out", "I'll be dropping it off"."""


def _words(tool_name: str) -> list[str]:
    return [w.lower() for w in re.split(r"[_\-\s]+|(?<=[a-z])(?=[A-Z])", tool_name) if w]


def action_verbs(tool_name: str) -> tuple[str, ...]:
    """The words of ``tool_name`` that the contract's readers take for a retraction or a negation."""
    return tuple(dict.fromkeys(w for w in _words(tool_name) if signals.NEGATION.fullmatch(w)))


def inflections(verb: str) -> tuple[str, ...]:
    """``verb`` as callers say it: "move" -> move, moves, moved, moving; "drop" -> dropping, dropped."""
    stem = verb[:-1] if verb.endswith("e") else verb
    forms = {verb, verb + "s", stem + "ed", stem + "ing"}
    if re.fullmatch(r"[a-z]*[^aeiou][aeiou][bdgmnprt]", verb):  # drop, stop, skip, scrap: the consonant doubles
        forms |= {verb + verb[-1] + "ed", verb + verb[-1] + "ing"}
    return tuple(sorted(forms, key=len, reverse=True))


def own_action(tool_name: str) -> str | None:
    """The pattern of a caller saying the tool's own action (its first word, inflected, with "we're", "I'll
    be"...), for a tool that books nothing the readers know; None for a one-word name or a non-verb."""
    words = _words(tool_name)
    if len(words) < 2 or len(words[0]) < 3:
        return None
    return _SAYING_SO + r"(?:" + "|".join(map(re.escape, inflections(words[0]))) + r")"


def action_phrase(tool_name: str) -> str:
    """What a read-back says the tool does: "cancel the subscription" for ``cancel_subscription``."""
    words = _words(tool_name)
    if not words:
        return "go ahead"
    return f"{words[0]} the {' '.join(words[1:])}" if len(words) > 1 else f"{words[0]} it"


@lru_cache(maxsize=256)
def _mask_pattern(verbs: tuple[str, ...], action: str | None) -> re.Pattern[str] | None:
    """What a :class:`VerbMask` masks, compiled once per tool (the contract decides at every date-bearing action)."""
    parts = [*map(re.escape, verbs), *([action] if action else [])]
    return re.compile(r"\b(?:" + "|".join(parts) + r")\b", re.I) if parts else None


class VerbMask:
    """Masks a tool's own verbs in what the contract reads, and restores them in what it quotes.

    Args:
        verbs: The tool's retraction-like verbs (:func:`action_verbs`), masked wherever they are said.
        action: The pattern of the caller saying the tool's own action (:func:`own_action`), masked too.
            Neither: every method returns its input.
    """

    def __init__(self, verbs: Sequence[str], action: str | None = None) -> None:
        self._verbs = tuple(verbs) or ("it",)
        self._pattern = _mask_pattern(tuple(verbs), action)
        self._said: dict[int, list[str]] = {}

    def text(self, words: str) -> str:
        """``words`` as the contract reads them."""
        if self._pattern is None:
            return words
        masked = self._pattern.sub(MASK, words)
        # The action from a day is the action on that day: "from" after it is no limit ("stop the milk from the
        # 14th"), so the contract reads a neutral word there too.
        return _FROM.sub(FROM_MASK, masked) if masked != words else masked

    def said(self, said: Sequence[SaidDates]) -> list[SaidDates]:
        """The utterances as the contract reads them (the words as said are kept for :meth:`citation`)."""
        if self._pattern is None:
            return list(said)
        out = []
        for s in said:
            masked = self.text(s.text)
            if masked != s.text:
                self._said.setdefault(s.turn, []).append(s.text)
                # The action from a day is the action on that day: "stop the papers from the 19th", "cancel it
                # with effect from the 31st", "shall I stop it from Monday?" name the 19th, the 31st, Monday.
                on = tuple(dataclasses.replace(c, kind=ConstraintKind.ON, end=c.start)
                           if c.kind is ConstraintKind.AFTER and c.start is not None and c.end is None
                           and not c.blocked else c for c in s.constraints)
                s = dataclasses.replace(s, text=masked, constraints=on)
            out.append(s)
        return out

    def citation(self, c: Citation) -> Citation:
        """``c`` with the words as the caller said them."""
        if self._pattern is None or (MASK not in c.words and FROM_MASK not in c.words):
            return c
        shape = re.compile(re.escape(c.words).replace(MASK, self._pattern.pattern)
                           .replace(FROM_MASK, _FROM.pattern), re.I)
        for text in self._said.get(c.turn, ()):
            found = shape.search(text)
            if found:
                return dataclasses.replace(c, words=found.group(0))
        return dataclasses.replace(c, words=c.words.replace(MASK, self._verbs[0]).replace(FROM_MASK, "from"))
