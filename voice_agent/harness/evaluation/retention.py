"""Per-pass retention R per fact kind, with a 95 % Wilson interval, from drop logs.

Every summary pass records the tracked fact keys that went in and the keys
that came out (DESIGN rule 6). Each (pass, fact offered) pair is one Bernoulli trial;
it succeeds when the fact came out verbatim. A fact followed in several exact forms
(``key``, ``key#2``: the caller's wording and the canonical form) is one trial,
offered when any form went in and kept when any form came out.

Accepted inputs, any mix:

* ``voice-agent eval FILE --json`` reports: ``policies.<name>.drop_log`` plus ``fact_kinds``;
* ``voice-agent simulate --json`` reports carrying the same ``policies.<name>.drop_log``
  (``[{"run", "turn", "facts_in", "facts_out"}]``) and ``fact_kinds``;
* traces (``voice-agent simulate --trace``): ``drop_log``, ``policy`` and ``fact_kinds``
  at the top, alone or as ``{"traces": [...]}``.

Keys ``ledger:<role>`` and ``slot:<name>`` (followed by the ``lanes`` policy's drop log)
are values the summarizer is told it does not own: they are reported on their own rows,
``ledger (lane-owned)`` and ``slot (lane-owned)``, and left out of ``all``, since a
summary that leaves them out loses nothing. Other keys take their kind from
``fact_kinds`` (``unknown`` when missing).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Z_95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (``(0, 1)`` without trials)."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def base_key(key: str) -> str:
    """The fact a tracked key belongs to: ``account_id#2`` -> ``account_id``."""
    head, sep, tail = key.rpartition("#")
    return head if sep and tail.isdigit() else key


LANE_OWNED = ("ledger (lane-owned)", "slot (lane-owned)")
"""Kinds of values that live in lanes the summary does not own; not part of ``all``."""


def kind_of(key: str, fact_kinds: Mapping[str, str]) -> str:
    """The kind a drop-log key counts under."""
    if key.startswith("ledger:"):
        return LANE_OWNED[0]
    if key.startswith("slot:"):
        return LANE_OWNED[1]
    return fact_kinds.get(key, "unknown")


@dataclass(frozen=True)
class PassEvent:
    """One summary pass of one call.

    Attributes:
        source: The file it came from.
        policy: The policy of the call.
        turn: The turn the pass ran at.
        facts_in: Tracked keys present in what the summarizer received.
        facts_out: Tracked keys present in what it returned.
    """

    source: str
    policy: str
    turn: int
    facts_in: frozenset[str]
    facts_out: frozenset[str]


def _events(rows: Iterable[Mapping[str, Any]], source: str, policy: str) -> list[PassEvent]:
    out = []
    for row in rows:
        keys_in = row.get("facts_in", row.get("keys_in"))
        keys_out = row.get("facts_out", row.get("keys_out"))
        if not isinstance(keys_in, list) or not isinstance(keys_out, list):
            continue
        out.append(PassEvent(source, policy, int(row.get("turn", 0)), frozenset(map(str, keys_in)),
                             frozenset(map(str, keys_out))))
    return out


def read_drop_logs(data: Any, source: str) -> tuple[list[PassEvent], dict[str, str]]:
    """Pass events and fact kinds from one parsed report or trace file.

    Raises:
        ValueError: The file carries no drop log.
    """
    events: list[PassEvent] = []
    kinds: dict[str, str] = {}
    items: list[Any] = []
    if isinstance(data, dict) and "traces" in data:
        traces = data["traces"]
        items = list(traces.values()) if isinstance(traces, dict) else list(traces)
    else:
        items = [data]
    found = False
    for item in items:
        if not isinstance(item, dict):
            continue
        kinds.update({str(k): str(v) for k, v in dict(item.get("fact_kinds") or {}).items()})
        for policy in (item.get("policies") or {}).values() if isinstance(item.get("policies"), dict) else ():
            for fact in policy.get("facts", []) if isinstance(policy, dict) else []:
                if isinstance(fact, dict) and "key" in fact and "kind" in fact:
                    kinds.setdefault(str(fact["key"]), str(fact["kind"]))
        if isinstance(item.get("drop_log"), list):
            found = True
            events += _events(item["drop_log"], source, str(item.get("policy", "unknown")))
        policies = item.get("policies")
        if isinstance(policies, dict):
            for name, body in policies.items():
                if isinstance(body, dict) and isinstance(body.get("drop_log"), list):
                    found = True
                    events += _events(body["drop_log"], source, str(name))
    if not found:
        raise ValueError(
            f"{source}: no drop log (expected policies.<name>.drop_log or a trace's drop_log: "
            '[{"turn", "facts_in", "facts_out"}])'
        )
    return events, kinds


def retention_table(events: Sequence[PassEvent], fact_kinds: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per policy and fact kind (plus ``all``, caller facts only): passes, offered, kept, R and its 95 % interval."""
    cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for event in events:
        offered = {base_key(k) for k in event.facts_in}
        kept = {base_key(k) for k in event.facts_out} & offered
        kinds = {kind_of(k, fact_kinds) for k in offered}
        for kind_name in kinds | ({"all"} if kinds - set(LANE_OWNED) else set()):
            cells[(event.policy, kind_name)][0] += 1
        for key in offered:
            kind = kind_of(key, fact_kinds)
            for kind_name in (kind,) if kind in LANE_OWNED else (kind, "all"):
                cells[(event.policy, kind_name)][1] += 1
                cells[(event.policy, kind_name)][2] += int(key in kept)
    rows = []
    for (policy, kind_name), (passes, offered_n, kept_n) in sorted(
        cells.items(), key=lambda kv: (kv[0][0], kv[0][1] == "all", kv[0][1])
    ):
        low, high = wilson_interval(kept_n, offered_n)
        rows.append({
            "policy": policy, "kind": kind_name, "passes": passes, "offered": offered_n, "kept": kept_n,
            "retention": kept_n / offered_n if offered_n else None, "ci95": [low, high],
        })
    return rows


def retention_report(paths: Sequence[Path | str]) -> dict[str, Any]:
    """Reads every report and returns the retention table with the files it came from.

    Raises:
        ValueError: A file is not JSON or has no drop log.
    """
    events: list[PassEvent] = []
    kinds: dict[str, str] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
        found, found_kinds = read_drop_logs(data, str(path))
        events += found
        kinds.update(found_kinds)
    return {"files": [str(p) for p in paths], "passes": len(events), "rows": retention_table(events, kinds)}
