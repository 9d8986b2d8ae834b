"""Replays call records through the context core under each memory policy and scores what the context held.

Each record's utterances are fed to a :class:`~voice_agent.core.call_state.CallState`
(caller utterances only by default; ``replay="all"`` adds the recorded agent
utterances). Each recorded action runs at its turn through the tool layer exactly as
in a live call: the :class:`~voice_agent.core.tool_gate.ToolGate` reviews it (ID guard,
date guard), a replay backend answers it (see *Harvest* below), and the gate harvests
that result into the ledger and slots.

Before each action the policy assembles the context the model would see at that
moment, and every argument value is looked for in it verbatim (or the caller's
wording of the fact it comes from). That presence is reported by fact kind and by
distance (turns since the caller last said the value), per policy.

Tool specs come from the record's ``tools`` map when it has one. Otherwise an
argument is an identifier when its name is the key of an ``identifier`` fact (SGD
keys such as ``Events_2.date`` match on the part after the dot too), and a date
when its recorded value is an ISO date.

Harvest: what the replay backend hands back, and what the gate harvests from it. The
mode is part of every headline figure (``harvest`` in the JSON, beside every figure in
the text and HTML reports), because it decides what ``lanes`` can keep:

* ``ids`` (the default): the tool result holds only what a real backend returns: a
  status, the action's identifier arguments (the records it looked up), and, for an
  action that creates something (``transactional`` in SGD, i.e. ``mutates``), a
  reference it created (``reservation_id``, ``booking_id``, ``ticket_id`` or
  ``confirmation_id``, derived deterministically from the call id and the action
  index). No other argument is ever handed back. Identifiers and created references
  enter the ledger; nothing enters a slot. When SGD says an action found nothing
  (``n_results: 0``) the status is ``no_results`` (a lookup) or ``failed`` (a
  booking), and nothing is created.
* ``echo``: an upper bound, not a measurement. The tool result hands every argument
  back, identifiers enter the ledger and every other argument a slot of a permissive
  per-record slot model (one slot per service, or tool, and argument, e.g.
  ``Events_1__date``). Whatever an action once carried then stays in ``lanes``'
  KNOWN FACTS for the rest of the call, whatever the caller did or did not say.

Two deliberate differences from the live session, both reported upstream:

* the gate reviews a call *before* the call is appended to the transcript lane. The
  live session appends first, so the ID guard finds every identifier in the call it
  is reviewing ("in the recent turns") and can never say ``unknown`` or ``mutated``;
* a tool is ``mutates=True`` only when a recorded action marks it ``transactional``
  (SGD does); call records carry no lookup results, so only those tools can yield
  ``unverified``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from voice_agent.agent.brain import Brain
from voice_agent.call.factory import build_session
from voice_agent.core.assembler import KNOWN_FACTS_HEADER, AssembledContext, AssemblerConfig
from voice_agent.core.call_state import CallState
from voice_agent.core.drop_log import DropEvent, facts_present
from voice_agent.core.guards.date_guard import DateCheck, parse_date_argument
from voice_agent.core.policy import ContextPolicy, rewrite_schedule
from voice_agent.core.tokens import estimate_tokens
from voice_agent.core.tool_gate import GateDecision, ToolGate
from voice_agent.core.tool_spec import HarvestField, ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import ToolOutcome
from voice_agent.domains.base import Domain
from voice_agent.harness.scenarios import Action, Fact, Scenario, load_call_records
from voice_agent.harness.simulation.fault_summarizer import FaultInjectingSummarizer, flat_tracked
from voice_agent.policies import PolicyName
from voice_agent.settings import Settings, with_overrides

ReplayMode = Literal["caller", "all"]
HarvestMode = Literal["ids", "echo"]

DEFAULT_HARVEST: HarvestMode = "ids"
HARVEST_MODES: dict[str, str] = {
    "ids": "ids (tool results hold only identifiers, created references and a status, as a real backend's)",
    "echo": "echo (upper bound: tool results hand every argument back)",
}
"""Each harvest mode and what it means, as printed beside every headline figure."""


def harvest_label(mode: str) -> str:
    """``mode`` with its meaning, e.g. ``echo (upper bound: tool results hand every argument back)``."""
    return HARVEST_MODES.get(mode, mode)


CREATED_REFERENCES: tuple[tuple[str, str, str], ...] = (
    ("reserve", "reservation_id", "RSV"),
    ("book", "booking_id", "BKG"),
    ("buy", "ticket_id", "TKT"),
    ("purchase", "ticket_id", "TKT"),
)
"""(tool-name prefix, result field, reference prefix) of what a creating action returns; else ``confirmation_id``."""


def created_reference_field(tool: str) -> tuple[str, str]:
    """(result field, reference prefix) of the reference a creating ``tool`` returns."""
    lowered = tool.lower()
    for prefix, name, code in CREATED_REFERENCES:
        if lowered.startswith(prefix):
            return name, code
    return "confirmation_id", "CNF"


def created_reference(call: str, action_index: int, prefix: str) -> str:
    """A deterministic reference for the thing action ``action_index`` of ``call`` created: ``RSV-1A2B3C4D``."""
    digest = hashlib.sha256(f"{call}#{action_index}".encode()).hexdigest()[:8].upper()
    return f"{prefix}-{digest}"

DISTANCE_BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 6), (7, 15), (16, 30), (31, None))
"""Distance buckets in turns (exchanges); 0-6 is inside the default raw window K=6."""

KIND_ORDER = ("identifier", "date_constraint", "other", "unlinked")
"""Row order of the by-kind tables; ``unlinked`` arguments match no caller fact."""

KIND_FOR_PARAM = {"identifier": ParamKind.IDENTIFIER, "date": ParamKind.DATE, "plain": ParamKind.PLAIN}


def distance_bucket(distance: int | None) -> str:
    """The bucket label (``0-6``, ``7-15``, ``16-30``, ``31+``) of a distance in turns, ``n/a`` for None."""
    if distance is None:
        return "n/a"
    for low, high in DISTANCE_BUCKETS:
        if distance >= low and (high is None or distance <= high):
            return f"{low}-{high}" if high is not None else f"{low}+"
    return "n/a"


def bucket_labels() -> list[str]:
    """Every bucket label, nearest first."""
    return [distance_bucket(low) for low, _ in DISTANCE_BUCKETS]


def exchange_of_utterance(index: int) -> int:
    """The exchange (turn from 1) an utterance index belongs to."""
    return index // 2 + 1


def exchange_of_action(action: Action) -> int:
    """The exchange during which an action with ``turn: N`` is issued (before utterance N)."""
    return max(1, (action.turn - 1) // 2 + 1)


def key_matches(fact_key: str, argument: str) -> bool:
    """Whether a fact key names an argument: ``Events_2.date`` names ``date`` (and so does ``date``)."""
    return fact_key == argument or fact_key.rsplit(".", 1)[-1] == argument


def _values(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value if v not in (None, "")]
    return [] if value in (None, "") else [str(value)]


def verbatim_in(value: str, text: str) -> bool:
    """``value`` appears in ``text`` verbatim, not glued to a longer word or number ("2" is not in "2019")."""
    return bool(value) and re.search(r"(?<![0-9A-Za-z])" + re.escape(value) + r"(?![0-9A-Za-z])", text) is not None


def _slot_name(group: str, argument: str) -> str:
    name = re.sub(r"\W", "_", f"{group}__{argument}").strip("_")
    return name if name and not name[0].isdigit() else f"s_{name}"


ActionExtras = Sequence[Mapping[str, Any]]
"""Per action, the fields the call-record schema does not model (SGD: ``service``, ``transactional``)."""


def read_action_extras(path: Path | str) -> dict[str, list[dict[str, Any]]]:
    """Record id -> the raw action objects of each well-formed line (the schema drops unknown fields)."""
    out: dict[str, list[dict[str, Any]]] = {}
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and isinstance(data.get("actions"), list):
                out[str(data.get("id"))] = [a if isinstance(a, dict) else {} for a in data["actions"]]
    return out


def tool_specs(
    record: Scenario, harvest: HarvestMode = DEFAULT_HARVEST, extras: ActionExtras = ()
) -> dict[str, ToolSpec]:
    """Tool specs for the tools a record's actions call.

    Args:
        record: The call record.
        harvest: ``ids``: identifiers and created references to the ledger, no slots; ``echo``: identifiers to the
            ledger and every other argument to a slot (see the module docstring).
        extras: The raw action objects, for ``service`` (groups slots) and ``transactional`` (``mutates``).

    Returns:
        Tool name -> spec, argument kinds from ``record.tools`` or inferred from the facts and values.
    """
    id_keys = [f.key for f in record.facts if f.kind == "identifier"]
    kinds: dict[str, dict[str, ParamKind]] = defaultdict(dict)
    groups: dict[str, dict[str, str]] = defaultdict(dict)
    mutates: dict[str, bool] = defaultdict(bool)
    for a_index, action in enumerate(record.actions):
        extra = extras[a_index] if a_index < len(extras) else {}
        mutates[action.tool] |= bool(extra.get("transactional"))
        declared = (record.tools or {}).get(action.tool)
        for name, value in action.args.items():
            groups[action.tool].setdefault(name, str(extra.get("service") or action.tool))
            if declared is not None:
                kind = KIND_FOR_PARAM.get(declared.get(name, "plain"), ParamKind.PLAIN)
            elif any(key_matches(k, name) for k in id_keys):
                kind = ParamKind.IDENTIFIER
            elif all(parse_date_argument(v) is not None for v in _values(value)) and _values(value):
                kind = ParamKind.DATE
            else:
                kind = ParamKind.PLAIN
            if kinds[action.tool].get(name) in (None, ParamKind.PLAIN):
                kinds[action.tool][name] = kind
    specs: dict[str, ToolSpec] = {}
    for tool, params in kinds.items():
        tool_params = tuple(
            ToolParam(name, f"{name} (from the call record)", kind, role=name if kind is ParamKind.IDENTIFIER else None,
                      required=False)
            for name, kind in params.items()
        )
        harvest_fields = [
            HarvestField(name, role=name) if kind is ParamKind.IDENTIFIER
            else HarvestField(name, slot=_slot_name(groups[tool][name], name))
            for name, kind in params.items()
            if kind is ParamKind.IDENTIFIER or harvest == "echo"
        ]
        if harvest == "ids" and mutates[tool]:
            created, _ = created_reference_field(tool)
            if created not in params:
                harvest_fields.append(HarvestField(created, role=created))
        specs[tool] = ToolSpec(tool, f"{tool} (replayed)", tool_params, mutates=mutates[tool],
                               harvest=tuple(harvest_fields))
    return specs


def slot_model_for(specs: Mapping[str, ToolSpec]) -> type[BaseModel]:
    """A permissive slot model with one optional slot of any type per harvested slot name."""
    names = sorted({h.slot for spec in specs.values() for h in spec.harvest if h.slot is not None})
    fields: dict[str, Any] = {name: (Any, None) for name in names}
    model: type[BaseModel] = create_model(
        "ReplaySlots", __config__=ConfigDict(extra="forbid", protected_namespaces=()), **fields
    )
    return model


def fact_labels(record: Scenario) -> list[str]:
    """A unique name per fact: its key, or ``key@N`` (N = stated utterance) when the key repeats.

    SGD records repeat a key when the caller changes a slot's value ("the 9th", later "the 10th").
    """
    counts = Counter(f.key for f in record.facts)
    return [f.key if counts[f.key] == 1 else f"{f.key}@{f.stated_turn}" for f in record.facts]


def tracked_forms(record: Scenario) -> dict[str, tuple[str, ...]]:
    """Fact label -> the exact forms whose presence counts (the caller's wording, the canonical form)."""
    return {
        label: tuple(dict.fromkeys(v for v in (f.value, f.canonical) if v))
        for label, f in zip(fact_labels(record), record.facts, strict=True)
    }


def link_map(record: Scenario) -> dict[tuple[int, str], int]:
    """(action index, argument) -> fact index: from ``links`` when given, else by value and key.

    Without a link, an argument comes from the latest fact stated before the action whose canonical form
    (or, without one, its wording) equals the value, preferring facts whose key names the argument.
    """
    out: dict[tuple[int, str], int] = {}
    for link in record.links:
        if 0 <= link.fact < len(record.facts) and 0 <= link.action < len(record.actions):
            out[(link.action, link.arg)] = link.fact
    for a_index, action in enumerate(record.actions):
        for name, value in action.args.items():
            if (a_index, name) in out:
                continue
            values = _values(value)
            candidates = [
                i for i, f in enumerate(record.facts)
                if (f.canonical or f.value) in values and f.stated_turn < max(action.turn, 1)
            ]
            named = [i for i in candidates if key_matches(record.facts[i].key, name)]
            if named or candidates:
                out[(a_index, name)] = (named or candidates)[-1]
    return out


def last_mention(fact: Fact, before_utterance: int) -> int:
    """Utterance index of the caller's last mention of ``fact`` before ``before_utterance``."""
    earlier = [t for t in (*fact.caller_mention_turns, fact.stated_turn) if t < before_utterance]
    return max(earlier) if earlier else fact.stated_turn


@dataclass(frozen=True)
class ReplayConfig:
    """How ``voice-agent eval`` replays records.

    Attributes:
        policies: Policies compared side by side.
        retention: Per-pass retention R of the fault-injecting summarizer.
        seed: First seed; record i uses ``seed + i``.
        keep: K, recent turns kept raw.
        every: S, summary pass cadence.
        replay: ``caller`` (caller utterances only) or ``all`` (recorded agent utterances too).
        harvest: ``ids`` (the default: tool results hold only identifiers, created references and a status) or
            ``echo`` (an upper bound: tool results hand every argument back, harvested into slots).
        perturb: Also check perturbed copies of every date argument (date-guard accuracy).
        settings: The settings each replayed call is built from (ledger capacity, output guard...);
            None: the defaults. Policy, K and S come from the fields above.
    """

    policies: tuple[PolicyName, ...] = (PolicyName.LANES, PolicyName.ROLLING, PolicyName.WINDOW)
    retention: float = 0.9
    seed: int = 0
    keep: int = 6
    every: int = 5
    replay: ReplayMode = "caller"
    harvest: HarvestMode = DEFAULT_HARVEST
    perturb: bool = True
    settings: Settings | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.retention <= 1.0:
            raise ValueError(f"--retention must lie in [0, 1], got {self.retention}")
        if not self.policies:
            raise ValueError("at least one policy is needed")
        if self.harvest not in HARVEST_MODES:
            raise ValueError(f"--harvest takes {' or '.join(HARVEST_MODES)}, got {self.harvest!r}")
        ContextPolicy(self.keep, self.every)  # validates K and S

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "policies": [p.value for p in self.policies], "retention": self.retention, "seed": self.seed,
            "keep": self.keep, "every": self.every, "replay": self.replay, "harvest": self.harvest,
            "harvest_meaning": harvest_label(self.harvest),
        }


@dataclass
class ArgumentRow:
    """One action argument of one record, with its presence under each policy and its guard verdict.

    Attributes:
        call: Record id.
        action: Action index in the record.
        turn: The action's ``turn`` (utterance index it precedes).
        exchange: The exchange it is issued in.
        tool: Tool name.
        argument: Argument name.
        value: The recorded value (lists joined with ", ").
        param_kind: ``identifier``, ``date`` or ``plain`` (the spec's mark).
        kind: Fact kind of the linked fact, ``identifier`` for an unlinked identifier, else ``unlinked``.
        fact: The linked fact's label (its key, ``key@N`` when the key repeats in the record).
        stated_exchange: Exchange the caller first stated the fact.
        mention_exchange: Exchange the caller last said it before the action.
        distance: Turns from that last mention to the action.
        rewrites: Summary passes a rolling summary runs over the fact before the action.
        present: Policy -> whether the value (or the caller's wording) was in the assembled context.
        id_guard: The ID guard's verdict on the argument (identifiers).
        date_guard: The date guard's check (dates), with cited turns.
    """

    call: str
    action: int
    turn: int
    exchange: int
    tool: str
    argument: str
    value: str
    param_kind: str
    kind: str
    fact: str | None = None
    stated_exchange: int | None = None
    mention_exchange: int | None = None
    distance: int | None = None
    rewrites: int | None = None
    present: dict[str, bool] = field(default_factory=dict)
    id_guard: dict[str, Any] | None = None
    date_guard: dict[str, Any] | None = None

    @property
    def bucket(self) -> str:
        """Distance bucket label."""
        return distance_bucket(self.distance)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "call": self.call, "action": self.action, "turn": self.turn, "exchange": self.exchange,
            "tool": self.tool, "argument": self.argument, "value": self.value, "param_kind": self.param_kind,
            "kind": self.kind, "fact": self.fact, "stated_exchange": self.stated_exchange,
            "mention_exchange": self.mention_exchange, "distance": self.distance, "bucket": self.bucket,
            "rewrites": self.rewrites, "present": dict(self.present), "id_guard": self.id_guard,
            "date_guard": self.date_guard,
        }


@dataclass(frozen=True)
class ActionContext:
    """What a perturbation check sees at the moment of one recorded action.

    Attributes:
        record: The call record.
        action_index: Index of the action in the record.
        action: The action.
        state: The call state just before the action runs (read it; do not modify it).
        gate: The record's tool gate.
        specs: The record's tool specs.
    """

    record: Scenario
    action_index: int
    action: Action
    state: CallState
    gate: ToolGate
    specs: Mapping[str, ToolSpec]


ActionHook = Callable[[ActionContext], None]
"""Called at every recorded action (in the first policy's run only; guard verdicts do not depend on the policy)."""


@dataclass
class RecordReplay:
    """Everything one record's replay produced.

    Attributes:
        call: Record id.
        arguments: One row per action argument.
        expect: The record's ``expect`` check, if it has one (filled by :func:`evaluate_records`, which knows the
            record's clean twin; see :mod:`voice_agent.harness.evaluation.perturb`).
        perturbed: The record carries ``expect`` (a perturbed copy of a call).
        tool_results: Action index -> the structured result the model received (the backend's answer, or the
            gate's rejection), from the first policy's run.
        tokens: Policy -> estimated tokens of the first request of each exchange, by exchange.
        known_facts_tokens: Policy -> estimated tokens of that request's KNOWN FACTS block, by exchange
            (0 without one).
        timeline: Policy -> fact label -> per-exchange presence (None before the caller stated it).
        drops: Policy -> the drop log of its summary passes.
        exchanges: Exchanges in the call.
        fact_kinds: Fact label -> kind, for every fact of the record.
    """

    call: str
    arguments: list[ArgumentRow] = field(default_factory=list)
    expect: dict[str, Any] | None = None
    perturbed: bool = False
    tool_results: dict[int, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, dict[int, int]] = field(default_factory=dict)
    known_facts_tokens: dict[str, dict[int, int]] = field(default_factory=dict)
    timeline: dict[str, dict[str, list[bool | None]]] = field(default_factory=dict)
    drops: dict[str, list[DropEvent]] = field(default_factory=dict)
    exchanges: int = 0
    fact_kinds: dict[str, str] = field(default_factory=dict)


def known_facts_tokens(context: AssembledContext) -> int:
    """Estimated tokens of the KNOWN FACTS block of an assembled request (0 when it has none)."""
    blocks = [str(m.get("content")) for m in context.messages
              if str(m.get("content", "")).startswith(KNOWN_FACTS_HEADER)]
    return estimate_tokens(blocks[0]) if blocks else 0


def record_domain(record: Scenario, specs: Mapping[str, ToolSpec], slot_model: type[BaseModel]) -> Domain:
    """The domain a replayed record runs in: its tools, its slots, no handlers (the replay answers)."""
    return Domain(
        name=record.domain, slot_model=slot_model, tools=tuple(specs.values()), handlers={},
        make_brain=_no_brain, system_prompt=assembler_config(record).system_prompt,
    )


def _no_brain() -> Brain:
    raise RuntimeError("a replayed record runs its recorded actions, not a brain")


def assembler_config(record: Scenario) -> AssemblerConfig:
    """The system prompt a replayed call is assembled with."""
    today = record.reference_date.isoformat() if record.reference_date else "unknown"
    return AssemblerConfig(
        system_prompt=f"You are a phone agent for {record.domain}. Today is {today}. Use the tools to act."
    )


async def replay_record(
    record: Scenario, config: ReplayConfig, index: int = 0, on_action: ActionHook | None = None,
    extras: ActionExtras = (),
) -> RecordReplay:
    """Replays one record under every policy of ``config``.

    Args:
        record: The call record.
        config: Policies, K, S, R, replay and harvest modes.
        index: The record's position in its file (seeds the summarizer with ``config.seed + index``).
        on_action: Called at every action of the first policy's run, before the action runs.
        extras: The record's raw action objects (see :func:`tool_specs`).

    Returns:
        Argument rows, tool results, tokens, presence timelines and drop logs (the expect check is scored across
        records, by :func:`evaluate_records`).
    """
    specs = tool_specs(record, config.harvest, extras)
    slot_model = slot_model_for(specs)
    forms = tracked_forms(record)
    tracked = flat_tracked(forms)
    links = link_map(record)
    reference = record.reference_date or dt.date.today()
    ctx_policy = ContextPolicy(config.keep, config.every)
    labels = fact_labels(record)
    out = RecordReplay(call=record.id, exchanges=record.exchanges, perturbed=bool(record.expect),
                       fact_kinds={label: f.kind for label, f in zip(labels, record.facts, strict=True)})
    rows: dict[tuple[int, str], ArgumentRow] = {}
    by_turn: dict[int, list[tuple[int, Action]]] = defaultdict(list)
    for a_index, action in enumerate(record.actions):
        by_turn[min(max(action.turn, 0), len(record.turns))].append((a_index, action))

    for p_index, name in enumerate(config.policies):
        first = p_index == 0
        # The call is built by the one call factory, as every entry point builds it; the replay then
        # plays the recorded actions where a live call would run a model.
        settings = with_overrides(config.settings or Settings(),
                                  policy={"name": name.value, "keep": config.keep, "every": config.every},
                                  call={"reference_date": reference})
        summarizer = FaultInjectingSummarizer(config.retention, tracked, config.seed + index)
        session = build_session(settings, f"{record.id}-{name.value}", record_domain(record, specs, slot_model),
                                summarizer)
        state, gate, policy = session.state, session.gate, session.policy
        drops: list[DropEvent] = []
        tokens: dict[int, int] = {}
        facts_tokens: dict[int, int] = {}
        timeline: dict[str, list[bool | None]] = {label: [] for label in labels}

        for u in range(len(record.turns) + 1):
            for a_index, action in by_turn.get(u, []):
                text = policy.build(state).text()
                if first and on_action is not None:
                    on_action(ActionContext(record, a_index, action, state, gate, specs))
                extra = extras[a_index] if a_index < len(extras) else {}
                decision, result = _run_action(state, gate, specs, a_index, action, config.harvest, record.id, extra)
                for arg, value in action.args.items():
                    row = rows.get((a_index, arg))
                    if row is None:
                        row = _argument_row(record, a_index, action, arg, value, specs, links, ctx_policy, labels)
                        rows[(a_index, arg)] = row
                    forms_here = list(_values(value))
                    if row.fact is not None:
                        forms_here += list(forms.get(row.fact, ()))
                    row.present[name.value] = any(verbatim_in(v, text) for v in forms_here)
                    if first:
                        _attach_verdicts(row, decision)
                if first:
                    out.tool_results[a_index] = result
            if u == len(record.turns):
                break
            utterance = record.turns[u]
            if utterance.speaker == "agent":
                if config.replay == "all":
                    state.record_agent(utterance.text)
                continue
            exchange = exchange_of_utterance(u)
            if exchange <= state.turn:
                state.add_caller_text(utterance.text)
                continue
            state.turn = exchange - 1
            state.start_turn(utterance.text)
            summary_pass = await policy.on_turn_start(state)
            if summary_pass is not None:
                # The record's facts, followed by the harness (the call follows only its own lanes).
                drops.append(DropEvent(summary_pass.turn, facts_present(summary_pass.text_in, tracked),
                                       facts_present(summary_pass.text_out, tracked)))
            context = policy.build(state)
            tokens[exchange] = context.total_tokens
            facts_tokens[exchange] = known_facts_tokens(context)
            text = context.text()
            for label, fact in zip(labels, record.facts, strict=True):
                series = timeline[label]
                series.extend([None] * (exchange - 1 - len(series)))
                stated = record.fact_stated_turn(fact) <= exchange
                series.append(any(verbatim_in(f, text) for f in forms[label]) if stated else None)
        out.tokens[name.value] = tokens
        out.known_facts_tokens[name.value] = facts_tokens
        out.timeline[name.value] = timeline
        out.drops[name.value] = drops
    out.arguments = [rows[k] for k in sorted(rows)]
    return out


def _argument_row(
    record: Scenario, a_index: int, action: Action, arg: str, value: Any, specs: Mapping[str, ToolSpec],
    links: Mapping[tuple[int, str], int], policy: ContextPolicy, labels: Sequence[str],
) -> ArgumentRow:
    param = next((p for p in specs[action.tool].params if p.name == arg), None)
    param_kind = param.kind.value if param is not None else ParamKind.PLAIN.value
    exchange = exchange_of_action(action)
    row = ArgumentRow(
        call=record.id, action=a_index, turn=action.turn, exchange=exchange, tool=action.tool, argument=arg,
        value=", ".join(_values(value)), param_kind=param_kind,
        kind="identifier" if param_kind == ParamKind.IDENTIFIER.value else "unlinked",
    )
    f_index = links.get((a_index, arg))
    if f_index is not None:
        fact = record.facts[f_index]
        mention = exchange_of_utterance(last_mention(fact, action.turn))
        row.kind = fact.kind
        row.fact = labels[f_index]
        row.stated_exchange = record.fact_stated_turn(fact)
        row.mention_exchange = mention
        row.distance = max(0, exchange - mention)
        row.rewrites = len(rewrite_schedule(policy, mention, max(exchange, mention)))
    return row


def _attach_verdicts(row: ArgumentRow, decision: GateDecision) -> None:
    for check in decision.id_checks:
        if check.argument == row.argument:
            row.id_guard = {"verdict": check.verdict.value, "reason": check.reason}
    for date_check in decision.date_checks:
        if date_check.argument == row.argument:
            row.date_guard = date_check.to_json()


def _run_action(
    state: CallState, gate: ToolGate, specs: Mapping[str, ToolSpec], a_index: int, action: Action,
    harvest: HarvestMode = DEFAULT_HARVEST, call: str = "", extra: Mapping[str, Any] | None = None,
) -> tuple[GateDecision, dict[str, Any]]:
    """Review -> execute against the replay backend -> harvest, recording the call and its result.

    Returns:
        The gate's decision and the structured result the model receives (the rejection when refused).
    """
    decision = gate.review(state, action.tool, action.args)
    turn = max(state.turn, 1)
    call_id = f"replay-{a_index}"
    state.transcript.append_tool_call(turn, action.tool, call_id, action.args)
    if decision.rejection is not None:
        state.transcript.append_tool_result(turn, action.tool, call_id, decision.rejection, ToolOutcome.REJECTED)
        return decision, dict(decision.rejection)
    result = replay_backend(action, specs[action.tool], harvest, call=call, index=a_index, extra=extra)
    state.transcript.append_tool_result(turn, action.tool, call_id, result, ToolOutcome.COMPLETED)
    gate.harvest(state, action.tool, action.args, result)
    return decision, result


def replay_backend(
    action: Action, spec: ToolSpec, harvest: HarvestMode = DEFAULT_HARVEST, *, call: str = "", index: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The replay backend's structured result for one action.

    Args:
        action: The recorded action.
        spec: Its tool spec (identifier parameters, ``mutates``).
        harvest: ``ids``: a status, the identifier arguments and, for a creating action, a created reference;
            never any other argument. ``echo``: the status and every argument (an upper bound).
        call: The record id (seeds the created reference).
        index: The action's index in the record (seeds the created reference).
        extra: The raw action object; SGD's ``n_results: 0`` means the backend found (or booked) nothing.
    """
    if harvest == "echo":
        return {"status": "ok", **action.args}
    found_nothing = (extra or {}).get("n_results") == 0
    result: dict[str, Any] = {
        "status": ("failed" if spec.mutates else "no_results") if found_nothing else "ok"
    }
    for param in spec.params_of(ParamKind.IDENTIFIER):
        value = action.args.get(param.name)
        if value not in (None, ""):
            result[param.name] = value
    if spec.mutates and not found_nothing:
        name, prefix = created_reference_field(action.tool)
        if name not in action.args:
            result[name] = created_reference(call, index, prefix)
    return result


def check_date(gate: ToolGate, state: CallState, tool: str, arguments: Mapping[str, Any], argument: str) -> DateCheck:
    """The date guard's check of one argument of a (possibly perturbed) call, through the gate as live."""
    decision = gate.review(state, tool, arguments)
    found = next((c for c in decision.date_checks if c.argument == argument), None)
    if found is None:
        raise KeyError(f"{tool} has no date argument {argument!r}")
    return found


# -- aggregation -------------------------------------------------------------------------------------------------------


def _rate(present: int, n: int) -> dict[str, Any]:
    return {"n": n, "present": present, "rate": present / n if n else None}


def aggregate(replays: Sequence[RecordReplay], config: ReplayConfig) -> dict[str, Any]:
    """Per-policy presence by kind and by kind x distance bucket, tokens, drop logs and guard tallies.

    Guard tallies are given over every record, and split between perturbed records (those with ``expect``) and
    clean ones. Every headline carries the harvest mode.
    """
    rows = [r for rep in replays for r in rep.arguments]
    policies: dict[str, Any] = {}
    for name in (p.value for p in config.policies):
        by_kind: dict[str, dict[str, Any]] = {}
        by_bucket: dict[str, dict[str, dict[str, Any]]] = {}
        for kind in KIND_ORDER:
            mine = [r for r in rows if r.kind == kind]
            if not mine:
                continue
            by_kind[kind] = _rate(sum(r.present.get(name, False) for r in mine), len(mine))
            by_bucket[kind] = {}
            for label in [*bucket_labels(), "n/a"]:
                in_bucket = [r for r in mine if r.bucket == label]
                if in_bucket:
                    by_bucket[kind][label] = _rate(sum(r.present.get(name, False) for r in in_bucket), len(in_bucket))
        linked = [r for r in rows if r.fact is not None]
        per_turn: dict[int, list[int]] = defaultdict(list)
        for rep in replays:
            for turn, tokens in rep.tokens.get(name, {}).items():
                per_turn[turn].append(tokens)
        all_tokens = [t for ts in per_turn.values() for t in ts]
        drop_log = [
            {"call": rep.call, "turn": e.turn, "facts_in": sorted(e.keys_in), "facts_out": sorted(e.keys_out)}
            for rep in replays for e in rep.drops.get(name, [])
        ]
        events = [e for rep in replays for e in rep.drops.get(name, [])]
        # Ledger and slot values are not the summary's to keep (lanes holds them): only caller facts count.
        offered = sum(len(_caller_facts(e.keys_in)) for e in events)
        kept = sum(len(_caller_facts(e.keys_in & e.keys_out)) for e in events)
        policies[name] = {
            "harvest": config.harvest,
            "arguments": _rate(sum(r.present.get(name, False) for r in rows), len(rows)),
            "linked_arguments": _rate(sum(r.present.get(name, False) for r in linked), len(linked)),
            "by_kind": by_kind,
            "by_kind_bucket": by_bucket,
            "tokens_per_request": statistics.mean(all_tokens) if all_tokens else 0.0,
            "tokens_by_turn": {str(t): statistics.mean(v) for t, v in sorted(per_turn.items())},
            "drop_log": drop_log,
            "measured_retention": kept / offered if offered else None,
        }
    perturbed_rows = [r for rep in replays if rep.perturbed for r in rep.arguments]
    clean_rows = [r for rep in replays if not rep.perturbed for r in rep.arguments]
    fact_kinds = {key: kind for rep in replays for key, kind in rep.fact_kinds.items()}
    return {
        "policies": policies,
        "guards": {
            "harvest": config.harvest,
            "id": _id_verdicts(rows),
            "date": _date_verdicts(rows),
            "id_by_set": {"perturbed": _id_verdicts(perturbed_rows), "clean": _id_verdicts(clean_rows)},
            "date_by_set": {"perturbed": _date_verdicts(perturbed_rows), "clean": _date_verdicts(clean_rows)},
        },
        "fact_kinds": fact_kinds,
    }


def _id_verdicts(rows: Sequence[ArgumentRow]) -> dict[str, int]:
    return dict(Counter(str(r.id_guard["verdict"]) for r in rows if r.id_guard))


def _date_verdicts(rows: Sequence[ArgumentRow]) -> dict[str, int]:
    return dict(Counter(str(r.date_guard["verdict"]) for r in rows if r.date_guard))


def _caller_facts(keys: frozenset[str]) -> frozenset[str]:
    return frozenset(k for k in keys if not k.startswith(("ledger:", "slot:")))


def survival_points(replays: Sequence[RecordReplay], policies: Sequence[str]) -> list[dict[str, Any]]:
    """Presence at need against the number of summary rewrites, per policy (linked arguments only)."""
    counts: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for rep in replays:
        for row in rep.arguments:
            if row.rewrites is None:
                continue
            for name in policies:
                cell = counts[(name, row.rewrites)]
                cell[0] += int(row.present.get(name, False))
                cell[1] += 1
    return [
        {"policy": p, "rewrites": n, "present": k, "n": total, "rate": k / total}
        for (p, n), (k, total) in sorted(counts.items())
    ]


@dataclass
class EvalResult:
    """The result of ``voice-agent eval FILE``.

    Attributes:
        report: The JSON report.
        replays: Per-record replays (for the HTML report).
    """

    report: dict[str, Any]
    replays: list[RecordReplay]


async def evaluate_records(
    records: Sequence[Scenario], config: ReplayConfig, on_record: Callable[[int], None] | None = None,
    extras: Mapping[str, ActionExtras] | None = None, raw: Mapping[str, Mapping[str, Any]] | None = None,
) -> EvalResult:
    """Replays ``records``, checks perturbed dates when ``config.perturb``, scores ``expect``, builds the report.

    Args:
        records: Call records.
        config: How to replay.
        on_record: Progress callback, called with the number of records done.
        extras: Record id -> raw action objects (see :func:`read_action_extras`).
        raw: Record id -> the raw record object, for explicit ``perturbation`` fields (see
            :mod:`voice_agent.harness.evaluation.perturb`); without it perturbed records are paired by id and diffed.
    """
    from voice_agent.harness.evaluation.perturb import DateGuardAudit, expect_report

    audit = DateGuardAudit(seed=config.seed)
    replays = []
    for i, record in enumerate(records):
        replays.append(await replay_record(record, config, i, audit.on_action if config.perturb else None,
                                           (extras or {}).get(record.id, ())))
        if on_record is not None:
            on_record(i + 1)
    expect = expect_report(records, replays, config.harvest, raw)
    accuracy = audit.report(replays) if config.perturb else None
    if accuracy is not None:
        accuracy = {"harvest": config.harvest, **accuracy}
    report = {
        "config": config.to_json(),
        "harvest": config.harvest,
        "harvest_meaning": harvest_label(config.harvest),
        "records": len(records),
        **aggregate(replays, config),
        "expect": expect,
        "date_guard_accuracy": accuracy,
        "survival": survival_points(replays, [p.value for p in config.policies]),
        "timelines": {
            rep.call: {"exchanges": rep.exchanges, "policies": rep.timeline} for rep in replays
        },
        "arguments": [row.to_json() for rep in replays for row in rep.arguments],
    }
    return EvalResult(report, replays)


def read_raw_records(path: Path | str) -> dict[str, dict[str, Any]]:
    """Record id -> the raw object of each well-formed line (the schema drops fields it does not model)."""
    out: dict[str, dict[str, Any]] = {}
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and "id" in data:
                out[str(data["id"])] = data
    return out


def evaluate_file(
    path: Path | str, config: ReplayConfig, on_record: Callable[[int], None] | None = None
) -> EvalResult:
    """Reads a JSONL file of call records (bad lines reported, not fatal) and evaluates it."""
    records, errors = load_call_records(path)
    result = asyncio.run(evaluate_records(records, config, on_record, read_action_extras(path),
                                          read_raw_records(path)))
    result.report = {
        "file": str(path),
        "errors": [{"line": e.line, "message": e.message} for e in errors],
        **result.report,
    }
    return result
