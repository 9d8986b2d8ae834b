"""Identifier tokens of the raw recent turns: what the caller said and what tools returned.

Provenance is whole-token equality: a value is stated by the caller or returned by a tool only when its
canonical form equals one token, never when it merely occurs inside some text. A caller utterance gives
the candidates of :func:`~voice_agent.core.guards.caller_tokens.caller_candidates`; every string or
number leaf of a completed tool result is one token. Agent words and tool-call arguments give none.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from voice_agent.core.guards.caller_tokens import caller_candidates
from voice_agent.core.near_miss import MIN_RESEMBLED, canonical
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry


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
