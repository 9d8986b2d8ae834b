"""The date contract measured on wording nobody here tuned to: ``voice-agent eval dates``.

The data (``config/evals/dates/contract/<set>/``, its README says who wrote it and how) is split
in two halves written apart from the engine: ``dev``, the only half rules were changed against,
and ``test``, never looked at item by item. Each half holds:

* ``sentences.yaml``: caller utterances (an agent line before some), each with probe dates labelled
  ``asked`` (the caller asks for or agrees to that exact day), ``ruled_out`` or ``open`` (neither);
* ``calls.yaml``: long billing calls ending with a callback, each with twin dates for the action:
  ``clean`` (the day the caller settled on), ``bad`` (breaks something the caller said) and
  ``stale`` (a day the caller asked for and later replaced).

Every probe and twin is one date-bearing action: the contract
(:class:`~voice_agent.core.guards.date_contract.DateContract`) runs it, confirms it or refuses it,
reading the transcript up to the action, with the rules alone or with a model reading beside them.
What is counted, per class and overall (each has a test in which it goes wrong):

* bad or ruled-out dates that **run** (the caller never confirms them): target 0;
* stale dates that run: target 0;
* clean dates that run with no question: target >= 85 %; clean dates refused outright: <= 2 %;
* confirmations per date-bearing action;
* model-reader quotes dropped as not found in the transcript.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from voice_agent.core.dates.reading import DateReading, ReadingStatus, ReadStatement, prompt_version, verify
from voice_agent.core.guards.date_contract import DateAction, DateContract, DateDecision
from voice_agent.core.guards.date_guard import DateGuard, parse_date_argument
from voice_agent.core.tool_spec import ToolSpec
from voice_agent.core.transcript import TranscriptEntry, TranscriptLane
from voice_agent.datafiles import data_path
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

CONTRACT_DIR = data_path("evals", "dates", "contract")
SETS = ("dev", "test", "dev-b", "test-b", "dev-c", "test-c")
"""Rounds of halves, each written by helpers who never read the engine: ``dev*`` tuned on, ``test*`` never read."""
LABELS = ("asked", "ruled_out", "open")
ROLES = ("clean", "bad", "stale")
DEFAULT_REFERENCE = dt.date(2026, 11, 18)
ACCOUNT = "ACC-0000-00"
"""The account argument of the scored callback (the contract reads only the date)."""


class InputError(ValueError):
    """A data file that cannot be read or is malformed (names the file and item)."""


@dataclass(frozen=True)
class Sentence:
    """One labelled caller utterance and its probe dates."""

    id: str
    classes: tuple[str, ...]
    reference: dt.date
    agent: str | None
    text: str
    probes: tuple[tuple[dt.date, str], ...]


@dataclass(frozen=True)
class Call:
    """One long call and its twin dates for the closing callback."""

    id: str
    classes: tuple[str, ...]
    reference: dt.date
    turns: tuple[tuple[str, str], ...]
    twins: tuple[tuple[dt.date, str], ...]


def _day(value: Any, where: str) -> dt.date:
    day = parse_date_argument(value) if isinstance(value, str | dt.date) else None
    if day is None:
        raise InputError(f"{where}: {value!r} is not an ISO date")
    return day


def _classes(raw: Mapping[str, Any]) -> tuple[str, ...]:
    value = raw.get("classes", raw.get("class"))
    values = value if isinstance(value, list) else [value] if value else []
    return tuple(str(v) for v in values) or ("unlabelled",)


def _load(path: Path) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: expected a mapping")
    return data


def _section(path: Path, key: str) -> tuple[dt.date, list[Any]]:
    """A data file's reference date and its list under ``key``."""
    data = _load(path)
    default = _day(data.get("reference_date", DEFAULT_REFERENCE.isoformat()), f"{path} reference_date")
    items = data.get(key)
    if not isinstance(items, list):
        raise InputError(f"{path}: expected a `{key}` list")
    return default, items


def load_sentences(path: Path) -> list[Sentence]:
    """Reads a ``sentences.yaml`` (see the module docstring); raises :class:`InputError` on a bad item."""
    default, items = _section(path, "items")
    out = []
    for n, raw in enumerate(items):
        where = f"{path} item {n}"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("text"), str):
            raise InputError(f"{where}: needs `text`")
        probes = []
        for p in raw.get("probes") or []:
            if not isinstance(p, Mapping) or p.get("label") not in LABELS:
                raise InputError(f"{where}: a probe needs `date` and a `label` in {LABELS}")
            probes.append((_day(p.get("date"), where), str(p["label"])))
        agent = raw.get("agent")
        out.append(Sentence(str(raw.get("id", n)), _classes(raw),
                            _day(raw.get("reference_date", default), where) if raw.get("reference_date") else default,
                            agent if isinstance(agent, str) and agent.strip() else None, raw["text"], tuple(probes)))
    return out


def load_calls(path: Path) -> list[Call]:
    """Reads a ``calls.yaml`` (see the module docstring); raises :class:`InputError` on a bad call."""
    default, calls = _section(path, "calls")
    out = []
    for n, raw in enumerate(calls):
        where = f"{path} call {raw.get('id', n) if isinstance(raw, Mapping) else n}"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("turns"), list):
            raise InputError(f"{where}: needs `turns`")
        turns = []
        for t in raw["turns"]:
            if not isinstance(t, Mapping) or len(t) != 1:
                raise InputError(f"{where}: a turn is one `agent: ...` or `caller: ...`")
            ((speaker, text),) = t.items()
            if speaker not in ("agent", "caller") or not isinstance(text, str):
                raise InputError(f"{where}: a turn is one `agent: ...` or `caller: ...`")
            turns.append((str(speaker), text))
        twins: list[tuple[dt.date, str]] = []
        if raw.get("clean"):
            twins.append((_day(raw["clean"], where), "clean"))
        for role in ("bad", "stale"):
            for value in raw.get(role) or []:
                twins.append((_day(value, where), role))
        reference = _day(raw["reference_date"], where) if raw.get("reference_date") else default
        out.append(Call(str(raw.get("id", n)), _classes(raw), reference, tuple(turns), tuple(twins)))
    return out


def call_lane(turns: Sequence[tuple[str, str]]) -> TranscriptLane:
    """The call as its transcript lane: turn k is the k-th caller utterance and the agent lines after it."""
    return TranscriptLane.of_lines(turns)


def sentence_turns(s: Sentence) -> list[tuple[str, str]]:
    """A sentence as a call: the agent's line (when there is one), then the caller's words."""
    return ([("agent", s.agent)] if s.agent else []) + [("caller", s.text)]


# -- the model reading --------------------------------------------------------------------------------------------


class Reader(Protocol):
    """What reads a call with a model (:class:`~voice_agent.core.dates.reading.ModelDateReader`)."""

    async def read(self, entries: Sequence[TranscriptEntry], reference: dt.date) -> DateReading:
        """The model's reading, checked by code."""
        ...


class CachedOnly:
    """A reader that never asks a model: a call whose reading is not in the cache counts as a reading that timed
    out (the rules and the confirm rule decide), as in a served call whose model had no time. It scores the
    readings a slow machine has finished so far; ``asked`` counts the calls it answered so."""

    def __init__(self) -> None:
        self.asked = 0

    async def read(self, entries: Sequence[TranscriptEntry], reference: dt.date) -> DateReading:
        """Always a timeout (only calls missing from the cache reach it)."""
        self.asked += 1
        return DateReading(ReadingStatus.TIMEOUT, error="not read yet (--cached-only)")


def reading_key(turns: Sequence[tuple[str, str]], reference: dt.date) -> str:
    """The cache key of one reading: what the model is asked, the words read and the day they resolve against."""
    blob = json.dumps([prompt_version(), reference.isoformat(), list(turns)], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


@dataclass
class ReadingCache:
    """Model replies kept on disk by :func:`reading_key`, so a set is read by the model once.

    The raw reply is stored, never the verdict: quotes are checked and dates resolved again on
    every run, by the code under test.
    """

    path: Path | None
    replies: dict[str, dict[str, Any]]

    @classmethod
    def open(cls, path: Path | None) -> ReadingCache:
        """Loads ``path`` when it exists (a missing file is an empty cache)."""
        if path is None or not path.exists():
            return cls(path, {})
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the reading cache {path}: {exc}") from exc
        return cls(path, dict(data) if isinstance(data, dict) else {})

    def save(self) -> None:
        """Writes the cache (atomically)."""
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.replies, indent=0, ensure_ascii=False), encoding="utf-8")
        tmp.replace(self.path)


async def read_all(
    items: Sequence[tuple[Sequence[tuple[str, str]], dt.date]], reader: Reader, cache: ReadingCache,
    progress: Any = None, reader_name: str = "model",
) -> dict[str, DateReading]:
    """Reads every distinct call once (cached replies are verified again, not re-asked).

    Only replies are cached, and under the reader that gave them: a timeout or an LLM vendor error is asked again
    next time, and another reader's replies are never taken for this one's.
    """
    out: dict[str, DateReading] = {}
    for turns, reference in items:
        key = reading_key(turns, reference)
        if key in out:
            continue
        entries = call_lane(turns).entries
        cached = cache.replies.get(key)
        if cached is not None and (cached.get("reader", reader_name) != reader_name or not cached.get("reply")):
            cached = None
        if cached is not None:
            if cached.get("status") in (ReadingStatus.OK.value, ReadingStatus.FAILED.value) and cached.get("reply"):
                out[key] = verify(str(cached.get("reply", "")), entries, reference, float(cached.get("seconds", 0)))
            else:
                out[key] = DateReading(ReadingStatus(cached.get("status", "failed")),
                                       seconds=float(cached.get("seconds", 0)), error=str(cached.get("error", "")))
        else:
            reading = await reader.read(entries, reference)
            out[key] = reading
            if reading.reply:
                cache.replies[key] = {"status": reading.status.value, "reply": reading.reply,
                                      "seconds": reading.seconds, "error": reading.error, "reader": reader_name}
                cache.save()
        if progress is not None:
            progress(len(out))
    return out


# -- scoring ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One date-bearing action and what the contract did with it."""

    set: str
    kind: str  # "call" or "sentence"
    id: str
    classes: tuple[str, ...]
    date: dt.date
    label: str  # clean/bad/stale for calls, asked/ruled_out/open for sentences
    action: DateAction
    why: str
    model_breaks: tuple[ReadStatement, ...]


class Contract(Protocol):
    """What is scored: :class:`~voice_agent.core.guards.date_contract.DateContract`'s ``decide``."""

    def decide(self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane,
               reading: DateReading | None = None) -> list[DateDecision]:
        """One decision per date argument."""
        ...


ContractFactory = Callable[[dt.date], Contract]
"""Builds the contract for a call's day (default: the call's own, over a fresh :class:`DateGuard`)."""


def default_contract(reference: dt.date) -> Contract:
    """The contract a served call runs, for one call's day."""
    return DateContract(DateGuard(reference))


def _decide(contract: ContractFactory, turns: Sequence[tuple[str, str]], reference: dt.date, day: dt.date,
            reading: DateReading | None) -> tuple[DateAction, str, tuple[ReadStatement, ...]]:
    (decision,) = contract(reference).decide(
        SCHEDULE_CALLBACK, {"account_id": ACCOUNT, "date": day.isoformat()}, call_lane(turns), reading)
    return decision.action, decision.why.value, decision.model


def score_set(
    name: str, sentences: Sequence[Sentence], calls: Sequence[Call], readings: Mapping[str, DateReading] | None = None,
    contract: ContractFactory = default_contract,
) -> list[Outcome]:
    """Every probe and twin of one set through the contract (with the model readings, when given)."""
    out: list[Outcome] = []
    for s in sentences:
        turns = sentence_turns(s)
        reading = readings.get(reading_key(turns, s.reference)) if readings is not None else None
        for day, label in s.probes:
            action, why, breaks = _decide(contract, turns, s.reference, day, reading)
            out.append(Outcome(name, "sentence", s.id, s.classes, day, label, action, why, breaks))
    for c in calls:
        reading = readings.get(reading_key(c.turns, c.reference)) if readings is not None else None
        for day, role in c.twins:
            action, why, breaks = _decide(contract, c.turns, c.reference, day, reading)
            out.append(Outcome(name, "call", c.id, c.classes, day, role, action, why, breaks))
    return out


def _rate(k: int, n: int) -> float | None:
    return k / n if n else None


def figures(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The contract's figures over ``outcomes`` (see the module docstring)."""
    calls = [o for o in outcomes if o.kind == "call"]
    sents = [o for o in outcomes if o.kind == "sentence"]

    def count(items: Sequence[Outcome], label: str, action: DateAction | None = None) -> int:
        return sum(1 for o in items if o.label == label and (action is None or o.action is action))

    clean = count(calls, "clean")
    asked = count(sents, "asked")
    return {
        "calls": len({o.id for o in calls}),
        "sentences": len({o.id for o in sents}),
        "bad_run": count(calls, "bad", DateAction.RUN),
        "bad": count(calls, "bad"),
        "stale_run": count(calls, "stale", DateAction.RUN),
        "stale": count(calls, "stale"),
        "clean": clean,
        "clean_run": count(calls, "clean", DateAction.RUN),
        "clean_run_rate": _rate(count(calls, "clean", DateAction.RUN), clean),
        "clean_refused": count(calls, "clean", DateAction.REFUSE),
        "clean_refused_rate": _rate(count(calls, "clean", DateAction.REFUSE), clean),
        "confirms_per_action": _rate(sum(1 for o in calls if o.action is DateAction.CONFIRM), len(calls)),
        "ruled_out_run": count(sents, "ruled_out", DateAction.RUN),
        "ruled_out": count(sents, "ruled_out"),
        "open_run": count(sents, "open", DateAction.RUN),
        "open": count(sents, "open"),
        "asked": asked,
        "asked_run_rate": _rate(count(sents, "asked", DateAction.RUN), asked),
        "asked_refused_rate": _rate(count(sents, "asked", DateAction.REFUSE), asked),
        "sentence_confirms_per_action": _rate(sum(1 for o in sents if o.action is DateAction.CONFIRM), len(sents)),
    }


TARGETS: tuple[tuple[str, str, float], ...] = (
    ("bad_run", "==", 0), ("stale_run", "==", 0), ("ruled_out_run", "==", 0), ("open_run", "==", 0),
    ("clean_refused_rate", "<=", 0.02), ("clean_run_rate", ">=", 0.85),
)
"""Each figure's target: bad, stale, ruled-out and never-asked dates never run; clean ones run, unasked."""


def targets_met(fig: Mapping[str, Any]) -> dict[str, bool | None]:
    """Whether each target is met (None when there was nothing to measure)."""
    out: dict[str, bool | None] = {}
    for key, op, bound in TARGETS:
        value = fig.get(key)
        if value is None:
            out[key] = None
        elif op == "==":
            out[key] = value == bound
        elif op == "<=":
            out[key] = value <= bound
        else:
            out[key] = value >= bound
    return out


def by_class(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    """:func:`figures` for each class an item carries (an item counts in each of its classes)."""
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        for c in o.classes:
            groups[c].append(o)
    return {c: figures(groups[c]) for c in sorted(groups)}


def failures(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The actions that miss a target: bad, stale, ruled-out or open dates run; clean dates refused or confirmed."""
    bad = {"bad", "stale", "ruled_out", "open"}
    return [o for o in outcomes if (o.label in bad and o.action is DateAction.RUN)
            or (o.label in ("clean", "asked") and o.action is not DateAction.RUN)]


@dataclass(frozen=True)
class ContractConfig:
    """What the contract evaluation runs.

    Attributes:
        sets: Set names under ``root`` (see :data:`SETS`).
        root: Where the sets live.
        reader: A model reader to run beside the rules (None: rules only).
        reader_name: How the report names it.
        cache: Where model replies are kept between runs (None: not kept).
        model_on: What the model reads: ``calls``, ``sentences`` or both (a call takes it about a minute on 2
            cores); what it does not read is scored by the rules alone and the report says so.
    """

    sets: tuple[str, ...] = SETS
    root: Path = CONTRACT_DIR
    reader: Reader | None = None
    reader_name: str = "rules"
    cache: Path | None = None
    model_on: tuple[str, ...] = ("calls", "sentences")
    contract: ContractFactory = default_contract


def load_set(root: Path, name: str) -> tuple[list[Sentence], list[Call]]:
    """Both files of one set; raises :class:`InputError` when the set is missing or malformed."""
    folder = root / name
    if not folder.is_dir():
        raise InputError(f"no data set {name!r} under {root}")
    return load_sentences(folder / "sentences.yaml"), load_calls(folder / "calls.yaml")


def evaluate_contract(config: ContractConfig, progress: Any = None) -> dict[str, Any]:
    """Scores each set with the rules alone and, with a reader, with the model reading beside them."""
    report: dict[str, Any] = {"reader": config.reader_name, "sets": {}}
    cache = ReadingCache.open(config.cache)
    for name in config.sets:
        sentences, calls = load_set(config.root, name)
        runs: dict[str, list[Outcome]] = {"rules": score_set(name, sentences, calls, contract=config.contract)}
        reading_stats: dict[str, Any] | None = None
        if config.reader is not None:
            read_sentences = sentences if "sentences" in config.model_on else []
            read_calls = calls if "calls" in config.model_on else []
            items = [(c.turns, c.reference) for c in read_calls] + [(sentence_turns(s), s.reference)
                                                                    for s in read_sentences]
            readings = asyncio.run(read_all(items, config.reader, cache, progress, config.reader_name))
            label = config.reader_name + ("" if read_sentences else " (calls; sentences: rules)")
            runs[label] = score_set(name, sentences, calls, readings, config.contract)
            seconds = sorted(r.seconds for r in readings.values())
            reading_stats = {
                "readings": len(readings),
                "failed": sum(1 for r in readings.values() if not r.ok),
                "quotes": sum(r.quotes for r in readings.values()),
                "dropped": sum(r.dropped for r in readings.values()),
                "seconds_p50": statistics.median(seconds) if seconds else None,
                "seconds_p95": seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))] if seconds else None,
            }
        report["sets"][name] = {
            "readers": {
                reader: {"overall": figures(outs), "targets": targets_met(figures(outs)), "classes": by_class(outs),
                         "failures": [_failure_json(o) for o in failures(outs)]}
                for reader, outs in runs.items()
            },
            "reading": reading_stats,
        }
    return report


def _failure_json(o: Outcome) -> dict[str, Any]:
    return {"kind": o.kind, "id": o.id, "classes": list(o.classes), "date": o.date.isoformat(), "label": o.label,
            "action": o.action.value, "why": o.why}
