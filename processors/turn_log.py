"""The turn log: records what the agent said as heard, and closes each turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pipecat.frames.frames import (
    Frame,
    FunctionCallsStartedFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    TextFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


class TurnLogSession(Protocol):
    """What the turn log uses of the call (:class:`voice_agent.call.session.CallSession`)."""

    @property
    def turn(self) -> int:
        """The turn in progress (0 before the caller has spoken)."""
        ...

    def record_agent(self, text: str, *, interrupted: bool = False) -> None:
        """Records what the agent said, as heard."""
        ...


class TurnLog(FrameProcessor):
    """Aggregates spoken text per response and closes the turn when a response calls no tool.

    Place it where text is released as heard: after the output guard in text mode,
    after the output transport in audio mode.

    Event handlers:
        on_turn_completed(processor, turn): the agent finished its answer to turn ``turn``.
        on_interrupted(processor): an interruption reached the end of the output side.

    Args:
        session: The call.
        on_close: Called with the turn as it closes, before ``on_turn_completed`` (the call's pipeline emits the
            turn's telemetry span with it).
    """

    def __init__(self, session: TurnLogSession, on_close: Callable[[int], None] | None = None,
                 **kwargs: Any) -> None:
        # Direct mode: frames are handled in the pushing processor's task, not queued for a task of this
        # one's own (two queue hops and task switches per frame saved; nothing here waits on anything).
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(**kwargs)
        self._session = session
        self._on_close = on_close
        self._text: list[str] = []
        self._calls_in_response = False
        self._register_event_handler("on_turn_completed")
        self._register_event_handler("on_interrupted")

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Tracks responses and tool calls; forwards every frame unchanged."""
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM:
            if isinstance(frame, LLMFullResponseStartFrame):
                self._text = []
            elif isinstance(frame, FunctionCallsStartedFrame):
                # A system frame: it can overtake the response's own start frame, so the flag
                # is cleared only once the response has been closed.
                self._calls_in_response = True
            elif isinstance(frame, TextFrame) and frame.append_to_context:
                # A TTS forwards the sentence it synthesised (append_to_context False) besides the
                # words the transport releases as they are played: only the latter were heard.
                spaced = frame.includes_inter_frame_spaces or not self._text
                self._text.append(frame.text if spaced else " " + frame.text)
            elif isinstance(frame, LLMFullResponseEndFrame):
                await self._close_response()
            elif isinstance(frame, InterruptionFrame):
                await self._interrupted()
        await self.push_frame(frame, direction)

    async def _close_response(self) -> None:
        text = "".join(self._text).strip()
        self._text = []
        self._session.record_agent(text)
        had_calls, self._calls_in_response = self._calls_in_response, False
        if not had_calls:
            await self._complete()

    async def _interrupted(self) -> None:
        heard = "".join(self._text).strip()
        self._text = []
        # The interruption cancelled the response's tool calls (cancel_on_interruption): no re-run will
        # close the turn, so the next response (the caller's next turn, a recovery line) must.
        self._calls_in_response = False
        if heard:
            self._session.record_agent(heard, interrupted=True)
        await self._call_event_handler("on_interrupted")
        # In-flight tools are cancelled by the LLM service (cancel_on_interruption); the tool
        # layer records each as cancelled when its handler is stopped.

    async def _complete(self) -> None:
        turn = self._session.turn
        if turn < 1:
            return
        if self._on_close is not None:
            self._on_close(turn)
        await self._call_event_handler("on_turn_completed", turn)
