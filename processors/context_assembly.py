"""The context stage: every inference gets a context assembled from the lanes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from processors.speculative_retrieval import KnowledgeFrame
from voice_agent.core.assembler import AssembledContext
from voice_agent.core.caller_history import CallerHistoryReader, message_text
from voice_agent.policies.pipecat_builtin import is_pipecat_summary
from voice_agent.services.vendor_hooks import MessageDialect


class AssemblySession(Protocol):
    """What the context stage uses of the call (:class:`voice_agent.call.session.CallSession`)."""

    @property
    def uses_pipeline_context(self) -> bool:
        """Whether the model is shown pipecat's own context (the ``pipecat`` policy) rather than the lanes'."""
        ...

    @property
    def system_prompt(self) -> str:
        """The prompt the LLM service holds as its system instruction."""
        ...

    async def begin_turn(self, caller_text: str) -> int:
        """Opens a turn with the caller's words."""
        ...

    async def sync_caller_messages(self, caller_messages: Sequence[str]) -> int | None:
        """Opens a turn with the caller's words not seen before, if any."""
        ...

    def assemble(self) -> AssembledContext:
        """The context for the next inference."""
        ...

    def count_request(self) -> None:
        """Counts one more inference in the turn."""
        ...

    def take_knowledge(self, texts: Sequence[str], record: Mapping[str, Any]) -> None:
        """The knowledge retrieved for the caller's final words."""
        ...


class CallerMessages:
    """The caller messages of the pipeline's own context already handed to the session, by identity.

    Under the ``pipecat`` policy pipecat's summarizer replaces older messages with one summary message (a
    ``user`` message too), so counting caller messages no longer finds the new ones. pipecat keeps the
    message objects it does not fold, so "not seen before" is exact. Shared by the two context stages.

    The summary message is told apart by :func:`~voice_agent.policies.pipecat_builtin.is_pipecat_summary`
    (the pipeline sets pipecat's template to match). A speculative user turn would add a provisional message
    and then the real one; the call's turn strategies never speculate, so each message is one turn's words.
    """

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._kept: list[object] = []  # holds the seen messages, so their ids are never reused

    def new(self, messages: list[Any]) -> list[str]:
        """The caller's words not handed on yet.

        Args:
            messages: The pipeline's context messages.

        Returns:
            The texts of the ``user`` messages not seen before, in order, pipecat's summary excluded.
        """
        # New caller messages are appended after every one seen, so the scan walks back from the end and stops
        # at the newest caller message already seen: a turn costs what it added, not the call's length.
        fresh = []
        for message in reversed(messages):
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            if id(message) in self._seen:
                break
            self._seen.add(id(message))
            self._kept.append(message)
            fresh.append(message_text(message.get("content")))
        return [text for text in reversed(fresh) if not is_pipecat_summary("user", text)]


class ContextAssembly(FrameProcessor):
    """Replaces each LLMContextFrame with one built from the session's lanes.

    Place one instance before the LLM (user turns, downstream) and one right after it
    (re-runs after tool results, pushed upstream by the assistant aggregator). They
    share the session. pipecat's own stored history is never mutated: the LLM gets a
    new LLMContext, so tool call/result pairing in the canonical history stays intact.
    Under the ``pipecat`` policy the frame goes on unchanged (pipecat's own context is
    what that policy shows the model); the caller's new words still open the turn.
    The history's messages that are no turn's (its system message, notes other processors
    add) go to the model first, unchanged; so do the context's tools and tool choice. The messages reach pipecat
    in the LLM vendor's dialect (the lane role, prompt-cache breakpoints at the end of the part no pass changes and
    at the end of the stable prefix); under
    ``pipecat`` the context is pipecat's own and is not rewritten.

    A :class:`~processors.speculative_retrieval.KnowledgeFrame` (the retrieval stage's, ahead of the caller's
    words) goes to the session here and no further.

    Args:
        session: The call.
        caller_messages: The caller messages already seen (used under ``pipecat``); the pipeline gives both
            stages one (a stage alone gets its own).
        history: The reader of the history's caller messages (the other policies); the pipeline gives both
            stages one, so each message is scanned once per call (a stage alone gets its own).
        dialect: What the LLM's vendor needs of the messages; None: the lanes' own (OpenAI's API).
    """

    def __init__(self, session: AssemblySession, caller_messages: CallerMessages | None = None,
                 history: CallerHistoryReader | None = None, dialect: MessageDialect | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._session = session
        self._caller_messages = caller_messages if caller_messages is not None else CallerMessages()
        # The history grows every turn: only the messages appended since the last inference are scanned.
        self._history = history if history is not None else CallerHistoryReader()
        self._dialect = dialect if dialect is not None else MessageDialect()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Dispatches LLMContextFrames to the assembler, knowledge to the session; forwards the rest."""
        await super().process_frame(frame, direction)
        if isinstance(frame, KnowledgeFrame):
            self._session.take_knowledge(frame.texts, frame.record)
            return
        if isinstance(frame, LLMContextFrame):
            frame = await self._assemble(frame)
        await self.push_frame(frame, direction)

    async def _assemble(self, frame: LLMContextFrame) -> LLMContextFrame:
        canonical = frame.context
        if self._session.uses_pipeline_context:
            new = [t for t in self._caller_messages.new(canonical.get_messages()) if t.strip()]
            if new:
                await self._session.begin_turn(" ".join(new))
            self._session.count_request()
            return frame
        history = canonical.get_messages()
        users = self._history.read(history)
        # New caller words since the last inference open a turn (and maybe a summary pass).
        await self._session.sync_caller_messages(users)
        assembled = self._session.assemble()
        messages = cast(list[Any], assembled.messages)  # plain OpenAI-format dicts
        stable, fixed = assembled.stable_count, assembled.fixed_count
        if messages and messages[0] == {"role": "system", "content": self._session.system_prompt}:
            # pipecat 1.9+ takes the prompt as the service's system instruction (set once per call
            # by build_call_pipeline); a leading system message in the context is deprecated.
            messages = messages[1:]
            stable, fixed = max(stable - 1, 0), max(fixed - 1, 0)
        # What the lanes do not hold goes first, as it stands in the history: the system message of the user's
        # own context, notes other processors added. It only grows, so the cached prefix survives it.
        passthrough = self._history.passthrough(history)
        messages = self._dialect.apply([*passthrough, *messages], len(passthrough) + stable,
                                       len(passthrough) + fixed if fixed else 0)
        context = LLMContext(messages=messages, tools=canonical.tools, tool_choice=canonical.tool_choice)
        return LLMContextFrame(context=context, speculation=frame.speculation)
