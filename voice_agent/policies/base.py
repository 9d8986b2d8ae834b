"""What a memory policy does for the pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from voice_agent.core.assembler import AssembledContext
from voice_agent.core.call_state import CallState
from voice_agent.core.drop_log import SummaryPass
from voice_agent.core.policy import ScheduledPass
from voice_agent.core.summary import Summarizer
from voice_agent.policies.rolling import TextSummarizer


class Policy(Protocol):
    """Decides what the model sees: which lanes, which summary, how many raw turns."""

    @property
    def name(self) -> str:
        """``lanes``, ``rolling`` or ``window``."""
        ...

    async def on_turn_start(self, state: CallState) -> SummaryPass | None:
        """Runs the summary pass due at the start of ``state.turn``, if any."""
        ...

    def schedule(self, state: CallState) -> ScheduledPass | None:
        """The pass due at the start of ``state.turn``, if any, without running it."""
        ...

    async def run(self, state: CallState, scheduled: ScheduledPass) -> SummaryPass:
        """Runs a pass :meth:`schedule` returned (now, or later in the background)."""
        ...

    def build(self, state: CallState, retrieved: Sequence[str] = ()) -> AssembledContext:
        """The context for the current inference."""
        ...


class PolicySummarizer(Summarizer, TextSummarizer, Protocol):
    """A summarizer that serves both ``lanes`` (structured) and ``rolling`` (free text)."""


@runtime_checkable
class ServesPipecat(Protocol):
    """A summarizer that also brings the pipecat LLM service pipecat's own summarizer may run on."""

    def pipecat_llm(self) -> Any:
        """The LLM service (a pipecat ``LLMService``) answering pipecat's summary requests."""
        ...


class NoPasses:
    """For a policy with no summary pass of its own (``window``; ``pipecat``, whose summary is
    pipecat's): the turn's opening, the schedule and the run are all nothing."""

    name: str

    async def on_turn_start(self, state: CallState) -> SummaryPass | None:
        """No pass to run."""
        return None

    def schedule(self, state: CallState) -> ScheduledPass | None:
        """Never a pass."""
        return None

    async def run(self, state: CallState, scheduled: ScheduledPass) -> SummaryPass:
        """Never called: :meth:`schedule` returns nothing to run."""
        raise RuntimeError(f"the {self.name} policy has no summary pass of its own")
