"""Candidate identifier tokens in a caller's words: how the ID guard reads what the caller stated.

Adjacent identifier pieces are joined ("ACC 4729 18", "a c c four seven two nine one eight") without
crossing ordinary words or punctuation: "flat 47, 2918 Main Street" gives ``FLAT47``, ``47`` and
``2918``, never ``472918``. See :func:`caller_candidates` for the rules.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

_WORD = re.compile(r"[0-9A-Za-z]+(?:['’][A-Za-z]+)?")
_JOINT_GAPS = frozenset({"-", "/", ".", "_"})
"""A gap of exactly one of these binds two words into one written unit ("ORD-7K4M2P", "4729.18")."""
_SOFT_MARKS = frozenset({"-", "/", "_", "#"})
"""One of these between spaces still leaves the words adjacent ("ACC - 4729", "order # 4729")."""
_DIGITS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9",
}
_TEENS = {
    "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13", "fourteen": "14", "fifteen": "15",
    "sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19",
}
_TENS = {
    "twenty": "2", "thirty": "3", "forty": "4", "fifty": "5", "sixty": "6", "seventy": "7", "eighty": "8",
    "ninety": "9",
}
_REPEATS = {"double": 2, "triple": 3}
_FILLERS = frozenset({"dash", "hyphen", "slash", "dot"})
# Homophones ("to", "for", "won") and letter names ("see", "bee") are left to the shape-aware spoken-ID
# normaliser upstream: without a shape to fit they turn ordinary speech into digits.
_STOP = frozenset({
    "an", "the", "is", "it", "its", "am", "are", "was", "be", "been", "my", "me", "we", "us", "our", "you", "your",
    "he", "she", "him", "her", "his", "they", "them", "their", "and", "or", "but", "nor", "so", "yet", "if", "of",
    "on", "in", "at", "to", "by", "for", "from", "with", "as", "up", "out", "off", "not", "no", "yes", "yeah", "yep",
    "nope", "ok", "okay", "oh", "uh", "um", "er", "erm", "hmm", "ah", "hi", "hey", "bye", "do", "does", "did", "done",
    "has", "have", "had", "can", "will", "just", "that", "this", "then", "than", "what", "when", "who", "how", "why",
    "here", "there", "got", "get", "see", "say", "said", "also", "too", "very", "well", "like", "sure",
})
"""Short words that are never part of an identifier (longer words never are anyway)."""


class _Kind(Enum):
    CORE = "core"  # has a digit: "4729", "7K4M2P", "ORD-7K4M2P"
    NUM = "num"  # a spoken number: "four" -> 4, "eighteen" -> 18
    TENS = "tens"  # "seventy", joined with a following digit word
    OH = "oh"  # "oh": 0 between numbers only
    REPEAT = "repeat"  # "double", "triple"
    FILLER = "filler"  # "dash": a spoken separator inside an identifier
    LETTER = "letter"  # one letter: "K", "c"
    WORDLIKE = "wordlike"  # "a", "I": a letter or a word
    CAPS = "caps"  # an all-caps group of up to 6 letters: "ACC", "ORD"
    LABEL = "label"  # a short lowercase word that may prefix an identifier: "inv", "acc", "flat"
    BREAK = "break"


_ALPHA_LEAD = frozenset({_Kind.LETTER, _Kind.WORDLIKE, _Kind.CAPS, _Kind.LABEL})
_MULTI_LETTER = frozenset({_Kind.CAPS, _Kind.LABEL})
_NUMBERISH = frozenset({_Kind.CORE, _Kind.NUM})
_SUBSTANTIVE = frozenset({_Kind.CORE, _Kind.NUM, _Kind.LETTER, _Kind.CAPS})
"""A run needs one of these to be an identifier; labels and word-like letters alone are words."""


@dataclass
class _Unit:
    """One word (or written compound) of an utterance, classified, with its span."""

    kind: _Kind
    canon: str
    start: int
    end: int
    written: bool = False  # several words bound by separators: a complete written form
    hard_after: bool = False


class Candidate(NamedTuple):
    """One candidate identifier token of a caller utterance.

    Attributes:
        canonical: Letters and digits, upper case, spoken digits as digits.
        text: The span of the utterance it was read from.
    """

    canonical: str
    text: str


def _word_unit(word: str, start: int, end: int) -> _Unit:
    if "'" in word or "’" in word:
        base = re.split(r"['’]", word, maxsplit=1)[0]
        if any(c.isdigit() for c in base):  # "7K4M2P's": the id, then a hard stop
            return _Unit(_Kind.CORE, base.upper(), start, start + len(base), hard_after=True)
        return _Unit(_Kind.BREAK, "", start, end)  # "it's", "I'm"
    if any(c.isdigit() for c in word):
        return _Unit(_Kind.CORE, word.upper(), start, end)
    low = word.lower()
    for table, kind in ((_DIGITS, _Kind.NUM), (_TEENS, _Kind.NUM), (_TENS, _Kind.TENS)):
        if low in table:
            return _Unit(kind, table[low], start, end)
    if low == "oh":
        return _Unit(_Kind.OH, "0", start, end)
    if low in _REPEATS:
        return _Unit(_Kind.REPEAT, str(_REPEATS[low]), start, end)
    if low in _FILLERS:
        return _Unit(_Kind.FILLER, "", start, end)
    if len(word) == 1:
        return _Unit(_Kind.WORDLIKE if low in "ai" else _Kind.LETTER, word.upper(), start, end)
    if word.isupper():
        # Capitals are how a recogniser writes spelled letters ("ACC", "ON"), so only "OK" is a word here.
        if len(word) <= 6 and low not in ("ok", "okay"):
            return _Unit(_Kind.CAPS, word, start, end)
        return _Unit(_Kind.BREAK, "", start, end)
    if low in _STOP:
        return _Unit(_Kind.BREAK, "", start, end)
    if len(word) <= 4:
        return _Unit(_Kind.LABEL, word.upper(), start, end)
    return _Unit(_Kind.BREAK, "", start, end)


def _compound_unit(parts: list[tuple[str, int, int]]) -> _Unit:
    """Words bound by single separators ("ORD-7K4M2P", "A-B-C", "e-mail")."""
    start, end = parts[0][1], parts[-1][2]
    words = [p[0] for p in parts]
    last = words[-1]
    hard_after = False
    if "'" in last or "’" in last:
        words[-1] = re.split(r"['’]", last, maxsplit=1)[0]
        hard_after = True
    if any(c.isdigit() for w in words for c in w):
        return _Unit(_Kind.CORE, "".join(words).upper(), start, end, written=True, hard_after=hard_after)
    if all(w.isalpha() and w.isupper() for w in words):
        return _Unit(_Kind.CAPS, "".join(words), start, end, written=True, hard_after=hard_after)
    return _Unit(_Kind.BREAK, "", start, end)


def _gap_is_hard(gap: str) -> bool:
    """Whether the text between two words ends a run: anything but spaces and one soft mark."""
    stripped = gap.strip(" \t")
    return bool(stripped) and stripped not in _SOFT_MARKS


def _segments(text: str) -> Iterator[list[_Unit]]:
    """Runs of units with no hard gap (punctuation, line break) and no ordinary word between them."""
    words = [(m.group(0), m.start(), m.end()) for m in _WORD.finditer(text)]
    units: list[_Unit] = []
    index = 0
    while index < len(words):
        parts = [words[index]]
        while index + 1 < len(words) and text[words[index][2] : words[index + 1][1]] in _JOINT_GAPS:
            index += 1
            parts.append(words[index])
        index += 1
        units.append(_word_unit(*parts[0]) if len(parts) == 1 else _compound_unit(parts))
    segment: list[_Unit] = []
    for unit in units:
        if segment and (segment[-1].hard_after or _gap_is_hard(text[segment[-1].end : unit.start])):
            yield segment
            segment = []
        if unit.kind is _Kind.BREAK:
            if segment:
                yield segment
            segment = []
            continue
        segment.append(unit)
    if segment:
        yield segment


def _resolve_spoken(segment: list[_Unit]) -> list[_Unit | None]:
    """Spoken numbers, "oh", "double" and "dash" resolved in context; None marks a split."""
    out: list[_Unit | None] = []
    i = 0
    while i < len(segment):
        unit = segment[i]
        prev = segment[i - 1] if i > 0 else None
        nxt = segment[i + 1] if i + 1 < len(segment) else None
        if unit.kind is _Kind.TENS:
            if nxt is not None and nxt.kind is _Kind.NUM and len(nxt.canon) == 1 and nxt.canon != "0":
                out.append(_Unit(_Kind.NUM, unit.canon + nxt.canon, unit.start, nxt.end))  # "seventy nine": 79
                i += 2
                continue
            out.append(_Unit(_Kind.NUM, unit.canon + "0", unit.start, unit.end))
        elif unit.kind is _Kind.OH:
            numeric = {_Kind.NUM, _Kind.CORE, _Kind.TENS}
            between = prev is not None and nxt is not None and prev.kind in numeric and nxt.kind in numeric
            out.append(_Unit(_Kind.NUM, "0", unit.start, unit.end) if between else None)
        elif unit.kind is _Kind.REPEAT:
            single = {_Kind.NUM, _Kind.LETTER, _Kind.WORDLIKE}
            if nxt is not None and nxt.kind in single and len(nxt.canon) == 1:
                kind = _Kind.NUM if nxt.kind is _Kind.NUM else _Kind.LETTER
                out.append(_Unit(kind, nxt.canon * int(unit.canon), unit.start, nxt.end))
                i += 2
                continue
            out.append(None)
        elif unit.kind is _Kind.FILLER:
            if prev is None or nxt is None:
                out.append(None)  # "dash" at either edge is a word, not a separator
        else:
            out.append(unit)
        i += 1
    return out


def _runs(pieces: list[_Unit | None]) -> Iterator[list[_Unit]]:
    """Splits a segment where two identifiers meet.

    A multi-letter group after digits starts the next identifier ("ACC 4729 18 INV 2026 1018"); a
    written form ("ORD-7K4M2P") is complete, so it does not absorb neighbouring numbers; a spoken number
    does not join a written number ("ORD 7K4M2P one more thing").
    """
    run: list[_Unit] = []
    for piece in pieces:
        if piece is None:
            if run:
                yield run
            run = []
            continue
        if run:
            last = run[-1]
            body = any(u.kind in _NUMBERISH for u in run)
            split = (
                (last.written and last.kind is _Kind.CORE)
                or (piece.kind in _MULTI_LETTER and body)
                or (piece.kind in _NUMBERISH and last.kind in _NUMBERISH and (piece.written or last.written))
                or (piece.kind is _Kind.NUM and last.kind is _Kind.CORE and len(last.canon) > 1)
                or (piece.kind is _Kind.CORE and len(piece.canon) > 1 and last.kind is _Kind.NUM)
            )
            if split:
                yield run
                run = []
        run.append(piece)
    if run:
        yield run


def _trim(run: list[_Unit]) -> list[_Unit]:
    """Drops a word-like letter ("I", "a") where it is a word.

    Alone it is a word; first in a run it spells ("a c c"); last it spells only after another single
    character ("7 K 4 M 2 A", not "55 21 90 I think").
    """
    if run and run[0].kind is _Kind.WORDLIKE and len(run) == 1:
        return []
    if len(run) > 1 and run[-1].kind is _Kind.WORDLIKE and len(run[-2].canon) != 1:
        run = run[:-1]  # "55 21 90 I think"; kept in "7 K 4 M 2 A"
    return run


def caller_candidates(text: str) -> list[Candidate]:
    """Candidate identifier tokens in one caller utterance.

    Rules: words are letter/digit runs; one ``-``, ``/``, ``.`` or ``_`` with no space binds words into a
    written unit; punctuation (comma, colon, full stop before a space, brackets, line break) and any
    ordinary word end a run; spoken digits ("four", "eighteen", "seventy nine", "double four", "oh" between
    numbers) become digits and "dash" between pieces is dropped. Pieces are units with a digit, single
    letters, all-caps groups of up to six letters and short words that can prefix an identifier ("inv",
    "flat"; those only before the digits). Each run gives its joined canonical form; when it starts with
    letters, the forms without the leading letter groups as well ("PIN 1234" gives ``PIN1234`` and
    ``1234``), never a form with the end cut off.

    Args:
        text: The utterance (after the spoken-identifier normaliser, when one runs).

    Returns:
        Candidates in order of appearance, possibly with repeats.
    """
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"[‐‑‒–—−]", "-", text)
    out: list[Candidate] = []
    for segment in _segments(text):
        for raw_run in _runs(_resolve_spoken(segment)):
            run = _trim(raw_run)
            if not any(u.kind in _SUBSTANTIVE for u in run):
                continue  # short ordinary words alone ("flat", "Main", "I want") are not identifiers
            starts = [0]
            body = next((i for i, u in enumerate(run) if u.kind not in _ALPHA_LEAD), None)
            if body is not None and body > 0:
                starts += [
                    i for i in range(1, body) if run[i].kind in _MULTI_LETTER or run[i - 1].kind in _MULTI_LETTER
                ]
                starts.append(body)
            end = run[-1].end
            for first in starts:
                out.append(Candidate("".join(u.canon for u in run[first:]), text[run[first].start : end]))
    return out
