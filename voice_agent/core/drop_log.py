"""The drop log: which tracked facts each summary pass kept and lost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DropEvent:
    """One pass's fact accounting, ready to attach to a tracing span.

    Attributes:
        turn: The turn at whose start the pass ran.
        keys_in: Tracked fact keys present in what the summarizer received.
        keys_out: Tracked fact keys present in what it returned.
    """

    turn: int
    keys_in: frozenset[str]
    keys_out: frozenset[str]
    scrubbed: tuple[tuple[str, int], ...] = ()
    """(ledger key, substitutions): identifier values the summarizer wrote that were replaced by their role."""

    @property
    def dropped(self) -> frozenset[str]:
        """Keys that went in and did not come out."""
        return self.keys_in - self.keys_out

    def span_attributes(self) -> dict[str, object]:
        """Attributes for an OpenTelemetry span (keys are fact names, never values)."""
        return {
            "summary.pass_turn": self.turn,
            "summary.facts_in": sorted(self.keys_in),
            "summary.facts_out": sorted(self.keys_out),
            "summary.facts_dropped": sorted(self.dropped),
            "summary.scrubbed": [f"{key}={n}" for key, n in self.scrubbed],
        }


@dataclass(frozen=True)
class SummaryPass:
    """One summary pass as it happened: what went in, what came out, and its drop event.

    Attributes:
        turn: The turn at whose start it ran.
        text_in: The previous summary plus the turns handed over, as the summarizer received them.
        text_out: The new summary, as the model will read it.
        event: The call's own accounting of ledger and slot keys in and out.
    """

    turn: int
    text_in: str
    text_out: str
    event: DropEvent
    landed_turn: int | None = None
    """The turn in progress when a background pass landed; None: it ran inline, at ``turn``."""

    @property
    def landed(self) -> int:
        """The turn from which the new summary was in the context."""
        return self.turn if self.landed_turn is None else self.landed_turn


def facts_present(text: str, tracked: Mapping[str, str]) -> frozenset[str]:
    """Keys of ``tracked`` (key -> exact value) whose value appears verbatim in ``text``."""
    return frozenset(key for key, value in tracked.items() if value and value in text)


@dataclass
class DropLog:
    """Accumulates :class:`DropEvent` records for a call."""

    events: list[DropEvent] = field(default_factory=list)

    def record(
        self, turn: int, keys_in: frozenset[str], keys_out: frozenset[str],
        scrubbed: Mapping[str, int] | None = None,
    ) -> DropEvent:
        """Appends one pass's accounting and returns it."""
        event = DropEvent(turn=turn, keys_in=keys_in, keys_out=keys_out,
                          scrubbed=tuple(sorted((scrubbed or {}).items())))
        self.events.append(event)
        return event

    def retention(self) -> float | None:
        """Observed per-pass retention: kept / offered over all passes (None before any)."""
        offered = sum(len(e.keys_in) for e in self.events)
        if offered == 0:
            return None
        kept = sum(len(e.keys_in & e.keys_out) for e in self.events)
        return kept / offered
