"""The ID guard: every identifier argument must come from the ledger or the raw recent turns.

What the raw recent turns vouch for is their identifier tokens
(:class:`~voice_agent.core.guards.id_tokens.IdTokenIndex`); how a value resembles a known one is
:mod:`voice_agent.core.near_miss`.

Order of checks for one argument (see :meth:`IdGuard.check`):

1. Canonically equal to a ledger value (verbatim, respaced or re-cased): ``ok``; a state-changing tool
   needs a verified entry, ``unverified`` otherwise.
2. A truncation (a prefix of at least :data:`~voice_agent.core.near_miss.MIN_PREFIX` characters) of a
   ledger value, then of a recent token: ``mutated``, even when the short form was itself said, because a
   cut-off repetition ("ORD 7K4M... ORD 7K4M2P") leaves the prefix as a token of its own.
3. Not a recent token (a caller token counts from :data:`MIN_CALLER_LENGTH` characters): an edit (up to
   :func:`~voice_agent.core.near_miss.edit_limit` substitutions, insertions, deletions or adjacent swaps)
   or a separator slip of a ledger value, then of a recent token: ``mutated``; anything else ``unknown``.
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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from voice_agent.core.guards.caller_tokens import caller_candidates
from voice_agent.core.guards.id_tokens import IdToken, IdTokenIndex, entry_tokens
from voice_agent.core.ledger import Ledger, LedgerEntry
from voice_agent.core.near_miss import (
    Forms,
    NearMiss,
    bounded_edit_distance,
    canonical,
    compare_forms,
    forms_of,
    forms_of_canonical,
    near_miss,
    near_miss_kind,
)
from voice_agent.core.tool_spec import ParamKind, ToolSpec
from voice_agent.core.transcript import EntryKind, TranscriptEntry

# The token and near-miss names are re-exported: callers imported them from here before they moved to
# their own modules.
__all__ = [
    "MIN_CALLER_LENGTH",
    "IdCheck",
    "IdGuard",
    "IdToken",
    "IdTokenIndex",
    "IdVerdict",
    "NearMiss",
    "bounded_edit_distance",
    "caller_candidates",
    "canonical",
    "entry_tokens",
    "near_miss",
    "near_miss_kind",
]

MIN_CALLER_LENGTH = 4
"""Fewest canonical characters a value needs to be accepted as caller-stated: shorter ones ("47") are
house numbers, quantities and years as often as identifiers."""


class IdVerdict(StrEnum):
    """The ID guard's verdict on one identifier argument."""

    OK = "ok"
    UNVERIFIED = "unverified"
    """Known, but not as a verified ledger value, and the tool changes state."""
    MUTATED = "mutated"
    """Not known, but a truncation, a one- or two-character edit or a separator slip of a known value."""
    UNKNOWN = "unknown"
    """Neither in the ledger nor in the raw recent turns: produced from memory."""


_HOW = {
    NearMiss.TRUNCATED: "cut short",
    NearMiss.EDITED: "with one or two characters changed",
    NearMiss.SEPARATOR: "with a separator turned into a character",
}


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


_Item = TypeVar("_Item", LedgerEntry, IdToken)


@dataclass
class _Nearest(Generic[_Item]):
    """The closest truncation and the closest edit of ``value`` among some known values."""

    truncated: tuple[_Item, NearMiss] | None = None
    edited: tuple[_Item, NearMiss] | None = None


def _nearest(value: Forms, known: Iterable[tuple[_Item, Forms, int]]) -> _Nearest[_Item]:
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
        found = compare_forms(value, forms)
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


def _ledger_forms(ledger: Ledger) -> list[tuple[LedgerEntry, Forms, int]]:
    """Every ledger entry with the forms of its value and its recency, latest entered first, once per check.

    Latest first: the entry a model copies is usually a recent one, so a 1-edit match found early lets
    :func:`_nearest` skip most of the rest; among equally recent entries the latest entered is named.
    """
    return [(entry, forms_of(entry.value), entry.last_used) for entry in reversed(ledger.entries)]


def _token_forms(index: IdTokenIndex) -> Iterator[tuple[IdToken, Forms, int]]:
    """The index's reference tokens with their forms and recency (position in the transcript)."""
    for token in index.references():
        # A tool leaf keeps its separators (for slips); a caller token is canonical already.
        forms = forms_of(token.text) if token.source is EntryKind.TOOL_RESULT else forms_of_canonical(token.canonical)
        yield token, forms, token.entry_index


class IdGuard:
    """Checks the identifier arguments of a tool call before it runs.

    Args:
        ledger_only_for_mutations: A state-changing tool accepts only verified ledger values. Off by default:
            a value a completed tool result returned in the raw recent turns is tool-verified too, which a
            domain needs when it does not harvest every identifier a state-changing tool takes. The tool
            gate turns it on.
    """

    def __init__(self, *, ledger_only_for_mutations: bool = False, tools: Sequence[ToolSpec] = ()) -> None:
        self.ledger_only_for_mutations = ledger_only_for_mutations
        # Which of the call's tools return each identifier role: a refusal names them ("look it up first with
        # lookup_order"), never a tool this call does not have.
        self._lookups: dict[str, list[str]] = {}
        for spec in tools:
            for field in spec.harvest:
                if field.role and "{" not in field.role and spec.name not in self._lookups.get(field.role, []):
                    self._lookups.setdefault(field.role, []).append(spec.name)

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

    def _how(self, tool: ToolSpec, name: str) -> str:
        """How to look up the identifier ``name`` of ``tool``: the call's tools that return its role."""
        role = next((p.role for p in tool.params if p.name == name), None)
        lookups = [t for t in self._lookups.get(role or "", []) if t != tool.name]
        return f"with {' or '.join(lookups[:2])}" if lookups else "with a tool that returns it"

    def _check_one(self, tool: ToolSpec, name: str, value: str, scan: _Scan) -> IdCheck:
        # Exact ledger match first: the verbatim value, then the same identifier respaced or re-cased.
        matches = scan.ledger.find(value)
        forms = forms_of(value)
        if not matches and forms.canonical:
            matches = [entry for entry, known, _ in scan.ledger_forms() if known.canonical == forms.canonical]
        if matches:
            verified = [e for e in matches if e.verified]
            if tool.mutates and not verified:
                return IdCheck(name, value, IdVerdict.UNVERIFIED, _unverified_reason(tool, name, self._how(tool, name)),
                               from_caller=True,
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
            how = self._how(tool, name)
            reason = _unrecorded_reason(tool, name, how) if returned else _unverified_reason(tool, name, how)
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
        self._ledger_forms: list[tuple[LedgerEntry, Forms, int]] | None = None

    def ledger_forms(self) -> list[tuple[LedgerEntry, Forms, int]]:
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


def _unverified_reason(tool: ToolSpec, name: str, how: str) -> str:
    return (
        f"Rejected: {tool.name} changes the account, and {name} has only been stated by the caller, not confirmed "
        f"by a tool. Look it up first ({how}), then retry."
    )


def _unrecorded_reason(tool: ToolSpec, name: str, how: str) -> str:
    return (
        f"Rejected: {tool.name} changes the account, and {name} is not a verified identifier in KNOWN FACTS. "
        f"Look it up first ({how}), then retry."
    )
