"""The slots lane: a domain's typed must-keep facts, each with its provenance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from voice_agent.core.provenance import CallerSpan, Provenance, is_verbatim

SlotModelT = TypeVar("SlotModelT", bound=BaseModel)


@dataclass(frozen=True)
class SlotValue:
    """A slot value and where it came from.

    Attributes:
        value: The value as the tool returned it (lists for list-typed slots).
        turn: Turn on which it was written.
        source: "tool_name.field" that produced it.
        provenance: The typed source (tool field, caller span or model output); None reads as the tool field.
    """

    value: Any
    turn: int
    source: str
    provenance: Provenance | None = None

    @property
    def verbatim(self) -> bool:
        """Whether the value may be stated as fact (a tool field or the caller's exact words)."""
        return self.provenance is None or is_verbatim(self.provenance)


class SlotError(ValueError):
    """A harvested value does not fit the domain's slot model."""


class SlotLane(Generic[SlotModelT]):
    """Holds one domain's slot model plus the provenance of every filled slot.

    Values are written only through :meth:`apply_harvest`, which the tool layer's
    harvest API calls with values read from structured tool results by field name.
    Each write is validated against the pydantic model.

    Args:
        model_type: The domain's slot model; every field must have a default.
    """

    def __init__(self, model_type: type[SlotModelT]) -> None:
        self._model_type = model_type
        self._model = model_type()
        self._provenance: dict[str, SlotValue] = {}

    @property
    def model(self) -> SlotModelT:
        """The validated slot model (read it, do not write to it)."""
        return self._model

    @property
    def fields(self) -> list[str]:
        """Names of the domain's slots."""
        return list(self._model_type.model_fields)

    def filled(self) -> dict[str, SlotValue]:
        """Slots that hold a value, with provenance."""
        return dict(self._provenance)

    def get(self, name: str) -> SlotValue | None:
        """The value of slot ``name`` with its provenance, or None."""
        return self._provenance.get(name)

    def apply_harvest(
        self, name: str, value: Any, turn: int, source: str, provenance: Provenance | None = None
    ) -> SlotValue:
        """Writes one slot from a tool result. Only the harvest API calls this.

        List-typed slots accumulate distinct values; scalar slots are replaced.

        Raises:
            SlotError: ``name`` is not a slot of this domain, or ``value`` has the wrong type.
        """
        if name not in self._model_type.model_fields:
            raise SlotError(f"{self._model_type.__name__} has no slot {name!r}")
        current = getattr(self._model, name)
        new_value: Any = value
        if isinstance(current, list):
            items = value if isinstance(value, list) else [value]
            new_value = current + [v for v in items if v not in current]
        data = self._model.model_dump()
        data[name] = new_value
        try:
            self._model = self._model_type.model_validate(data)
        except ValidationError as exc:
            raise SlotError(f"slot {name!r} rejects {value!r}: {exc.errors()[0]['msg']}") from exc
        slot = SlotValue(value=getattr(self._model, name), turn=turn, source=source, provenance=provenance)
        self._provenance[name] = slot
        return slot

    def render_lines(
        self, *, provenance: bool = False, skip_values: frozenset[str] = frozenset(), verbatim: bool | None = None
    ) -> list[str]:
        """One line per filled slot, values verbatim.

        Args:
            provenance: Add the turn and source (for handoff cards; the KNOWN FACTS block,
                sent on every request, leaves it out).
            skip_values: Scalar values already shown elsewhere (the ledger), left out here.
            verbatim: True: only slots from tool fields and caller spans; False: only model-sourced ones.
        """
        lines = []
        for name, slot in self._provenance.items():
            if verbatim is not None and slot.verbatim is not verbatim:
                continue
            if not isinstance(slot.value, list) and str(slot.value) in skip_values:
                continue
            if isinstance(slot.provenance, CallerSpan) and not provenance:
                items = slot.value if isinstance(slot.value, list) else [slot.value]
                quoted = "; ".join(f'"{v}"' for v in items)
                lines.append(f"{name} (turn {slot.provenance.turn}): {quoted}")
                continue
            value = ", ".join(map(str, slot.value)) if isinstance(slot.value, list) else str(slot.value)
            lines.append(f"{name}: {value}" + (f" (turn {slot.turn}, from {slot.source})" if provenance else ""))
        return lines

    def values(self) -> list[str]:
        """Every filled value as a string, list items separately (for verbatim checks)."""
        out: list[str] = []
        for slot in self._provenance.values():
            out.extend(map(str, slot.value) if isinstance(slot.value, list) else [str(slot.value)])
        return out
