"""The ID guard: every identifier argument must come from the ledger or the raw recent turns.

Provenance is whole-token equality. What the caller said and what tools returned in the raw recent
turns are cut into canonical identifier *tokens* (:class:`IdTokenIndex`): a caller's words become
candidate tokens by joining adjacent identifier pieces ("ACC 4729 18", "a c c four seven two nine one
eight") without crossing ordinary words or punctuation ("flat 47, 2918 Main Street" gives ``FLAT47``,
``47`` and ``2918``, never ``472918``); every string or number leaf of a completed tool result is one
token. A value is stated by the caller or returned by a tool only when its canonical form equals one
such token, never when it merely occurs inside some text.

Order of checks for one argument (see :meth:`IdGuard.check`):

1. Canonically equal to a ledger value (verbatim, respaced or re-cased): ``ok``; a state-changing tool
   needs a verified entry, ``unverified`` otherwise.
2. A truncation (a prefix of at least :data:`MIN_PREFIX` characters) of a ledger value, then of a recent
   token: ``mutated``, even when the short form was itself said, because a cut-off repetition
   ("ORD 7K4M... ORD 7K4M2P") leaves the prefix as a token of its own.
3. Not a recent token (a caller token counts from :data:`MIN_CALLER_LENGTH` characters): an edit (up to
   :func:`edit_limit` substitutions, insertions, deletions or adjacent swaps) or a separator slip of a
   ledger value, then of a recent token: ``mutated``; anything else ``unknown``.
4. A recent token: ``ok`` for a read-only tool. A state-changing tool gets ``unverified`` for a value only
   the caller said; a value a completed tool result returned passes (unless the guard is built with
   ``ledger_only_for_mutations``).

Edits yield to whole-token provenance (step 3 runs only for values nobody said or returned) because
identifiers of one scheme are often one character apart (ORD-7K4M2P and ORD-7K4M2R, consecutive
invoice numbers): a value the caller said exactly was not corrupted by the model, and refusing it
because its sibling is in the ledger would leave the call no way forward. State-changing tools stay
protected: the caller's word alone never reaches them.
"""

from __future__ import annotations

import re
import unicodedata
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from functools import lru_cache
from typing import Any, Generic, NamedTuple, TypeVar

from voice_agent.core.ledger import Ledger, LedgerEntry
from voice_agent.core.tool_spec import ParamKind, ToolSpec
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry

MIN_CALLER_LENGTH = 4
"""Fewest canonical characters a value needs to be accepted as caller-stated: shorter ones ("47") are
house numbers, quantities and years as often as identifiers."""
MIN_PREFIX = 4
"""Fewest characters a truncation keeps to count as a copy of the longer value."""
MIN_RESEMBLED = 4
"""Fewest canonical characters a known value needs before anything is said to resemble it."""
LONG_VALUE = 8
"""Canonical length from which two edits (not one) still count as a near miss."""


class IdVerdict(StrEnum):
    """The ID guard's verdict on one identifier argument."""

    OK = "ok"
    UNVERIFIED = "unverified"
    """Known, but not as a verified ledger value, and the tool changes state."""
    MUTATED = "mutated"
    """Not known, but a truncation, a one- or two-character edit or a separator slip of a known value."""
    UNKNOWN = "unknown"
    """Neither in the ledger nor in the raw recent turns: produced from memory."""


class NearMiss(StrEnum):
    """How a value differs from the known value it resembles."""

    TRUNCATED = "truncated"
    EDITED = "edited"
    SEPARATOR = "separator"


_HOW = {
    NearMiss.TRUNCATED: "cut short",
    NearMiss.EDITED: "with one or two characters changed",
    NearMiss.SEPARATOR: "with a separator turned into a character",
}


@dataclass(frozen=True)
class IdToken:
    """One canonical identifier token of the raw recent turns.

    Attributes:
        canonical: Letters and digits, upper case (spoken digits as digits).
        text: The words as the caller said them, or the tool's leaf value verbatim (caller PII).
        source: ``caller`` or ``tool_result``.
        turn: The turn of the entry.
        entry_index: The entry's position in the transcript lane.
        tool_name: For tool results, the tool.
        path: For tool results, where the leaf sits (``invoices[].invoice_id``).
        reference: Whether a near miss of this token is refused as ``mutated``; False for prose and
            amounts, which only serve as provenance.
    """

    canonical: str
    text: str
    source: EntryKind
    turn: int
    entry_index: int
    tool_name: str | None = None
    path: str | None = None
    reference: bool = True


@dataclass(frozen=True)
class IdCheck:
    """The verdict on one identifier argument, with what the model should do next.

    Attributes:
        argument: Parameter name.
        value: The value the model passed (caller PII: redact in logs).
        verdict: See :class:`IdVerdict`.
        reason: Text for the model, as the tool result when the call is rejected.
        resembles: For ``mutated``, the ledger entry it resembles.
        from_caller: The value was found only in what the caller said in the recent turns.
        match: The ledger entry the value equals canonically (its ``value`` is the verbatim form to run
            the tool with when the model respaced or re-cased it).
        token: The recent token that vouches for the value, or, for ``mutated`` without ``resembles``,
            the one it resembles.
        near_miss: For ``mutated``, how it differs.
    """

    argument: str
    value: str
    verdict: IdVerdict
    reason: str
    resembles: LedgerEntry | None = None
    from_caller: bool = False
    match: LedgerEntry | None = None
    token: IdToken | None = None
    near_miss: NearMiss | None = None

    @property
    def accepted(self) -> bool:
        """Whether the call may run as far as this argument is concerned."""
        return self.verdict is IdVerdict.OK


# --- canonical forms and near misses -----------------------------------------------------------------------------

_NOT_ALNUM = re.compile(r"[^0-9A-Za-z]")


@lru_cache(maxsize=8192)
def canonical(value: str) -> str:
    """Letters and digits only, upper-cased: how a spoken ID compares ("4729 18" == "4729-18")."""
    return _NOT_ALNUM.sub("", unicodedata.normalize("NFKC", value)).upper()


class _Forms(NamedTuple):
    """A value prepared once for comparisons (cached per value: ledger values recur on every check)."""

    canonical: str
    raw: str
    """Upper-cased NFKC, separators kept: for prefix and separator-position comparisons."""
    slip: re.Pattern[str] | None
    """For a value with separators: matches the same raw length with any character where a separator is."""
    big: int
    """The canonical form's bytes as a big-endian integer: XOR with another gives mismatches in C."""
    little: int
    """The same, little-endian: its XOR tells the length of a common suffix."""


@lru_cache(maxsize=8192)
def _forms(value: str) -> _Forms:
    """The comparison forms of ``value``."""
    raw = unicodedata.normalize("NFKC", value).upper()
    canon = canonical(value)
    slip = None
    if len(raw) != len(canon):
        slip = re.compile("".join(re.escape(c) if c.isascii() and c.isalnum() else "." for c in raw), re.DOTALL)
    data = canon.encode("ascii")
    return _Forms(canon, raw, slip, int.from_bytes(data, "big"), int.from_bytes(data, "little"))


@lru_cache(maxsize=8192)
def _plain(canon: str) -> _Forms:
    """Forms of a value already canonical (a caller token): no separators, so no slips."""
    data = canon.encode("ascii")
    return _Forms(canon, canon, None, int.from_bytes(data, "big"), int.from_bytes(data, "little"))


def edit_limit(known: str) -> int:
    """Edits that still make a near miss of canonical ``known``: 2 from :data:`LONG_VALUE` chars, else 1."""
    return 2 if len(known) >= LONG_VALUE else 1


_END_EDITS = ((1, 1), (1, 0), (0, 1), (2, 2))
"""Characters (of a, of b) one edit consumes at an end: substitution, deletion, insertion, adjacent swap."""
_EDIT_PAIRS = {
    shift: tuple(
        (start, end) for start in _END_EDITS for end in _END_EDITS
        if start[0] - start[1] + end[0] - end[1] == shift
    )
    for shift in range(-2, 3)
}
"""Pairs of end edits by how much longer they leave ``a`` than ``b``."""


def _core_distance(a: str, b: str, limit: int) -> int | None:
    """:func:`bounded_edit_distance` of two strings whose first characters differ and whose last ones do.

    Every edit script then has an edit at each end, and within two edits nothing else: a distance of 1
    or 2 is found by trying the pairs of end edits and comparing the untouched middles, without a table.
    """
    la, lb = len(a), len(b)
    if not la or not lb:
        return max(la, lb) if abs(la - lb) <= limit else None
    if la == lb == 1 or (la == lb == 2 and a[0] == b[1] and a[1] == b[0]):
        return 1
    if limit < 2:
        return None
    if limit > 2:
        return _table_distance(a, b, limit)
    if la <= 2 and lb <= 2:
        return 2
    if la > 4 and a[2 : la - 2] not in b:
        return None  # the middle no end edit reaches is not in b: rejects almost every unrelated value
    for (fa, fb), (ea, eb) in _EDIT_PAIRS.get(la - lb, ()):
        if fa + ea > la or fb + eb > lb:
            continue
        if fa == 2 and not (a[0] == b[1] and a[1] == b[0]):
            continue
        if ea == 2 and not (a[-1] == b[-2] and a[-2] == b[-1]):
            continue
        if a[fa : la - ea] == b[fb : lb - eb]:
            return 2
    return None


def bounded_edit_distance(a: str, b: str, limit: int) -> int | None:
    """Optimal-string-alignment distance of ``a`` and ``b`` (an adjacent swap costs 1), or None above ``limit``.

    Args:
        a: One string.
        b: The other.
        limit: The largest distance of interest.
    """
    la, lb = len(a), len(b)
    if abs(la - lb) > limit:
        return None
    shortest = min(la, lb)
    start = 0
    while start < shortest and a[start] == b[start]:
        start += 1
    end_a, end_b = la, lb
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    return _core_distance(a[start:end_a], b[start:end_b], limit)


def _table_distance(a: str, b: str, limit: int) -> int | None:
    """The full optimal-string-alignment table, for limits above 2 (not on the guard's path)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cell = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cell = min(cell, previous2[j - 2] + 1)
            row[j] = cell
        if min(row) > limit:
            return None
        previous2, previous = previous, row
    return previous[-1] if previous[-1] <= limit else None


def _compare(value: _Forms, known: _Forms) -> tuple[NearMiss, int] | None:
    """How ``value`` is a near miss of ``known``, and how many characters it changes; None when it is not.

    Runs once per ledger value on every check, so the common case (equal lengths) is done with integer
    XORs: the mismatching bytes, the common prefix and the common suffix come out of C.
    """
    v, v_raw, _, v_big, v_little = value  # unpacked once: this is the guard's innermost loop
    k, k_raw, k_slip, k_big, k_little = known
    lv, lk = len(v), len(k)
    if lk < MIN_RESEMBLED or v == k:
        return None
    if lv < lk:
        if lv >= MIN_PREFIX and k.startswith(v):
            return NearMiss.TRUNCATED, lk - lv
        # A raw prefix counts too when the cut falls just after a separator ("ACC-" of "ACC-4729-18").
        if len(v_raw) >= MIN_PREFIX and len(v_raw) < len(k_raw) and k_raw.startswith(v_raw):
            return NearMiss.TRUNCATED, lk - lv
    # A slip is named first, being the more precise account; it also covers several slips in a short value.
    # (A slip turns a separator into a character, so only a longer canonical form can be one.)
    if lv > lk and k_slip is not None and len(v_raw) == len(k_raw) and k_slip.fullmatch(v_raw):
        slips = sum(1 for x, y in zip(v_raw, k_raw, strict=True) if x != y and x.isascii() and x.isalnum())
        if slips:
            return NearMiss.SEPARATOR, slips
    limit = edit_limit(k)
    if lv != lk:
        if abs(lv - lk) > limit:
            return None
        distance = bounded_edit_distance(v, k, limit)
        return (NearMiss.EDITED, distance) if distance is not None else None
    xor = v_big ^ k_big
    mismatches = lv - xor.to_bytes(lv, "big").count(0)
    if mismatches == 1:
        return NearMiss.EDITED, 1
    prefix = lv - (xor.bit_length() + 7) // 8
    if mismatches == 2:
        # Two substitutions, or one adjacent swap when the two mismatches are neighbours.
        swapped = v[prefix + 1 : prefix + 2] == k[prefix : prefix + 1] and v[prefix] == k[prefix + 1]
        return (NearMiss.EDITED, 1) if swapped else (NearMiss.EDITED, 2) if limit >= 2 else None
    if limit < 2:
        return None
    # Three or more mismatches within two edits: a shift (a deletion at one end of the differing stretch,
    # an insertion at the other) or swaps; nothing else is possible, so compare those directly.
    end = lv - ((v_little ^ k_little).bit_length() + 7) // 8
    a, b = v[prefix : lv - end], k[prefix : lv - end]
    m = len(a)
    if a[1:] == b[:-1] or a[:-1] == b[1:]:
        return NearMiss.EDITED, 2
    swap_start = a[0] == b[1] and a[1] == b[0]
    swap_end = a[-1] == b[-2] and a[-2] == b[-1]
    if (swap_start and a[2 : m - 1] == b[2 : m - 1]) or (swap_end and a[1 : m - 2] == b[1 : m - 2]):
        return NearMiss.EDITED, 2
    if m >= 4 and swap_start and swap_end and a[2 : m - 2] == b[2 : m - 2]:
        return NearMiss.EDITED, 2
    return None


def near_miss_kind(value: str, known: str) -> NearMiss | None:
    """How ``value`` is a near miss of ``known``, or None (equal canonical forms are not a miss).

    Args:
        value: The value the model produced.
        known: A value the call knows (ledger value or recent token).
    """
    found = _compare(_forms(value), _forms(known))
    return found[0] if found else None


def near_miss(value: str, known: str) -> bool:
    """True when ``value`` is a truncation, a one- or two-character edit or a separator slip of ``known``."""
    return near_miss_kind(value, known) is not None


# --- the caller tokenizer ----------------------------------------------------------------------------------------

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


# --- the token index ---------------------------------------------------------------------------------------------

_PROVENANCE_OUTCOMES = (ToolOutcome.COMPLETED, None)
"""A rejected, failed or cancelled call's result is the guard's or the tool's own words about the model's
arguments (often echoing them), so it vouches for nothing."""


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(path, leaf) for every string and number in a result; booleans and None are no identifiers."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item, f"{path}[]")
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield path, value


def _tokens_of(entry: TranscriptEntry) -> tuple[IdToken, ...]:
    """The tokens of one entry, unmemoised."""
    if entry.kind is EntryKind.CALLER:
        seen: set[str] = set()
        out: list[IdToken] = []
        for cand in caller_candidates(entry.text):
            if cand.canonical and cand.canonical not in seen:
                seen.add(cand.canonical)
                out.append(IdToken(cand.canonical, cand.text, EntryKind.CALLER, entry.turn, entry.index))
        return tuple(out)
    if entry.kind is EntryKind.TOOL_RESULT and entry.outcome in _PROVENANCE_OUTCOMES:
        out = []
        for path, leaf in _leaves(entry.result, ""):
            text = str(leaf)
            canon = canonical(text)
            if canon:
                # Prose ("Wireless Headphones") and amounts only vouch for an exact value; a near miss of
                # them means nothing.
                reference = isinstance(leaf, int) or (isinstance(leaf, str) and not any(c.isspace() for c in text))
                out.append(IdToken(canon, text, EntryKind.TOOL_RESULT, entry.turn, entry.index, entry.tool_name,
                                   path, reference))
        return tuple(out)
    return ()


_MEMO: dict[int, tuple[weakref.ref[TranscriptEntry], tuple[IdToken, ...]]] = {}
_MEMO_LIMIT = 4096


def entry_tokens(entry: TranscriptEntry) -> tuple[IdToken, ...]:
    """The identifier tokens of one transcript entry (none for agent words and tool calls).

    Agent words and tool-call arguments are left out on purpose: both come from the model, so an
    identifier found only there has no provenance. Memoised per entry object: entries are immutable and
    the guard re-reads the same recent turns on every tool call.
    """
    held = _MEMO.get(id(entry))
    if held is not None and held[0]() is entry:
        return held[1]
    tokens = _tokens_of(entry)
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[id(entry)] = (weakref.ref(entry), tokens)
    return tokens


class IdTokenIndex:
    """Canonical identifier tokens of the raw recent turns, updated as entries arrive.

    Args:
        entries: Entries to add at once (the raw recent turns).
    """

    def __init__(self, entries: Iterable[TranscriptEntry] = ()) -> None:
        self._tokens: list[IdToken] = []
        self._by_canonical: dict[str, list[IdToken]] = {}
        for entry in entries:
            self.add(entry)

    def __len__(self) -> int:
        return len(self._tokens)

    def __iter__(self) -> Iterator[IdToken]:
        return iter(tuple(self._tokens))

    def add(self, entry: TranscriptEntry) -> tuple[IdToken, ...]:
        """Adds the tokens of one entry (caller utterances and completed tool results only).

        Returns:
            The tokens added.
        """
        tokens = entry_tokens(entry)
        for token in tokens:
            self._tokens.append(token)
            self._by_canonical.setdefault(token.canonical, []).append(token)
        return tokens

    def prune(self, first_turn: int) -> None:
        """Drops the tokens of turns before ``first_turn``, as those turns leave the raw window."""
        kept = [t for t in self._tokens if t.turn >= first_turn]
        if len(kept) != len(self._tokens):
            self._tokens = []
            self._by_canonical = {}
            for token in kept:
                self._tokens.append(token)
                self._by_canonical.setdefault(token.canonical, []).append(token)

    def find(self, canonical_value: str) -> list[IdToken]:
        """Tokens whose canonical form is exactly ``canonical_value``, oldest first."""
        return list(self._by_canonical.get(canonical_value, ()))

    def references(self) -> Iterator[IdToken]:
        """Tokens a near miss is measured against: one per canonical form (its latest reference token).

        Short tokens and tokens that are not references (prose, amounts) are left out.
        """
        for tokens in reversed(list(self._by_canonical.values())):
            for token in reversed(tokens):
                if token.reference and len(token.canonical) >= MIN_RESEMBLED:
                    yield token
                    break


# --- the guard ---------------------------------------------------------------------------------------------------


_Item = TypeVar("_Item", LedgerEntry, IdToken)


@dataclass
class _Nearest(Generic[_Item]):
    """The closest truncation and the closest edit of ``value`` among some known values."""

    truncated: tuple[_Item, NearMiss] | None = None
    edited: tuple[_Item, NearMiss] | None = None


def _nearest(value: _Forms, known: Iterable[tuple[_Item, _Forms, int]]) -> _Nearest[_Item]:
    """One pass over ``(item, forms, recency)``: fewest changes wins, then the most recent.

    Both kinds are kept apart because they are asked at different points of the check (truncation
    before provenance, edits after it).
    """
    cut_item: _Item | None = None
    cut_rank = (0, 0)
    edit_item: _Item | None = None
    edit_rank = (0, 0)
    edit_kind = NearMiss.EDITED
    shortest = len(value.canonical)
    for item, forms, recency in known:
        # Cheap skips that cannot change the answer: once there is a truncation, edits no longer matter
        # (the check asks for truncations first), and an edit costs at least 1, so after a 1-edit match
        # only a more recent entry, or a possible truncation, is worth comparing.
        could_cut = len(forms.canonical) > shortest
        if cut_item is not None and not could_cut:
            continue
        if edit_item is not None and edit_rank[0] == 1 and -recency >= edit_rank[1] and not could_cut:
            continue
        found = _compare(value, forms)
        if found is None:
            continue
        kind, cost = found
        if kind is NearMiss.TRUNCATED:
            if cut_item is None or (cost, -recency) < cut_rank:
                cut_item, cut_rank = item, (cost, -recency)
        elif edit_item is None or (cost, -recency) < edit_rank:
            edit_item, edit_rank, edit_kind = item, (cost, -recency), kind
    return _Nearest(
        (cut_item, NearMiss.TRUNCATED) if cut_item is not None else None,
        (edit_item, edit_kind) if edit_item is not None else None,
    )


def _ledger_forms(ledger: Ledger) -> list[tuple[LedgerEntry, _Forms, int]]:
    """Every ledger entry with the forms of its value and its recency, latest entered first, once per check.

    Latest first: the entry a model copies is usually a recent one, so a 1-edit match found early lets
    :func:`_nearest` skip most of the rest; among equally recent entries the latest entered is named.
    """
    return [(entry, _forms(entry.value), entry.last_used) for entry in reversed(ledger.entries)]


def _token_forms(index: IdTokenIndex) -> Iterator[tuple[IdToken, _Forms, int]]:
    """The index's reference tokens with their forms and recency (position in the transcript)."""
    for token in index.references():
        # A tool leaf keeps its separators (for slips); a caller token is canonical already.
        forms = _forms(token.text) if token.source is EntryKind.TOOL_RESULT else _plain(token.canonical)
        yield token, forms, token.entry_index


class IdGuard:
    """Checks the identifier arguments of a tool call before it runs.

    Args:
        ledger_only_for_mutations: A state-changing tool accepts only verified ledger values. Off by default:
            a value a completed tool result returned in the raw recent turns is tool-verified too, and some
            result fields are not harvested into the ledger (``lookup_order`` returns the order's
            ``invoice_id``, which ``open_dispute`` then needs).
    """

    def __init__(self, *, ledger_only_for_mutations: bool = False) -> None:
        self.ledger_only_for_mutations = ledger_only_for_mutations

    def check(
        self,
        tool: ToolSpec,
        arguments: Mapping[str, Any],
        ledger: Ledger,
        recent: Sequence[TranscriptEntry],
        index: IdTokenIndex | None = None,
    ) -> list[IdCheck]:
        """Returns one check per identifier argument present in ``arguments``.

        Args:
            tool: The tool's spec; identifier parameters are the ones marked so.
            arguments: The arguments as the model produced them.
            ledger: The call's ledger.
            recent: Transcript entries of the raw last K turns (and the current one).
            index: The tokens of ``recent``, when the caller keeps one up to date; built from ``recent``
                otherwise (cheap: each entry's tokens are memoised).
        """
        present = [(p.name, arguments.get(p.name)) for p in tool.params_of(ParamKind.IDENTIFIER)]
        present = [(name, value) for name, value in present if value is not None and value != ""]
        if not present:
            return []
        scan = _Scan(ledger, recent, index)
        return [self._check_one(tool, name, str(value), scan) for name, value in present]

    def _check_one(self, tool: ToolSpec, name: str, value: str, scan: _Scan) -> IdCheck:
        # Exact ledger match first: the verbatim value, then the same identifier respaced or re-cased.
        matches = scan.ledger.find(value)
        forms = _forms(value)
        if not matches and forms.canonical:
            matches = [entry for entry, known, _ in scan.ledger_forms() if known.canonical == forms.canonical]
        if matches:
            verified = [e for e in matches if e.verified]
            if tool.mutates and not verified:
                return IdCheck(name, value, IdVerdict.UNVERIFIED, _unverified_reason(tool, name), from_caller=True,
                               match=matches[0])
            return IdCheck(name, value, IdVerdict.OK, "in the ledger", match=(verified or matches)[0])
        if not forms.canonical:
            return IdCheck(name, value, IdVerdict.UNKNOWN, _unknown_reason(name, value))
        in_ledger = _nearest(forms, scan.ledger_forms())
        if in_ledger.truncated:
            return _mutated_by_entry(name, value, *in_ledger.truncated)
        index = scan.tokens()
        in_turns = _nearest(forms, _token_forms(index))
        # A truncation is refused before provenance is asked: a cut-off repetition is a token of its own.
        if in_turns.truncated:
            return _mutated_by_token(name, value, *in_turns.truncated)
        said = index.find(forms.canonical)
        returned = [t for t in said if t.source is EntryKind.TOOL_RESULT]
        stated = [t for t in said if t.source is EntryKind.CALLER]
        if len(forms.canonical) < MIN_CALLER_LENGTH:
            stated = []
        if not returned and not stated:
            if in_ledger.edited:
                return _mutated_by_entry(name, value, *in_ledger.edited)
            if in_turns.edited:
                return _mutated_by_token(name, value, *in_turns.edited)
            return IdCheck(name, value, IdVerdict.UNKNOWN, _unknown_reason(name, value))
        if tool.mutates and (not returned or self.ledger_only_for_mutations):
            # The caller's word alone never changes the account: it is looked up first.
            reason = _unrecorded_reason(tool, name) if returned else _unverified_reason(tool, name)
            return IdCheck(name, value, IdVerdict.UNVERIFIED, reason, from_caller=not returned,
                           token=(returned or stated)[-1])
        if returned:
            return IdCheck(name, value, IdVerdict.OK, "returned by a tool in the recent turns", token=returned[-1])
        return IdCheck(name, value, IdVerdict.OK, "stated by the caller in the recent turns", from_caller=True,
                       token=stated[-1])


class _Scan:
    """What one check reads, each part built on first use and shared by the call's arguments."""

    def __init__(self, ledger: Ledger, recent: Sequence[TranscriptEntry], index: IdTokenIndex | None) -> None:
        self.ledger = ledger
        self._recent = recent
        self._index = index
        self._ledger_forms: list[tuple[LedgerEntry, _Forms, int]] | None = None

    def ledger_forms(self) -> list[tuple[LedgerEntry, _Forms, int]]:
        """The ledger's entries with their forms (see :func:`_ledger_forms`)."""
        if self._ledger_forms is None:
            self._ledger_forms = _ledger_forms(self.ledger)
        return self._ledger_forms

    def tokens(self) -> IdTokenIndex:
        """The given index, or one built from the recent turns."""
        if self._index is None:
            self._index = IdTokenIndex(self._recent)
        return self._index


def _mutated_by_entry(name: str, value: str, entry: LedgerEntry, kind: NearMiss) -> IdCheck:
    # The ledger's own value is quoted (never the model's or a token's): it is the one to copy.
    reason = (
        f"Rejected: {name}={value!r} is not a known identifier; it looks like a corrupted copy of the "
        f"{entry.role} ({entry.value}), {_HOW[kind]}. Do not guess: use the exact value from KNOWN FACTS, "
        "or ask the caller to confirm it."
    )
    return IdCheck(name, value, IdVerdict.MUTATED, reason, resembles=entry, near_miss=kind)


def _mutated_by_token(name: str, value: str, token: IdToken, kind: NearMiss) -> IdCheck:
    if token.source is EntryKind.TOOL_RESULT:
        origin = f"the {token.path} that {token.tool_name} returned in turn {token.turn} ({token.text})"
        advice = "use that exact value"
    else:
        # The caller's words are not quoted back: the model should hear the identifier again, not copy
        # a reading of a transcript.
        origin = f"an identifier the caller said in turn {token.turn}"
        advice = "use it exactly as the caller said it, or ask the caller to repeat it"
    reason = (
        f"Rejected: {name}={value!r} is not a known identifier; it looks like a corrupted copy of {origin}, "
        f"{_HOW[kind]}. Do not guess: {advice}."
    )
    return IdCheck(name, value, IdVerdict.MUTATED, reason, token=token, near_miss=kind)


def _unknown_reason(name: str, value: str) -> str:
    return (
        f"Rejected: {name}={value!r} was not returned by any tool in this call and the caller did not say it "
        "in the recent turns, so it may be misremembered. Look it up again with a lookup tool, or ask the "
        "caller to repeat it."
    )


def _unverified_reason(tool: ToolSpec, name: str) -> str:
    return (
        f"Rejected: {tool.name} changes the account, and {name} has only been stated by the caller, not confirmed "
        "by a tool. Look it up first (for example with lookup_account or get_invoice), then retry."
    )


def _unrecorded_reason(tool: ToolSpec, name: str) -> str:
    return (
        f"Rejected: {tool.name} changes the account, and {name} is not a verified identifier in KNOWN FACTS. "
        "Look it up first (for example with lookup_account or get_invoice), then retry."
    )
