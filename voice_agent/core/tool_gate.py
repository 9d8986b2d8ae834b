"""The tool gate: guards before a tool runs, harvest after it returns.

Pure core: the pipecat tool layer wraps every handler with :meth:`ToolGate.review`
and :meth:`ToolGate.harvest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from voice_agent.core.call_state import CallState
from voice_agent.core.dates.reading import DateReading
from voice_agent.core.guards.date_contract import DateContract, DateDecision
from voice_agent.core.guards.date_guard import DateCheck, DateGuard
from voice_agent.core.guards.id_guard import IdCheck, IdGuard
from voice_agent.core.guards.quote_guard import QuoteCheck, QuoteGuard
from voice_agent.core.harvest import Harvested, harvest_result, record_caller_arguments
from voice_agent.core.tool_spec import ParamKind, ToolSpec


@dataclass(frozen=True)
class GateDecision:
    """Whether a tool call may run, with every guard verdict.

    Attributes:
        tool: The tool's name.
        id_checks: One per identifier argument.
        date_checks: The cue-word reader's verdict, one per date argument (the transcript is re-read only
            when there is one).
        rejection: The structured result the model receives instead of running the tool.
        quote_checks: One per ``caller_quote`` argument, with the turn it quotes.
        date_decisions: The date contract's run, confirm or refuse, one per date argument.
    """

    tool: str
    id_checks: tuple[IdCheck, ...] = ()
    date_checks: tuple[DateCheck, ...] = ()
    rejection: dict[str, Any] | None = None
    quote_checks: tuple[QuoteCheck, ...] = ()
    date_decisions: tuple[DateDecision, ...] = ()

    @property
    def allowed(self) -> bool:
        """True when the tool may run."""
        return self.rejection is None

    def arguments_to_run(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments the tool runs with: ``arguments``, each identifier in the ledger's verbatim form.

        The ID guard accepts an identifier the model respaced or re-cased ("acc 4729 18") as the ledger
        value it equals canonically; the backend and the harvest compare values verbatim, so they get the
        ledger's spelling ("ACC-4729-18").
        """
        run = dict(arguments)
        for check in self.id_checks:
            if check.accepted and check.match is not None and check.match.value != check.value:
                run[check.argument] = check.match.value
        return run

    def verdicts(self) -> list[dict[str, str]]:
        """Verdicts as plain records for logs and spans (argument names, never values)."""
        out = [{"guard": "id", "argument": c.argument, "verdict": c.verdict.value} for c in self.id_checks]
        actions = {d.argument: d.action.value for d in self.date_decisions}
        out += [{"guard": "date", "argument": c.argument, "verdict": c.verdict.value,
                 **({"action": actions[c.argument]} if c.argument in actions else {})} for c in self.date_checks]
        out += [{"guard": "quote", "argument": c.argument, "verdict": "ok" if c.accepted else "not_said"}
                for c in self.quote_checks]
        return out


class ToolGate:
    """Runs the ID and date guards for a domain's tools.

    Args:
        tools: The domain's tool specs by name.
        reference_date_guard: The call's date guard (resolves against the call's reference date).
    """

    def __init__(self, tools: Mapping[str, ToolSpec], date_guard: DateGuard) -> None:
        self.tools = dict(tools)
        # The domains harvest every identifier a state-changing tool takes (lookup_order's invoice_id
        # included), so a mutation can insist on a ledger fact rather than a value a result mentioned.
        self.id_guard = IdGuard(ledger_only_for_mutations=True, tools=tuple(self.tools.values()))
        self.quote_guard = QuoteGuard()
        self.date_guard = date_guard
        self.date_contract = DateContract(date_guard)

    def has_dates(self, tool_name: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a call of ``tool_name`` with ``arguments`` is a date-bearing action (the contract judges it)."""
        tool = self.tools.get(tool_name)
        return tool is not None and any(p.name in arguments for p in tool.params_of(ParamKind.DATE))

    def review(
        self, state: CallState, tool_name: str, arguments: Mapping[str, Any], reading: DateReading | None = None
    ) -> GateDecision:
        """Checks one call before it runs; never modifies the lanes.

        Args:
            state: The call's lanes.
            tool_name: The tool the model called.
            arguments: Its arguments.
            reading: The model reader's reading of the call at this action, when a model reader is configured.
        """
        tool = self.tools.get(tool_name)
        if tool is None:
            known = ", ".join(sorted(self.tools))
            return GateDecision(tool_name, rejection=_rejection(
                "tool", "unknown_tool", f"No tool named {tool_name}. The tools are: {known}. Use one of them, or "
                                        "answer the caller without a tool."))
        id_checks = tuple(self.id_guard.check(tool, arguments, state.ledger, state.recent_entries()))
        decisions: tuple[DateDecision, ...] = ()
        if self.has_dates(tool_name, arguments):
            # The full transcript is re-read here, at the moment of a date-bearing action, and only here.
            decisions = tuple(self.date_contract.decide(tool, arguments, state.transcript, reading))
        date_checks = tuple(d.rules for d in decisions)
        quotes = tuple(self.quote_guard.check(tool, arguments, state.transcript))
        for check in id_checks:
            if not check.accepted:
                return GateDecision(tool_name, id_checks, date_checks, _rejection("id", check.verdict, check.reason),
                                    quotes, decisions)
        for date_decision in decisions:
            if not date_decision.runs:
                return GateDecision(tool_name, id_checks, date_checks, date_decision.result(), quotes, decisions)
        for quote in quotes:
            if not quote.accepted:
                return GateDecision(tool_name, id_checks, date_checks, _rejection("quote", "not_said", quote.reason),
                                    quotes, decisions)
        return GateDecision(tool_name, id_checks, date_checks, quote_checks=quotes, date_decisions=decisions)

    def harvest(
        self, state: CallState, tool_name: str, arguments: Mapping[str, Any], result: Any,
        decision: GateDecision | None = None,
    ) -> Harvested | None:
        """After a successful call: caller-stated IDs enter the ledger, the result is harvested."""
        tool = self.tools.get(tool_name)
        if tool is None:
            return None
        turn = max(state.turn, 1)
        for param in tool.params_of(ParamKind.IDENTIFIER):
            value = arguments.get(param.name)
            if isinstance(value, str):
                state.ledger.touch(value, turn)
        record_caller_arguments(tool, arguments, state.ledger, turn)
        quoted = {c.argument: c.turn for c in decision.quote_checks if c.turn is not None} if decision else {}
        return harvest_result(tool, result, state.ledger, state.slots, turn, quoted)


def _rejection(guard: str, verdict: str, reason: str) -> dict[str, Any]:
    return {"status": "rejected", "guard": guard, "verdict": str(verdict), "reason": reason}


@dataclass(frozen=True)
class ToolAdmission:
    """What the guards decided about one tool call, before it runs.

    Attributes:
        arguments: The arguments to run it with (identifiers as the ledger spells them).
        decision: The guards' decision (None when the call was stopped before the guards).
        refusal: The result for the model instead of running the tool (stopped, rejected, or a mutating call
            an earlier attempt already made: its recorded result); None: run it.
    """

    arguments: dict[str, Any]
    decision: GateDecision | None = None
    refusal: dict[str, Any] | None = None
    effect: str | None = None
    """The effect key of an admitted mutating call (its result is then recorded in the effect log)."""
