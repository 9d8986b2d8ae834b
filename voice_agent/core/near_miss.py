"""Comparing identifiers: the canonical form, and how a value is a near miss of a known one.

Two spellings of one identifier share a canonical form ("ACC-4729-18", "acc 4729 18"). A value whose
canonical form differs is a *near miss* of a known value when it is a copy of it damaged the way models
damage identifiers: cut short, a character or two edited, or a separator turned into a character. The
ID guard refuses near misses as ``mutated``; the summary scrubber replaces them by the ledger role.
"""

from __future__ import annotations

import re
import unicodedata
from enum import StrEnum
from functools import lru_cache
from typing import NamedTuple

MIN_PREFIX = 4
"""Fewest characters a truncation keeps to count as a copy of the longer value."""
MIN_RESEMBLED = 4
"""Fewest canonical characters a known value needs before anything is said to resemble it."""
LONG_VALUE = 8
"""Canonical length from which two edits (not one) still count as a near miss."""


class NearMiss(StrEnum):
    """How a value differs from the known value it resembles."""

    TRUNCATED = "truncated"
    EDITED = "edited"
    SEPARATOR = "separator"


_NOT_ALNUM = re.compile(r"[^0-9A-Za-z]")


@lru_cache(maxsize=8192)
def canonical(value: str) -> str:
    """Letters and digits only, upper-cased: how a spoken ID compares ("4729 18" == "4729-18")."""
    return _NOT_ALNUM.sub("", unicodedata.normalize("NFKC", value)).upper()


class Forms(NamedTuple):
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
def forms_of(value: str) -> Forms:
    """The comparison forms of ``value``."""
    raw = unicodedata.normalize("NFKC", value).upper()
    canon = canonical(value)
    slip = None
    if len(raw) != len(canon):
        slip = re.compile("".join(re.escape(c) if c.isascii() and c.isalnum() else "." for c in raw), re.DOTALL)
    data = canon.encode("ascii")
    return Forms(canon, raw, slip, int.from_bytes(data, "big"), int.from_bytes(data, "little"))


@lru_cache(maxsize=8192)
def forms_of_canonical(canon: str) -> Forms:
    """Forms of a value already canonical (a caller token): no separators, so no slips."""
    data = canon.encode("ascii")
    return Forms(canon, canon, None, int.from_bytes(data, "big"), int.from_bytes(data, "little"))


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


def compare_forms(value: Forms, known: Forms) -> tuple[NearMiss, int] | None:
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
    found = compare_forms(forms_of(value), forms_of(known))
    return found[0] if found else None


def near_miss(value: str, known: str) -> bool:
    """True when ``value`` is a truncation, a one- or two-character edit or a separator slip of ``known``."""
    return near_miss_kind(value, known) is not None
