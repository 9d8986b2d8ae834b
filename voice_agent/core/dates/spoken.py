"""Caller text to normalised tokens: spoken numbers as digits, identifiers masked.

Every token keeps its span in the original text, so a phrase matched in the
normalised text can be quoted back in the caller's own words.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from voice_agent.core.casefree import CaseFree

ID_TOKEN = "#id"
"""Norm of a masked identifier: never read as a date."""

MONTHS: dict[str, int] = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
    "september": 9, "sep": 9, "sept": 9, "october": 10, "oct": 10, "november": 11, "nov": 11,
    "december": 12, "dec": 12,
}  # fmt: skip
WEEKDAYS: dict[str, int] = {
    "monday": 0, "tuesday": 1, "tues": 1, "wednesday": 2, "weds": 2, "thursday": 3, "thurs": 3,
    "friday": 4, "saturday": 5, "sunday": 6,
}  # fmt: skip
UNITS = frozenset({"day", "days", "week", "weeks", "month", "months", "fortnight", "fortnights", "year", "years"})

_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
    "twentieth": 20, "thirtieth": 30,
}  # fmt: skip
_CARDINALS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
}  # fmt: skip
_TENS = {"twenty": 20, "thirty": 30}

_ID_CUE = (
    r"(?:account|acct|order|invoice|card|number|no\.|id|reference|ref|code|phone|mobile|pin|policy|ticket"
    r"|tracking|postcode|zip|serial|confirmation|booking|member(?:ship)?|customer|extension|ext|case|claim"
    r"|ending|ends|iban|routing|parcel|package|contract|meter|receipt|transaction|sku|model|item)"
)
_ID_FILLER = r"(?:\s+(?:number|no\.|is|was|ending|ends|in|with|of|it's|its|are|code|id|ref|reference))*"
# A digit run named by an identifier cue ("card ending 1214", "account number is 4729 18").
_ID_AFTER_CUE = CaseFree(rf"\b{_ID_CUE}{_ID_FILLER}[\s:#]*(\d+(?:[\s.\-/]+\d+)*)\b")
# Three or more digit groups in a row are a phone/account/order number, never a date.
_DIGIT_GROUPS = re.compile(r"(?<![\w])\d+(?:[ \t.\-/]+\d+){2,}(?![\w])")
# A word with a digit plus letters or internal separators: INV-2026-1114, 12/14, AB12CD, 3pm.
_MIXED = re.compile(r"[A-Za-z0-9]+(?:[\-./][A-Za-z0-9]+)+|[A-Za-z0-9]*\d[A-Za-z0-9]*")
_ORDINAL_DIGITS = re.compile(r"\d{1,2}(?:st|nd|rd|th)", re.IGNORECASE)
_HASH_NUMBER = re.compile(r"#\s*\d+")
_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*|\d+(?:st|nd|rd|th)?(?![A-Za-z0-9])|\d+|[^\sA-Za-z0-9]")


@dataclass(frozen=True, slots=True)
class Token:
    """One normalised token and its span in the original text."""

    norm: str
    start: int
    end: int


@dataclass(frozen=True)
class Normalised:
    """Normalised text with a map back to the original words.

    Attributes:
        original: The text as given.
        text: Token norms joined by single spaces (lower case, numbers as digits,
            ordinals as ``<n>th``, identifiers as ``#id``).
        tokens: The tokens, in order.
        offsets: Start of each token within ``text``.
    """

    original: str
    text: str
    tokens: tuple[Token, ...]
    offsets: tuple[int, ...]

    def token_range(self, start: int, end: int) -> tuple[int, int]:
        """Indices of the first and last token touched by ``text[start:end]``."""
        first = max(bisect_right(self.offsets, start) - 1, 0)
        last = max(bisect_right(self.offsets, max(end - 1, start)) - 1, first)
        return first, last

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """The original-text span of the normalised span ``text[start:end]``."""
        first, last = self.token_range(start, end)
        return self.tokens[first].start, self.tokens[last].end


def _mask_spans(text: str) -> list[tuple[int, int]]:
    spans = _ID_AFTER_CUE.spans(text, 1)
    spans += [m.span() for m in _DIGIT_GROUPS.finditer(text)]
    spans += [m.span() for m in _HASH_NUMBER.finditer(text)]
    for m in _MIXED.finditer(text):
        word = m.group()
        if any(c.isdigit() for c in word) and not word.isdigit() and not _ORDINAL_DIGITS.fullmatch(word):
            spans.append(m.span())
    spans.sort()
    merged: list[tuple[int, int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged


def _raw_tokens(text: str) -> list[Token]:
    masks = _mask_spans(text)
    out: list[Token] = []
    mi = 0
    for m in _TOKEN.finditer(text):
        s, e = m.span()
        while mi < len(masks) and masks[mi][1] <= s:
            mi += 1
        if mi < len(masks) and masks[mi][0] <= s < masks[mi][1]:
            ms, me = masks[mi]
            if not (out and out[-1].norm == ID_TOKEN and out[-1].start == ms):
                out.append(Token(ID_TOKEN, ms, me))
            continue
        word = m.group().lower()
        if word[0].isdigit():
            digits = word.rstrip("stndrh")
            out.append(Token(f"{int(digits)}th" if digits != word else str(int(digits)), s, e))
        elif word.startswith("t'") and len(word) > 2:
            # "t'Monday", "on t'farm": a Northern "the" run into its word
            out.append(Token("the", s, s + 2))
            rest = word[2:]
            if rest.endswith("'s") and rest[:-2] in WEEKDAYS:
                out.append(Token(rest[:-2], s + 2, e - 2))
                out.append(Token("'s", e - 2, e))
            else:
                out.append(Token(rest, s + 2, e))
        elif word.endswith("'s") and (word[:-2] in WEEKDAYS or word[:-2] in ("today", "tomorrow")):
            # "Tuesday's no good": the weekday must stand alone for the cue rules.
            out.append(Token(word[:-2], s, e - 2))
            out.append(Token("'s", e - 2, e))
        else:
            out.append(Token(word, s, e))
    return out


def _join_numbers(raw: list[Token]) -> list[Token]:
    """Spoken ordinals become ``<n>th``; spoken cardinals become digits only beside a month or unit."""
    out: list[Token] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        if tok.norm in _TENS:
            j = i + 1 + (i + 1 < len(raw) and raw[i + 1].norm == "-")
            if j < len(raw):
                unit = raw[j].norm
                if _ORDINALS.get(unit, 0) in range(1, 10):
                    out.append(Token(f"{_TENS[tok.norm] + _ORDINALS[unit]}th", tok.start, raw[j].end))
                    i = j + 1
                    continue
                if _CARDINALS.get(unit, 0) in range(1, 10):
                    out.append(Token(f"~{_TENS[tok.norm] + _CARDINALS[unit]}", tok.start, raw[j].end))
                    i = j + 1
                    continue
        if tok.norm in _ORDINALS:
            out.append(Token(f"{_ORDINALS[tok.norm]}th", tok.start, tok.end))
        elif tok.norm in _CARDINALS:
            out.append(Token(f"~{_CARDINALS[tok.norm]}", tok.start, tok.end))
        elif tok.norm == "a" and [t.norm for t in raw[i : i + 3]] == ["a", "couple", "of"]:
            out.append(Token("~2", tok.start, raw[i + 2].end))
            i += 2
        else:
            out.append(tok)
        i += 1
    return out


def _settle_cardinals(toks: list[Token]) -> list[Token]:
    """Keeps a spoken cardinal as a number only where it can be a day or a count of units.

    "the one on Tuesday" must not become "the 1": a spelled cardinal is a number
    only next to a month name or before a unit ("two weeks", "December fourteen").
    """
    out: list[Token] = []
    for i, tok in enumerate(toks):
        norm = tok.norm
        if norm.startswith("~"):
            prev = toks[i - 1].norm if i else ""
            nxt = toks[i + 1].norm if i + 1 < len(toks) else ""
            nxt2 = toks[i + 2].norm if i + 2 < len(toks) else ""
            near = prev in MONTHS or nxt in MONTHS or nxt in UNITS or (nxt == "of" and nxt2 in MONTHS)
            # Elsewhere it is a count of something else ("the one on Tuesday"): not a number.
            norm = norm[1:] if near else "#num"
        elif norm in ("a", "an") and i + 1 < len(toks) and toks[i + 1].norm in UNITS:
            norm = "1"
        out.append(tok if norm == tok.norm else Token(norm, tok.start, tok.end))
    return out


# Contractions as recognisers write them, without the apostrophe ("i cant take calls on wednesdays").
_ASR_CONTRACTIONS = {
    "cant": "can't", "dont": "don't", "wont": "won't", "im": "i'm", "ive": "i've", "didnt": "didn't",
    "doesnt": "doesn't", "isnt": "isn't", "wouldnt": "wouldn't", "couldnt": "couldn't", "shouldnt": "shouldn't",
    "thats": "that's", "whats": "what's", "youre": "you're", "wasnt": "wasn't", "arent": "aren't",
    "havent": "haven't", "itll": "it'll", "weak": "week", "weaks": "weeks",
}
_SPLIT_SUFFIX = frozenset(("th", "st", "nd", "rd"))


def _asr_repairs(toks: list[Token]) -> list[Token]:
    """Undoes two recogniser habits: dropped apostrophes and a split ordinal ("the 9 th")."""
    out: list[Token] = []
    for tok in toks:
        if out and tok.norm in _SPLIT_SUFFIX and out[-1].norm.isdigit() and len(out[-1].norm) <= 2:
            out[-1] = Token(out[-1].norm + "th", out[-1].start, tok.end)
            continue
        if out and tok.norm == "th" and _CARDINALS.get(out[-1].norm, 0) in range(4, 32):
            out[-1] = Token(f"{_CARDINALS[out[-1].norm]}th", out[-1].start, tok.end)  # "fourteen th"
            continue
        if tok.norm == "forth" and out and out[-1].norm in ("the", "twenty", "thirty", "on"):
            out.append(Token("fourth", tok.start, tok.end))  # "the forth": a recogniser's "fourth"
            continue
        if tok.norm == "'" and out and out[-1].norm in _ELIDED and out[-1].end == tok.start:
            # "t'27th", "the 14th o' December": a Northern "the" or "of" before a number or a word
            out[-1] = Token(_ELIDED[out[-1].norm], out[-1].start, tok.end)
            continue
        fixed = (_ASR_CONTRACTIONS.get(tok.norm) or _DIALECT_LIMITS.get(tok.norm)  # "afore then": before then
                 or _TENS_SPOKEN.get(tok.norm))
        out.append(Token(fixed, tok.start, tok.end) if fixed else tok)
    return _dialect_until(out)


_TENS_SPOKEN = {"twenny": "twenty", "twendy": "twenty", "tweny": "twenty", "thirdy": "thirty", "thurty": "thirty"}
"""Tens as quick or accented speech is written ("the twenny seventh"): no other word is spelled so."""
_ELIDED = {"t": "the", "o": "of"}
"""Words a Northern English speaker runs into the next with an apostrophe ("t'27th", "t'14th o' December")."""
_DIALECT_LIMITS = {"afore": "before"}
"""Limit words of Northern English and Scots: "afore" is "before"."""
_DAY_WORDS = frozenset({"christmas", "easter", "new", "next", "end"} | set(WEEKDAYS) | set(MONTHS))


def _names_a_day(norm: str) -> bool:
    return norm in _DAY_WORDS or norm[:1].isdigit()


def _dialect_until(toks: list[Token]) -> list[Token]:
    """"while" straight before a day is Northern English for "until" ("not back while the Thursday", "there while
    after New Year"); standard English never says so ("while the kettle boils" stays)."""
    out = list(toks)
    for i, tok in enumerate(out[:-1]):
        if tok.norm != "while":
            continue
        nxt = out[i + 1].norm
        after = out[i + 2].norm if i + 2 < len(out) else ""
        if _names_a_day(nxt) or (nxt in ("the", "after") and _names_a_day(after)):
            out[i] = Token("until", tok.start, tok.end)
    return out


def normalise(text: str) -> Normalised:
    """Tokenises ``text`` for the date rules.

    Args:
        text: A caller (or agent) utterance, as transcribed.

    Returns:
        The normalised form with its map back to ``text``.
    """
    clean = text.replace("’", "'").replace("‘", "'")
    tokens = _settle_cardinals(_join_numbers(_asr_repairs(_raw_tokens(clean))))
    offsets: list[int] = []
    pos = 0
    for tok in tokens:
        offsets.append(pos)
        pos += len(tok.norm) + 1
    return Normalised(
        original=text,
        text=" ".join(t.norm for t in tokens),
        tokens=tuple(tokens),
        offsets=tuple(offsets),
    )
