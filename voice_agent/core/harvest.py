"""The harvest API: the only writer of slots and the ledger (from structured tool results and quote-checked
caller spans)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from voice_agent.core.ledger import Ledger
from voice_agent.core.provenance import CallerSpan, ModelOutput, Provenance, ToolField
from voice_agent.core.slots import SlotError, SlotLane
from voice_agent.core.tool_spec import HarvestField, ParamKind, ToolSpec


@dataclass(frozen=True)
class Harvested:
    """What one tool result contributed.

    Attributes:
        ledger: (role, value) pairs recorded.
        slots: Slot names written.
        errors: Values that did not fit the slot model (recorded, never raised).
    """

    ledger: tuple[tuple[str, str], ...]
    slots: tuple[str, ...]
    errors: tuple[str, ...]


def _walk(result: Any, path: str) -> Iterator[tuple[Any, Mapping[str, Any]]]:
    """Yields (value, owning object) for ``path`` in ``result``; ``a[].b`` fans out over list ``a``."""
    head, dot, rest = path.partition(".")
    if not isinstance(result, Mapping):
        return
    if head.endswith("[]"):
        items = result.get(head[:-2])
        if isinstance(items, list):
            for item in items:
                yield from _walk(item, rest) if dot else ()
        return
    if dot:
        yield from _walk(result.get(head), rest)
    elif head in result and result[head] not in (None, ""):
        yield result[head], result


def _role(spec: HarvestField, owner: Mapping[str, Any]) -> str:
    assert spec.role is not None
    try:
        return spec.role.format_map({k: v for k, v in owner.items() if not isinstance(v, (dict, list))})
    except (KeyError, ValueError):
        return spec.role


def record_caller_arguments(tool: ToolSpec, arguments: Mapping[str, Any], ledger: Ledger, turn: int) -> None:
    """Records identifier arguments the ledger does not hold yet as caller-stated (unverified).

    Called once the ID guard has accepted a call whose identifier came from the raw
    recent turns: the caller said it, so it enters the ledger flagged unverified.
    """
    for param in tool.params_of(ParamKind.IDENTIFIER):
        value = arguments.get(param.name)
        if isinstance(value, str) and value:
            if ledger.find(value):
                ledger.touch(value, turn)
            else:
                ledger.record_from_caller(param.role or param.name, value, turn)


def _source(tool: ToolSpec, spec: HarvestField, field_name: str, value: Any, turn: int,
            quoted: Mapping[str, int]) -> Provenance:
    """A result field's source: the tool, unless it hands back an argument (then the argument's source)."""
    if spec.from_param is None:
        return ToolField(tool.name, field_name, turn)
    param = tool.param(spec.from_param)
    if param is not None and param.kind is ParamKind.CALLER_QUOTE and spec.from_param in quoted:
        return CallerSpan(quoted[spec.from_param], str(value))
    return ModelOutput(tool.name, turn)


def harvest_result(
    tool: ToolSpec, result: Any, ledger: Ledger, slots: SlotLane[Any], turn: int,
    quoted: Mapping[str, int] | None = None,
) -> Harvested:
    """Reads identifiers and slot values from a structured result by field name.

    Never looks at free text: a value enters only through a declared field, with its source:
    the tool's field, or, for a field that hands an argument back, that argument's source (the
    caller span a ``caller_quote`` argument was checked against, else the model).

    Args:
        quoted: ``caller_quote`` argument -> the turn of the caller utterance it quotes.
    """
    recorded: list[tuple[str, str]] = []
    written: list[str] = []
    errors: list[str] = []
    for spec in tool.harvest:
        field_name = spec.path.rsplit(".", 1)[-1]
        source = f"{tool.name}.{field_name}"
        for value, owner in _walk(result, spec.path):
            if spec.role is not None and isinstance(value, (str, int)):
                role = _role(spec, owner)
                ledger.record_from_tool(role, str(value), turn, tool.name, field_name, listed="[]" in spec.path)
                recorded.append((role, str(value)))
            if spec.slot is not None:
                try:
                    slots.apply_harvest(spec.slot, value, turn, source,
                                        _source(tool, spec, field_name, value, turn, quoted or {}))
                    written.append(spec.slot)
                except SlotError as exc:
                    errors.append(str(exc))
    return Harvested(tuple(recorded), tuple(written), tuple(errors))


def harvest_caller_spans(
    spans: Sequence[tuple[str, CallerSpan]], slots: SlotLane[Any], source: str
) -> Harvested:
    """Writes quote-checked caller spans into their slots, each with its caller span as provenance.

    What the caller-span extractor found (:mod:`voice_agent.core.caller_spans`): every span's quote was
    found in the caller's words by the quote guard before it reaches here, as for ``update_case``'s
    ``caller_quote`` arguments.

    Args:
        spans: (slot, caller span) pairs.
        slots: The call's slot lane.
        source: Names the writer in the slot's ``source`` (``caller_spans.llm``).
    """
    written: list[str] = []
    errors: list[str] = []
    for slot, span in spans:
        try:
            slots.apply_harvest(slot, span.quote, span.turn, source, span)
            written.append(slot)
        except SlotError as exc:
            errors.append(str(exc))
    return Harvested((), tuple(written), tuple(errors))
