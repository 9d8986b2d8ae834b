"""One live call: its lanes, its policy and its guards.

Framework-agnostic: the pipecat processors call into a session; so do the tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger

from voice_agent.core.assembler import AssembledContext, AssemblerConfig, Message
from voice_agent.core.call_state import CallState
from voice_agent.core.caller_spans import CallerSpanExtraction, CallerSpanExtractor
from voice_agent.core.dates.reading import DateReader, DateReading
from voice_agent.core.drop_log import SummaryPass
from voice_agent.core.effects import EffectLog, MemoryEffectLog, effect_key, running, unknown_outcome
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.guards.output_guard import OutputContext, OutputGuard, OutputVerdict
from voice_agent.core.llm_recovery import FailureKind, LLMFailure, RecoveryAction, tool_loop
from voice_agent.core.passes import BackgroundPasses
from voice_agent.core.policy import ContextPolicy, Trigger
from voice_agent.core.read_ahead import ReadAhead
from voice_agent.core.spoken_ids import IdShape, find_identifiers, id_shapes
from voice_agent.core.tool_gate import GateDecision, ToolAdmission, ToolGate
from voice_agent.core.tool_spec import ToolSpec
from voice_agent.core.transcript import ToolOutcome
from voice_agent.domains.base import Domain, ToolError
from voice_agent.policies import PolicyName
from voice_agent.policies.base import Policy, PolicySummarizer
from voice_agent.policies.lanes import LanesPolicy
from voice_agent.policies.pipecat_builtin import PipecatBuiltinPolicy, pipecat_history, pipecat_threshold
from voice_agent.policies.rolling import RollingPolicy
from voice_agent.policies.window import WindowPolicy
from voice_agent.settings import Settings

MAX_UTTERANCE_CHARS = 2000
"""Longer caller utterances are cut (and the cut logged): one runaway STT segment must not blow the context."""

_NEVER_RECEIVED = object()
"""The backend's answer for a begun call it never received: it runs now."""


@dataclass(frozen=True)
class GuardEvent:
    """One tool call as the guards saw it (names and verdicts, never values).

    Attributes:
        turn: The turn it was made in.
        tool: The tool's name.
        verdicts: Every check's guard, argument and verdict.
        rejection: The guard and verdict that refused it, if it was refused.
    """

    turn: int
    tool: str
    verdicts: tuple[dict[str, str], ...]
    rejection: dict[str, str] | None = None


class CallSession:
    """Glue between the pipeline and the core for one call: its lanes, its policy and its guards.

    It measures nothing: recorders observe the call from outside
    (:mod:`voice_agent.recording`). What it keeps besides the lanes are the guards' and the
    policy's own logs (guard events, summary passes, output blocks), which a live call
    exports as telemetry.

    Args:
        domain: Tools, slots, backend and prompts.
        settings: The call's settings, unchanged: the session reads ``policy``, ``call`` and ``dates.holding_line``,
            and hands ``output_guard`` to the output guard, ``llm`` to the LLM recovery (through the pipeline's
            watchdog) and ``pipecat_summarizer`` to the ``pipecat`` policy. An unset ``call.reference_date`` is
            the real today, taken here, when the call starts.
        summarizer: Serves the ``lanes`` and ``rolling`` policies (not used by ``window``).
        call_id: Names the call in logs and spans.
        policy: A ready policy, instead of one built from ``settings`` and ``summarizer``.
        date_reader: The date contract's model reader (``dates.reader``); None: the rules alone.
        summary_in_background: Run summary passes off the turn: the reply never waits for one, the turns it folds
            stay raw until it lands. Off (inline, the pass lands before the turn's reply) for instant summarizers
            and measurements. Under ``pipecat`` pipecat always summarizes off the turn; off here, a scripted
            driver waits for its summary before the caller's next line (so both mechanisms are measured with their
            summary in place). :func:`voice_agent.call.factory.build_session` decides it from
            ``summarizer.background``.
        caller_spans: The caller-span extractor (``caller_spans``), if any: it reads the caller's new words off the
            turn and its quote-checked spans fill slots when the next turn opens.

    Raises:
        ValueError: When the policy needs a summarizer and none is given.
    """

    def __init__(
        self,
        domain: Domain,
        settings: Settings,
        summarizer: PolicySummarizer | None = None,
        call_id: str = "call",
        policy: Policy | None = None,
        date_reader: DateReader | None = None,
        caller_spans: CallerSpanExtractor | None = None,
        *,
        summary_in_background: bool = False,
    ) -> None:
        self.domain = domain
        self.date_reader = date_reader
        self.date_readings: list[DateReading] = []
        self.settings = settings
        self.summary_in_background = summary_in_background
        self.call_id = call_id
        # Unset means today, read per call: a server running past midnight must not keep yesterday.
        self.reference_date = settings.call.reference_date or dt.date.today()
        chosen = settings.policy
        self.state = CallState(
            call_id=call_id,
            reference_date=self.reference_date,
            policy=ContextPolicy(keep=chosen.keep, every=chosen.every, trigger=Trigger(chosen.trigger),
                                 floor=chosen.floor, batch=chosen.batch, cache_price=chosen.cache_price),
            slot_model=domain.slot_model,
            ledger_capacity=settings.call.ledger_capacity,
        )
        self.date_guard = DateGuard(self.reference_date)
        self.gate = ToolGate({t.name: t for t in domain.tools}, self.date_guard)
        self.output_guard = OutputGuard(settings.output_guard)
        prompt = domain.prompt_for(self.reference_date)
        self.assembler_config = AssemblerConfig(system_prompt=prompt, hard_constraints=domain.hard_constraints)
        self.system_prompt = prompt
        self.summarizer = summarizer
        self.policy: Policy = policy or self._build_policy(summarizer)
        self.retrieved: list[str] = []
        # Given by the retrieval stage at the caller's final words (take_knowledge), before the turn opens.
        self.pending_retrieval: dict[str, Any] = {}
        self.retrieval_by_turn: dict[int, dict[str, Any]] = {}
        # Awaited with the turn number once the caller's words have opened it, before any answer.
        self.turn_opened_hooks: list[Callable[[int], Awaitable[None]]] = []
        self.summary_passes: list[SummaryPass] = []
        self.background_passes = BackgroundPasses(self.state, self.summary_passes.append)
        self.guard_events: list[GuardEvent] = []
        self.output_blocks: list[tuple[int, str]] = []
        # Every failed LLM attempt (a timeout or an error) and what followed, from the LLM watchdog.
        self.llm_failures: list[LLMFailure] = []
        self.last_context: AssembledContext | None = None
        self.requests_by_turn: dict[int, int] = {}
        # Mutating calls recorded once per call across legs (a served call's store sets its own).
        self.effects: EffectLog = MemoryEffectLog()
        self.effects_replayed: list[str] = []
        self.effects_unknown: list[str] = []
        self._caller_messages_seen = 0
        self._id_shapes = id_shapes(domain.id_shapes)
        self._id_roles = domain.id_roles
        # Identifiers in caller words read at an interim transcript, by the words (the shapes are the call's).
        self.identifiers_ahead: ReadAhead[str, list[tuple[str, IdShape]]] = ReadAhead()
        self.caller_spans = (CallerSpanExtraction(caller_spans, self.state, call_id)
                             if caller_spans is not None else None)

    def _build_policy(self, summarizer: PolicySummarizer | None) -> Policy:
        name = PolicyName(self.settings.policy.name)
        if name is PolicyName.WINDOW:
            return WindowPolicy(self.assembler_config)
        if name is PolicyName.PIPECAT:
            # Its summarizing LLM service is a pipecat object: the call factory builds the policy with it.
            return PipecatBuiltinPolicy(self.settings.pipecat_summarizer, None)
        if summarizer is None:
            raise ValueError(f"the {name.value} policy needs a summarizer")
        if name is PolicyName.ROLLING:
            return RollingPolicy(self.assembler_config, summarizer)
        return LanesPolicy(self.assembler_config, summarizer, self.date_guard)

    def describe(self) -> dict[str, Any]:
        """How the call is set up (names and numbers, no caller values): for call records and logs."""
        chosen, guard, recovery = self.settings.policy, self.settings.output_guard, self.settings.llm
        described: dict[str, Any] = {
            "policy": self.policy.name, "keep": chosen.keep, "every": chosen.every,
            "trigger": chosen.trigger,
            "summarizer": type(self.summarizer).__name__ if self.summarizer is not None else None,
            "summary_in_background": self.summary_in_background,
            "caller_spans": self.caller_spans.extractor.name if self.caller_spans is not None else None,
            "ledger_capacity": self.settings.call.ledger_capacity,
            "reference_date": self.reference_date.isoformat(),
            "output_guard": {"max_credit": guard.max_credit, "late_max_credit": guard.late_max_credit,
                             "strict_after_turn": guard.strict_after_turn},
            "llm_recovery": {"first_token_timeout_secs": recovery.first_token_timeout_secs,
                             "total_timeout_secs": recovery.total_timeout_secs, "retries": recovery.retries,
                             "transfer_after": recovery.transfer_after_failures},
        }
        if isinstance(self.policy, PipecatBuiltinPolicy):
            config = self.policy.config  # the thresholds it ran under, as pipecat took them
            described["pipecat_summarizer"] = {
                **config.model_dump(), "max_context_tokens": pipecat_threshold(config.max_context_tokens),
                "max_unsummarized_messages": pipecat_threshold(config.max_unsummarized_messages)}
        return described

    @property
    def turn(self) -> int:
        """The turn in progress (0 before the caller has spoken)."""
        return self.state.turn

    async def begin_turn(self, caller_text: str) -> int:
        """The caller's final words open a turn; a summary pass runs first when due."""
        text = caller_text.strip()
        if len(text) > MAX_UTTERANCE_CHARS:
            logger.warning("call {}: caller utterance cut from {} to {} chars", self.call_id, len(text),
                           MAX_UTTERANCE_CHARS)
            text = text[:MAX_UTTERANCE_CHARS]
        turn = self.state.start_turn(text)
        self._ledger_caller_identifiers(turn, text)
        if self.caller_spans is not None:
            # What the extractor found in earlier turns is this turn's context; these words it reads off the turn.
            self.caller_spans.land()
        for hook in self.turn_opened_hooks:
            # Before the answer: a served call saves the caller's line here, so a crash mid-answer keeps it.
            await hook(turn)
        if self.caller_spans is not None:
            self.caller_spans.start()
        if self.pending_retrieval:
            self.retrieval_by_turn[turn] = self.pending_retrieval
        self.pending_retrieval = {}
        if self.summary_in_background:
            scheduled = self.policy.schedule(self.state)
            if scheduled is not None:
                policy, state = self.policy, self.state
                self.background_passes.start(scheduled, lambda r: policy.run(state, r))
            return turn
        summary_pass = await self.policy.on_turn_start(self.state)
        if summary_pass is not None:
            self.summary_passes.append(summary_pass)
        return turn

    async def settle_summaries(self) -> None:
        """Waits for every background summary pass to land (a no-op inline)."""
        await self.background_passes.drain()

    async def settle_caller_spans(self) -> None:
        """Waits for the caller-span reading in flight (a no-op without an extractor); it lands at the next turn."""
        if self.caller_spans is not None:
            await self.caller_spans.settle()

    def _ledger_caller_identifiers(self, turn: int, text: str) -> None:
        """Identifiers the caller just said enter the ledger, unverified, with the words they came in.

        A lead, not ground truth: the model is told to look an unverified value up before it acts,
        and a state-changing tool refuses it until a tool has returned it.
        """
        found = self.identifiers_ahead.take(text)
        for value, shape in find_identifiers(text, self._id_shapes) if found is None else found:
            role = self._id_roles.get(shape.template) or shape.prefix.lower() or "identifier"
            self.state.ledger.record_from_caller(role, value, turn, quote=text)

    def read_ahead_caller(self, text: str) -> None:
        """Reads the caller's words from an interim transcript now, so a final with the same words need not.

        The same work the turn's opening does on them (their spoken identifiers; under ``lanes`` their dates),
        done while the caller is still speaking and kept, bounded, for the final to take. A final with other
        words reads them as usual.

        Args:
            text: An interim transcript's text.
        """
        words = text.strip()[:MAX_UTTERANCE_CHARS]  # as ``begin_turn`` will record them
        if not words:
            return
        if words not in self.identifiers_ahead:
            self.identifiers_ahead.put(words, find_identifiers(words, self._id_shapes))
        if isinstance(self.policy, LanesPolicy):
            self.date_guard.read_ahead_caller(words, self.state.transcript)

    async def sync_caller_messages(self, caller_messages: Sequence[str]) -> int | None:
        """Opens a turn when the pipeline's history holds caller messages not yet seen.

        Several new messages (one turn spoken in pieces) open one turn together.
        """
        if len(caller_messages) <= self._caller_messages_seen:
            return None
        text = " ".join(caller_messages[self._caller_messages_seen :]).strip()
        self._caller_messages_seen = len(caller_messages)
        return await self.begin_turn(text)

    @property
    def uses_pipeline_context(self) -> bool:
        """True under ``pipecat``: the model gets the pipeline's own context, which pipecat summarizes."""
        return isinstance(self.policy, PipecatBuiltinPolicy)

    def pipeline_history(self) -> list[Message]:
        """The messages the pipeline's own context starts with: under ``pipecat``, what the call said so far.

        A new call's is empty. A resumed leg builds its pipeline anew, and under ``pipecat`` that context is
        all the model sees, so it starts from the restored transcript lane in pipecat's own message shapes
        (:func:`~voice_agent.policies.pipecat_builtin.pipecat_history`), as a pipecat user restoring their
        stored messages would: every turn in full (pipecat's summary is not kept; pipecat summarizes them again
        when its thresholds say so). The other policies build every request from the lanes: empty.
        """
        if not self.uses_pipeline_context:
            return []
        return pipecat_history(self.state.transcript.entries)

    def take_knowledge(self, texts: Sequence[str], record: Mapping[str, Any]) -> None:
        """The knowledge retrieved for the caller's final words: the next context injects ``texts``, and the turn
        those words open records ``record`` (:meth:`~voice_agent.retrieval.speculative.TurnRetrieval.to_dict`)."""
        self.retrieved = list(texts)
        self.pending_retrieval = dict(record)

    def assemble(self) -> AssembledContext:
        """The context for the next inference, built from the lanes by the policy."""
        context = self.policy.build(self.state, self.retrieved)
        self.last_context = context
        self.count_request()
        return context

    def count_request(self) -> None:
        """One more inference in the current turn (:meth:`assemble` counts its own)."""
        turn = self.state.turn
        self.requests_by_turn[turn] = self.requests_by_turn.get(turn, 0) + 1

    def reads_dates(self, name: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a model will read the call before this tool call runs (the caller hears the holding line):
        a date-bearing call, with a model reader, that is not one too many in its turn."""
        return (self.date_reader is not None and self.gate.has_dates(name, arguments)
                and self._tool_loop(name, arguments) is None)

    async def read_dates(self, name: str, arguments: Mapping[str, Any]) -> DateReading | None:
        """The model reader's reading of the call at a date-bearing action (None without a model reader)."""
        if self.date_reader is None or not self.gate.has_dates(name, arguments):
            return None
        reading = await self.date_reader.read(self.state.transcript.entries, self.reference_date)
        self.date_readings.append(reading)
        if not reading.ok:
            logger.warning("call {}: date reader {} ({}); the rules decide and binding words are read back",
                           self.call_id, reading.status.value, reading.error)
        elif reading.dropped:
            logger.info("call {}: date reader quoted {} line(s) not in the transcript (dropped)", self.call_id,
                        reading.dropped)
        return reading

    def review_tool_call(
        self, name: str, call_id: str, arguments: Mapping[str, Any], reading: DateReading | None = None
    ) -> GateDecision:
        """Records the call in the transcript, then runs the guards on it (with the model's date reading, if any)."""
        turn = max(self.state.turn, 1)
        # Review first: the call's own entry must not count as a source for its arguments.
        decision = self.gate.review(self.state, name, arguments, reading)
        self.state.transcript.append_tool_call(turn, name, call_id, arguments)
        rejection = None
        if decision.rejection is not None:
            rejection = {k: str(v) for k, v in decision.rejection.items() if k in ("guard", "verdict")}
        self.guard_events.append(GuardEvent(turn, name, tuple(decision.verdicts()), rejection))
        if decision.rejection is not None:
            logger.info("call {}: guard rejected {} ({} {})", self.call_id, name,
                        decision.rejection["guard"], decision.rejection["verdict"])
            self.state.transcript.append_tool_result(turn, name, call_id, decision.rejection, ToolOutcome.REJECTED)
        return decision

    def _tool_loop(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """Why this call is one too many in its turn, or None (see :func:`~voice_agent.core.llm_recovery.tool_loop`)."""
        turn = max(self.state.turn, 1)
        return tool_loop(self.state.transcript.in_turns(turn, turn), name, arguments, self.settings.llm)

    def stop_tool_loop(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """Stops a call that is one too many in its turn: recorded, counted as an LLM failure, never run.

        Returns:
            The result for the model (status ``stopped``), or None when the call may go ahead.
        """
        why = self._tool_loop(name, arguments)
        if why is None:
            return None
        turn = max(self.state.turn, 1)
        result = {"status": "stopped", "reason": f"Stopped: {why}. Do not call tools again in this turn."}
        self.state.transcript.append_tool_call(turn, name, call_id, arguments)
        self.state.transcript.append_tool_result(turn, name, call_id, result, ToolOutcome.REJECTED)
        failure = LLMFailure(turn, FailureKind.TOOL_LOOP, why, 0, RecoveryAction.APOLOGIZE)
        self.llm_failures.append(failure)
        logger.warning("call {}: {}", self.call_id, failure.describe())
        return result

    async def admit_tool_call(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> ToolAdmission:
        """The guards' part of a tool call, before anything runs: the loop cap, the date reading, the guards.

        The call is recorded in the transcript; a refused one with its result. An admitted call must be followed
        by :meth:`tool_returned` or :meth:`tool_failed` (or :meth:`cancel_tool`), whoever runs the tool.
        """
        stopped = self.stop_tool_loop(name, call_id, arguments)
        if stopped is not None:
            return ToolAdmission(dict(arguments), refusal=stopped)
        reading = await self.read_dates(name, arguments)
        decision = self.review_tool_call(name, call_id, arguments, reading)
        if decision.rejection is not None:
            return ToolAdmission(dict(arguments), decision, refusal=decision.rejection)
        # A respaced or re-cased ledger identifier runs, and is harvested, as the ledger spells it.
        admission = ToolAdmission(decision.arguments_to_run(arguments), decision)
        spec = self.domain.tool(name)
        if spec is None or not spec.mutates:
            return admission
        return await self._begin_effect(spec, call_id, admission)

    async def _begin_effect(self, spec: ToolSpec, call_id: str, admission: ToolAdmission) -> ToolAdmission:
        """Takes the effect key of an admitted mutating call, or answers with what an earlier attempt left."""
        name = spec.name
        key = effect_key(self.call_id, name, admission.arguments, spec)
        begun = asyncio.ensure_future(self.effects.begin(key, name))
        try:
            prior = await asyncio.shield(begun)
        except asyncio.CancelledError:
            # Cancelled (a barge-in) before the tool ran: the key this attempt took is given back once taken.
            begun.add_done_callback(lambda done: self._give_back(done, key))
            raise
        except Exception as exc:  # an effect log that fails must not stop the call: the tool runs (at least once)
            logger.error("call {}: effect log failed, {} runs unchecked: {}", self.call_id, name, exc)
            return admission
        if prior is None:
            return dataclasses.replace(admission, effect=key)
        if prior.state == "done":
            # Made before (on a leg that died before its state was saved): the recorded result, not a second run.
            return self._replayed(name, call_id, admission, prior.result,
                                  f"already made (leg {prior.leg}); its recorded result is used, not run again")
        learned = await self._learn_outcome(key, name, prior.leg)
        if learned is _NEVER_RECEIVED:
            logger.warning("call {}: {} was begun on leg {} and the backend never received it; it runs now",
                           self.call_id, name, prior.leg)
            return dataclasses.replace(admission, effect=key)
        if learned is not None:
            await self.settle_effect(name, dataclasses.replace(admission, effect=key), learned)
            return self._replayed(name, call_id, admission, learned,
                                  f"was begun on leg {prior.leg}; the backend had made it, its result is used")
        result = unknown_outcome(name, prior.leg)
        self.state.transcript.append_tool_result(max(self.state.turn, 1), name, call_id, result, ToolOutcome.FAILED)
        self.effects_unknown.append(name)
        logger.error("call {}: {} was begun on leg {} and never finished; not run again (outcome unknown)",
                     self.call_id, name, prior.leg)
        return dataclasses.replace(admission, refusal=result)

    def _replayed(self, name: str, call_id: str, admission: ToolAdmission, result: Any, why: str) -> ToolAdmission:
        """A mutating call answered with the result it already had, not run again."""
        result = result if isinstance(result, dict) else {"result": result}
        self.tool_returned(name, call_id, admission, result)
        self.effects_replayed.append(name)
        logger.warning("call {}: {} {}", self.call_id, name, why)
        return dataclasses.replace(admission, refusal=result)

    async def _learn_outcome(self, key: str, name: str, leg: int) -> Any:
        """What the backend says of a call a dead leg began: its result, :data:`_NEVER_RECEIVED`, or None (unknown)."""
        lookup = self.domain.outcome_of
        if lookup is None:
            return None
        try:
            result = await lookup(name, key)
        except Exception as exc:
            logger.error("call {}: the backend could not say whether {} (leg {}) went through: {}", self.call_id,
                         name, leg, exc)
            return None
        return _NEVER_RECEIVED if result is None else result

    def _give_back(self, begun: asyncio.Future[Any], key: str) -> None:
        if begun.cancelled() or begun.exception() is not None or begun.result() is not None:
            return  # nothing was taken by this attempt
        task = asyncio.ensure_future(self.effects.drop(key))

        def dropped(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is not None:
                logger.error("call {}: effect log failed to give back a cancelled call: {}", self.call_id,
                             done.exception())

        task.add_done_callback(dropped)

    async def settle_effect(self, name: str, admission: ToolAdmission, result: Any, *, failed: bool = False) -> None:
        """Records the result of an admitted mutating call in the effect log; ``failed``: the backend refused it
        (a :class:`~voice_agent.domains.base.ToolError`, nothing done), so it is forgotten and may be asked again.
        Recorded even when the turn is cancelled meanwhile: what ran must not be run again."""
        if admission.effect is None:
            return
        write = self.effects.drop(admission.effect) if failed else self.effects.finish(admission.effect, name, result)
        try:
            await asyncio.shield(asyncio.ensure_future(write))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("call {}: effect log failed to record a result: {}", self.call_id, exc)

    def tool_returned(self, name: str, call_id: str, admission: ToolAdmission, result: Any) -> None:
        """An admitted call's result: recorded, then harvested into the ledger and slots."""
        self.state.transcript.append_tool_result(max(self.state.turn, 1), name, call_id, result, ToolOutcome.COMPLETED)
        harvested = self.gate.harvest(self.state, name, admission.arguments, result, admission.decision)
        if harvested is not None and harvested.errors:
            logger.warning("call {}: {} slot value(s) from {} did not fit the slot model", self.call_id,
                           len(harvested.errors), name)

    def tool_failed(self, name: str, call_id: str, error: BaseException) -> dict[str, Any]:
        """An admitted call's tool raised: recorded as failed.

        Returns:
            The result for the model: a :class:`~voice_agent.domains.base.ToolError`'s message, else a line
            that asks the model to apologise (a broken tool must not take the call down).
        """
        if isinstance(error, ToolError):
            result: dict[str, Any] = {"status": "error", "error": str(error)}
        else:
            logger.opt(exception=error).error("call {}: tool {} raised", self.call_id, name)
            result = {"status": "error", "error": f"The tool {name} failed ({type(error).__name__}). Apologise and "
                      "offer to try again or transfer to a colleague."}
        self.state.transcript.append_tool_result(max(self.state.turn, 1), name, call_id, result, ToolOutcome.FAILED)
        return result

    async def execute_tool(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Guards, runs (the domain's handler) and harvests one tool call; always returns a result for the model.

        A call past the turn's cap, or the same refused call again, is stopped (status ``stopped``): the tool
        layer then ends the turn with a line for the caller instead of asking the model again.
        """
        admission = await self.admit_tool_call(name, call_id, arguments)
        if admission.refusal is not None:
            return admission.refusal
        handler = self.domain.handlers.get(name)
        if handler is None:
            await self.settle_effect(name, admission, None, failed=True)
            result: dict[str, Any] = {"status": "error", "error": f"The tool {name} is not available."}
            self.state.transcript.append_tool_result(max(self.state.turn, 1), name, call_id, result,
                                                     ToolOutcome.FAILED)
            return result
        try:
            with running(admission.effect):
                result = await handler(admission.arguments, self.state)
        except Exception as exc:
            if isinstance(exc, ToolError):  # refused: nothing done (anything else may have gone through)
                await self.settle_effect(name, admission, None, failed=True)
            return self.tool_failed(name, call_id, exc)
        self.tool_returned(name, call_id, admission, result)
        await self.settle_effect(name, admission, result)
        return result

    def cancel_tool(self, name: str, call_id: str) -> None:
        """Records a tool call cancelled by a barge-in or a timeout, so it is never left pending."""
        if any(e.tool_call_id == call_id for e in self.state.transcript.pending_tool_calls()):
            self.state.transcript.append_tool_result(
                max(self.state.turn, 1), name, call_id, {"status": "cancelled"}, ToolOutcome.CANCELLED
            )

    def close(self) -> None:
        """Ends the call: any tool call still without a result is recorded as cancelled.

        A summary pass or a caller-span reading still running in the background is cancelled: nobody will read it.
        """
        self.background_passes.cancel()
        if self.caller_spans is not None:
            self.caller_spans.cancel()
        for entry in self.state.transcript.pending_tool_calls():
            self.cancel_tool(entry.tool_name or "", entry.tool_call_id or "")

    def review_output(self, text: str) -> OutputVerdict:
        """Runs the output guard on text about to be spoken."""
        ctx = OutputContext(
            turn=max(self.state.turn, 1),
            ledger_values=frozenset(self.state.ledger.values()),
            date_violations=self.date_guard.violation_finder(self.state.transcript),
        )
        verdict = self.output_guard.review(text, ctx)
        if not verdict.allowed:
            self.output_blocks.extend((ctx.turn, b.check) for b in verdict.blocks)
        return verdict

    def record_agent(self, text: str, *, interrupted: bool = False) -> None:
        """Records what the agent said, as heard."""
        if not text and not interrupted:
            return
        self.state.record_agent(text, interrupted=interrupted)
        if isinstance(self.policy, LanesPolicy):
            # The lanes context reads every utterance's dates: read the reply now, while the caller listens,
            # so the caller's next words do not wait on it.
            self.date_guard.read_ahead(self.state.transcript)
