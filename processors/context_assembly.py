"""The context stage: every inference gets a context assembled from the lanes."""

from __future__ import annotations

from typing import Any, cast

from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from voice_agent.session import CallSession


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: keep the text parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class ContextAssembly(FrameProcessor):
    """Replaces each LLMContextFrame with one built from the session's lanes.

    Place one instance before the LLM (user turns, downstream) and one right after it
    (re-runs after tool results, pushed upstream by the assistant aggregator). They
    share the session. pipecat's own stored history is never mutated: the LLM gets a
    new LLMContext, so tool call/result pairing in the canonical history stays intact.

    Args:
        session: The call.
    """

    def __init__(self, session: CallSession, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._session = session

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Dispatches LLMContextFrames to the assembler; forwards the rest."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            frame = await self._assemble(frame)
        await self.push_frame(frame, direction)

    async def _assemble(self, frame: LLMContextFrame) -> LLMContextFrame:
        canonical = frame.context
        users = [_text(m.get("content")) for m in canonical.get_messages() if isinstance(m, dict)
                 and m.get("role") == "user"]
        # New caller words since the last inference open a turn (and maybe a summary pass).
        await self._session.sync_caller_messages(users)
        assembled = self._session.assemble()
        messages = cast(list[Any], assembled.messages)  # plain OpenAI-format dicts
        if messages and messages[0] == {"role": "system", "content": self._session.system_prompt}:
            # pipecat 1.9+ takes the prompt as the service's system instruction (set once per call
            # by build_call_pipeline); a leading system message in the context is deprecated.
            messages = messages[1:]
        context = LLMContext(messages=messages, tools=canonical.tools, tool_choice=canonical.tool_choice)
        return LLMContextFrame(context=context, speculation=frame.speculation)
