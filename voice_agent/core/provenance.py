"""Provenance as a type: where a value in the lanes came from (DESIGN rule 8).

Only a tool result field and a caller span are sources the call may state as fact; a value
the model produced is kept apart and marked, never rendered as verbatim truth.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolField:
    """A field of a structured tool result.

    Attributes:
        tool: The tool that returned it.
        field: The result field.
        turn: The turn of the result.
    """

    tool: str
    field: str
    turn: int

    def render(self) -> str:
        """``tool.field, turn N``."""
        return f"{self.tool}.{self.field}, turn {self.turn}"


@dataclass(frozen=True)
class CallerSpan:
    """The caller's own words, quoted exactly from one utterance of the transcript lane.

    Attributes:
        turn: The turn of the utterance.
        quote: The exact words.
    """

    turn: int
    quote: str

    def render(self) -> str:
        """``caller, turn N``."""
        return f"caller, turn {self.turn}"


@dataclass(frozen=True)
class ModelOutput:
    """A value the model wrote (a free-text tool argument echoed back): never a verbatim fact.

    Attributes:
        tool: The tool whose argument it was.
        turn: The turn of the call.
    """

    tool: str
    turn: int

    def render(self) -> str:
        """``model, turn N``."""
        return f"model via {self.tool}, turn {self.turn}"


Provenance = ToolField | CallerSpan | ModelOutput
"""Where a slot value or ledger entry came from."""


def is_verbatim(source: Provenance) -> bool:
    """Whether a value with this source may be rendered under the verbatim KNOWN FACTS header."""
    return isinstance(source, ToolField | CallerSpan)
