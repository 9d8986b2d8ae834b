"""Tool schemas with explicit argument kinds and harvest rules.

Identifier and date parameters are marked in the schema, never guessed from a
parameter's name; the guards and the harvest read these marks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

KIND_KEY = "x-kind"
"""JSON-schema extension key that carries a parameter's kind."""


class ParamKind(StrEnum):
    """What a tool parameter carries."""

    PLAIN = "plain"
    IDENTIFIER = "identifier"
    DATE = "date"
    CALLER_QUOTE = "caller_quote"
    """The caller's own words, quoted exactly: checked against the transcript before the tool runs."""


@dataclass(frozen=True)
class ToolParam:
    """One tool parameter.

    Attributes:
        name: Argument name.
        description: Shown to the model.
        kind: Plain, identifier (ID guard) or date (date guard).
        role: For identifiers, the ledger role a caller-stated value is recorded under.
        required: Whether the model must supply it.
        enum: Allowed values, for plain string parameters.
        type: JSON-schema type.
        binds: For dates, the subjects of the caller's date statements that bind it
            ("availability", "trip", "booking"; see ``core.dates.subjects``). Empty: the default
            (availability, booking and trip).
        topic: For dates, the thing it books ("callback", "car", "hotel"); None: read from the names.
    """

    name: str
    description: str
    kind: ParamKind = ParamKind.PLAIN
    role: str | None = None
    required: bool = True
    enum: tuple[str, ...] = ()
    type: str = "string"
    binds: tuple[str, ...] = ()
    topic: str | None = None


@dataclass(frozen=True)
class HarvestField:
    """Where a structured tool result feeds the ledger and slots.

    Attributes:
        path: Field name in the result; ``items[].field`` reads ``field`` of every item of list ``items``.
        role: Ledger role for the value (identifiers); ``{other}`` is filled from the same object.
        slot: Slot the value is written to, if any.
        from_param: The call argument this result field hands back, when it is one: the value's source is
            then that argument's (a caller span for a ``caller_quote`` parameter, the model otherwise),
            not the tool.
    """

    path: str
    role: str | None = None
    slot: str | None = None
    from_param: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the guards and the harvest see it.

    Attributes:
        name: Tool name.
        description: Shown to the model.
        params: Parameters with their kinds.
        mutates: True for tools that change state (credits, refunds, bookings,
            disputes); those refuse unverified identifiers.
        harvest: Result fields to record in the ledger and slots.
    """

    name: str
    description: str
    params: tuple[ToolParam, ...] = ()
    mutates: bool = False
    harvest: tuple[HarvestField, ...] = ()

    def params_of(self, kind: ParamKind) -> list[ToolParam]:
        """Parameters of ``kind``."""
        return [p for p in self.params if p.kind is kind]

    def param(self, name: str) -> ToolParam | None:
        """The parameter called ``name``, if the tool has one."""
        return next((p for p in self.params if p.name == name), None)

    def json_schema(self, *, with_kinds: bool = True) -> dict[str, Any]:
        """OpenAI-style function parameters, with each parameter's kind under ``x-kind``.

        Args:
            with_kinds: Include the ``x-kind`` marks (leave them out for LLM vendors that reject
                unknown schema keywords; the guards read the spec, not the vendor schema).
        """
        properties: dict[str, Any] = {}
        for p in self.params:
            prop: dict[str, Any] = {"type": p.type, "description": p.description}
            if with_kinds:
                prop[KIND_KEY] = p.kind.value
            if p.enum:
                prop["enum"] = list(p.enum)
            properties[p.name] = prop
        return {
            "type": "object",
            "properties": properties,
            "required": [p.name for p in self.params if p.required],
        }
