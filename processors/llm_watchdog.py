"""The LLM watchdog: our own timeouts on every inference, a retry, and never a silent caller.

What to do after a failure is the core's decision (:mod:`voice_agent.core.llm_recovery`); this module
times the inferences and carries the decisions out. It sits around the LLM as a pair of pass-through
processors sharing one :class:`LLMWatchdog`::

    user aggregator -> context assembly -> [inlet] -> LLM -> [outlet] -> context re-assembly -> output guard -> ...

* The inferences are watched on the LLM itself, through two synchronous events every pipecat processor
  has: ``on_before_process_frame`` (the LLM starts on an LLMContextFrame, from either direction: a caller
  turn or a re-run after tool results) and ``on_before_push_frame`` (every frame it emits:
  LLMFullResponseStartFrame, LLMTextFrame, FunctionCallsStartedFrame, LLMFullResponseEndFrame, and the
  ErrorFrame it pushes upstream). Both run in the LLM's own task, in the order things happen, so an
  error is known before the response end that follows it; each response frame is stamped with the
  generation (the number) of the inference that produced it.
* The inlet acts *into* the LLM. It cancels an inference by pushing an InterruptionFrame downstream:
  the LLM cancels its inference (and its cancellable tool calls), then the frame resets everything after
  it (the output guard's buffer, TTS, the turn log, the assistant aggregator) and nothing before it (the
  caller's words in the user aggregator stay). A retry follows as an LLMContextFrame with the context
  the LLM was given last, already assembled. The inlet also notes the contexts of caller turns.
* The outlet acts *after* the LLM. It drops the frames of failed inferences still on their way (a
  cancelled OpenAI inference still pushes its response end, which would otherwise close the turn in
  silence), and once its interruption has gone by it speaks the recovery line the way an LLM answers
  (response start, text, response end): the output guard reviews it, TTS says it, the turn log records
  it as the agent's words and closes the turn, the assistant aggregator adds it to the history. For a
  transfer it first runs the domain's transfer tool through the guarded tool layer
  (:meth:`~voice_agent.call.session.CallSession.execute_tool`), which builds the handoff card. The outlet
  also notes the contexts of re-runs (they travel upstream).

Every failed attempt is logged in ``session.llm_failures``: the recorder (``TurnRecord.errors``) and
the turn span read it there.

An inference's *first output* is its first text, reasoning or tool call. pipecat's OpenAI service
announces a tool call only once its arguments have streamed in full, so a response that only calls a
tool shows its first output when the call is complete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EagerEndOfTurnCancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    FunctionCallsStartedFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    LLMThoughtEndFrame,
    LLMThoughtStartFrame,
    LLMThoughtTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from voice_agent.core.llm_recovery import (
    TRANSFER_TOOL,
    FailureKind,
    LLMFailure,
    LLMRecovery,
    RecoveryAction,
    RecoveryLines,
)
from voice_agent.core.transfer import NOT_TRANSFERRED
from voice_agent.domains.base import Domain
from voice_agent.services.cut_streams import CutStream
from voice_agent.settings import LLMConfig


class WatchdogSession(Protocol):
    """What the watchdog uses of the call (:class:`voice_agent.call.session.CallSession`)."""

    @property
    def call_id(self) -> str:
        """Names the call in logs."""
        ...

    @property
    def turn(self) -> int:
        """The turn in progress."""
        ...

    @property
    def domain(self) -> Domain:
        """The call's tools (is the transfer tool one of them?)."""
        ...

    @property
    def llm_failures(self) -> list[LLMFailure]:
        """The log of failed attempts the watchdog appends to."""
        ...

    async def execute_tool(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Runs a tool through the guards (the transfer after repeated failures)."""
        ...

GENERATION = "llm_watchdog.generation"
"""Frame metadata key: the generation of the inference that produced a response frame."""

_RESPONSE = (
    LLMFullResponseStartFrame, LLMFullResponseEndFrame, LLMTextFrame, LLMThoughtStartFrame, LLMThoughtTextFrame,
    LLMThoughtEndFrame, FunctionCallsStartedFrame,
)
"""The frames of an inference's response (what a failed inference must not let through)."""
_OUTPUT = (LLMTextFrame, LLMThoughtTextFrame, FunctionCallsStartedFrame)
"""The frames that show an inference is answering (its first output ends the first-token wait)."""


@dataclass
class _Attempt:
    """One inference the LLM is running."""

    generation: int
    number: int
    context: LLMContext
    started: float
    first_output: float | None = None
    answered: bool = False
    """Text or a tool call came (reasoning alone is no answer for the caller)."""
    done: bool = False
    timer: asyncio.Task[None] | None = None


class LLMWatchdog:
    """Times each inference of one call's LLM and sees that a failure is retried, then answered.

    Build it with the LLM it watches; put :attr:`inlet` right before the LLM and :attr:`outlet`
    right after it.

    Args:
        session: The call: its turn, its tool layer and its ``llm_failures`` log.
        llm: The LLM processor (any pipecat LLM service).
        config: The call's ``llm`` settings section: timeouts, retries and the transfer threshold.
        lines: What the caller hears instead of an answer.
    """

    def __init__(
        self,
        session: WatchdogSession,
        llm: FrameProcessor,
        config: LLMConfig,
        lines: RecoveryLines | None = None,
    ) -> None:
        self.config = config
        self.lines = lines or RecoveryLines()
        self._session = session
        self._llm = llm
        self.recovery = LLMRecovery(self.config,
                                    can_transfer=session.domain.tool(TRANSFER_TOOL) is not None)
        self.inlet = LLMWatchdogInlet(self, name="llm-watchdog-in")
        self.outlet = LLMWatchdogOutlet(self, name="llm-watchdog-out")
        self._generation = 0
        self._attempt: _Attempt | None = None
        self._failed: set[int] = set()
        self._latest: LLMContext | None = None
        self._retries: set[int] = set()
        self._ours: set[int] = set()
        self._follow_ups: dict[int, tuple[RecoveryAction, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        llm.add_event_handler("on_before_process_frame", self._llm_processing)
        llm.add_event_handler("on_before_push_frame", self._llm_pushing)

    # -- what the LLM does (its own task, in order) --------------------------------------------------

    def _llm_processing(self, _llm: FrameProcessor, frame: Frame) -> None:
        if isinstance(frame, LLMContextFrame):
            self._begin(frame)
        elif isinstance(frame, InterruptionFrame | EagerEndOfTurnCancelFrame | CancelFrame) and (
            frame.id not in self._ours
        ):
            self._abandon()  # the caller barged in, or the turn was withdrawn: nothing failed

    def _llm_pushing(self, _llm: FrameProcessor, frame: Frame) -> None:
        if isinstance(frame, _RESPONSE):
            frame.metadata[GENERATION] = self._generation
        attempt = self._attempt
        live = attempt is not None and not attempt.done and attempt.generation == self._generation
        if isinstance(frame, ErrorFrame) and frame.processor is self._llm:
            if attempt is not None and live:
                permanent = frame.category is not None and frame.category.is_permanent
                kind = FailureKind.CUT_STREAM if isinstance(frame.exception, CutStream) else FailureKind.ERROR
                self._fail(attempt, kind, str(frame.error), permanent=permanent)
            else:
                self._log(LLMFailure(max(self._session.turn, 1), FailureKind.ERROR, str(frame.error), 0,
                                     RecoveryAction.NONE))
        elif attempt is None or not live:
            return
        elif isinstance(frame, _OUTPUT):
            if attempt.first_output is None:
                attempt.first_output = time.monotonic()
            if isinstance(frame, LLMTextFrame | FunctionCallsStartedFrame):
                attempt.answered = True
        elif isinstance(frame, LLMFullResponseEndFrame):
            if not attempt.answered:
                # Nothing to say and no tool to call (reasoning alone included): silence for the caller. A tool
                # call whose arguments are not JSON ends this way too (the vendor's pipecat service drops it).
                self._fail(attempt, FailureKind.EMPTY, "the answer ended with no text and no tool call")
            else:
                self._close(attempt)

    def _begin(self, frame: LLMContextFrame) -> None:
        retry = frame.id in self._retries
        self._retries.discard(frame.id)
        if self._attempt is not None:
            self._close(self._attempt)
        self._generation += 1
        attempt = _Attempt(self._generation, self.recovery.start_attempt(retry=retry), frame.context,
                           time.monotonic())
        attempt.timer = self._spawn(self._watch(attempt), f"llm-watchdog-timer-{attempt.generation}")
        self._attempt = attempt

    def _abandon(self) -> None:
        if self._attempt is not None:
            self._close(self._attempt)

    def _close(self, attempt: _Attempt) -> None:
        attempt.done = True
        if attempt.timer is not None and attempt.timer is not asyncio.current_task():
            attempt.timer.cancel()

    async def _watch(self, attempt: _Attempt) -> None:
        config = self.config
        await asyncio.sleep(config.first_token_timeout_secs)
        if attempt.first_output is None:
            self._fail(attempt, FailureKind.FIRST_TOKEN_TIMEOUT,
                       f"no answer within {config.first_token_timeout_secs:g} s")
            return
        await asyncio.sleep(max(0.0, attempt.started + config.total_timeout_secs - time.monotonic()))
        self._fail(attempt, FailureKind.TOTAL_TIMEOUT, f"answer not finished within {config.total_timeout_secs:g} s")

    # -- acting on a failure -------------------------------------------------------------------------

    def _fail(self, attempt: _Attempt, kind: FailureKind, detail: str, *, permanent: bool = False) -> None:
        if attempt.done:
            return
        self._close(attempt)
        self._failed.add(attempt.generation)
        action = self.recovery.fail(permanent=permanent)
        index = self._log(LLMFailure(max(self._session.turn, 1), kind, detail, attempt.number, action))
        # Never from the LLM's own task: the interruption cancels that task.
        self._spawn(self._act(action, attempt, index), f"llm-watchdog-{action.value}")

    def _log(self, failure: LLMFailure) -> int:
        self._session.llm_failures.append(failure)
        logger.warning("call {}: {}", self._session.call_id, failure.describe())
        return len(self._session.llm_failures) - 1

    async def _act(self, action: RecoveryAction, attempt: _Attempt, index: int) -> None:
        interruption = InterruptionFrame()
        self._ours.add(interruption.id)
        if action is RecoveryAction.RETRY:
            await self.inlet.push_frame(interruption)
            retry = LLMContextFrame(context=self._latest or attempt.context)
            self._retries.add(retry.id)
            await self.inlet.push_frame(retry)
        elif action is not RecoveryAction.NONE:
            self._follow_ups[interruption.id] = (action, index)
            await self.inlet.push_frame(interruption)

    def interruption_passed(self, frame: InterruptionFrame) -> None:
        """The outlet forwarded ``frame``: if it was ours, what the LLM left unsaid can now be said."""
        self._ours.discard(frame.id)
        follow_up = self._follow_ups.pop(frame.id, None)
        if follow_up is not None:
            self._spawn(self._say(*follow_up), "llm-watchdog-say")

    async def _say(self, action: RecoveryAction, index: int) -> None:
        if action is RecoveryAction.TRANSFER and not await self._transfer():
            self.recovery.transfer_refused()
            action = RecoveryAction.OFFER_CALLBACK
            failures = self._session.llm_failures
            failures[index] = dataclasses.replace(failures[index], action=action)
        line = self.lines.line(action)
        if line is None:
            return
        await self.outlet.push_frame(LLMFullResponseStartFrame())
        await self.outlet.push_frame(LLMTextFrame(line))
        await self.outlet.push_frame(LLMFullResponseEndFrame())

    async def _transfer(self) -> bool:
        """Hands the call over through the guarded tool layer; False when the tool refused or failed."""
        session = self._session
        kinds = sorted({f.kind.value for f in session.llm_failures})
        reason = (f"The assistant's language model failed {self.recovery.failed_requests} times in this call "
                  f"({', '.join(kinds)}); the caller could not be answered.")
        call_id = f"llm-watchdog-transfer-{session.turn}"
        result = await session.execute_tool(TRANSFER_TOOL, call_id, {"reason": reason})
        # Not moved (no transfer target) is refused too: the caller must not hear they are being put through.
        refused = result.get("status") in ("rejected", "error", "cancelled", NOT_TRANSFERRED)
        if refused:
            logger.error("call {}: transfer after LLM failures refused: {}", session.call_id, result)
        return not refused

    # -- bookkeeping ---------------------------------------------------------------------------------

    def context_sent(self, frame: LLMContextFrame) -> None:
        """A context went by on its way to the LLM: a retry resends the newest."""
        self._latest = frame.context

    def stale(self, frame: Frame) -> bool:
        """``frame`` belongs to the response of a failed inference."""
        return isinstance(frame, _RESPONSE) and frame.metadata.get(GENERATION) in self._failed

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = self.outlet.create_task(coroutine, name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def stop(self) -> None:
        """The call ends: no timer fires and nothing more is said."""
        self._abandon()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()


class LLMWatchdogInlet(FrameProcessor):
    """The watchdog's side before the LLM: notes caller-turn contexts, pushes cancellations and retries.

    Args:
        watchdog: The watchdog it belongs to.
    """

    def __init__(self, watchdog: LLMWatchdog, **kwargs: Any) -> None:
        # Direct mode: frames are handled in the pushing processor's task, not queued for a task of this
        # one's own (two queue hops and task switches per frame saved; nothing here waits on anything).
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(**kwargs)
        self._watchdog = watchdog

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Notes contexts going down to the LLM; forwards every frame."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame) and direction is FrameDirection.DOWNSTREAM:
            self._watchdog.context_sent(frame)
        await self.push_frame(frame, direction)


class LLMWatchdogOutlet(FrameProcessor):
    """The watchdog's side after the LLM: drops failed inferences' frames, speaks the recovery lines.

    Args:
        watchdog: The watchdog it belongs to.
    """

    def __init__(self, watchdog: LLMWatchdog, **kwargs: Any) -> None:
        # Direct mode: frames are handled in the pushing processor's task, not queued for a task of this
        # one's own (two queue hops and task switches per frame saved; nothing here waits on anything).
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(**kwargs)
        self._watchdog = watchdog

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Drops stale response frames; notes re-run contexts going up; forwards the rest."""
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM and self._watchdog.stale(frame):
            return
        if isinstance(frame, LLMContextFrame) and direction is FrameDirection.UPSTREAM:
            self._watchdog.context_sent(frame)
        await self.push_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._watchdog.interruption_passed(frame)
        elif isinstance(frame, EndFrame | CancelFrame):
            self._watchdog.stop()

    async def cleanup(self) -> None:
        """Stops the watchdog's timers when the pipeline is torn down."""
        self._watchdog.stop()
        await super().cleanup()  # type: ignore[no-untyped-call]
