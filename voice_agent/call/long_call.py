"""The library's front door: make an existing pipecat bot long-call safe without rewriting it.

The bot keeps its own LLM service, prompt, tools, handlers, aggregators and transport. It declares which
parameters of its own tool schemas are identifiers and dates (:func:`guarded_tool`), and splices the processors
of :meth:`LongCall.attach` around its LLM::

    LANES = LongCall(tools=[guarded_tool(LOOKUP_ORDER, identifiers={"order_id": "order"})])

    llm.register_function("lookup_order", lookup_order)        # the bot's own handler, unchanged
    call = LANES.attach(llm)                                   # every handler now runs behind the guards
    pipeline = Pipeline([transport.input(), stt, user_agg, *call.before_llm, llm, *call.after_llm,
                         tts, transport.output(), *call.after_output, assistant_agg])

What then holds for the whole call: every identifier a tool returned or the caller said is kept verbatim in the
ledger and shown to the model on every request; a tool call whose identifier is in neither the ledger nor the
recent turns is refused (the model reads why and looks it up again); before a date-bearing action the whole
transcript is re-read and a date the caller ruled out never runs. See ``docs/library.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.services.llm_service import LLMService
from pydantic import BaseModel

from processors.tool_layer import guard_registered_handlers, registered_tools
from voice_agent.call.factory import build_session
from voice_agent.call.pipeline import CallProcessors, call_processors
from voice_agent.core.tool_spec import HarvestField, ParamKind, ToolParam, ToolSpec
from voice_agent.domains.base import Domain
from voice_agent.policies import PolicyName
from voice_agent.services.cut_streams import report_cut_streams
from voice_agent.services.factory import without_sdk_retries
from voice_agent.settings import Settings, SettingsError, load_settings


class NoSlots(BaseModel):
    """The slot model of a bot that declares none: its must-keep facts are the ledger's identifiers."""


@dataclass(frozen=True)
class GuardedTool:
    """One of the bot's tools as the guards see it (build it with :func:`guarded_tool`).

    Attributes:
        schema: The bot's own schema, unchanged (it is what the model is shown).
        spec: Its parameters' kinds, whether it changes state, and what its results feed into the ledger.
    """

    schema: FunctionSchema
    spec: ToolSpec


def guarded_tool(
    schema: FunctionSchema,
    *,
    identifiers: Mapping[str, str] | Sequence[str] = (),
    dates: Sequence[str] = (),
    quotes: Sequence[str] = (),
    mutates: bool = False,
    harvest: Sequence[HarvestField] = (),
) -> GuardedTool:
    """Declares which parameters of the bot's own tool are identifiers and dates; the schema is not changed.

    Args:
        schema: The bot's pipecat ``FunctionSchema``.
        identifiers: Identifier parameters, each with its ledger role (``{"order_id": "order"}``), or their names
            (the role is the name without ``_id``). Before the tool runs, each value must be in the ledger or
            in the recent turns.
        dates: Date parameters: before the tool runs the whole transcript is re-read for what the caller said
            about dates (the date contract); a ruled-out date is refused or read back for a yes.
        quotes: Parameters that quote the caller's words: checked against the transcript before the tool runs.
        mutates: The tool changes something (a booking, a refund): its identifiers must come from the ledger,
            and one the caller said but no tool confirmed is refused.
        harvest: Result fields to keep in the ledger (``HarvestField("invoices[].invoice_id", role="invoice")``).
            Each identifier parameter is harvested from a result field of the same name without saying so.

    Raises:
        ValueError: A declared parameter is not in the schema, or is declared twice.
    """
    roles = dict(identifiers) if isinstance(identifiers, Mapping) else {
        name: name.removesuffix("_id") for name in identifiers}
    kinds = {name: ParamKind.IDENTIFIER for name in roles}
    for names, kind in ((dates, ParamKind.DATE), (quotes, ParamKind.CALLER_QUOTE)):
        for name in names:
            if name in kinds:
                raise ValueError(f"tool {schema.name}: parameter {name!r} is declared twice")
            kinds[name] = kind
    properties: Mapping[str, Any] = schema.properties
    unknown = sorted(set(kinds) - set(properties))
    if unknown:
        raise ValueError(f"tool {schema.name}: no parameter {', '.join(unknown)} in its schema "
                         f"(it has {', '.join(properties) or 'none'})")
    params = tuple(
        ToolParam(name, str(prop.get("description", "")), kind=kinds.get(name, ParamKind.PLAIN),
                  role=roles.get(name), required=name in schema.required, type=str(prop.get("type", "string")))
        for name, prop in properties.items()
    )
    echoed = tuple(HarvestField(name, role=role) for name, role in roles.items())
    spec = ToolSpec(schema.name, schema.description, params, mutates=mutates, harvest=(*echoed, *harvest))
    return GuardedTool(schema, spec)


class LongCall:
    """The lanes and guards for a pipecat bot: declared once, attached to each call's LLM.

    Args:
        tools: The bot's tools that carry identifiers, dates or caller quotes (:func:`guarded_tool`). Its other
            tools need no declaration: they run behind the guards as plain tools.
        settings: The settings every call runs with (policy, K and S, summarizer, LLM timeouts and retries, date
            reader...); None: :func:`~voice_agent.settings.load_settings` at each :meth:`attach`.
        id_shapes: How callers say identifiers, each shape with its ledger role (``{"ORD-XXXXXX": "order"}``; ``#``
            a digit, ``X`` a letter or digit): an identifier the caller says enters the ledger, unverified.
        hard_constraints: Rules restated close to the end of every request.
        slots: The typed must-keep facts tools fill (a pydantic model); default: none besides the ledger.
        name: Names the bot in logs and errors.

    The bot's prompt stays where it is (the LLM service's ``system_instruction``, or the system message of its
    own context) and is never formatted: braces reach the model as written.
    """

    def __init__(
        self,
        tools: Sequence[GuardedTool] = (),
        *,
        settings: Settings | None = None,
        id_shapes: Mapping[str, str] | None = None,
        hard_constraints: Sequence[str] = (),
        slots: type[BaseModel] = NoSlots,
        name: str = "bot",
    ) -> None:
        names = [t.spec.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"{name}: a tool is declared twice ({', '.join(sorted(names))})")
        self.tools = tuple(tools)
        self.settings = settings
        self.id_shapes = dict(id_shapes or {})
        self.hard_constraints = tuple(hard_constraints)
        self.slots = slots
        self.name = name

    def domain(self, tool_names: Sequence[str] = ()) -> Domain:
        """The domain a call runs in: the declared tools, and each other name in ``tool_names`` as a plain tool.

        No reference brain, no prompt (the bot's own is used), no handlers (the bot's run behind the guards).
        """
        declared = {t.spec.name for t in self.tools}
        plain = tuple(ToolSpec(name, "") for name in tool_names if name not in declared)
        return Domain(
            name=self.name, slot_model=self.slots, tools=(*(t.spec for t in self.tools), *plain), handlers={},
            make_brain=None, system_prompt="", hard_constraints=self.hard_constraints,
            extra={"spoken_id_shapes": tuple(self.id_shapes), "spoken_id_roles": self.id_shapes},
        )

    def attach(self, llm: LLMService[Any], *, call_id: str | None = None) -> CallProcessors:
        """Starts one call on ``llm``: its lanes, its guards, and the processors to splice around ``llm``.

        Call it once per call, after registering the bot's handlers on ``llm``: every handler registered then
        runs behind the guards from now on, with its own options. A declared tool whose schema carries its
        handler (``FunctionSchema(handler=...)``) is registered here. The SDK's own retries are turned off
        (:func:`~voice_agent.services.factory.without_sdk_retries`): the call's LLM watchdog times and retries
        each inference, as ``settings.llm`` says; a stream cut before its finish reason is reported to it as an
        error, not taken for a whole answer.

        Args:
            llm: The bot's LLM service (any pipecat ``LLMService``).
            call_id: Names the call in logs and records; default: a fresh one.

        Returns:
            The call's session and its processors (``before_llm``, ``after_llm``, ``after_output``).

        Raises:
            ValueError: A declared tool has no handler on ``llm``, or a handler cannot be guarded (a catch-all
                or a direct function).
            SettingsError: The settings cannot serve a call of this bot.
        """
        settings = self.settings if self.settings is not None else load_settings()
        if settings.policy.name == PolicyName.PIPECAT.value:
            raise SettingsError("settings: policy.name=pipecat is pipecat's own summarizer: configure it on your "
                                "assistant aggregator and leave LongCall out, or pick lanes, rolling or window")
        for tool in self.tools:
            handler = tool.schema.handler
            if not llm.has_function(tool.spec.name) and handler is not None:
                llm.register_function(tool.spec.name, handler)
        names = registered_tools(llm)
        missing = [t.spec.name for t in self.tools if t.spec.name not in names]
        if missing:
            raise ValueError(f"{self.name}: no handler registered on the LLM for {', '.join(missing)} "
                             "(register them with llm.register_function before attach)")
        call_id = call_id or f"{self.name}-{uuid.uuid4().hex[:8]}"
        session = build_session(settings, call_id, self.domain(names), llm=llm)
        guard_registered_handlers(llm, session)
        without_sdk_retries(llm, settings.llm)
        report_cut_streams(llm)
        return call_processors(session, llm)
