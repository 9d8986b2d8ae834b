"""Replaces identifier values in summary text by their ledger roles (DESIGN rule 9).

A model told not to write identifiers writes them anyway, and a summary that carries
an identifier can carry it damaged. After every pass each ledger value, in any
spacing, separator or case ("ACC-4729-18", "acc 4729 18", "ACC472918"), becomes
``[the <role>]``; so does a near miss of one (one character off, or cut short
with "..."), because a damaged copy beside the true value in KNOWN FACTS is worse
than none. The summary points at the ledger; the ledger holds the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from voice_agent.core.near_miss import bounded_edit_distance, canonical
from voice_agent.core.summary import EpisodeSummary

_SEPARATORS = r"[\s\-_./]*"
_MIN_CHARS = 4
"""Shorter values are too easily ordinary words or numbers."""
_TOKEN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9](?:[A-Za-z0-9]|[\-_./](?=[A-Za-z0-9]))*(?:\.\.\.)?")


@lru_cache(maxsize=4096)
def _pattern(value: str) -> re.Pattern[str] | None:
    chars = [c for c in value if c.isalnum()]
    if len(chars) < _MIN_CHARS:
        return None
    body = _SEPARATORS.join(re.escape(c) for c in chars)
    return re.compile(rf"(?<![A-Za-z0-9]){body}(?![A-Za-z0-9])", re.IGNORECASE)


def _near_miss(token: str, value: str) -> bool:
    """``token`` is a damaged copy of ``value``: one character off, or its start cut with "..."."""
    cut = token.endswith("...")
    tok, val = canonical(token), canonical(value)
    if len(tok) < _MIN_CHARS or not any(c.isdigit() for c in tok) or tok == val:
        return False
    if cut:
        return val.startswith(tok)
    if bounded_edit_distance(tok, val, 1) is None:
        return False
    # The shared distance takes an adjacent swap for one edit, but a swap changes two characters.
    return len(tok) != len(val) or sum(a != b for a, b in zip(tok, val, strict=True)) == 1


def _label(role: str) -> str:
    return role.split("#", 1)[0]


def scrub_text(text: str, identifiers: Mapping[str, str], counts: dict[str, int] | None = None) -> str:
    """``text`` with every identifier value (value -> role), and every near miss of one, as ``[the role]``.

    Args:
        identifiers: Value -> role; a role may carry ``#n`` ("order#2") to tell apart entries that share
            it: the text says the role, the counts keep the ``#n``.
        counts: When given, substitutions are counted into it per role (with its ``#n``).
    """
    if not identifiers:
        return text

    def count(role: str, n: int = 1) -> None:
        if counts is not None and n:
            counts[role] = counts.get(role, 0) + n

    # Longest first: "ORD-7K4M2P" must not be half-replaced by a shorter value it contains.
    for value in sorted(identifiers, key=len, reverse=True):
        pattern = _pattern(value)
        if pattern is not None:
            text, n = pattern.subn(f"[the {_label(identifiers[value])}]", text)
            count(identifiers[value], n)

    def near(match: re.Match[str]) -> str:
        token = match.group(0)
        for value, role in identifiers.items():
            if _near_miss(token, value):
                count(role)
                return f"[the {_label(role)}]"
        return token

    return _TOKEN.sub(near, text)


def scrub_summary(
    summary: EpisodeSummary, identifiers: Mapping[str, str], counts: dict[str, int] | None = None
) -> EpisodeSummary:
    """Every section of ``summary`` scrubbed with :func:`scrub_text` (substitutions counted into ``counts``)."""
    if not identifiers:
        return summary
    return summary.map_text(lambda text: scrub_text(text, identifiers, counts))
