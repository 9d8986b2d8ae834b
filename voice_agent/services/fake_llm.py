"""A scripted fake LLM, in the spirit of livekit's ``FakeLLM``: replies and tool calls per turn, no model.

It lets lanes, guards and recorders be tested without the reference brain: the
script says exactly what the "model" answers on each turn, including paraphrased
arguments and mutated identifiers, an error, or a reply that never comes. It runs
tools through pipecat's own function-calling machinery, so the guarded tool layer
sees exactly what it sees with a real model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    FunctionCallFromLLM,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext

from voice_agent.harness.scenarios import Scenario
from voice_agent.services.offline_llm import OfflineLLMService


@dataclass(frozen=True)
class FakeToolCall:
    """One tool call the fake model makes.

    Attributes:
        name: The tool.
        arguments: Its arguments, exactly as the "model" writes them.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeReply:
    """What the fake model does on one inference.

    Attributes:
        text: Words to say (may be empty when it only calls tools).
        tool_calls: Tools to call; their results come back as the next inference of the same turn.
        error: Report this error (an ErrorFrame, as a failing LLM vendor does) instead of answering.
        hang: Never answer (an LLM vendor that hangs); the call's own timeouts must deal with it.
        delay: Seconds before anything is sent (a slow first token); with ``error``, before the error.
        hang_after_text: Send the text, then never finish (a stream that stalls after its first token).
    """

    text: str = ""
    tool_calls: tuple[FakeToolCall, ...] = ()
    error: str | None = None
    hang: bool = False
    delay: float = 0.0
    hang_after_text: bool = False


DEFAULT_REPLY = FakeReply(text="Okay.")
"""Said when the script has nothing more for a turn."""


class FakeLLM(OfflineLLMService):
    """Answers each inference from a script keyed by turn.

    A new turn starts with every inference whose last turn message is not a tool result; the
    inferences after tool results take the turn's next replies, and so does a retry (an inference
    of exactly the context received last, as the call's LLM watchdog sends after a failure).
    Everything the fake received is kept in :attr:`received` for assertions.

    Args:
        script: Turn number (from 1) -> its replies, in order; missing turns say ``default``.
        default: The reply when the script is silent.
        **kwargs: Passed to :class:`~voice_agent.services.offline_llm.OfflineLLMService` (``system_instruction``)
            and pipecat's ``LLMService``.
    """

    def __init__(
        self, script: Mapping[int, Sequence[FakeReply]], *, default: FakeReply = DEFAULT_REPLY, **kwargs: Any
    ) -> None:
        super().__init__("fake-llm", **kwargs)
        self._script = {turn: list(replies) for turn, replies in script.items()}
        self._default = default
        self._turn = 0
        self._step = 0
        self.received: list[list[dict[str, Any]]] = []
        """Every context the fake received, as plain messages."""
        self.received_tools: list[list[str]] = []
        """The names of the tools each context offered the model, in order."""
        self.instructions: list[str | None] = []
        """The system instruction the model had at each inference."""

    def _next_reply(self, messages: Sequence[Mapping[str, Any]], *, retry: bool = False) -> FakeReply:
        # Lane messages (KNOWN FACTS, rules) may follow the raw turns: look at the last turn message.
        turn_roles = [m.get("role") for m in messages if m.get("role") in ("user", "assistant", "tool")]
        if not retry and (not turn_roles or turn_roles[-1] != "tool"):
            self._turn += 1
            self._step = 0
        replies = self._script.get(self._turn, [])
        reply = replies[self._step] if self._step < len(replies) else self._default
        self._step += 1
        return reply

    async def respond(self, context: LLMContext) -> None:
        """Plays the next scripted reply of the turn."""
        messages = [dict(m) for m in context.get_messages() if isinstance(m, dict)]
        retry = bool(self.received) and self._turn > 0 and messages == self.received[-1]
        self.received.append(messages)
        tools = context.tools
        self.received_tools.append([t.name for t in tools.standard_tools] if isinstance(tools, ToolsSchema) else [])
        self.instructions.append(self.system_instruction)
        reply = self._next_reply(messages, retry=retry)
        if reply.delay > 0:
            await asyncio.sleep(reply.delay)
        if reply.hang:
            await asyncio.Event().wait()  # until the call is cancelled
        if reply.error is not None:
            await self.push_error(reply.error)
            return
        await self.push_frame(LLMFullResponseStartFrame())
        if reply.text:
            await self.push_frame(LLMTextFrame(reply.text))
        if reply.hang_after_text:
            await asyncio.Event().wait()
        if reply.tool_calls:
            await self.run_function_calls([
                FunctionCallFromLLM(function_name=call.name, tool_call_id=self.next_call_id("fake"),
                                    arguments=dict(call.arguments), context=context)
                for call in reply.tool_calls
            ])
        await self.push_frame(LLMFullResponseEndFrame())


_QUOTE_WORDS = 4
"""Shorter arguments are values, not quotations of what the caller said."""


def _requote(value: Any, record: Scenario, original: Scenario) -> Any:
    """An argument quoting a caller line of ``original``, re-quoted from ``record``'s rewording of that line."""
    if not isinstance(value, str) or len(value.split()) < _QUOTE_WORDS:
        return value  # identifiers, dates and amounts are kept as recorded; only quoted words are reworded
    wanted = " ".join(value.lower().split()).strip(" .,")
    for index, (old, new) in enumerate(zip(original.turns, record.turns, strict=False)):
        if old.speaker == "caller" and old.text != new.text and wanted in " ".join(old.text.lower().split()):
            return record.turns[index].text
    return value


def script_from_record(record: Scenario, original: Scenario | None = None) -> dict[int, list[FakeReply]]:
    """A FakeLLM script that replays a call record: each exchange's recorded actions, then its agent line.

    The "model" calls exactly the recorded tools with the recorded arguments, whatever it was told:
    what the call kept is judged by a recorder from what the model received, and whether each call
    may run is the guards' decision, as with a real model.

    Args:
        record: A scenario or call record (utterances from 0, actions before utterance ``turn``).
        original: When ``record`` is a paraphrase of ``original``: an argument that quotes a reworded caller
            line quotes the reworded line instead, as a model that quotes the caller would.
    """
    script: dict[int, list[FakeReply]] = {}
    for index, utterance in enumerate(record.turns):
        if utterance.speaker != "agent":
            continue
        exchange = index // 2 + 1
        calls = tuple(
            FakeToolCall(a.tool, {k: _requote(v, record, original) if original else v for k, v in a.args.items()})
            for a in record.actions_in_exchange(exchange)
        )
        replies = [FakeReply(tool_calls=calls)] if calls else []
        script[exchange] = [*replies, FakeReply(text=utterance.text)]
    return script
