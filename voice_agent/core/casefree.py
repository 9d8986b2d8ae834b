"""Case-blind matching of lower-case patterns, fast on ASCII text.

Python's case-blind matching (``re.IGNORECASE``) compares every character under Unicode case rules and
costs three to four times a plain match. For ASCII text, lowering the text and matching the pattern
case-sensitively is the same test with the same spans, so the utterances a turn reads pay the plain cost.
Text with other characters keeps the case-blind match, whose rules ``str.lower`` does not follow (``İ``
lowers to two characters).
"""

from __future__ import annotations

import re


class CaseFree:
    """A lower-case pattern matched in any case.

    Args:
        pattern: The pattern, written in lower case.
        flags: Further ``re`` flags (``re.IGNORECASE`` is implied).

    Raises:
        ValueError: When the pattern has an upper-case letter (it would never match lowered text).
    """

    def __init__(self, pattern: str, flags: int = 0) -> None:
        if pattern != pattern.lower():
            raise ValueError(f"a case-free pattern is written in lower case: {pattern!r}")
        self.pattern = pattern
        self._blind = re.compile(pattern, flags | re.IGNORECASE)
        self._plain = re.compile(pattern, flags)

    def found(self, text: str) -> bool:
        """Whether the pattern occurs anywhere in ``text``."""
        if text.isascii():
            return self._plain.search(text.lower()) is not None
        return self._blind.search(text) is not None

    def spans(self, text: str, group: int = 0) -> list[tuple[int, int]]:
        """The spans of ``group`` in every non-overlapping match, in order (as ``finditer`` finds them)."""
        if text.isascii():
            return [m.span(group) for m in self._plain.finditer(text.lower())]
        return [m.span(group) for m in self._blind.finditer(text)]
