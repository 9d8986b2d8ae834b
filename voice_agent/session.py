"""One live call: its lanes, its policy, its guards and its per-turn record.

Framework-agnostic: the pipecat processors call into a session; so do the tests.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from voice_agent.core.assembler import AssembledContext, AssemblerConfig
from voice_agent.core.call_state import CallState
from voice_agent.core.drop_log import DropEvent
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.guards.output_guard import OutputContext, OutputGuard, OutputGuardConfig, OutputVerdict
from voice_agent.core.policy import ContextPolicy
from voice_agent.core.tool_gate import GateDecision, ToolGate
from voice_agent.core.tool_spec import ParamKind
from voice_agent.core.transcript import ToolOutcome
from voice_agent.domains.base import Domain, ToolError
from voice_agent.policies import PolicyName
from voice_agent.policies.base import Policy, PolicySummarizer
from voice_agent.policies.lanes import LanesPolicy
from voice_agent.policies.rolling import RollingPolicy
from voice_agent.policies.window import WindowPolicy
from voice_agent.summarizers.fault_injecting import FaultInjectingSummarizer

MAX_UTTERANCE_CHARS = 2000
"""Longer caller utterances are cut (and the cut logged): one runaway STT segment must not blow the context."""


@dataclass
class TurnRecord:
    """What happened in one turn, for the live printout, the report and the turn span.

    Attributes:
        turn: Turn number.
        caller: The caller's final words.
        agent: What the agent said, as heard.
        started: Monotonic time the caller's final transcript arrived.
        first_response_ms: Time from the final transcript to the first agent text.
        requests: LLM requests made in this turn (tool re-runs included).
        lane_tokens: Estimated tokens per lane of the first request.
        facts_present: Tracked fact key -> value present verbatim in the first request.
        guard_verdicts: Every guard verdict of the turn (names, never values).
        rejections: Tool calls the guards refused.
        executed: Tool calls that ran.
        unledgered_executed: Executed calls with an identifier neither in the ledger nor the recent turns.
        reasks: Argument names the agent asked the caller for.
        output_blocks: Output guard checks that fired.
        drop: The summary regeneration of this turn, if any.
        interrupted: The caller barged in on the agent.
    """

    turn: int
    caller: str
    agent: list[str] = field(default_factory=list)
    started: float = 0.0
    first_response_ms: float | None = None
    requests: int = 0
    lane_tokens: dict[str, int] = field(default_factory=dict)
    facts_present: dict[str, bool] = field(default_factory=dict)
    guard_verdicts: list[dict[str, str]] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    unledgered_executed: int = 0
    reasks: list[str] = field(default_factory=list)
    output_blocks: list[str] = field(default_factory=list)
    drop: DropEvent | None = None
    interrupted: bool = False
    retrieval: dict[str, Any] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        """Estimated tokens of the turn's first request."""
        return sum(self.lane_tokens.values())


@dataclass(frozen=True)
class SessionConfig:
    """How one call is run.

    Attributes:
        policy: ``lanes``, ``rolling`` or ``window``.
        keep: K, recent turns kept raw.
        every: S, summary regeneration cadence.
        retention: Per-pass retention of the fault-injecting summarizer.
        seed: Seeds the summarizer's faults.
        reference_date: The call's "today".
        ledger_capacity: Most identifiers held.
        output_guard: Output guard limits.
    """

    policy: PolicyName = PolicyName.LANES
    keep: int = 6
    every: int = 5
    retention: float = 0.9
    seed: int = 0
    reference_date: dt.date = field(default_factory=dt.date.today)
    ledger_capacity: int = 64
    output_guard: OutputGuardConfig = field(default_factory=OutputGuardConfig)


class CallSession:
    """Glue between the pipeline and the core for one call.

    Args:
        domain: Tools, slots, backend and prompts.
        config: Policy and limits.
        tracked_facts: Fact key -> the exact forms whose presence is measured (a scenario's facts: the
            caller's wording and the canonical form an action uses); any form present counts.
        call_id: Names the call in logs and spans.
        policy: A ready policy, instead of one built from ``config``.
        summarizer: The summarizer for the policy built from ``config`` (for example an
            :class:`~voice_agent.summarizers.llm.LLMSummarizer`); default: the seeded
            fault-injecting one at ``config.retention``.
    """

    def __init__(
        self,
        domain: Domain,
        config: SessionConfig,
        tracked_facts: Mapping[str, Sequence[str]] | None = None,
        call_id: str = "call",
        policy: Policy | None = None,
        summarizer: PolicySummarizer | None = None,
    ) -> None:
        self.domain = domain
        self.config = config
        self.call_id = call_id
        self.fact_forms = {k: tuple(f for f in forms if f) for k, forms in (tracked_facts or {}).items()}
        # The summarizer and drop log follow every form separately ("key", "key#2", ...).
        self.tracked_facts = {
            (key if i == 0 else f"{key}#{i + 1}"): form
            for key, forms in self.fact_forms.items() for i, form in enumerate(forms)
        }
        self.state = CallState(
            call_id=call_id,
            reference_date=config.reference_date,
            policy=ContextPolicy(keep=config.keep, every=config.every),
            slot_model=domain.slot_model,
            ledger_capacity=config.ledger_capacity,
        )
        self.date_guard = DateGuard(config.reference_date)
        self.gate = ToolGate({t.name: t for t in domain.tools}, self.date_guard)
        self.output_guard = OutputGuard(config.output_guard)
        today = config.reference_date.isoformat()
        prompt = domain.system_prompt.format(today=today, reference_date=today)
        self.assembler_config = AssemblerConfig(system_prompt=prompt, hard_constraints=domain.hard_constraints)
        self.system_prompt = prompt
        self.policy: Policy = policy or self._build_policy(summarizer)
        self.turns: list[TurnRecord] = []
        self.retrieved: list[str] = []
        # Set by the retrieval stage at the caller's final words, before this turn's record exists.
        self.pending_retrieval: dict[str, Any] = {}
        self._caller_messages_seen = 0

    def _build_policy(self, summarizer: PolicySummarizer | None) -> Policy:
        if summarizer is None:
            summarizer = FaultInjectingSummarizer(self.config.retention, self.tracked_facts, self.config.seed)
        if self.config.policy is PolicyName.ROLLING:
            return RollingPolicy(self.assembler_config, summarizer, self.tracked_facts)
        if self.config.policy is PolicyName.WINDOW:
            return WindowPolicy(self.assembler_config)
        return LanesPolicy(self.assembler_config, summarizer, self.date_guard, self.tracked_facts)

    @property
    def current(self) -> TurnRecord | None:
        """The turn in progress."""
        return self.turns[-1] if self.turns else None

    async def begin_turn(self, caller_text: str) -> TurnRecord:
        """The caller's final words open a turn; the summary is regenerated first when due."""
        text = caller_text.strip()
        if len(text) > MAX_UTTERANCE_CHARS:
            logger.warning("call {}: caller utterance cut from {} to {} chars", self.call_id, len(text),
                           MAX_UTTERANCE_CHARS)
            text = text[:MAX_UTTERANCE_CHARS]
        turn = self.state.start_turn(text)
        record = TurnRecord(turn=turn, caller=text, started=time.perf_counter(), retrieval=self.pending_retrieval)
        self.pending_retrieval = {}
        self.turns.append(record)
        record.drop = await self.policy.on_turn_start(self.state)
        return record

    async def sync_caller_messages(self, caller_messages: Sequence[str]) -> TurnRecord | None:
        """Opens a turn when the pipeline's history holds caller messages not yet seen.

        Several new messages (one turn spoken in pieces) open one turn together.
        """
        if len(caller_messages) <= self._caller_messages_seen:
            return None
        text = " ".join(caller_messages[self._caller_messages_seen :]).strip()
        self._caller_messages_seen = len(caller_messages)
        return await self.begin_turn(text)

    def assemble(self) -> AssembledContext:
        """The context for the next inference; the first of a turn is measured."""
        context = self.policy.build(self.state, self.retrieved)
        record = self.current
        if record is not None:
            if record.requests == 0:
                record.lane_tokens = dict(context.lane_tokens)
                text = context.text()
                record.facts_present = {k: any(f in text for f in forms) for k, forms in self.fact_forms.items()}
            record.requests += 1
        return context

    def review_tool_call(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> GateDecision:
        """Records the call in the transcript, then runs the guards on it."""
        turn = max(self.state.turn, 1)
        # Review first: the call's own entry must not count as a source for its arguments.
        decision = self.gate.review(self.state, name, arguments)
        self.state.transcript.append_tool_call(turn, name, call_id, arguments)
        if self.current is not None:
            self.current.guard_verdicts.extend(decision.verdicts())
            if decision.rejection is not None:
                self.current.rejections.append({"tool": name, **{k: v for k, v in decision.rejection.items()
                                                                 if k in ("guard", "verdict")}})
        if decision.rejection is not None:
            logger.info("call {}: guard rejected {} ({} {})", self.call_id, name,
                        decision.rejection["guard"], decision.rejection["verdict"])
            self.state.transcript.append_tool_result(turn, name, call_id, decision.rejection, ToolOutcome.REJECTED)
        return decision

    async def execute_tool(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Guards, runs and harvests one tool call; always returns a result for the model."""
        decision = self.review_tool_call(name, call_id, arguments)
        if decision.rejection is not None:
            return decision.rejection
        handler = self.domain.handlers.get(name)
        turn = max(self.state.turn, 1)
        if handler is None:
            result: dict[str, Any] = {"status": "error", "error": f"The tool {name} is not available."}
            self.state.transcript.append_tool_result(turn, name, call_id, result, ToolOutcome.FAILED)
            return result
        if self.current is not None:
            self.current.executed.append(name)
            if self._has_unledgered_identifier(name, arguments):
                self.current.unledgered_executed += 1
        try:
            result = await handler(dict(arguments), self.state)
        except ToolError as exc:
            result = {"status": "error", "error": str(exc)}
            self.state.transcript.append_tool_result(turn, name, call_id, result, ToolOutcome.FAILED)
            return result
        except Exception as exc:  # a broken tool must not take the call down
            logger.exception("call {}: tool {} raised", self.call_id, name)
            result = {"status": "error", "error": f"The tool {name} failed ({type(exc).__name__}). Apologise and "
                      "offer to try again or transfer to a colleague."}
            self.state.transcript.append_tool_result(turn, name, call_id, result, ToolOutcome.FAILED)
            return result
        self.state.transcript.append_tool_result(turn, name, call_id, result, ToolOutcome.COMPLETED)
        harvested = self.gate.harvest(self.state, name, arguments, result)
        if harvested is not None and harvested.errors:
            logger.warning("call {}: {} slot value(s) from {} did not fit the slot model", self.call_id,
                           len(harvested.errors), name)
        return result

    def _has_unledgered_identifier(self, name: str, arguments: Mapping[str, Any]) -> bool:
        """Audit, independent of the guards: an identifier argument neither in the ledger nor said recently."""
        tool = self.domain.tool(name)
        if tool is None:
            return False
        known = self.state.ledger.values()
        recent = "\n".join(e.render() for e in self.state.recent_entries())
        values = [arguments.get(p.name) for p in tool.params_of(ParamKind.IDENTIFIER)]
        return any(isinstance(v, str) and v and v not in known and v not in recent for v in values)

    def cancel_tool(self, name: str, call_id: str) -> None:
        """Records a tool call cancelled by a barge-in or a timeout, so it is never left pending."""
        if any(e.tool_call_id == call_id for e in self.state.transcript.pending_tool_calls()):
            self.state.transcript.append_tool_result(
                max(self.state.turn, 1), name, call_id, {"status": "cancelled"}, ToolOutcome.CANCELLED
            )

    def close(self) -> None:
        """Ends the call: any tool call still without a result is recorded as cancelled."""
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
        if not verdict.allowed and self.current is not None:
            self.current.output_blocks.extend(b.check for b in verdict.blocks)
        return verdict

    def record_agent(self, text: str, *, interrupted: bool = False) -> None:
        """Records what the agent said, as heard."""
        if not text and not interrupted:
            return
        self.state.record_agent(text, interrupted=interrupted)
        record = self.current
        if record is not None:
            record.agent.append(text)
            record.interrupted = record.interrupted or interrupted
            if record.first_response_ms is None:
                record.first_response_ms = (time.perf_counter() - record.started) * 1000

    def note_reask(self, argument: str) -> None:
        """The agent asked the caller for ``argument``."""
        if self.current is not None:
            self.current.reasks.append(argument)
