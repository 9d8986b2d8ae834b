"""What a domain provides to the pipeline."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from voice_agent.agent.brain import Brain
from voice_agent.core.call_state import CallState
from voice_agent.core.effects import OutcomeLookup
from voice_agent.core.tool_spec import ToolSpec
from voice_agent.core.transfer import CallTransfer

ToolHandler = Callable[[dict[str, Any], CallState], Awaitable[dict[str, Any]]]
"""Runs a tool: (arguments, call state) -> structured result. Raises ToolError on bad input."""


class ToolError(Exception):
    """A tool refused its input (unknown record, bad amount...): the message goes to the model."""


@dataclass(frozen=True)
class Domain:
    """Everything the pipeline needs to serve one domain.

    Attributes:
        name: Domain name ("billing").
        slot_model: The typed must-keep facts.
        tools: Tool specs, with identifier and date parameters marked.
        handlers: Tool name -> handler.
        make_brain: Builds the deterministic reference brain for this domain; None for a domain served only by
            a real model (the library's: :class:`voice_agent.LongCall`).
        system_prompt: The agent's instructions; ``{today}`` and ``{reference_date}`` become the call's date, every
            other brace stays as written (no ``str.format``). Empty: the prompt is the LLM service's own.
        hard_constraints: Rules restated at the end of every context.
        outcome_of: Asks the backend for a mutating call by its effect key, so a resumed leg learns the outcome
            of a call a dead leg began (:mod:`voice_agent.core.effects`); None: such a call's outcome is unknown.
    """

    name: str
    slot_model: type[BaseModel]
    tools: tuple[ToolSpec, ...]
    handlers: Mapping[str, ToolHandler]
    make_brain: Callable[[], Brain] | None
    system_prompt: str
    hard_constraints: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    outcome_of: OutcomeLookup | None = None

    def brain(self) -> Brain:
        """A new reference brain for this domain.

        Raises:
            ValueError: The domain has none (it is served by a real model only).
        """
        if self.make_brain is None:
            raise ValueError(f"the {self.name} domain has no reference brain: serve it with a real LLM")
        return self.make_brain()

    def prompt_for(self, today: dt.date) -> str:
        """The system prompt of a call on ``today``: its date placeholders filled, nothing else touched.

        Only the two named placeholders are replaced: a prompt holding JSON or other braces reaches the model
        as written (``str.format`` would raise on it or eat its braces).
        """
        iso = today.isoformat()
        return self.system_prompt.replace("{today}", iso).replace("{reference_date}", iso)

    @property
    def id_shapes(self) -> tuple[str, ...]:
        """The identifier templates callers spell out (``extra["spoken_id_shapes"]``, e.g. ``ACC-####-##``)."""
        return tuple(str(s) for s in self.extra.get("spoken_id_shapes", ()))

    @property
    def id_roles(self) -> dict[str, str]:
        """Template -> the ledger role of a caller-stated identifier of that shape (``extra["spoken_id_roles"]``)."""
        return {str(k): str(v) for k, v in dict(self.extra.get("spoken_id_roles", {})).items()}

    @property
    def recognizer_topic(self) -> str | None:
        """One sentence on what callers talk about, a hint for the recogniser (``extra["recognizer_topic"]``)."""
        supplied = self.extra.get("recognizer_topic")
        return str(supplied) if supplied else None

    def use_transfer(self, transfer: CallTransfer) -> bool:
        """Gives the domain's transfer tool a served call's line to its provider (``extra["use_transfer"]``).

        Returns:
            Whether the domain took it (a domain without a transfer tool has nothing to move the call with).
        """
        use = self.extra.get("use_transfer")
        if use is None:
            return False
        use(transfer)
        return True

    def tool(self, name: str) -> ToolSpec | None:
        """The spec of tool ``name``, if the domain has it."""
        return next((t for t in self.tools if t.name == name), None)
