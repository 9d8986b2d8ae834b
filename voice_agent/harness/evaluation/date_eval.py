"""``voice-agent eval dates``: the date guard measured on data written apart from the date engine.

Three inputs, each labelled by its author and never by the engine under test:

* **Labelled sentences** (``config/evals/dates/sentences.yaml``; its header says what every label
  means). With the statement reader (``voice_agent.core.dates.read_statements``, or one given)
  every sentence is scored for its subject, kind and topic, and every probe for whether the
  statements that bind the probe's tool rule the date out (:func:`binds`, :func:`statement_blocks`;
  an agreement reply's probes are left to the guard, since the reader never sees the agent's
  line). Through the guard that exists today
  (:class:`~voice_agent.core.guards.date_guard.DateGuard`) every probe is scored too: the sentence
  alone is the transcript (an agreement item's agent line first), and a date counts as ruled out
  when the verdict is ``conflict`` or ``superseded``. An agreement item also scores whether the
  guard accepts the proposed date exactly when the caller agreed.
* **Generated calls** (:mod:`voice_agent.harness.evaluation.date_calls`, or any JSON Lines of call records
  carrying ``twin_role``/``expect`` and ``expect_cite_turns``). Each record's callback action is
  checked with ``DateGuard(reference).check(tool, action args, lane)``, the lane holding the
  utterances before the action. Per call class:

  - *false alarms*: clean twins whose verdict is not ``ok`` (target <= 2 %);
  - *breaks caught*: bad twins judged ``conflict`` (target >= 98 %);
  - *stale caught*: stale twins judged ``superseded`` or ``conflict`` (target >= 90 %);
  - *clean cited*: clean twins judged ``ok`` whose citations include a caller turn that asked for
    or agreed to the date (target >= 95 %).
* **SGD perturbations** (``--sgd``): the existing replay and perturbation audit
  (:mod:`voice_agent.harness.evaluation.perturb`) over the public SGD calls, side by side.

Turn numbering of a replayed call: lane turn ``k`` (from 1) is the ``k``-th caller utterance of the
record together with the agent utterances after it, up to the next caller utterance; agent
utterances before the first caller utterance belong to turn 1. A record's ``expect_cite_turns``
are utterance indices (from 0, as ``stated_turn``); the caller utterance at index ``i`` is lane
turn ``1 + (caller utterances before i)``. For the generated calls, which alternate strictly from
the caller, utterance ``i`` is lane turn ``i // 2 + 1`` (as :func:`replay.exchange_of_utterance`).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from voice_agent.core.dates import read_statements
from voice_agent.core.guards.date_guard import DateCheck, DateGuard, DateVerdict, parse_date_argument
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import TranscriptLane
from voice_agent.datafiles import SGD_CALLS, data_path, shared_data_path
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

DEFAULT_SENTENCES = data_path("evals", "dates", "sentences.yaml")
DEFAULT_SGD = shared_data_path(SGD_CALLS)

SENTENCE_CLASSES = ("small_talk", "event_date", "correction", "compound_cue", "other_subject_limit",
                    "availability_constraint", "request", "agreement")
SUBJECTS = ("availability", "trip", "booking", "charge_period", "deadline", "none")
KINDS = ("constraint", "event", "request", "correction", "none")
DEFAULT_TOOL = "schedule_callback.date"

TOOL_BINDINGS: dict[str, tuple[str, str | None]] = {
    "schedule_callback.date": ("availability", None),
    "book_hotel.check_in": ("booking", "hotel"),
    "book_hotel.check_out": ("booking", "hotel"),
    "reserve_car.pickup_date": ("booking", "car"),
    "reserve_car.dropoff_date": ("booking", "car"),
    "book_flight.departure_date": ("booking", "flight"),
    "book_flight.return_date": ("booking", "flight"),
    "buy_tickets.date": ("booking", "tickets"),
}
"""Tool parameter -> (the subject whose statements bind it, the booking topic; None: any topic)."""

TOPIC_SYNONYMS: dict[str, frozenset[str]] = {
    "car": frozenset({"car", "van", "truck", "rental", "rental car", "hire car", "vehicle", "suv", "minivan"}),
    "hotel": frozenset({"hotel", "room", "cottage", "villa", "flat", "apartment", "airbnb", "stay", "accommodation"}),
    "flight": frozenset({"flight", "flights", "plane", "departure", "return", "air"}),
    "tickets": frozenset({"tickets", "ticket", "show", "concert", "event", "game", "match"}),
    "callback": frozenset({"callback", "call", "call back", "call-back", "phone call"}),
    "train": frozenset({"train", "rail"}),
    "storage": frozenset({"storage", "storage unit"}),
}
"""Canonical topic -> the words that name it (a reader's topic is matched case-insensitively)."""

BLOCKING_VERDICTS = frozenset({DateVerdict.CONFLICT, DateVerdict.SUPERSEDED})
"""Guard verdicts that count as "ruled out" when a sentence alone is the transcript."""


@dataclass(frozen=True)
class Target:
    """A figure the guard must reach on the generated calls.

    Attributes:
        metric: Key in a call-score cell.
        label: Shown in the tables.
        op: ``<=`` or ``>=``.
        value: The bound, as a fraction.
        short: A short column heading.
    """

    metric: str
    label: str
    op: str
    value: float
    short: str = ""

    def met(self, rate: float | None) -> bool | None:
        """Whether ``rate`` meets the target (None when there was nothing to measure)."""
        if rate is None:
            return None
        return rate <= self.value if self.op == "<=" else rate >= self.value

    def describe(self) -> str:
        """``<= 2%``."""
        return f"{self.op} {self.value * 100:g}%"


TARGETS: tuple[Target, ...] = (
    Target("false_alarm", "false alarms on correct dates", "<=", 0.02, "false alarms"),
    Target("stale_caught", "stale dates caught", ">=", 0.90, "stale caught"),
    Target("breaks_caught", "binding breaks caught", ">=", 0.98, "breaks caught"),
    Target("clean_cited", "clean accepted, right turn cited", ">=", 0.95, "clean + cited"),
)


class InputError(ValueError):
    """An evaluation input that cannot be read (missing, malformed, or mislabelled)."""


# -- engine and guard interfaces --------------------------------------------------------------------------------------


class ConstraintLike(Protocol):
    """The part of a statement's constraint the scorer reads."""

    def allows(self, d: dt.date) -> bool:
        """Whether the constraint permits ``d``."""


class StatementLike(Protocol):
    """A date statement as ``read_statements`` returns it (``DateStatement``); enum fields are ``str`` enums."""

    @property
    def subject(self) -> str:
        """``availability``, ``trip``, ``booking``, ``charge_period``, ``deadline`` or ``none``."""

    @property
    def kind(self) -> str:
        """``constraint``, ``event``, ``request``, ``correction`` or ``none``."""

    @property
    def topic(self) -> str | None:
        """What a booking or trip is about (``car``, ``hotel``...), or None."""

    @property
    def constraint(self) -> ConstraintLike:
        """The dates the statement allows."""


StatementReader = Callable[[str, dt.date], Sequence[StatementLike]]
"""``read_statements(text, reference)``."""


class GuardLike(Protocol):
    """What the scorer calls: ``DateGuard(reference).check``."""

    def check(self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane) -> list[DateCheck]:
        """The verdict on every date argument of ``arguments``."""


GuardFactory = Callable[[dt.date], GuardLike]
"""Builds the guard for one reference date (``DateGuard`` itself by default)."""


def _value(x: Any) -> str:
    return str(getattr(x, "value", x))


def canonical_topic(topic: str | None) -> str | None:
    """A reader's topic word as its canonical topic (``van`` -> ``car``); unknown words stay as they are."""
    if topic is None:
        return None
    word = topic.strip().lower()
    return next((name for name, words in TOPIC_SYNONYMS.items() if word == name or word in words), word)


def binds(statement: StatementLike, tool: str) -> bool:
    """Whether a statement limits the tool parameter ``tool`` (see :data:`TOOL_BINDINGS`).

    Availability statements bind the callback date; booking statements bind the booking tool of their
    topic (a booking statement with no topic binds every booking tool). Trips, charge periods, deadlines
    and subject-less statements bind nothing.
    """
    subject, topic = TOOL_BINDINGS.get(tool, ("booking", None))
    if _value(statement.subject) != subject:
        return False
    if topic is None:
        return True
    said = canonical_topic(statement.topic)
    return said is None or said == topic


def statement_blocks(statements: Iterable[StatementLike], tool: str, d: dt.date) -> bool:
    """Whether the statements that bind ``tool`` rule ``d`` out, combined as the contract's kinds mean.

    A correction replaces what came before it: when one binds, the last such correction alone decides. Otherwise
    every constraint must allow ``d`` (they add up) and, when there are requests, at least one request must
    (several requests are alternatives: "the 8th, otherwise the 9th"). Events and kind-less statements limit nothing.
    """
    mine = [s for s in statements if binds(s, tool)]
    corrections = [s for s in mine if _value(s.kind) == "correction"]
    if corrections:
        return not corrections[-1].constraint.allows(d)
    if any(_value(s.kind) == "constraint" and not s.constraint.allows(d) for s in mine):
        return True
    requests = [s for s in mine if _value(s.kind) == "request"]
    return bool(requests) and not any(s.constraint.allows(d) for s in requests)


# -- labelled sentences ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One probe: does the sentence alone rule ``day`` out for the item's tool."""

    day: dt.date
    blocks: bool


@dataclass(frozen=True)
class SentenceItem:
    """One labelled sentence (see the header of ``sentences.yaml``).

    Attributes:
        index: Position in the file, from 0.
        text: The caller's words.
        klass: The class (``small_talk``...).
        subjects: The labelled subject, or the subjects that are all right when the sentence reads either way.
        kinds: The labelled kind (or kinds, likewise).
        topic: The labelled topic, if any.
        tool: The tool parameter the probes are about, ``tool.param``.
        reference: The reference date.
        probes: The probes.
        agent: For agreement items, the agent's line before the reply.
        proposed: For agreement items, the date the agent proposes.
        agreed: For agreement items, whether the reply accepts it.
    """

    index: int
    text: str
    klass: str
    subjects: tuple[str, ...]
    kinds: tuple[str, ...]
    topic: str | None
    tool: str
    reference: dt.date
    probes: tuple[Probe, ...]
    agent: str | None = None
    proposed: dt.date | None = None
    agreed: bool | None = None

    @property
    def subject(self) -> str:
        """The first labelled subject."""
        return self.subjects[0]

    @property
    def kind(self) -> str:
        """The first labelled kind."""
        return self.kinds[0]


def _iso(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.date):
        return value
    day = parse_date_argument(value) if isinstance(value, str) else None
    if day is None:
        raise InputError(f"{where}: {value!r} is not an ISO date")
    return day


def _labels(value: Any, allowed: Sequence[str], where: str) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    if not values or any(not isinstance(v, str) or v not in allowed for v in values):
        raise InputError(f"{where}: {value!r} is not one of (or a list of) {', '.join(allowed)}")
    return tuple(values)


def parse_sentences(data: Any, source: str = "sentences") -> list[SentenceItem]:
    """Validates a loaded sentences document (``reference_date`` and ``items``).

    Raises:
        InputError: A missing field, an unknown class, subject, kind or tool, a bad date.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("items"), list):
        raise InputError(f"{source}: expected a mapping with an `items` list")
    default_ref = data.get("reference_date")
    out: list[SentenceItem] = []
    for index, raw in enumerate(data["items"]):
        where = f"{source} item {index}"
        if not isinstance(raw, Mapping):
            raise InputError(f"{where}: not a mapping")
        for key in ("text", "class"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise InputError(f"{where}: missing `{key}`")
        if raw["class"] not in SENTENCE_CLASSES:
            raise InputError(f"{where}: unknown class {raw['class']!r}")
        subjects = _labels(raw.get("subject"), SUBJECTS, f"{where} subject")
        kinds = _labels(raw.get("kind"), KINDS, f"{where} kind")
        tool = str(raw.get("tool") or DEFAULT_TOOL)
        if "." not in tool:
            raise InputError(f"{where}: tool {tool!r} is not `tool.param`")
        reference = _iso(raw.get("reference_date", default_ref), f"{where} reference_date")
        probes = []
        for p in raw.get("probes") or []:
            if not isinstance(p, Mapping) or not isinstance(p.get("blocks"), bool):
                raise InputError(f"{where}: a probe needs `date` and a boolean `blocks`")
            probes.append(Probe(_iso(p.get("date"), f"{where} probe"), p["blocks"]))
        agent = raw.get("agent")
        proposed = _iso(raw["proposed"], f"{where} proposed") if raw.get("proposed") is not None else None
        agreed = raw.get("agreed")
        if raw["class"] == "agreement" and (not isinstance(agent, str) or proposed is None
                                            or not isinstance(agreed, bool)):
            raise InputError(f"{where}: an agreement item needs `agent`, `proposed` and a boolean `agreed`")
        out.append(SentenceItem(index, raw["text"], raw["class"], subjects, kinds,
                                raw.get("topic") if isinstance(raw.get("topic"), str) else None, tool, reference,
                                tuple(probes), agent if isinstance(agent, str) else None, proposed,
                                agreed if isinstance(agreed, bool) else None))
    return out


def load_sentences(path: Path | str = DEFAULT_SENTENCES) -> list[SentenceItem]:
    """Reads and validates a sentences YAML file.

    Raises:
        InputError: The file is missing, is not YAML, or an item is malformed.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {exc}") from exc
    return parse_sentences(data, str(path))


def tool_spec_for(tool: str) -> tuple[ToolSpec, str]:
    """The spec a ``tool.param`` name is checked with, and the parameter: the billing callback, or a one-date tool."""
    name, param = tool.split(".", 1)
    if name == SCHEDULE_CALLBACK.name and SCHEDULE_CALLBACK.param(param) is not None:
        return SCHEDULE_CALLBACK, param
    return ToolSpec(name, f"{name} (evaluation)", (ToolParam(param, param, kind=ParamKind.DATE),), mutates=True), param


def sentence_lane(item: SentenceItem) -> TranscriptLane:
    """The sentence as a transcript: the agent's line (agreement items) on turn 1, then the caller's."""
    lane = TranscriptLane()
    turn = 1
    if item.agent:
        lane.append_agent(turn, item.agent)
        turn += 1
    lane.append_caller(turn, item.text)
    return lane


def _argument_check(checks: Sequence[DateCheck], argument: str) -> DateCheck | None:
    return next((c for c in checks if c.argument == argument), None)


def _rate(k: int, n: int) -> float | None:
    return k / n if n else None


def _cell(k: int, n: int) -> dict[str, Any]:
    return {"n": n, "correct": k, "rate": _rate(k, n)}


@dataclass
class _Tally:
    counts: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def add(self, metric: str, ok: bool) -> None:
        cell = self.counts[metric]
        cell[0] += int(ok)
        cell[1] += 1

    def to_json(self, metrics: Sequence[str]) -> dict[str, Any]:
        return {m: _cell(*self.counts[m]) if m in self.counts else _cell(0, 0) for m in metrics}


Said = Sequence[tuple[str, str, str | None]]
"""(subject, kind, canonical topic) of each statement read from a sentence."""


def _subject_right(subject: str, said: Said) -> bool:
    """A labelled subject is read when some statement has it; ``none`` when no statement has any other."""
    if subject == "none":
        return all(subj == "none" for subj, _, _ in said)
    return any(subj == subject for subj, _, _ in said)


def _kind_right(subject: str, kind: str, said: Said) -> bool:
    """A labelled subject/kind pair is read (for ``none``: nothing else read, and the kind if anything was)."""
    if subject == "none":
        return _subject_right("none", said) and ((not said and kind == "none") or any(k == kind for _, k, _ in said))
    return any(subj == subject and k == kind for subj, k, _ in said)


def _count(mine: _Tally, overall: _Tally, metric: str, ok: bool) -> None:
    mine.add(metric, ok)
    overall.add(metric, ok)


SENTENCE_METRICS = ("subject", "kind", "topic", "probes", "probes_ruled_out", "probes_free", "guard_probes",
                    "guard_ruled_out_refused", "guard_free_kept", "agreement")
"""Per class: subject/kind/topic of the statements; ``probes`` (all probes right), ``probes_ruled_out`` (of the
probes that block: judged blocked), ``probes_free`` (of those that do not: judged free); the same through the guard,
where a ruled-out date also counts as refused when the verdict is anything but ``ok``; ``agreement``."""


def score_sentences(
    items: Sequence[SentenceItem], reader: StatementReader | None, guard_factory: GuardFactory | None = DateGuard,
) -> dict[str, Any]:
    """Subject, kind, topic and probe accuracy per class, the guard's probe and agreement accuracy, and every miss.

    Args:
        items: The labelled sentences.
        reader: ``read_statements`` (None: the statement metrics are not measured).
        guard_factory: Builds the guard for a reference date (None: the guard metrics are not measured).

    Returns:
        ``by_class`` and ``all`` (each metric ``n``/``correct``/``rate``) and ``failures`` (what was expected, what
        came out).
    """
    per_class: dict[str, _Tally] = defaultdict(_Tally)
    overall = _Tally()
    failures: list[dict[str, Any]] = []

    def note(item: SentenceItem, metric: str, ok: bool, expected: Any, got: Any) -> None:
        per_class[item.klass].add(metric, ok)
        overall.add(metric, ok)
        if not ok:
            failures.append({"class": item.klass, "index": item.index, "text": item.text,
                             "reference_date": item.reference.isoformat(), "tool": item.tool, "metric": metric,
                             "expected": expected, "got": got})

    for item in items:
        if reader is not None:
            try:
                statements = list(reader(item.text, item.reference))
                error = None
            except Exception as exc:  # a reader crash scores as a miss on every metric, never aborts the run
                statements, error = [], f"{type(exc).__name__}: {exc}"
            said = [(_value(s.subject), _value(s.kind), canonical_topic(s.topic)) for s in statements]
            shown = error or [f"{subj}/{kind}" + (f"/{topic}" if topic else "") for subj, kind, topic in said]
            subject_ok = any(_subject_right(subject, said) for subject in item.subjects)
            kind_ok = any(_kind_right(subject, kind, said) for subject in item.subjects for kind in item.kinds)
            ok_all = error is None
            note(item, "subject", ok_all and subject_ok, "|".join(item.subjects), shown)
            note(item, "kind", ok_all and kind_ok, f"{'|'.join(item.subjects)}/{'|'.join(item.kinds)}", shown)
            if item.topic:
                want = canonical_topic(item.topic)
                note(item, "topic", ok_all and any(subj in item.subjects and topic == want for subj, _, topic in said),
                     want, shown)
            # An agreement reply read without the agent's line cannot know which "Tuesday" it means: its probes
            # are scored through the guard only, which sees both.
            for probe in item.probes if item.agent is None else ():
                got = statement_blocks(statements, item.tool, probe.day)
                right = ok_all and got == probe.blocks
                note(item, "probes", right, f"{probe.day.isoformat()} blocks={probe.blocks}",
                     f"blocks={got}" if ok_all else error)
                _count(per_class[item.klass], overall, "probes_ruled_out" if probe.blocks else "probes_free", right)
        if guard_factory is not None:
            spec, param = tool_spec_for(item.tool)
            lane = sentence_lane(item)
            guard = guard_factory(item.reference)  # one guard per item, so its per-entry cache is reused
            for probe in item.probes:
                check = _argument_check(guard.check(spec, {param: probe.day.isoformat()}, lane), param)
                verdict = check.verdict.value if check else "not checked"
                blocked = check is not None and check.verdict in BLOCKING_VERDICTS
                note(item, "guard_probes", blocked == probe.blocks, f"{probe.day.isoformat()} blocks={probe.blocks}",
                     verdict)
                if probe.blocks:
                    refused = check is not None and check.verdict is not DateVerdict.OK
                    _count(per_class[item.klass], overall, "guard_ruled_out_refused", refused)
                else:
                    _count(per_class[item.klass], overall, "guard_free_kept", not blocked)
            if item.proposed is not None and item.agreed is not None:
                check = _argument_check(guard.check(spec, {param: item.proposed.isoformat()}, lane), param)
                accepted = check is not None and check.verdict is DateVerdict.OK
                note(item, "agreement", accepted == item.agreed,
                     f"{item.proposed.isoformat()} {'ok' if item.agreed else 'not ok'}",
                     check.verdict.value if check else "not checked")
    classes = [c for c in SENTENCE_CLASSES if c in per_class]
    return {
        "n": len(items),
        "by_class": {c: {"n": sum(1 for i in items if i.klass == c), **per_class[c].to_json(SENTENCE_METRICS)}
                     for c in classes},
        "all": {"n": len(items), **overall.to_json(SENTENCE_METRICS)},
        "failures": failures,
    }


# -- generated calls ----------------------------------------------------------------------------------------------


def lane_turns(turns: Sequence[Mapping[str, Any]]) -> list[int]:
    """The lane turn of every utterance (see the module docstring)."""
    out: list[int] = []
    callers = 0
    for utterance in turns:
        if utterance.get("speaker") == "caller":
            callers += 1
        out.append(max(callers, 1))
    return out


def replay_lane(record: Mapping[str, Any], upto: int) -> TranscriptLane:
    """A transcript lane of the record's utterances ``0..upto-1`` (an action with ``turn: upto`` comes next)."""
    turns = list(record.get("turns") or [])[: max(upto, 0)]
    lane = TranscriptLane()
    for utterance, turn in zip(turns, lane_turns(turns), strict=True):
        text = str(utterance.get("text", ""))
        if utterance.get("speaker") == "caller":
            lane.append_caller(turn, text)
        else:
            lane.append_agent(turn, text)
    return lane


def role_of(record: Mapping[str, Any]) -> str | None:
    """``clean``, ``bad`` or ``stale``: the record's ``twin_role``, else read from ``expect`` (None: not scored)."""
    role = record.get("twin_role")
    if role in ("clean", "bad", "stale"):
        return str(role)
    wanted = (record.get("expect") or {}).get("date_guard")
    return {"conflict": "bad", "superseded": "stale", None: "clean", "ok": "clean"}.get(wanted)


def date_action(record: Mapping[str, Any]) -> tuple[int, Mapping[str, Any], ToolSpec, str] | None:
    """(index, action, spec, date parameter) of the action to check: the named perturbed one, else the last dated."""
    actions = [a for a in record.get("actions") or [] if isinstance(a, Mapping)]
    tools = record.get("tools") or {}
    wanted = (record.get("perturbation") or {}).get("action") if isinstance(record.get("perturbation"), Mapping) \
        else None
    order = [wanted] if isinstance(wanted, int) and 0 <= wanted < len(actions) else list(range(len(actions)))[::-1]
    for index in order:
        action = actions[index]
        name = str(action.get("tool"))
        args = action.get("args") or {}
        declared = [p for p, kind in (tools.get(name) or {}).items() if kind == "date"]
        params = declared or [p for p, v in args.items() if parse_date_argument(v) is not None]
        for param in params:
            if param in args:
                if name == SCHEDULE_CALLBACK.name and SCHEDULE_CALLBACK.param(param) is not None:
                    return index, action, SCHEDULE_CALLBACK, param
                spec, _ = tool_spec_for(f"{name}.{param}")
                return index, action, spec, param
    return None


CALL_METRICS = ("false_alarm", "breaks_caught", "stale_caught", "stale_superseded", "clean_cited", "bad_cited")


def score_calls(records: Sequence[Mapping[str, Any]], guard_factory: GuardFactory = DateGuard) -> dict[str, Any]:
    """Checks every record's callback date with the guard; false alarms, breaks, stale and citations per class.

    Args:
        records: Call records (raw dicts) with ``twin_role`` (or ``expect``) and, for citations,
            ``expect_cite_turns``.
        guard_factory: Builds the guard for a record's reference date.

    Returns:
        ``by_class`` / ``by_feature`` / ``all`` cells, each metric with ``n``, ``hits`` and ``rate``; ``verdicts`` per
        role; ``failures``; ``skipped`` (records with no date action or role).
    """
    cells: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    verdicts: dict[str, Counter[str]] = defaultdict(Counter)
    failures: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []

    def add(groups: Sequence[str], metric: str, hit: bool) -> None:
        for group in groups:
            cells[group][metric][0] += int(hit)
            cells[group][metric][1] += 1

    for record in records:
        rid = str(record.get("id"))
        role = role_of(record)
        found = date_action(record)
        reference = parse_date_argument(record.get("reference_date"))
        if role is None or found is None or reference is None:
            skipped.append({"call": rid, "reason": "no role" if role is None else "no date action" if found is None
                            else "no reference_date"})
            continue
        _, action, spec, param = found
        upto = int(action.get("turn", 0))
        lane = replay_lane(record, upto)
        check = _argument_check(guard_factory(reference).check(spec, dict(action.get("args") or {}), lane), param)
        verdict = check.verdict if check is not None else None
        cited = {c.turn for c in check.citations} if check is not None else set()
        per_turn = lane_turns(list(record.get("turns") or []))
        expected = sorted({per_turn[i] for i in record.get("expect_cite_turns") or [] if 0 <= i < len(per_turn)})
        klass = str(record.get("call_class") or "unclassified")
        features = [str(f).split(":")[0] if str(f).startswith("changed:") else str(f)
                    for f in record.get("flags") or []] + [f"trap:{t}" for t in record.get("traps") or []]
        groups = ["all", f"class:{klass}", *(f"feature:{f}" for f in features)]
        verdicts[role][verdict.value if verdict else "not checked"] += 1
        misses: list[str] = []
        if role == "clean":
            alarm = verdict is not DateVerdict.OK
            add(groups, "false_alarm", alarm)
            if alarm:
                misses.append("false alarm")
            if expected:
                right = verdict is DateVerdict.OK and bool(cited & set(expected))
                add(groups, "clean_cited", right)
                if not alarm and not right:
                    misses.append("accepted without citing the caller's turn")
        elif role == "bad":
            caught = verdict is DateVerdict.CONFLICT
            add(groups, "breaks_caught", caught)
            if not caught:
                misses.append("break not caught")
            if expected and caught:
                add(groups, "bad_cited", bool(cited & set(expected)))
        else:
            add(groups, "stale_caught", verdict in BLOCKING_VERDICTS)
            add(groups, "stale_superseded", verdict is DateVerdict.SUPERSEDED)
            if verdict not in BLOCKING_VERDICTS:
                misses.append("stale date not caught")
        if misses:
            failures.append({
                "call": rid, "role": role, "class": klass, "features": features, "what": "; ".join(misses),
                "date": (action.get("args") or {}).get(param), "verdict": verdict.value if verdict else None,
                "reason": check.reason if check else None,
                "citations": [{"turn": c.turn, "words": c.words} for c in check.citations] if check else [],
                "expected_cite_turns": expected,
                "said_at_expected": [t.get("text") for i, t in enumerate(record.get("turns") or [])
                                     if i in set(record.get("expect_cite_turns") or [])],
            })

    def cell(group: str) -> dict[str, Any]:
        body = cells.get(group, {})
        return {m: {"n": body[m][1], "hits": body[m][0], "rate": _rate(body[m][0], body[m][1])} if m in body
                else {"n": 0, "hits": 0, "rate": None} for m in CALL_METRICS}

    classes = sorted({g.split(":", 1)[1] for g in cells if g.startswith("class:")})
    features = sorted({g.split(":", 1)[1] for g in cells if g.startswith("feature:")})
    roles = Counter(role_of(r) for r in records)
    return {
        "records": len(records),
        "calls": roles.get("clean", 0),
        "roles": {k: v for k, v in roles.items() if k},
        "by_class": {c: cell(f"class:{c}") for c in classes},
        "by_feature": {f: cell(f"feature:{f}") for f in features},
        "all": cell("all"),
        "verdicts": {k: dict(v) for k, v in verdicts.items()},
        "failures": failures,
        "skipped": skipped,
    }


def read_call_records(path: Path | str) -> list[dict[str, Any]]:
    """The raw call records of a JSON Lines file.

    Raises:
        InputError: The file is missing or a line is not a JSON object.
    """
    out: list[dict[str, Any]] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} line {number}: invalid JSON: {exc.msg}") from exc
        if not isinstance(data, dict):
            raise InputError(f"{path} line {number}: not a JSON object")
        out.append(data)
    return out


# -- SGD, side by side ------------------------------------------------------------------------------------------------


def sgd_figures(path: Path | str) -> dict[str, Any]:
    """The date-guard audit of the existing replay over SGD call records (lanes policy; perturbations on).

    Returns:
        ``recorded`` false alarms and the ``stale``/``limit``/``unrelated`` catch rates, the ``expect`` scores of
        perturbed records when the file has any, or ``error`` when the file cannot be replayed.
    """
    from voice_agent.harness.evaluation.replay import ReplayConfig, evaluate_file
    from voice_agent.policies import PolicyName

    try:
        # Both speakers, as a live call's lane holds them: "Yes, that is correct" agrees to the date the agent
        # read back, and a caller-only lane would make every agreed date look unconfirmed.
        config = ReplayConfig(policies=(PolicyName.LANES,), perturb=True, replay="all")
        report = evaluate_file(path, config).report
    except (OSError, ValueError) as exc:
        return {"file": str(path), "error": f"{type(exc).__name__}: {exc}"}
    audit = report.get("date_guard_accuracy") or {}
    expect = report.get("expect") or {}
    return {
        "file": str(path), "records": report.get("records"), "errors": report.get("errors", []),
        "recorded": audit.get("recorded"),
        "perturbed": {k: {key: v[key] for key in ("n", "caught", "rate", "verdicts")}
                      for k, v in (audit.get("perturbed") or {}).items()},
        "expect": {"by_kind": expect.get("by_kind"), "all": expect.get("all")} if expect.get("records") else None,
        "missed": [c for c in audit.get("missed", []) if c.get("perturbation") != "unrelated"],
        "false_alarms": audit.get("failures", []),
    }


def side_by_side(calls: Mapping[str, Any] | None, sgd: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per target: the generated calls' figure and the nearest SGD perturbation figure."""
    sgd_ok = sgd is not None and "error" not in sgd
    recorded = (sgd or {}).get("recorded") or {}
    perturbed = (sgd or {}).get("perturbed") or {}
    sgd_rates: dict[str, tuple[float | None, str]] = {
        "false_alarm": (recorded.get("false_alarm_rate"), f"recorded dates not ok (n={recorded.get('n', 0)})"),
        "stale_caught": ((perturbed.get("stale") or {}).get("rate"),
                         f"stale perturbation not ok (n={(perturbed.get('stale') or {}).get('n', 0)})"),
        "breaks_caught": ((perturbed.get("limit") or {}).get("rate"),
                          f"limit perturbation not ok (n={(perturbed.get('limit') or {}).get('n', 0)})"),
        "clean_cited": (None, "no citation labels in SGD"),
    }
    rows = []
    for target in TARGETS:
        generated = (calls or {}).get("all", {}).get(target.metric, {}) if calls else {}
        rate = generated.get("rate")
        sgd_rate, sgd_note = sgd_rates[target.metric] if sgd_ok else (None, "not run")
        rows.append({"metric": target.metric, "label": target.label, "target": target.describe(),
                     "generated": rate, "generated_n": generated.get("n", 0), "met": target.met(rate),
                     "sgd": sgd_rate, "sgd_note": sgd_note, "sgd_met": target.met(sgd_rate)})
    return rows


# -- the whole evaluation -------------------------------------------------------------------------------------------


@dataclass
class DatesConfig:
    """What ``voice-agent eval dates`` runs.

    Attributes:
        sentences: The labelled sentences file (None: skipped).
        calls: Call records to score (None: generate ``n`` calls with ``seed``).
        n: Calls to generate.
        seed: The generator's seed.
        sgd: SGD call records for the perturbation audit (None: skipped).
    """

    sentences: Path | None = DEFAULT_SENTENCES
    calls: Path | None = None
    n: int = 60
    seed: int = 0
    sgd: Path | None = None


def evaluate_dates(
    config: DatesConfig, *, reader: StatementReader | None = None, reader_name: str | None = None,
    guard_factory: GuardFactory | None = None, use_default_reader: bool = True,
) -> dict[str, Any]:
    """Runs the sentences, the calls and the SGD audit, and checks the targets.

    Args:
        config: Inputs.
        reader: The statement reader (default: the engine's ``read_statements``).
        reader_name: How the report names ``reader``.
        guard_factory: Builds the guard for a reference date (default: :class:`DateGuard`, looked up at call time).
        use_default_reader: Use the engine's ``read_statements`` when ``reader`` is None (False: no reader).

    Raises:
        InputError: An input file is missing or malformed.
    """
    from voice_agent.harness.evaluation.date_calls import generate_calls

    started = time.perf_counter()
    guard_factory = guard_factory or DateGuard
    why = reader_name or ("given" if reader is not None else "none")
    if reader is None and use_default_reader:
        reader, why = read_statements, "voice_agent.core.dates.read_statements"
    items = load_sentences(config.sentences) if config.sentences is not None else None
    records = read_call_records(config.calls) if config.calls is not None else generate_calls(config.n, config.seed)
    t0 = time.perf_counter()
    sentences = score_sentences(items, reader, guard_factory) if items is not None else None
    t1 = time.perf_counter()
    calls = score_calls(records, guard_factory)
    t2 = time.perf_counter()
    sgd = sgd_figures(config.sgd) if config.sgd is not None else None
    t3 = time.perf_counter()
    rows = side_by_side(calls, sgd)
    return {
        "engine": {"read_statements": why, "guard": f"{getattr(guard_factory, '__module__', '')}."
                                                    f"{getattr(guard_factory, '__qualname__', repr(guard_factory))}"},
        "inputs": {"sentences": str(config.sentences) if config.sentences else None,
                   "calls": str(config.calls) if config.calls else f"generated (n={config.n}, seed={config.seed})",
                   "sgd": str(config.sgd) if config.sgd else None},
        "turn_numbering": "lane turn k = the k-th caller utterance and the agent utterances after it (agent lines "
                          "before the first caller utterance: turn 1); expect_cite_turns are utterance indices",
        "sentences": sentences,
        "calls": calls,
        "sgd": sgd,
        "targets": rows,
        "targets_met": all(r["met"] is not False for r in rows),
        "seconds": {"sentences": t1 - t0, "calls": t2 - t1, "sgd": t3 - t2, "total": t3 - started},
    }
