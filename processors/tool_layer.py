"""The tool layer: every handler registered on the LLM runs behind the guards."""

from __future__ import annotations

import asyncio

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    FunctionCallResultProperties,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSSpeakFrame,
)
from pipecat.services.llm_service import FunctionCallParams, LLMService

from voice_agent.core.llm_recovery import RecoveryLines
from voice_agent.session import CallSession


def tools_schema(session: CallSession) -> ToolsSchema:
    """The domain's tools as pipecat advertises them to the model (without our kind marks)."""
    schemas = []
    for tool in session.domain.tools:
        params = tool.json_schema(with_kinds=False)
        schemas.append(FunctionSchema(tool.name, tool.description, params["properties"], params["required"]))
    return ToolsSchema(standard_tools=schemas)


def register_guarded_tools(llm: LLMService, session: CallSession) -> None:
    """Registers one guarded handler per domain tool on ``llm``.

    The guards run first; a rejection becomes the tool result the model reads, so the
    bot is never left silent. A call cancelled by a barge-in is recorded as cancelled. Before a
    date-bearing action a configured model reader reads the call while the caller hears the
    holding line.
    """

    async def handler(params: FunctionCallParams) -> None:
        if session.reads_dates(params.function_name, params.arguments) and session.config.holding_line:
            # The model reads the call before a date-bearing action runs: the caller is not left in silence.
            await params.llm.push_frame(TTSSpeakFrame(session.config.holding_line, append_to_context=False))
        try:
            result = await session.execute_tool(params.function_name, params.tool_call_id, dict(params.arguments))
        except asyncio.CancelledError:
            session.cancel_tool(params.function_name, params.tool_call_id)
            raise
        if result.get("status") == "stopped":
            # One tool call too many in this turn: the model is not asked again (no loop can run up a bill),
            # and the caller hears a line, said the way an answer is (the output guard, TTS and the turn log).
            await params.result_callback(result, properties=FunctionCallResultProperties(run_llm=False))
            await params.llm.push_frame(LLMFullResponseStartFrame())
            await params.llm.push_frame(LLMTextFrame(lines.tool_loop))
            await params.llm.push_frame(LLMFullResponseEndFrame())
            return
        await params.result_callback(result)

    lines = RecoveryLines()
    for tool in session.domain.tools:
        llm.register_function(tool.name, handler)
    # A tool the model invents reaches the gate too: it answers "no tool named X" (and counts toward the cap).
    llm.register_function(None, handler)
