"""Date-guard accuracy: perturb every recorded date argument three ways and see whether the guard objects.

At each recorded action with a date argument, with the call state exactly as it is
at that moment (the transcript up to the action), the gate reviews three altered
copies of the call:

* ``stale``: the date is replaced by a value the caller stated for the same slot and
  later replaced (``other_values_stated_for_slot``, resolved against the call's
  reference date by :func:`resolve_wording`);
* ``limit``: for a fact stated with an "until" phrase (``prose_limit_phrase``), a
  date on the wrong side of that limit: two days after the limit the fact's own
  ``canonical`` holds ("need it until March 10th" -> 2019-03-10 -> 2019-03-12);
* ``unrelated``: a date 9 to 45 days away from the recorded one that nothing in the
  call mentions (seeded).

The perturbed values come from the record's own annotations, read with
``dateparser`` and plain date arithmetic, never from the date engine
(:mod:`voice_agent.core.dates`) that the guard under test is built on: an engine
cannot then pass its own test by misreading the caller and the perturbation alike.

A perturbation is caught when the verdict is not ``ok``. The recorded actions
themselves should pass: a verdict other than ``ok`` there is a false alarm, and
every one is listed with the guard's reason and cited turns.

Perturbed records (:func:`expect_report`). A record with ``expect`` is a perturbed
copy of a clean call, its *twin*. The twin is named by an explicit ``twin`` field (or
``perturbation.of``; both also read under ``meta``) when the raw record has one, else
by the id: ``<twin id>-<kind>``, e.g. ``sgd-train-15_00033-bad-id`` is the ``bad-id``
perturbation of ``sgd-train-15_00033`` (the longest id in the file that the record's
id extends with a ``-``). The perturbed action and argument are
``perturbation.action`` / ``perturbation.arg`` when given, else found by diffing the
record's actions against its twin's (paired by tool and occurrence): every argument
whose value differs, keeping those the expected guard checks (identifiers for
``id_guard``, dates for ``date_guard``) when there are any. When the actions are
identical and the turns differ, the perturbation is in what was said: every argument
the expected guard checks in an action after the first differing utterance.

Scoring, per perturbed record, at exactly those arguments:

* *caught*: the guard's verdict on the perturbed record's argument is the expected one
  (``expect``), at every located argument;
* *twin accepted*: the same guard's verdict on the twin's same action and argument is
  ``ok`` (a guard that refuses both detects nothing);
* *pair*: caught AND twin accepted.

Records whose twin is not in the file are listed under ``missing_twin`` (with the
verdicts on every action, for reference) and not counted in the per-kind scores;
records identical to their twin are listed under ``unlocated``.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from voice_agent.core.dates import extract_constraints
from voice_agent.core.guards.date_guard import DateVerdict, parse_date_argument
from voice_agent.core.tool_spec import ParamKind
from voice_agent.core.transcript import EntryKind
from voice_agent.harness.evaluation.replay import ActionContext, ArgumentRow, RecordReplay, check_date, link_map
from voice_agent.harness.scenarios import Fact, Scenario

PerturbationKind = Literal["stale", "limit", "unrelated"]
PERTURBATIONS: tuple[PerturbationKind, ...] = ("stale", "limit", "unrelated")

UNRELATED_DAYS = (9, 45)
"""How far (in days, either way) an unrelated date lies from the recorded one."""


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_SPELLED = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
            "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth",
            "twentieth")
_SPELLED_DAYS = {
    **{w: i + 1 for i, w in enumerate(_SPELLED)},
    **{f"twenty {w}": 21 + i for i, w in enumerate(_SPELLED[:9])},
    **{f"twenty-{w}": 21 + i for i, w in enumerate(_SPELLED[:9])},
    "thirtieth": 30, "thirty first": 31, "thirty-first": 31,
}
_BARE_ORDINAL = re.compile(
    r"^(?:the\s+)?(\d{1,2}(?:st|nd|rd|th)?|" + "|".join(sorted(_SPELLED_DAYS, key=len, reverse=True))
    + r")(?:\s+of\s+(this|next)\s+month)?$")
_WEEKDAY_NEXT_WEEK = re.compile(r"^(?:(\w+day)\s+(?:of\s+)?next\s+week|next\s+week(?:\s+on)?\s+(\w+day))$")
# A wording names a day only with one of these; "10:30" or "1 pm" (which dateparser reads as today) does not.
_DAY_CUE = re.compile(
    r"\d{1,2}(?:st|nd|rd|th)\b|\d{4}-\d{2}-\d{2}|\b(?:today|tomorrow|tonight|"
    + "|".join(_WEEKDAYS) + "|" + "|".join(_MONTHS) + "|" + "|".join(m[:3] for m in _MONTHS) + r")\b"
)


def _month_day(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def resolve_wording(text: str, reference: dt.date) -> dt.date | None:
    """The single day a caller's wording names ("next Monday", "the 11th"), or None.

    Read with ``dateparser`` (``RELATIVE_BASE`` = ``reference``, ``PREFER_DATES_FROM`` = future), never with the
    date engine under test. Three forms dateparser misreads are read here first: a bare ordinal ("the 11th",
    "1st of this month", "the fourteenth": that day of the reference month, or of the next month once it has
    passed; dateparser takes "the 11th" for November), "<weekday> next week" (that weekday of the next
    Monday-to-Sunday week; dateparser reads nothing) and a month and day with no year that dateparser pushes a year
    ahead when it is the reference day itself ("March 1st" on 2019-03-01). Times and spans ("10:30", "next week",
    "March") name no single day: None.
    """
    from dateparser.date import DateDataParser

    wording = " ".join(text.lower().replace(",", " ").split()).strip(" .!?")
    bare = _BARE_ORDINAL.match(wording)
    if bare:
        token, which = bare.group(1), bare.group(2)
        number = _SPELLED_DAYS[token] if token in _SPELLED_DAYS else int(re.sub(r"\D", "", token))
        year, month = reference.year, reference.month
        if which == "next" or (which is None and number < reference.day):
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return _month_day(year, month, number)
    in_week = _WEEKDAY_NEXT_WEEK.match(wording)
    if in_week:
        name = in_week.group(1) or in_week.group(2)
        if name in _WEEKDAYS:
            monday = reference + dt.timedelta(days=7 - reference.weekday())
            return monday + dt.timedelta(days=_WEEKDAYS.index(name))
        return None
    if not _DAY_CUE.search(wording):
        return None
    parser = DateDataParser(languages=["en"], settings={
        "RELATIVE_BASE": dt.datetime.combine(reference, dt.time()), "PREFER_DATES_FROM": "future"})
    data = parser.get_date_data(wording)
    if data.date_obj is None or data.period != "day":
        return None
    day: dt.date = data.date_obj.date()
    earlier = _month_day(day.year - 1, day.month, day.day)
    if day > reference and earlier is not None and earlier >= reference:
        return earlier
    return day


def stale_dates(fact: Fact, recorded: dt.date, reference: dt.date) -> list[dt.date]:
    """Earlier values the caller replaced, as dates different from the recorded one."""
    out: list[dt.date] = []
    for wording in fact.other_values_stated_for_slot:
        day = resolve_wording(wording, reference)
        if day is not None and day != recorded and day not in out:
            out.append(day)
    return out


def limit_violation(record: Scenario, fact: Fact, reference: dt.date) -> dt.date | None:
    """Two days past the "until" limit of ``fact``, taken from its annotated ``canonical``; None without one.

    ``record`` and ``reference`` are not read: the limit is the annotation's, not a reading of the caller's words.
    """
    if not fact.prose_limit_phrase:
        return None
    limit = parse_date_argument(fact.canonical)
    return limit + dt.timedelta(days=2) if limit is not None else None


def unrelated_date(recorded: dt.date, mentioned: set[dt.date], rng: random.Random) -> dt.date:
    """A date 9-45 days from ``recorded`` that is not among ``mentioned``."""
    for _ in range(50):
        offset = rng.randint(*UNRELATED_DAYS) * rng.choice((-1, 1))
        day = recorded + dt.timedelta(days=offset)
        if day not in mentioned:
            return day
    return recorded + dt.timedelta(days=UNRELATED_DAYS[1] + 1)


@dataclass
class DateGuardAudit:
    """Collects the guard's verdicts on perturbed date arguments during a replay.

    Args:
        seed: Seeds the choice of unrelated dates.
    """

    seed: int = 0
    checks: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._links: dict[str, dict[tuple[int, str], int]] = {}

    def on_action(self, ctx: ActionContext) -> None:
        """Checks the perturbed copies of every date argument of the action about to run."""
        record, action = ctx.record, ctx.action
        spec = ctx.specs.get(action.tool)
        if spec is None:
            return
        links = self._links.setdefault(record.id, link_map(record))
        reference = ctx.state.reference_date
        mentioned = self._mentioned(ctx)
        for param in spec.params_of(ParamKind.DATE):
            recorded = parse_date_argument(action.args.get(param.name))
            if recorded is None:
                continue
            f_index = links.get((ctx.action_index, param.name))
            fact = record.facts[f_index] if f_index is not None else None
            candidates: dict[PerturbationKind, list[dt.date]] = {
                "stale": stale_dates(fact, recorded, reference) if fact else [],
                "limit": [d for d in [limit_violation(record, fact, reference) if fact else None]
                          if d is not None and d != recorded],
                "unrelated": [unrelated_date(recorded, mentioned | {recorded}, self._rng)],
            }
            for kind in PERTURBATIONS:
                if not candidates[kind]:
                    why = "no linked fact" if fact is None else {
                        "stale": "no replaced value", "limit": "no until limit", "unrelated": "none"}[kind]
                    self.skipped[kind][why] += 1
                for day in candidates[kind]:
                    args = {**action.args, param.name: day.isoformat()}
                    check = check_date(ctx.gate, ctx.state, action.tool, args, param.name)
                    self.checks.append({
                        "call": record.id, "action": ctx.action_index, "turn": action.turn, "tool": action.tool,
                        "argument": param.name, "recorded": recorded.isoformat(), "perturbation": kind,
                        "value": day.isoformat(), "verdict": check.verdict.value, "reason": check.reason,
                        "citations": [{"turn": c.turn, "words": c.words} for c in check.citations],
                    })

    @staticmethod
    def _mentioned(ctx: ActionContext) -> set[dt.date]:
        """Every day named or spanned by anything said so far (and the reference day)."""
        days = {ctx.state.reference_date}
        for entry in ctx.state.transcript.entries:
            if entry.kind not in (EntryKind.CALLER, EntryKind.AGENT):
                continue
            for c in extract_constraints(entry.text, ctx.state.reference_date):
                if c.start is not None and c.end is not None and (c.end - c.start).days <= 62:
                    days.update(c.start + dt.timedelta(days=i) for i in range((c.end - c.start).days + 1))
                elif c.start is not None:
                    days.add(c.start)
                elif c.end is not None:
                    days.add(c.end)
        return days

    def report(self, replays: Sequence[RecordReplay]) -> dict[str, Any]:
        """Catch rate per perturbation, false-alarm rate on the recorded actions, and every failure explained."""
        perturbed: dict[str, Any] = {}
        for kind in PERTURBATIONS:
            mine = [c for c in self.checks if c["perturbation"] == kind]
            caught = sum(1 for c in mine if c["verdict"] != DateVerdict.OK.value)
            perturbed[kind] = {
                "n": len(mine), "caught": caught, "rate": caught / len(mine) if mine else None,
                "verdicts": dict(Counter(c["verdict"] for c in mine)), "skipped": dict(self.skipped.get(kind, {})),
            }
        recorded = [row for rep in replays for row in rep.arguments if row.date_guard is not None]
        failures = [
            {
                "call": row.call, "action": row.action, "turn": row.turn, "exchange": row.exchange, "tool": row.tool,
                "argument": row.argument, "value": row.value, "fact": row.fact,
                "verdict": row.date_guard["verdict"], "reason": row.date_guard["reason"],
                "citations": row.date_guard["citations"],
            }
            for row in recorded if row.date_guard is not None and row.date_guard["verdict"] != DateVerdict.OK.value
        ]
        total = sum(p["n"] for p in perturbed.values())
        caught_all = sum(p["caught"] for p in perturbed.values())
        return {
            "recorded": {
                "n": len(recorded), "false_alarms": len(failures),
                "false_alarm_rate": len(failures) / len(recorded) if recorded else None,
                "verdicts": dict(Counter(str(r.date_guard["verdict"]) for r in recorded if r.date_guard)),
            },
            "perturbed": perturbed,
            "caught_rate": caught_all / total if total else None,
            "failures": failures,
            "missed": [c for c in self.checks if c["verdict"] == DateVerdict.OK.value],
        }


# -- perturbed records and their clean twins ---------------------------------------------------------------------------

GUARD_PARAM_KINDS: dict[str, str] = {"id_guard": ParamKind.IDENTIFIER.value, "date_guard": ParamKind.DATE.value}
"""The ``expect`` guards and the parameter kind each one checks."""

BAD_SUFFIX = re.compile(r"-(bad-[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*)$")
"""A perturbation suffix such as ``-bad-id`` or ``-bad-date``, read when the twin is not in the file."""

EXPECT_DEFINITION = (
    "caught: the expected verdict on exactly the perturbed argument; twin accepted: verdict ok on the clean twin's "
    "same action and argument; pair: caught AND twin accepted"
)


@dataclass(frozen=True)
class Perturbation:
    """Where one perturbed record differs from its clean twin.

    Attributes:
        call: The perturbed record's id.
        twin: The twin's id (None when nothing names one).
        twin_found: Whether the twin is among the records.
        kind: The perturbation kind (``bad-id``, ...).
        locations: (action index in the record, action index in the twin, argument) of each perturbed argument.
        located_by: ``explicit``, ``arguments`` (diffed against the twin), ``turns``, or ``""`` (not located).
    """

    call: str
    twin: str | None
    twin_found: bool
    kind: str
    locations: tuple[tuple[int, int | None, str], ...] = ()
    located_by: str = ""


def _explicit(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The explicit perturbation fields of a raw record: ``twin``, ``kind``, ``action``, ``arg``."""
    if not raw:
        return {}
    out: dict[str, Any] = {}
    meta = raw.get("meta") if isinstance(raw.get("meta"), Mapping) else {}
    for scope in (meta, raw):
        assert isinstance(scope, Mapping)
        block = scope.get("perturbation")
        if isinstance(block, Mapping):
            for src, dst in (("of", "twin"), ("twin", "twin"), ("kind", "kind"), ("action", "action"),
                             ("arg", "arg"), ("argument", "arg")):
                if block.get(src) is not None:
                    out[dst] = block[src]
        elif isinstance(block, str):
            out["kind"] = block
        if isinstance(scope.get("twin"), str):
            out["twin"] = scope["twin"]
    return out


def _expect_kind(expect: Mapping[str, str]) -> str:
    return "+".join(f"{guard}={verdict}" for guard, verdict in sorted(expect.items()))


def find_perturbation(
    record: Scenario, by_id: Mapping[str, Scenario], replay: RecordReplay, raw: Mapping[str, Any] | None = None
) -> Perturbation:
    """Names the twin of a perturbed record and locates the perturbed arguments (see the module docstring)."""
    fields = _explicit(raw)
    twin_id: str | None = str(fields["twin"]) if fields.get("twin") else None
    if twin_id is None:
        prefixes = [i for i in by_id if i != record.id and record.id.startswith(i + "-") and not by_id[i].expect]
        if prefixes:
            twin_id = max(prefixes, key=len)
    if twin_id is None:
        match = BAD_SUFFIX.search(record.id)
        twin_id = record.id[: match.start()] if match else None
    twin = by_id.get(twin_id) if twin_id is not None else None
    if twin is not None and twin.expect:
        twin = None
    kind = str(fields.get("kind") or "")
    if not kind and twin_id is not None and record.id.startswith(twin_id + "-"):
        kind = record.id[len(twin_id) + 1:]
    if not kind:
        kind = _expect_kind(record.expect or {})
    base = Perturbation(record.id, twin_id, twin is not None, kind)
    rows = {(r.action, r.argument): r for r in replay.arguments}
    wanted_kinds = {GUARD_PARAM_KINDS[g] for g in (record.expect or {}) if g in GUARD_PARAM_KINDS}
    if "action" in fields and "arg" in fields:
        try:
            a_index = int(fields["action"])
        except (TypeError, ValueError):
            a_index = -1
        pairing = _pair_actions(record, twin) if twin is not None else {}
        return Perturbation(record.id, twin_id, twin is not None, kind,
                            ((a_index, pairing.get(a_index), str(fields["arg"])),), "explicit")
    if twin is None:
        return base
    pairing = _pair_actions(record, twin)
    diffs: list[tuple[int, int | None, str]] = []
    for a_index, action in enumerate(record.actions):
        t_index = pairing.get(a_index)
        twin_args = twin.actions[t_index].args if t_index is not None else {}
        for name, value in action.args.items():
            if t_index is None or twin_args.get(name) != value:
                diffs.append((a_index, t_index, name))
    if diffs:
        matching = [d for d in diffs if rows.get((d[0], d[2])) is not None
                    and rows[(d[0], d[2])].param_kind in wanted_kinds]
        return Perturbation(record.id, twin_id, True, kind, tuple(matching or diffs), "arguments")
    said = [t.model_dump() for t in record.turns]
    said_twin = [t.model_dump() for t in twin.turns]
    first = next((i for i, (a, b) in enumerate(zip(said, said_twin, strict=False)) if a != b),
                 None if len(said) == len(said_twin) else min(len(said), len(said_twin)))
    if first is None:
        return base
    after = tuple(
        (r.action, pairing.get(r.action), r.argument) for r in replay.arguments
        if r.turn > first and r.param_kind in wanted_kinds
    )
    return Perturbation(record.id, twin_id, True, kind, after, "turns" if after else "")


def _pair_actions(record: Scenario, twin: Scenario) -> dict[int, int]:
    """Record action index -> twin action index, by tool and occurrence (n-th call of a tool to its n-th)."""
    slots: dict[str, list[int]] = defaultdict(list)
    for t_index, action in enumerate(twin.actions):
        slots[action.tool].append(t_index)
    seen: Counter[str] = Counter()
    out: dict[int, int] = {}
    for a_index, action in enumerate(record.actions):
        n = seen[action.tool]
        seen[action.tool] += 1
        if n < len(slots[action.tool]):
            out[a_index] = slots[action.tool][n]
    return out


def guard_verdict(row: ArgumentRow | None, guard: str) -> str | None:
    """The verdict ``guard`` (``id_guard`` or ``date_guard``) gave one argument, None when it did not check it."""
    if row is None:
        return None
    check = row.id_guard if guard == "id_guard" else row.date_guard if guard == "date_guard" else None
    return None if check is None else str(check["verdict"])


def _guard_for(row: ArgumentRow | None, expect: Mapping[str, str]) -> str:
    for guard in expect:
        if row is not None and GUARD_PARAM_KINDS.get(guard) == row.param_kind:
            return guard
    return next(iter(expect))


def _any_action_checks(record: Scenario, replay: RecordReplay) -> list[dict[str, Any]]:
    """The fallback check of a record that cannot be located: the expected verdict on any argument of any action."""
    checks = []
    for guard, wanted in (record.expect or {}).items():
        observed = [v for r in replay.arguments if (v := guard_verdict(r, guard)) is not None]
        checks.append({"guard": guard, "expected": wanted, "observed": observed, "met": wanted in observed})
    return checks


def _rate(k: int, n: int) -> float | None:
    return k / n if n else None


def expect_report(
    records: Sequence[Scenario], replays: Sequence[RecordReplay], harvest: str,
    raw: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Scores every perturbed record at its perturbed arguments, and its clean twin at the same arguments.

    Also fills each perturbed replay's ``expect``.

    Args:
        records: The records, in the order of ``replays``.
        replays: Their replays.
        harvest: The harvest mode the replays ran with (reported beside every figure).
        raw: Record id -> raw record object, for explicit ``twin`` / ``perturbation`` fields.

    Returns:
        ``records``/``met``/``unmet`` (per record), ``by_kind`` (caught, twin accepted, pair), the scored ``pairs``,
        ``missing_twin`` and ``unlocated`` records, and the verdicts at the perturbed arguments by guard.
    """
    by_id = {r.id: r for r in records}
    replay_of = {rep.call: rep for rep in replays}
    pairs: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    unlocated: list[dict[str, Any]] = []
    per_record: list[dict[str, Any]] = []
    at_argument: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: {"perturbed": Counter(), "twin": Counter()})
    for record, replay in zip(records, replays, strict=True):
        if not record.expect:
            continue
        found = find_perturbation(record, by_id, replay, (raw or {}).get(record.id))
        entry: dict[str, Any] = {"call": record.id, "twin": found.twin, "kind": found.kind,
                                 "located_by": found.located_by}
        if not found.twin_found or not found.locations:
            checks = _any_action_checks(record, replay)
            entry.update(checks=checks, met=all(c["met"] for c in checks), scored_at="any action (not located)")
            (missing if not found.twin_found else unlocated).append(
                {**entry, "reason": "twin not in the file" if not found.twin_found else "identical to its twin"})
            replay.expect = entry
            per_record.append(entry)
            continue
        twin_replay = replay_of.get(found.twin or "")
        rows = {(r.action, r.argument): r for r in replay.arguments}
        twin_rows = {(r.action, r.argument): r for r in twin_replay.arguments} if twin_replay else {}
        locations = []
        for a_index, t_index, arg in found.locations:
            row = rows.get((a_index, arg))
            twin_row = twin_rows.get((t_index, arg)) if t_index is not None else None
            guard = _guard_for(row, record.expect)
            verdict, twin_verdict = guard_verdict(row, guard), guard_verdict(twin_row, guard)
            at_argument[guard]["perturbed"][verdict or "not checked"] += 1
            at_argument[guard]["twin"][twin_verdict or "not checked"] += 1
            locations.append({
                "action": a_index, "twin_action": t_index, "turn": row.turn if row else None,
                "tool": row.tool if row else None, "argument": arg, "value": row.value if row else None,
                "twin_value": twin_row.value if twin_row else None, "guard": guard,
                "expected": record.expect[guard], "verdict": verdict, "twin_verdict": twin_verdict,
                "caught": verdict == record.expect[guard], "refused": verdict not in (None, "ok"),
                "twin_accepted": twin_verdict == "ok",
            })
        caught = all(loc["caught"] for loc in locations)
        twin_ok = all(loc["twin_accepted"] for loc in locations)
        checks = [
            {"guard": guard, "expected": wanted,
             "observed": [loc["verdict"] for loc in locations if loc["guard"] == guard],
             "met": all(loc["caught"] for loc in locations if loc["guard"] == guard)
             and any(loc["guard"] == guard for loc in locations)}
            for guard, wanted in record.expect.items()
        ]
        pair = {**entry, "locations": locations, "caught": caught, "refused": all(loc["refused"] for loc in locations),
                "twin_accepted": twin_ok, "pair": caught and twin_ok}
        pairs.append(pair)
        entry.update(checks=checks, met=all(c["met"] for c in checks), scored_at="perturbed argument")
        replay.expect = entry
        per_record.append(entry)
    kinds = sorted({p["kind"] for p in pairs} | {m["kind"] for m in missing} | {u["kind"] for u in unlocated})
    by_kind = {kind: _kind_scores([p for p in pairs if p["kind"] == kind],
                                  sum(1 for m in missing if m["kind"] == kind),
                                  sum(1 for u in unlocated if u["kind"] == kind)) for kind in kinds}
    return {
        "harvest": harvest,
        "definition": EXPECT_DEFINITION,
        "records": len(per_record),
        "met": sum(1 for e in per_record if e["met"]),
        "unmet": [e for e in per_record if not e["met"]],
        "by_kind": by_kind,
        "all": _kind_scores(pairs, len(missing), len(unlocated)),
        "pairs": pairs,
        "missing_twin": missing,
        "unlocated": unlocated,
        "at_argument": {g: {k: dict(c) for k, c in sets.items()} for g, sets in sorted(at_argument.items())},
    }


def _kind_scores(pairs: Sequence[Mapping[str, Any]], missing: int, unlocated: int) -> dict[str, Any]:
    n = len(pairs)
    caught = sum(1 for p in pairs if p["caught"])
    refused = sum(1 for p in pairs if p["refused"])
    accepted = sum(1 for p in pairs if p["twin_accepted"])
    both = sum(1 for p in pairs if p["pair"])
    return {
        "n": n, "caught": caught, "caught_rate": _rate(caught, n), "refused": refused,
        "refused_rate": _rate(refused, n), "twin_accepted": accepted, "twin_accepted_rate": _rate(accepted, n),
        "pair": both, "pair_rate": _rate(both, n), "missing_twin": missing, "unlocated": unlocated,
    }
