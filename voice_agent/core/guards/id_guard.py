"""The ID guard: every identifier argument must come from the ledger or the raw recent turns."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voice_agent.core.ledger import Ledger, LedgerEntry
from voice_agent.core.tool_spec import ParamKind, ToolSpec
from voice_agent.core.transcript import EntryKind, TranscriptEntry


class IdVerdict(StrEnum):
    """The ID guard's verdict on one identifier argument."""

    OK = "ok"
    UNVERIFIED = "unverified"
    """Known, but only caller-stated, and the tool changes state."""
    MUTATED = "mutated"
    """Not known, but one or two characters off (or a truncation of) a ledger value."""
    UNKNOWN = "unknown"
    """Neither in the ledger nor in the raw recent turns: produced from memory."""


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
    """

    argument: str
    value: str
    verdict: IdVerdict
    reason: str
    resembles: LedgerEntry | None = None
    from_caller: bool = False

    @property
    def accepted(self) -> bool:
        """Whether the call may run as far as this argument is concerned."""
        return self.verdict is IdVerdict.OK


def canonical(value: str) -> str:
    """Letters and digits only, upper-cased: how a spoken ID compares ("4729 18" == "4729-18")."""
    return re.sub(r"[^0-9A-Za-z]", "", value).upper()


def near_miss(value: str, known: str) -> bool:
    """True when ``value`` is a one- or two-character mutation or a truncated prefix of ``known``."""
    if value == known:
        return False
    a, b = canonical(value.rstrip(".…")), canonical(known)
    if len(a) >= 4 and len(a) < len(b) and b.startswith(a):
        return True
    if len(a) != len(b) or len(b) < 4:
        return False
    return 0 < sum(x != y for x, y in zip(a, b, strict=True)) <= 2


def _recent_texts(recent: Iterable[TranscriptEntry]) -> tuple[str, str]:
    """(caller words, tool results) in the raw recent turns.

    Tool-call arguments and the agent's own words are left out on purpose: both come from
    the model, so an identifier found only there has no provenance.
    """
    caller: list[str] = []
    results: list[str] = []
    for entry in recent:
        if entry.kind is EntryKind.CALLER:
            caller.append(entry.text)
        elif entry.kind is EntryKind.TOOL_RESULT:
            results.append(entry.render())
    return "\n".join(caller), "\n".join(results)


class IdGuard:
    """Checks the identifier arguments of a tool call before it runs."""

    def check(
        self, tool: ToolSpec, arguments: Mapping[str, Any], ledger: Ledger, recent: Sequence[TranscriptEntry]
    ) -> list[IdCheck]:
        """Returns one check per identifier argument present in ``arguments``.

        Args:
            tool: The tool's spec; identifier parameters are the ones marked so.
            arguments: The arguments as the model produced them.
            ledger: The call's ledger.
            recent: Transcript entries of the raw last K turns (and the current one).
        """
        caller_text, other_text = _recent_texts(recent)
        caller_canon = canonical(caller_text)
        checks = []
        for param in tool.params_of(ParamKind.IDENTIFIER):
            value = arguments.get(param.name)
            if value is None or value == "":
                continue
            checks.append(self._check_one(tool, param.name, str(value), ledger, caller_text, caller_canon, other_text))
        return checks

    def _check_one(
        self, tool: ToolSpec, name: str, value: str, ledger: Ledger, caller_text: str, caller_canon: str,
        other_text: str,
    ) -> IdCheck:
        known = ledger.find(value)
        if known:
            if tool.mutates and not any(e.verified for e in known):
                return IdCheck(name, value, IdVerdict.UNVERIFIED, _unverified_reason(tool, name), from_caller=True)
            return IdCheck(name, value, IdVerdict.OK, "in the ledger")
        said_by_caller = value in caller_text or (len(canonical(value)) >= 4 and canonical(value) in caller_canon)
        if said_by_caller:
            if tool.mutates:
                return IdCheck(name, value, IdVerdict.UNVERIFIED, _unverified_reason(tool, name), from_caller=True)
            return IdCheck(name, value, IdVerdict.OK, "stated by the caller in the recent turns", from_caller=True)
        if value in other_text:
            return IdCheck(name, value, IdVerdict.OK, "returned by a tool in the recent turns")
        for entry in sorted(ledger.entries, key=lambda e: e.last_used, reverse=True):
            if near_miss(value, entry.value):
                reason = (
                    f"Rejected: {name}={value!r} is not a known identifier; it looks like a corrupted copy of the "
                    f"{entry.role} ({entry.value}). Do not guess: use the exact value from KNOWN FACTS, or ask the "
                    "caller to confirm it."
                )
                return IdCheck(name, value, IdVerdict.MUTATED, reason, resembles=entry)
        reason = (
            f"Rejected: {name}={value!r} was not returned by any tool in this call and the caller did not say it "
            "in the recent turns, so it may be misremembered. Look it up again with a lookup tool, or ask the "
            "caller to repeat it."
        )
        return IdCheck(name, value, IdVerdict.UNKNOWN, reason)


def _unverified_reason(tool: ToolSpec, name: str) -> str:
    return (
        f"Rejected: {tool.name} changes the account, and {name} has only been stated by the caller, not confirmed "
        "by a tool. Look it up first (for example with lookup_account or get_invoice), then retry."
    )
