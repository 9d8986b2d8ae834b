"""The tool layer: every handler registered on the LLM runs behind the guards."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from pipecat.adapters.llm.schemas.direct_function import DirectFunctionWrapper
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    FunctionCallFromLLM,
    FunctionCallResultProperties,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSSpeakFrame,
)
from pipecat.services.llm_service import FunctionCallParams, LLMService

from voice_agent.core.effects import running
from voice_agent.core.llm_recovery import RecoveryLines
from voice_agent.core.tool_gate import ToolAdmission
from voice_agent.domains.base import Domain, ToolError
from voice_agent.settings import Settings

FunctionHandler = Callable[[FunctionCallParams], Awaitable[None]]
"""A pipecat function-call handler: it answers through ``params.result_callback``."""


class ToolSession(Protocol):
    """What the tool layer uses of the call (:class:`voice_agent.call.session.CallSession`): its tools and guards."""

    @property
    def domain(self) -> Domain:
        """The call's tools and their handlers."""
        ...

    @property
    def settings(self) -> Settings:
        """The call's settings: ``dates.holding_line``, what the caller hears while a model reads the call before a
        date-bearing action ("" for nothing)."""
        ...

    def reads_dates(self, name: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a model reads the call before this tool call runs."""
        ...

    async def execute_tool(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Guards, runs (the domain's handler) and harvests one tool call."""
        ...

    async def admit_tool_call(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> ToolAdmission:
        """The guards' part of a tool call, before it runs."""
        ...

    def tool_returned(self, name: str, call_id: str, admission: ToolAdmission, result: Any) -> None:
        """Records an admitted call's result."""
        ...

    async def settle_effect(self, name: str, admission: ToolAdmission, result: Any, *, failed: bool = False) -> None:
        """Records the outcome of an admitted mutating call in the effect log."""
        ...

    def tool_failed(self, name: str, call_id: str, error: BaseException) -> dict[str, Any]:
        """Records an admitted call whose tool raised; the result for the model."""
        ...

    def cancel_tool(self, name: str, call_id: str) -> None:
        """Records a tool call cancelled by a barge-in or a timeout."""
        ...


class CallGroups:
    """The tool calls of each model response that have not returned yet, so the model answers once per response.

    pipecat runs the model again after a result when no sibling of its response is in progress; a sibling that has
    started but not yet said so (an instant tool returns before the next one's task runs) is not counted, so a
    response with two calls got two answers, the second one landing in the caller's next turn. Each result whose
    siblings are still out is sent with ``run_llm=False``; the last one leaves the choice to pipecat.
    """

    def __init__(self) -> None:
        self._out: dict[str, set[str]] = {}

    async def started(self, _llm: LLMService[Any], calls: Sequence[FunctionCallFromLLM]) -> None:
        """``on_function_calls_started``: the response's calls, all out."""
        group = {call.tool_call_id for call in calls}
        for call_id in group:
            self._out[call_id] = group

    def settle(self, call_id: str) -> bool:
        """Marks ``call_id`` returned (or cancelled); whether siblings of its response are still out."""
        group = self._out.pop(call_id, set())
        group.discard(call_id)
        return bool(group)

    def properties(self, call_id: str, given: FunctionCallResultProperties | None = None
                   ) -> FunctionCallResultProperties | None:
        """The properties a final result goes with: ``given``, with ``run_llm=False`` while siblings are out."""
        if not self.settle(call_id):
            return given
        return dataclasses.replace(given, run_llm=False) if given else FunctionCallResultProperties(run_llm=False)

    def watch(self, llm: LLMService[Any]) -> CallGroups:
        """Follows the responses of ``llm``; returns itself."""
        llm.add_event_handler("on_function_calls_started", self.started)
        return self


def tools_schema(session: ToolSession) -> ToolsSchema:
    """The domain's tools as pipecat advertises them to the model (without our kind marks)."""
    schemas = []
    for tool in session.domain.tools:
        params = tool.json_schema(with_kinds=False)
        schemas.append(FunctionSchema(tool.name, tool.description, params["properties"], params["required"]))
    return ToolsSchema(standard_tools=schemas)


def guarded(session: ToolSession, handler: FunctionHandler | None = None, groups: CallGroups | None = None
            ) -> FunctionHandler:
    """A pipecat handler that runs one tool call behind the call's guards.

    The guards run first; a refusal becomes the tool result the model reads, so the bot is never left silent.
    An admitted call runs ``handler`` (a pipecat handler, the user's own, given the arguments as the ledger
    spells them) or, with None, the domain's own handler; its result is recorded in the transcript lane and
    harvested into the ledger and slots before it goes on to pipecat. A call cancelled by a barge-in is
    recorded as cancelled. Before a date-bearing action a configured model reader reads the call while the
    caller hears the holding line.

    Args:
        session: The call.
        handler: The handler to run once the guards admit a call; None: the domain's.
        groups: The calls of each response still out (:class:`CallGroups`), so the model answers a response once;
            None: as pipecat decides.
    """
    lines = RecoveryLines()
    calls = groups or CallGroups()  # unwatched, it knows no siblings: pipecat decides

    async def run(params: FunctionCallParams) -> None:
        name, call_id = params.function_name, params.tool_call_id
        holding_line = session.settings.dates.holding_line
        if session.reads_dates(name, params.arguments) and holding_line:
            # The model reads the call before a date-bearing action runs: the caller is not left in silence.
            await params.llm.push_frame(TTSSpeakFrame(holding_line, append_to_context=False))
        try:
            if handler is None:
                result = await session.execute_tool(name, call_id, dict(params.arguments))
            else:
                admission = await session.admit_tool_call(name, call_id, dict(params.arguments))
                if admission.refusal is None:
                    await _run_own(session, handler, params, admission, calls)
                    return
                result = admission.refusal
        except asyncio.CancelledError:
            calls.settle(call_id)
            session.cancel_tool(name, call_id)
            raise
        if result.get("status") == "stopped":
            # One tool call too many in this turn: the model is not asked again (no loop can run up a bill),
            # and the caller hears a line, said the way an answer is (the output guard, TTS and the turn log).
            calls.settle(call_id)
            await params.result_callback(result, properties=FunctionCallResultProperties(run_llm=False))
            await params.llm.push_frame(LLMFullResponseStartFrame())
            await params.llm.push_frame(LLMTextFrame(lines.tool_loop))
            await params.llm.push_frame(LLMFullResponseEndFrame())
            return
        await params.result_callback(result, properties=calls.properties(call_id))

    return run


async def _run_own(
    session: ToolSession, handler: FunctionHandler, params: FunctionCallParams, admission: ToolAdmission,
    calls: CallGroups,
) -> None:
    """Runs the user's handler on an admitted call; its final result is recorded and harvested on its way."""
    name, call_id = params.function_name, params.tool_call_id
    answered = False

    async def record(result: Any, *, properties: FunctionCallResultProperties | None = None) -> None:
        nonlocal answered
        if properties is None or properties.is_final:  # an async tool's progress reports are not its result
            answered = True
            session.tool_returned(name, call_id, admission, result)
            await session.settle_effect(name, admission, result)
            properties = calls.properties(call_id, properties)
        await params.result_callback(result, properties=properties)

    try:
        with running(admission.effect):  # the handler can hand running_effect() to its backend
            await handler(dataclasses.replace(params, arguments=admission.arguments, result_callback=record))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # as for the domain's tools: the model hears the failure, the call goes on
        if answered:
            raise
        if isinstance(exc, ToolError):  # refused: nothing done (anything else may have gone through)
            await session.settle_effect(name, admission, None, failed=True)
        await params.result_callback(session.tool_failed(name, call_id, exc), properties=calls.properties(call_id))


def register_guarded_tools(llm: LLMService[Any], session: ToolSession) -> None:
    """Registers one guarded handler per domain tool on ``llm`` (the domain's own handlers run)."""
    handler = guarded(session, groups=CallGroups().watch(llm))
    for tool in session.domain.tools:
        llm.register_function(tool.name, handler)
    # A tool the model invents reaches the gate too: it answers "no tool named X" (and counts toward the cap).
    llm.register_function(None, handler)


def registered_tools(llm: LLMService[Any]) -> list[str]:
    """The tool names with a handler registered on ``llm``, in registration order.

    pipecat lists its handlers only privately (``LLMService._functions``, pinned by a test).

    Raises:
        ValueError: A handler is one of pipecat's direct functions (they carry their own schema), or a catch-all
            (the guards check each tool by name): register a handler per tool name instead.
    """
    names = []
    for name, item in llm._functions.items():
        if name is None or isinstance(item.handler, DirectFunctionWrapper):
            raise ValueError(f"{'the catch-all handler' if name is None else 'tool ' + name}: only a handler "
                             "registered for one tool name can be guarded (llm.register_function(name, handler))")
        names.append(name)
    return names


def guard_registered_handlers(llm: LLMService[Any], session: ToolSession) -> list[str]:
    """Puts every handler already registered on ``llm`` behind the guards, each with its own options.

    Every tool call is then recorded in the transcript lane, whatever the tool: the lanes rebuild each
    request from it, so a tool left outside would be called again and again. A catch-all handler is added:
    a tool the model invents is answered by the gate ("no tool named X"). Handlers are read as
    :func:`registered_tools` reads them and registered again through the public ``register_function``.

    Returns:
        The names of the tools now guarded.

    Raises:
        ValueError: As :func:`registered_tools`.
    """
    names = registered_tools(llm)
    groups = CallGroups().watch(llm)
    for name in names:
        item = llm._functions[name]
        handler = cast(FunctionHandler, item.handler)  # not a direct function: registered_tools checked
        llm.register_function(name, guarded(session, handler, groups),
                              cancel_on_interruption=item.cancel_on_interruption, timeout_secs=item.timeout_secs,
                              cancellable_by_llm=item.cancellable_by_llm)
    llm.register_function(None, guarded(session, groups=groups))
    return names
