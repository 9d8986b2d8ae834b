"""The ledger lane: every identifier the call has touched, by role, never paraphrased."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from voice_agent.core.provenance import CallerSpan, Provenance, ToolField

CALLER_SOURCE = "caller"
"""The ``source`` of an entry the caller stated (unverified until a tool confirms it)."""


@dataclass
class LedgerEntry:
    """One identifier with its role and provenance.

    Attributes:
        role: What the identifier is to this call ("damaged_order", "account").
        value: The identifier, verbatim. Caller PII: redact it in logs and spans.
        verified: True once a tool result returned this exact value.
        first_seen: Turn the value first entered the ledger.
        last_used: Turn the value was last seen in a tool call, result or utterance.
        source: "tool_name.field" for tool results, or "caller".
        provenance: The typed source: the tool result field, or the caller span it was said in.
        listed: Entered as one item of a list result (an invoice among the account's invoices) and not
            used since: the ledger holds it for the guards, KNOWN FACTS need not show it.
    """

    role: str
    value: str
    verified: bool
    first_seen: int
    last_used: int
    source: str
    provenance: Provenance | None = None
    listed: bool = False

    def render(self) -> str:
        """One line for the KNOWN FACTS block: role and verbatim value, flagged when only caller-stated.

        Kept short on purpose: the block is sent on every request.
        """
        return f"{self.role}: {self.value}" + ("" if self.verified else " (UNVERIFIED, caller-stated)")


@dataclass
class Ledger:
    """Identifiers keyed by (role, value), evicted by least recent use.

    Two entries with the same value and different roles stay distinct: the same
    invoice can be both ``listed_invoice`` and ``disputed_invoice``.

    Args:
        capacity: Most entries held at once; when full, the entry whose last use is
            oldest is evicted (never simply the first one seen).
    """

    capacity: int = 64
    _entries: dict[tuple[str, str], LedgerEntry] = field(default_factory=dict)
    evicted: list[LedgerEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"ledger capacity must be at least 1, got {self.capacity}")

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(list(self._entries.values()))

    @property
    def entries(self) -> list[LedgerEntry]:
        """Entries in insertion order."""
        return list(self._entries.values())

    def values(self) -> set[str]:
        """Every identifier value currently held."""
        return {e.value for e in self._entries.values()}

    def find(self, value: str) -> list[LedgerEntry]:
        """All entries (any role) holding exactly ``value``."""
        return [e for e in self._entries.values() if e.value == value]

    def get(self, role: str, value: str) -> LedgerEntry | None:
        """The entry for ``(role, value)``, if held."""
        return self._entries.get((role, value))

    def by_role(self, role: str) -> list[LedgerEntry]:
        """Entries with ``role``, most recently used first."""
        found = [e for e in self._entries.values() if e.role == role]
        return sorted(found, key=lambda e: e.last_used, reverse=True)

    def record_from_tool(
        self, role: str, value: str, turn: int, tool: str, field_name: str, *, listed: bool = False
    ) -> LedgerEntry:
        """Records an identifier a tool returned: verified, and it verifies caller-stated twins.

        Args:
            listed: The value is one item of a list in the result (see :attr:`LedgerEntry.listed`).
        """
        for twin in self.find(value):
            twin.verified = True
            twin.last_used = max(twin.last_used, turn)
        existing = self.get(role, value)
        entry = self._upsert(role, value, turn, verified=True, source=f"{tool}.{field_name}",
                             provenance=ToolField(tool, field_name, turn))
        if existing is None:
            entry.listed = listed
        elif not listed:
            entry.listed = False  # returned on its own now: in play
        return entry

    def record_from_caller(self, role: str, value: str, turn: int, quote: str | None = None) -> LedgerEntry:
        """Records an identifier the caller stated; it stays unverified until a tool returns it.

        Args:
            quote: The words the caller said it in (the span of the transcript utterance).
        """
        verified = any(e.verified for e in self.find(value))
        return self._upsert(role, value, turn, verified=verified, source=CALLER_SOURCE,
                            provenance=CallerSpan(turn, quote or value))

    def touch(self, value: str, turn: int) -> None:
        """Marks every entry holding ``value`` as used on ``turn`` (a listed entry is now in play)."""
        for entry in self.find(value):
            entry.last_used = max(entry.last_used, turn)
            if turn > entry.first_seen:
                entry.listed = False

    def _upsert(
        self, role: str, value: str, turn: int, *, verified: bool, source: str, provenance: Provenance | None = None
    ) -> LedgerEntry:
        if not value:
            raise ValueError("a ledger value cannot be empty")
        key = (role, value)
        existing = self._entries.get(key)
        if existing is not None:
            existing.last_used = max(existing.last_used, turn)
            existing.verified = existing.verified or verified
            return existing
        if len(self._entries) >= self.capacity:
            self._evict_least_recently_used()
        entry = LedgerEntry(role, value, verified, first_seen=turn, last_used=turn, source=source,
                            provenance=provenance)
        self._entries[key] = entry
        return entry

    def _evict_least_recently_used(self) -> None:
        # min() keeps the first of equals, so ties go to the earlier-inserted entry.
        victim = min(self._entries.values(), key=lambda e: e.last_used)
        del self._entries[(victim.role, victim.value)]
        self.evicted.append(victim)
