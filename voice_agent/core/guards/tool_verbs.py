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

from voice_agent.core.dates import signals
from voice_agent.core.guards.date_guard import Citation, SaidDates

MASK = "zzdo"
"""What the contract reads in place of the tool's verb: a word no reader knows."""


def action_verbs(tool_name: str) -> tuple[str, ...]:
    """The words of ``tool_name`` that the contract's readers take for a retraction or a negation."""
    words = re.split(r"[_\-\s]+|(?<=[a-z])(?=[A-Z])", tool_name)
    return tuple(dict.fromkeys(w.lower() for w in words if w and signals.NEGATION.fullmatch(w.lower())))


def action_phrase(tool_name: str) -> str:
    """What a read-back says the tool does: "cancel the subscription" for ``cancel_subscription``."""
    words = [w.lower() for w in re.split(r"[_\-\s]+|(?<=[a-z])(?=[A-Z])", tool_name) if w]
    if not words:
        return "go ahead"
    return f"{words[0]} the {' '.join(words[1:])}" if len(words) > 1 else f"{words[0]} it"


class VerbMask:
    """Masks a tool's own verbs in what the contract reads, and restores them in what it quotes.

    Args:
        verbs: The tool's verbs (:func:`action_verbs`); none: every method returns its input.
    """

    def __init__(self, verbs: Sequence[str]) -> None:
        self._verbs = tuple(verbs)
        self._pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, verbs)) + r")\b", re.I) if verbs else None
        self._said: dict[int, list[str]] = {}

    def text(self, words: str) -> str:
        """``words`` as the contract reads them."""
        return words if self._pattern is None else self._pattern.sub(MASK, words)

    def said(self, said: Sequence[SaidDates]) -> list[SaidDates]:
        """The utterances as the contract reads them (the words as said are kept for :meth:`citation`)."""
        if self._pattern is None:
            return list(said)
        out = []
        for s in said:
            masked = self.text(s.text)
            if masked != s.text:
                self._said.setdefault(s.turn, []).append(s.text)
                s = dataclasses.replace(s, text=masked)
            out.append(s)
        return out

    def citation(self, c: Citation) -> Citation:
        """``c`` with the words as the caller said them."""
        if self._pattern is None or MASK not in c.words:
            return c
        shape = re.compile(re.escape(c.words).replace(MASK, self._pattern.pattern), re.I)
        for text in self._said.get(c.turn, ()):
            found = shape.search(text)
            if found:
                return dataclasses.replace(c, words=found.group(0))
        return dataclasses.replace(c, words=c.words.replace(MASK, self._verbs[0]))
