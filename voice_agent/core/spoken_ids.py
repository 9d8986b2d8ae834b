"""Spoken identifiers back into their written form, before the user aggregator sees a transcript.

Over the phone a caller spells "ACC-4729-18" as "a c c four seven two nine one eight", and a
speech recogniser writes it back in many ways ("a CC 4 729 1 8", "ACC 472918", "ay see see for
seven two nine eighteen"). The domain's brain and guards expect the canonical form, so final and
interim transcripts are rewritten here when a run of consecutive words spells out an identifier of
one of the shapes the domain supplies. Nothing else in the text changes.

A shape is a template: its leading letters are literal (``ACC`` in ``ACC-####-##``); after them
``#`` is one digit, ``X`` one letter or digit, ``@`` one letter, any other letter or digit is literal,
and ``-``, ``/``, ``.`` and spaces are separators written back as given (e.g. ``ACC-####-##``,
``INV-####-####``, ``ORD-XXXXXX``). A run is rewritten only when it spells the whole template
exactly, from the first word to the last, so ordinary speech is left alone.

Pure logic: the pipecat processor (``processors/spoken_ids.py``) and the session (which enters
caller-stated identifiers into the ledger, unverified) both use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_SEPARATORS = frozenset("-/. ")
_DIGIT_WORDS: dict[str, str] = {
    "zero": "0", "oh": "0", "o": "0", "nought": "0", "one": "1", "won": "1", "two": "2", "to": "2", "too": "2",
    "three": "3", "four": "4", "for": "4", "fore": "4", "five": "5", "six": "6", "seven": "7", "eight": "8",
    "ate": "8", "nine": "9",
}
_TEENS: dict[str, str] = {
    "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13", "fourteen": "14", "fifteen": "15",
    "sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19",
}
_TENS: dict[str, str] = {
    "twenty": "2", "thirty": "3", "forty": "4", "fourty": "4", "fifty": "5", "sixty": "6", "seventy": "7",
    "eighty": "8", "ninety": "9",
}
_LETTER_NAMES: dict[str, str] = {
    "ay": "A", "eh": "A", "bee": "B", "be": "B", "see": "C", "sea": "C", "cee": "C", "dee": "D", "ee": "E",
    "eff": "F", "ef": "F", "gee": "G", "aitch": "H", "eye": "I", "jay": "J", "kay": "K", "el": "L", "ell": "L",
    "em": "M", "en": "N", "oh": "O", "pee": "P", "cue": "Q", "queue": "Q", "ar": "R", "are": "R", "ess": "S",
    "tee": "T", "tea": "T", "you": "U", "vee": "V", "ex": "X", "why": "Y", "wye": "Y", "zee": "Z", "zed": "Z",
}
_REPEATERS: dict[str, int] = {"double": 2, "triple": 3}
_FILLERS = frozenset({"dash", "hyphen", "slash", "dot"})
_TOKEN = re.compile(r"[A-Za-z]+|\d+")
_MAX_TOKENS = 24
"""Longest run of words tried for one identifier (a 12-symbol id spelled with repeats fits easily)."""


@dataclass(frozen=True)
class IdShape:
    """One identifier shape a domain uses.

    Attributes:
        template: Leading letters literal, then ``#`` digit, ``X`` letter or digit, ``@`` letter, other
            letters/digits literal, ``-``/``/``/``.``/space separators (e.g. ``ACC-####-##``).
        name: A label for logs (the template when empty).
    """

    template: str
    name: str = ""
    compact: str = field(init=False)
    prefix: str = field(init=False)
    written: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compact = "".join(c for c in self.template if c not in _SEPARATORS).upper()
        if not compact or not all(c.isalnum() or c in "#@" for c in compact):
            raise ValueError(f"identifier shape {self.template!r}: use letters, digits, #, X, @ and - / . or space")
        prefix = ""
        for c in self.template.upper():
            if not c.isalpha():
                break
            prefix += c
        if prefix == compact:
            raise ValueError(f"identifier shape {self.template!r} has no variable part (#, X or @)")
        object.__setattr__(self, "compact", compact)
        object.__setattr__(self, "prefix", prefix)
        object.__setattr__(self, "written", _written_pattern(self.template, len(prefix)))

    def accepts(self, position: int, symbol: str) -> bool:
        """Whether ``symbol`` (one uppercase character) may stand at ``position`` of the compact form."""
        want = self.compact[position]
        if position < len(self.prefix):
            return symbol == want
        if want == "#":
            return symbol.isdigit()
        if want == "X":
            return symbol.isalnum()
        if want == "@":
            return symbol.isalpha()
        return symbol == want

    def render(self, symbols: str) -> str:
        """The canonical written form of ``symbols`` (the compact characters in order)."""
        out: list[str] = []
        index = 0
        for c in self.template:
            if c in _SEPARATORS:
                out.append(c)
            else:
                out.append(symbols[index])
                index += 1
        return "".join(out)


def _written_pattern(template: str, prefix_length: int) -> re.Pattern[str]:
    """The shape as written, any case; its separators optional (``ACC472918``), none anywhere else."""
    parts = []
    position = 0
    for c in template:
        if c in _SEPARATORS:
            parts.append("[-/. ]?")
            continue
        upper = c.upper()
        if position >= prefix_length and upper in "#X@":
            parts.append({"#": "[0-9]", "X": "[A-Za-z0-9]", "@": "[A-Za-z]"}[upper])
        else:
            parts.append(re.escape(c))
        position += 1
    return re.compile(rf"(?<![A-Za-z0-9]){''.join(parts)}(?![A-Za-z0-9])", re.IGNORECASE)


def _readings(tokens: Sequence[str], index: int, prefixes: frozenset[str]) -> list[tuple[str, int]]:
    """Every way the words from ``index`` on can start an identifier: (symbols, words consumed)."""
    word = tokens[index]
    lower = word.lower()
    out: list[tuple[str, int]] = []
    if word.isdigit():
        out.append((word, 1))
        return out
    if lower in _FILLERS:
        out.append(("", 1))
    if lower in _REPEATERS and index + 1 < len(tokens):
        for symbols, used in _readings(tokens, index + 1, prefixes):
            if len(symbols) == 1:
                out.append((symbols * _REPEATERS[lower], used + 1))
    if lower in _DIGIT_WORDS:
        out.append((_DIGIT_WORDS[lower], 1))
    if lower in _TEENS:
        out.append((_TEENS[lower], 1))
    if lower in _TENS:
        following = tokens[index + 1].lower() if index + 1 < len(tokens) else ""
        if following in _DIGIT_WORDS and _DIGIT_WORDS[following] != "0" and following not in ("to", "too", "for"):
            out.append((_TENS[lower] + _DIGIT_WORDS[following], 2))  # "seventy nine" is 79, never 7-0-9
        else:
            out.append((_TENS[lower] + "0", 1))
    if len(word) == 1 and word.isalpha():
        out.append((word.upper(), 1))
    if lower in _LETTER_NAMES:
        out.append((_LETTER_NAMES[lower], 1))
    if len(word) > 1 and word.isalpha() and ((word.isupper() and len(word) <= 6) or word.upper() in prefixes):
        # Recognisers write spelled letters as one word: "CC", "ACC"; a lowercase word counts
        # only when it is a shape's literal prefix ("acc"), so ordinary words never do.
        out.append((word.upper(), 1))
    return out


def _match_at(
    tokens: Sequence[str], start: int, shape: IdShape, prefixes: frozenset[str],
    readings: dict[int, list[tuple[str, int]]] | None = None,
) -> tuple[str, int] | None:
    """The symbols and end index (exclusive) of ``shape`` spelled from word ``start``, if it is.

    ``readings`` keeps each word's readings for the whole text: every shape, at every start, reads the same
    words the same way, so they are worked out once.
    """
    if readings is None:
        readings = {}
    target = len(shape.compact)
    stack: list[tuple[int, str]] = [(start, "")]
    while stack:
        index, symbols = stack.pop()
        if len(symbols) == target:
            return symbols, index
        if index >= len(tokens) or index - start >= _MAX_TOKENS:
            continue
        ways = readings.get(index)
        if ways is None:
            ways = readings[index] = _readings(tokens, index, prefixes)
        for reading, used in reversed(ways):
            if not reading and symbols == "":
                continue  # an id never starts with "dash"
            candidate = symbols + reading
            if len(candidate) > target:
                continue
            if all(shape.accepts(len(symbols) + i, s) for i, s in enumerate(reading)):
                stack.append((index + used, candidate))
    return None


def normalize_spoken_ids(text: str, shapes: Sequence[IdShape]) -> str:
    """Rewrites every spelled-out identifier of one of ``shapes`` in ``text`` into its canonical form.

    Args:
        text: A transcript.
        shapes: The domain's identifier shapes, tried in order at each word.

    Returns:
        The text with each matching run of words replaced; unchanged when nothing matches.
    """
    if not shapes or not text:
        return text
    spans = [(m.start(), m.end(), m.group(0)) for m in _TOKEN.finditer(text)]
    tokens = [s[2] for s in spans]
    prefixes = frozenset(s.prefix for s in shapes if s.prefix)
    readings: dict[int, list[tuple[str, int]]] = {}
    pieces: list[str] = []
    cursor = 0
    index = 0
    while index < len(tokens):
        found: tuple[str, int, IdShape] | None = None
        if index not in readings:
            readings[index] = _readings(tokens, index, prefixes)
        if not readings[index]:  # no identifier starts with this word ("charge"): no shape to try
            index += 1
            continue
        for shape in shapes:
            match = _match_at(tokens, index, shape, prefixes, readings)
            if match is not None and (found is None or match[1] > found[1]):
                found = (match[0], match[1], shape)
        if found is None:
            index += 1
            continue
        symbols, end, shape = found
        pieces.append(text[cursor : spans[index][0]])
        pieces.append(shape.render(symbols))
        cursor = spans[end - 1][1]
        index = end
    pieces.append(text[cursor:])
    return "".join(pieces)


def example_of(shape: IdShape) -> str:
    """A made-up identifier of ``shape`` (``ACC-4729-18`` style), for recogniser prompts."""
    digits = "3158062947"
    alnum = "7K4M2PQ9"
    out: list[str] = []
    position = d = a = 0
    for c in shape.template:
        if c in _SEPARATORS:
            out.append(c)
            continue
        wild = position >= len(shape.prefix)
        if wild and c == "#":
            out.append(digits[d % len(digits)])
            d += 1
        elif wild and c.upper() == "X":
            out.append(alnum[a % len(alnum)])
            a += 1
        elif wild and c == "@":
            out.append("K")
        else:
            out.append(c.upper())
        position += 1
    return "".join(out)


def recognizer_prompt(shapes: Iterable[str | IdShape], topic: str | None = None) -> str | None:
    """A short hint for a recogniser that accepts a prompt (Whisper): the topic, and how identifiers are written.

    Args:
        shapes: The domain's identifier shapes.
        topic: One sentence on what callers talk about (its vocabulary helps the recogniser).

    Returns:
        E.g. ``"A billing call. Reference numbers are written like ACC-4729-18."``; None when there is nothing to say.
    """
    examples = [example_of(s) for s in id_shapes(shapes)]
    parts = [topic.strip()] if topic and topic.strip() else []
    if examples:
        parts.append(f"Reference numbers are written like {', '.join(examples)}.")
    return " ".join(parts) or None


def id_shapes(templates: Iterable[str | IdShape]) -> tuple[IdShape, ...]:
    """Shapes from templates (``"ACC-####-##"``) or ready shapes."""
    return tuple(t if isinstance(t, IdShape) else IdShape(t) for t in templates)


def find_identifiers(text: str, shapes: Sequence[IdShape]) -> list[tuple[str, IdShape]]:
    """Every identifier of one of ``shapes`` in ``text``, written or spelled out, in canonical form.

    Args:
        text: A caller utterance.
        shapes: The domain's identifier shapes.

    Returns:
        (canonical value, its shape) in the order they occur, each value once.
    """
    normalised = normalize_spoken_ids(text, shapes)
    found: dict[str, IdShape] = {}
    for shape in shapes:
        for match in shape.written.finditer(normalised):
            symbols = "".join(c for c in match.group(0).upper() if c.isalnum())
            variable = symbols[len(shape.prefix) :]
            if "X" in shape.compact and not any(c.isdigit() for c in variable):
                continue  # "ORDERS" is a word, not an order number
            found.setdefault(shape.render(symbols), shape)
    order = {value: normalised.find(value) for value in found}
    return sorted(found.items(), key=lambda item: order[item[0]])
