"""Date-guard accuracy: perturb every recorded date argument three ways and see whether the guard objects.

At each recorded action with a date argument, with the call state exactly as it is
at that moment (the transcript up to the action), the gate reviews three altered
copies of the call:

* ``stale``: the date is replaced by a value the caller stated for the same slot and
  later replaced (``other_values_stated_for_slot``, resolved against the call's
  reference date);
* ``limit``: for a fact stated with an "until" phrase (``prose_limit_phrase``), a
  date on the wrong side of that limit (two days after a "need it until X" limit;
  inside a blocked "away until X" span);
* ``unrelated``: a date 9 to 45 days away from the recorded one that nothing in the
  call mentions (seeded).

A perturbation is caught when the verdict is not ``ok``. The recorded actions
themselves should pass: a verdict other than ``ok`` there is a false alarm, and
every one is listed with the guard's reason and cited turns.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from voice_agent.core.dates import ConstraintKind, extract_constraints
from voice_agent.core.guards.date_guard import DateVerdict, parse_date_argument
from voice_agent.core.tool_spec import ParamKind
from voice_agent.core.transcript import EntryKind
from voice_agent.evaluation.replay import ActionContext, RecordReplay, check_date, link_map
from voice_agent.scenarios import Fact, Scenario

PerturbationKind = Literal["stale", "limit", "unrelated"]
PERTURBATIONS: tuple[PerturbationKind, ...] = ("stale", "limit", "unrelated")

UNRELATED_DAYS = (9, 45)
"""How far (in days, either way) an unrelated date lies from the recorded one."""


def resolve_wording(text: str, reference: dt.date) -> dt.date | None:
    """The single day a caller's wording names ("next Monday", "the 11th"), or None."""
    days = [c.start for c in extract_constraints(text, reference) if c.kind is ConstraintKind.ON and c.start]
    return days[0] if days else None


def stale_dates(fact: Fact, recorded: dt.date, reference: dt.date) -> list[dt.date]:
    """Earlier values the caller replaced, as dates different from the recorded one."""
    out: list[dt.date] = []
    for wording in fact.other_values_stated_for_slot:
        day = resolve_wording(wording, reference)
        if day is not None and day != recorded and day not in out:
            out.append(day)
    return out


def limit_violation(record: Scenario, fact: Fact, reference: dt.date) -> dt.date | None:
    """A date outside the "until" limit the caller stated with ``fact``, or None when none is read."""
    if not fact.prose_limit_phrase or not 0 <= fact.stated_turn < len(record.turns):
        return None
    constraints = extract_constraints(record.turns[fact.stated_turn].text, reference)
    limits = [c for c in constraints if c.end is not None and c.kind in (
        ConstraintKind.UNTIL, ConstraintKind.BEFORE, ConstraintKind.RANGE)]
    if not limits:
        return None
    limit = limits[-1]
    assert limit.end is not None
    return limit.end if limit.blocked else limit.end + dt.timedelta(days=2)


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
