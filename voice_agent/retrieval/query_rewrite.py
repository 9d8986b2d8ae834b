"""Caller words -> the knowledge base's words: spoken-form repairs and caller vocabulary, before scoring.

Callers do not speak the knowledge base's language, and the ASR adds its own slips. Four classes of mismatch are
repaired here, each from the knowledge base's own vocabulary (the words of its chunks), never from any question:

* split words: an ASR often hands one word over as two or three ("re fund", "deb it", "paper less",
  "up grade"); adjacent words are joined when the joined word is a knowledge-base word and a part is not one;
* misspelt words: a word of five letters or more that is neither a knowledge-base word nor a stop word is
  replaced by the knowledge-base word one edit away with the same first letter ("debbit" -> "debit"), when
  exactly one such word is the most frequent;
* caller vocabulary: ``caller_terms.yaml`` beside the knowledge files lists, for knowledge-base words, the
  everyday words and phrases callers use for them ("guarantee" for "warranty", "quid" for "pounds"). A caller
  phrase found in the query adds the knowledge-base words as an *expansion*, scored lexically with its own
  weight (:class:`~voice_agent.retrieval.index.RetrievalConfig`), and never embedded. A single caller word the
  knowledge base uses itself is not expanded: it already matches where the knowledge base uses it.

* numbers: the knowledge base writes some in words ("forty-five pounds") and some in digits ("Fibre 1000"),
  and an ASR hands over either; :func:`spoken_numbers_to_digits` gives both sides of BM25 digits.

The repaired text is what gets embedded and scored; the expansion only feeds BM25.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

CALLER_TERMS_FILE = "caller_terms.yaml"
"""The caller-vocabulary file's name, in the knowledge directory."""

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_MIN_CORRECTED = 5
"""Shorter words are never spelling-corrected: too many real words sit one edit from a short one."""
_ALPHABET = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class RewrittenQuery:
    """A caller query after the repairs.

    Attributes:
        text: The repaired query (split words joined, misspellings fixed): embedded and scored.
        expansion: Knowledge-base words the caller's vocabulary maps to (BM25 only, ``expansion_weight``).
        repairs: What was changed, as ``(heard, repaired)``, for logs and tests.
    """

    text: str
    expansion: tuple[str, ...] = ()
    repairs: tuple[tuple[str, str], ...] = ()


def load_caller_terms(path: Path | str) -> dict[str, tuple[str, ...]]:
    """Reads a caller-vocabulary file: ``{knowledge-base words: [caller word or phrase, ...]}``.

    Args:
        path: The YAML file.

    Returns:
        ``{caller phrase (lower case): knowledge-base words}``; several entries naming one phrase are merged.

    Raises:
        ValueError: The file is not such a mapping.
        OSError: The file cannot be read.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of knowledge-base words to lists of caller words")
    out: dict[str, list[str]] = {}
    for target, phrases in data.items():
        if not isinstance(target, str) or not isinstance(phrases, list) or not all(
            isinstance(p, str) and p.strip() for p in phrases
        ):
            raise ValueError(f"{path}: {target!r} must map to a list of non-empty caller words or phrases")
        for phrase in phrases:
            key = " ".join(_WORD.findall(phrase.lower()))
            out.setdefault(key, [])
            out[key] += [w for w in target.split() if w not in out[key]]
    return {k: tuple(v) for k, v in out.items() if k}


_UNITS = {
    w: n for n, w in enumerate([
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    ])
}
_TENS = {
    w: 10 * n
    for n, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], start=2)
}
_NUMBER_WORD = "|".join(sorted([*_TENS, *_UNITS, "hundred", "thousand"], key=len, reverse=True))
_NUMBER_RUN = re.compile(
    rf"\b(?:a[\s-]+(?=(?:hundred|thousand)\b))?(?:{_NUMBER_WORD})\b(?:(?:[\s-]+and)?[\s-]+(?:{_NUMBER_WORD})\b)*",
    re.IGNORECASE,
)


def _number_values(words: list[str]) -> list[int]:
    """The numbers a run of number words says: "nineteen ninety-nine" is 19 and 99, "one hundred and ten" is 110."""
    out: list[int] = []
    total = current = 0
    last = ""
    for word in words:
        if word in ("a", "and"):
            continue
        value = _UNITS.get(word, _TENS.get(word))
        kind = "hundred" if word == "hundred" else "thousand" if word == "thousand" else (
            "unit" if value is not None and value < 10 else "teen" if word in _UNITS else "tens")
        ends = (kind in ("teen", "tens") and last in ("unit", "teen", "tens")) or (
            kind == "unit" and (last in ("unit", "teen") or (last == "tens" and current % 10)))
        if ends:
            out.append(total + current)
            total = current = 0
        if kind == "hundred":
            current = max(current, 1) * 100
        elif kind == "thousand":
            total, current = total + max(current, 1) * 1000, 0
        else:
            current += value or 0
        last = kind
    out.append(total + current)
    return out


def spoken_numbers_to_digits(text: str) -> str:
    """Number words as digits ("forty-five" -> 45, "one thousand" -> 1000, "a hundred" -> 100).

    The knowledge base writes some numbers in words ("forty-five pounds") and some in digits ("Fibre 1000"),
    and an ASR hands over either; both sides of the lexical search get digits. A lone "a" or "one" is left
    alone ("a month", "one moment" are not amounts): only runs of two or more number words, or a single word
    other than "one", are rewritten.
    """

    def replace(match: re.Match[str]) -> str:
        words = [w for w in re.split(r"[\s-]+", match.group(0).lower()) if w and w != "and"]
        if words == ["one"]:
            return match.group(0)
        return " ".join(str(n) for n in _number_values(words))

    return _NUMBER_RUN.sub(replace, text)


def _edits1(word: str) -> set[str]:
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deletes = {a + b[1:] for a, b in splits if b}
    swaps = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    replaces = {a + c + b[1:] for a, b in splits if b for c in _ALPHABET}
    inserts = {a + c + b for a, b in splits for c in _ALPHABET}
    return deletes | swaps | replaces | inserts


class QueryRewriter:
    """Repairs caller queries against one knowledge base's vocabulary.

    Args:
        passages: The knowledge texts (their words are the vocabulary).
        stopwords: Words never corrected or counted as knowledge-base words (function words, fillers).
        stem: Maps a word to its stem (a joined word counts when its stem is a knowledge-base stem).
        caller_terms: ``{caller phrase: knowledge-base words}`` (see :func:`load_caller_terms`).
    """

    def __init__(
        self,
        passages: Iterable[str],
        stopwords: Iterable[str],
        stem: Callable[[str], str],
        caller_terms: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        counts: Counter[str] = Counter()
        for text in passages:
            counts.update(_WORD.findall(text.lower()))
        self.stopwords = frozenset(stopwords)
        self.vocabulary = {w: n for w, n in counts.items() if w not in self.stopwords}
        self.stem = stem
        self.stems = frozenset(stem(w) for w in self.vocabulary)
        # A single caller word the knowledge base itself uses ("open", "late") already matches lexically; mapping
        # it elsewhere too ("open" -> opening hours) would only pull in the wrong chunks.
        self.caller_terms = {
            k: tuple(v) for k, v in (caller_terms or {}).items() if " " in k or not self._known(k)
        }
        self._longest_phrase = max((len(k.split()) for k in self.caller_terms), default=0)

    def _known(self, word: str) -> bool:
        return word in self.vocabulary or self.stem(word) in self.stems

    def _content(self, word: str) -> bool:
        """A knowledge-base word that carries meaning on its own (not a stop word, not a scrap)."""
        return len(word) > 3 and word not in self.stopwords and self._known(word)

    def _join(self, words: list[str], repairs: list[tuple[str, str]]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(words):
            for size in (3, 2):
                parts = words[i:i + size]
                joined = "".join(parts)
                if len(parts) == size and self._known(joined) and not all(self._content(p) for p in parts):
                    repairs.append((" ".join(parts), joined))
                    out.append(joined)
                    i += size
                    break
            else:
                out.append(words[i])
                i += 1
        return out

    def _correct(self, word: str, repairs: list[tuple[str, str]]) -> str:
        if len(word) < _MIN_CORRECTED or not word.isalpha() or word in self.stopwords or self._known(word):
            return word
        candidates = [w for w in _edits1(word) if w in self.vocabulary and w[0] == word[0]]
        if not candidates:
            return word
        ranked = sorted(candidates, key=lambda w: -self.vocabulary[w])
        if len(ranked) > 1 and self.vocabulary[ranked[0]] == self.vocabulary[ranked[1]]:
            return word  # two equally likely repairs: guessing would be worse than leaving it
        repairs.append((word, ranked[0]))
        return ranked[0]

    def _expansion(self, words: list[str]) -> tuple[str, ...]:
        found: list[str] = []
        for size in range(min(self._longest_phrase, len(words)), 0, -1):
            for i in range(len(words) - size + 1):
                for term in self.caller_terms.get(" ".join(words[i:i + size]), ()):
                    if term not in found and term not in words:
                        found.append(term)
        return tuple(found)

    def rewrite(self, query: str) -> RewrittenQuery:
        """The repaired query and its expansion.

        Args:
            query: The caller's words as transcribed.

        Returns:
            The rewrite; ``text`` equals the lower-cased words of ``query`` when nothing needed repair.
        """
        repairs: list[tuple[str, str]] = []
        words = self._join(_WORD.findall(query.lower()), repairs)
        words = [self._correct(w, repairs) for w in words]
        return RewrittenQuery(" ".join(words), self._expansion(words), tuple(repairs))

