"""Retention of a real summarizer, measured pass by pass (``voice-agent eval retention --summarizer local``).

Each call (a scenario, a paraphrase of one, or a public SGD call) is replayed into a transcript lane,
both speakers as recorded, and the summary passes a live call would run (K, S: the policy tracker's
schedule) are run through the summarizer directly: each gets the previous summary and the turns that
just left the window, as in a call. The summarizer is handed the identifier facts as ledger roles and no
slot names: it owns every other fact, so what it drops it loses.

For every caller fact and every pass, a trial:

* **capture**: the first pass of the call, for a fact stated in the turns it receives;
* **intake**: a later pass, for a fact stated in the turns it receives (new facts, summary not empty);
* **survival**: any later pass, for a fact present in the summary it receives (per-pass r);

plus, per pass, **identifier leaks** (identifier values the model wrote, before the role scrub), and
per fact, **inversions** (a line outside ``rejected`` stating what the caller ruled out, without a
negation) and **rejected listed as decided** (the same, in ``decided``).

Presence is judged by words, not by exact text, because a model paraphrases: a fact is present when one
summary line holds every number of the caller's wording and at least half of its content words, stemmed
(two at least), or every word of its canonical form when that is words ("account_credit"). It is a
heuristic: every verdict, with the line that matched,
is in the JSON report for audit, and ``--summarizer extractive`` (which copies the caller's words)
calibrates it.

The SGD calls are derived from the Schema-Guided Dialogue dataset (Rastogi et al., 2019,
google-research-datasets/dstc8-schema-guided-dialogue), licence CC BY-SA 4.0; reports built from them
carry that licence and attribution.
"""

from __future__ import annotations

import random
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import Stemmer

from voice_agent.core.policy import ContextPolicy, cadence_passes
from voice_agent.core.role_scrub import scrub_summary
from voice_agent.core.summary import EpisodeSummary, Summarizer, SummaryRequest
from voice_agent.core.transcript import TranscriptLane
from voice_agent.datafiles import SGD_CALLS, require_shared_data, shared_data_path
from voice_agent.harness.evaluation.retention import wilson_interval
from voice_agent.harness.scenarios import Fact, Scenario

SGD_PATH = shared_data_path(SGD_CALLS)
SGD_ATTRIBUTION = (
    "SGD calls: derived from the Schema-Guided Dialogue dataset (Rastogi et al., 2019, "
    "google-research-datasets/dstc8-schema-guided-dialogue), CC BY-SA 4.0"
)
SOURCES = ("scenarios", "paraphrases", "sgd")

_STOP_WORDS = (
    "a an the and or but so if then than that this those these there here it its it's i "
    "i'm i'd i've i'll me my mine you your yours we our us they their them he she "
    "his her is are was were be been being am do does did doing have has had having "
    "to of in on at for from by with about as into onto up down out over under "
    "again just also very can could would should will shall may might must please okay ok yes yeah "
    "well oh hi hello thanks thank what which who whom when where why how all any each some "
    "such own same too s t one"
)
_STOP = frozenset(_STOP_WORDS.split())
_NEGATION = re.compile(
    r"\b(?:not|no|never|don'?t|doesn'?t|didn'?t|won'?t|can'?t|cannot|isn'?t|aren'?t|rather than|instead of|avoid|"
    r"except|without|nothing)\b|n't\b", re.I)
_CLAUSE_END = re.compile(r"[,.;!?]|\bbecause\b|\bsince\b|\bas\b", re.I)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
MIN_SHARE = 0.5
"""Share of a form's content words a summary line must hold for the fact to count as present."""


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    return Stemmer.Stemmer("english")


@lru_cache(maxsize=65536)
def terms(text: str) -> frozenset[str]:
    """Stemmed content words of ``text``; ordinals become their number ("14th" -> "14")."""
    out = []
    for word in _WORD.findall(text.lower().replace("_", " ").replace("-", " ")):
        word = word.removesuffix("'s")
        ordinal = _ORDINAL.match(word)
        if ordinal:
            out.append(ordinal.group(1))
        elif word.isdigit() or (word not in _STOP and len(word) > 1):
            out.append(word)
    return frozenset(_stemmer().stemWords([w for w in out if not w.isdigit()]) + [w for w in out if w.isdigit()])


def summary_lines(summary: EpisodeSummary) -> list[tuple[str, str]]:
    """(section, line) for every line of ``summary``; a rejected line holds its item and reason."""
    return [(title.lower(), line) for title, lines in summary.render_sections() for line in lines]


def _share(form: str, line_terms: frozenset[str]) -> float:
    """Share of ``form``'s content words in a line; 0 unless every number of it is there and two words at least."""
    wanted = terms(form)
    if not wanted or not {t for t in wanted if t.isdigit()} <= line_terms:
        return 0.0
    held = len(wanted & line_terms)
    return held / len(wanted) if held >= min(2, len(wanted)) else 0.0


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def _canonical_words(fact: Fact) -> str | None:
    """The canonical form as a summary would write it: words ("account_credit"), a date as "March 4".

    None for an identifier or anything else a line would not spell out.
    """
    canonical = fact.canonical
    if not canonical or canonical == fact.value:
        return None
    date = re.fullmatch(r"\d{4}-(\d{2})-(\d{2})", canonical)
    if date:  # "Monday next week" is written "March 4th" once the model resolves it
        month, day = int(date.group(1)), int(date.group(2))
        return f"{_MONTHS[month - 1]} {day}" if 1 <= month <= 12 else None
    if re.fullmatch(r"[A-Z0-9\-]+|[0-9:\-]+", canonical):
        return None
    return canonical


def _score(fact: Fact, line: str) -> float:
    """How well one line holds the fact: half the caller's words, or every word of the canonical form."""
    line_terms = terms(line)
    share = _share(fact.value, line_terms)
    canonical = _canonical_words(fact)
    # The canonical form is short ("cloudvault_app_support"): half of it is too easily met by chance.
    whole = canonical is not None and _share(canonical, line_terms) == 1.0
    return max(share if share >= MIN_SHARE else 0.0, 1.0 if whole else 0.0)


def find_fact(fact: Fact, summary: EpisodeSummary) -> tuple[str, str] | None:
    """The (section, line) that holds ``fact``, or None (see the module docstring for the rule)."""
    best: tuple[float, tuple[str, str]] | None = None
    for section, line in summary_lines(summary):
        score = _score(fact, line)
        if score > 0 and (best is None or score > best[0]):
            best = (score, (section, line))
    return best[1] if best else None


def ruled_out(fact: Fact) -> frozenset[str]:
    """Content words of what the caller ruled out in ``fact`` ("not refunded to my card" -> refund, card)."""
    if fact.rejected_option:
        return terms(fact.rejected_option)
    match = _NEGATION.search(fact.value)
    if match is None:
        return frozenset()
    rest = fact.value[match.end():]
    end = _CLAUSE_END.search(rest)
    return terms(rest[: end.start()] if end else rest)


_UNTIL_DAY = re.compile(r"\buntil (?:the )?(\d{1,2})(?:st|nd|rd|th)?\b", re.I)
_BEFORE = re.compile(r"\bbefore\b", re.I)


def contradictions(fact: Fact, summary: EpisodeSummary) -> tuple[list[str], list[str]]:
    """Lines stating what the caller ruled out, without a negation: (inversions, listed as decided).

    What was ruled out: the fact's ``rejected_option``, the words after its negation ("not refunded to
    my card"), or, for "until the 14th", anything "before" the 14th. A line in ``rejected`` says it was
    ruled out, so it is never counted.
    """
    excluded = ruled_out(fact)
    until = _UNTIL_DAY.search(fact.value)
    inversions: list[str] = []
    decided: list[str] = []
    for section, line in summary_lines(summary):
        if section == "rejected" or _NEGATION.search(line):
            continue
        words = terms(line)
        states_excluded = bool(excluded) and (len(excluded) >= 2 or bool(fact.rejected_option)) and excluded <= words
        # "travelling until the 14th" written as "take calls before the 14th": the limit turned round.
        states_before = until is not None and until.group(1) in words and bool(_BEFORE.search(line))
        if states_excluded or states_before:
            (decided if section == "decided" else inversions).append(line)
    return inversions, decided


@dataclass
class CallInput:
    """One call to measure on.

    Attributes:
        record: The call record (turns and facts).
        source: ``scenarios``, ``paraphrases`` or ``sgd``.
    """

    record: Scenario
    source: str


def load_inputs(sources: Sequence[str], *, calls: int | None, seed: int = 0,
                sgd_path: Path = SGD_PATH) -> list[CallInput]:
    """The calls of each source, at most ``calls`` per source (SGD: a seeded sample).

    Raises:
        ValueError: An unknown source, or the SGD file cannot be read.
    """
    from voice_agent.harness import paraphrases
    from voice_agent.harness.scenarios import list_scenarios, load_call_records, load_scenario

    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise ValueError(f"--sources takes {', '.join(SOURCES)} or a comma list; got {', '.join(unknown)}")
    out: list[CallInput] = []
    scenarios = [load_scenario(name) for name in list_scenarios()]
    if "scenarios" in sources:
        out += [CallInput(s, "scenarios") for s in scenarios[:calls]]
    if "paraphrases" in sources:
        variants = [v for s in scenarios if paraphrases.available(s.id) for v in paraphrases.variants(s)]
        # Round-robin over scenarios, so a small --calls still spans them.
        variants.sort(key=lambda v: (int(v.id.rsplit("~p", 1)[-1]), v.id))
        out += [CallInput(v, "paraphrases") for v in variants[:calls]]
    if "sgd" in sources:
        try:
            records, _errors = load_call_records(require_shared_data(sgd_path, "the public SGD calls",
                                                                  "--sgd PATH, or --sources without sgd"))
        except FileNotFoundError as exc:
            raise ValueError(str(exc)) from None
        except OSError as exc:
            raise ValueError(f"SGD calls: cannot read {sgd_path} ({exc.strerror})") from exc
        chosen = records if calls is None or calls >= len(records) else random.Random(seed).sample(records, calls)
        out += [CallInput(r, "sgd") for r in chosen]
    return out


def transcript_of(record: Scenario) -> TranscriptLane:
    """Both speakers' utterances as a transcript lane, numbered in exchanges (utterance i -> turn i // 2 + 1)."""
    lane = TranscriptLane()
    for index, turn in enumerate(record.turns):
        exchange = index // 2 + 1
        if turn.speaker == "caller":
            lane.append_caller(exchange, turn.text)
        else:
            lane.append_agent(exchange, turn.text)
    return lane


def _identifiers(record: Scenario) -> dict[str, str]:
    ids: dict[str, str] = {}
    for fact in record.facts:
        if fact.kind == "identifier":
            for value in {fact.value, fact.canonical or fact.value}:
                ids[value] = fact.key
    return ids


@dataclass
class Trials:
    """Bernoulli trials of one kind of event: offered and kept."""

    offered: int = 0
    kept: int = 0

    def add(self, kept: bool) -> None:
        self.offered += 1
        self.kept += int(kept)

    def to_json(self) -> dict[str, Any]:
        low, high = wilson_interval(self.kept, self.offered)
        return {"offered": self.offered, "kept": self.kept,
                "rate": self.kept / self.offered if self.offered else None, "ci95": [low, high]}


@dataclass
class Measurement:
    """Everything counted over the calls (see the module docstring)."""

    capture: dict[str, Trials] = field(default_factory=lambda: defaultdict(Trials))
    intake: dict[str, Trials] = field(default_factory=lambda: defaultdict(Trials))
    survival: dict[str, Trials] = field(default_factory=lambda: defaultdict(Trials))
    survival_by_pass: dict[int, Trials] = field(default_factory=lambda: defaultdict(Trials))
    kept_through: dict[int, Trials] = field(default_factory=lambda: defaultdict(Trials))
    by_source: dict[str, dict[str, Trials]] = field(default_factory=dict)
    passes: int = 0
    failed_passes: int = 0
    passes_with_leak: int = 0
    leaked_values: int = 0
    identifier_passes: int = 0
    inversions: list[dict[str, Any]] = field(default_factory=list)
    rejected_as_decided: list[dict[str, Any]] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def source(self, name: str, event: str) -> Trials:
        return self.by_source.setdefault(name, {}).setdefault(event, Trials())


Progress = Callable[[str], None]


async def measure_call(call: CallInput, summarizer: Summarizer, policy: ContextPolicy, out: Measurement, *,
                       max_passes: int | None = None, progress: Progress | None = None,
                       label: str = "") -> None:
    """Runs the call's summary passes and counts its trials into ``out``."""
    record = call.record
    lane = transcript_of(record)
    schedule = list(cadence_passes(policy, record.exchanges))[:max_passes]
    identifiers = _identifiers(record)
    # Keyed by position: a call can state one slot twice (the caller changed their mind), two facts.
    facts = [(i, f) for i, f in enumerate(record.facts) if f.kind != "identifier"]
    stated = {i: record.fact_stated_turn(f) for i, f in enumerate(record.facts)}
    id_stated = {f.key: record.fact_stated_turn(f) for f in record.facts if f.kind == "identifier"}
    summary = EpisodeSummary()
    present_before: dict[int, bool] = {}
    first_offered: dict[int, int] = {}
    failures_before = getattr(summarizer, "failures", 0)
    for number, scheduled in enumerate(schedule, start=1):
        seen_ids = {v: r for v, r in identifiers.items() if id_stated[r] <= scheduled.last}
        request = SummaryRequest(previous=summary, turns=lane.in_turns(scheduled.first, scheduled.last),
                                 ledger_roles=sorted(set(seen_ids.values())), slot_names=(),
                                 pass_turn=scheduled.turn, identifiers=seen_ids)
        started = time.monotonic()
        raw = await summarizer.summarize(request)
        seconds = time.monotonic() - started
        out.seconds.append(seconds)
        out.passes += 1
        failures_now = getattr(summarizer, "failures", 0)
        failed = failures_now > failures_before
        failures_before = failures_now
        out.failed_passes += int(failed)
        scrubbed: dict[str, int] = {}
        new = scrub_summary(raw, seen_ids, scrubbed).model_copy(update={"covers_through_turn": scheduled.last})
        if seen_ids:
            out.identifier_passes += 1
            out.passes_with_leak += int(bool(scrubbed))
            out.leaked_values += sum(scrubbed.values())
        verdicts: list[dict[str, Any]] = []
        for index, fact in facts:
            where = find_fact(fact, new)
            now = where is not None
            kind = fact.kind
            offered_now = scheduled.first <= stated[index] <= scheduled.last
            if offered_now:
                event = "capture" if number == 1 else "intake"
                (out.capture if number == 1 else out.intake)[kind].add(now)
                out.source(call.source, event).add(now)
                first_offered[index] = number
            elif present_before.get(index):
                out.survival[kind].add(now)
                out.survival_by_pass[number].add(now)
                out.source(call.source, "survival").add(now)
                event = "survival"
            else:
                event = "absent" if stated[index] < scheduled.first else "later"
            if index in first_offered:
                out.kept_through[number - first_offered[index] + 1].add(now)
            inversions, decided = contradictions(fact, new) if index in first_offered else ([], [])
            for line in inversions:
                out.inversions.append({"call": record.id, "pass": number, "fact": fact.key, "line": line})
            for line in decided:
                out.rejected_as_decided.append({"call": record.id, "pass": number, "fact": fact.key, "line": line})
            present_before[index] = now
            if event != "later":
                verdicts.append({"fact": fact.key, "kind": kind, "event": event, "present": now,
                                 "line": where[1] if where else None})
        stats = getattr(summarizer, "passes", None)
        tokens = ({"prompt": stats[-1].prompt_tokens, "completion": stats[-1].completion_tokens}
                  if isinstance(stats, list) and stats else None)
        out.details.append({
            "call": record.id, "source": call.source, "pass": number, "turn": scheduled.turn,
            "turns": [scheduled.first, scheduled.last], "seconds": round(seconds, 1), "failed": failed,
            "tokens": tokens,
            "identifier_leaks": scrubbed, "facts": verdicts, "summary": new.model_dump(),
        })
        if progress is not None:
            kept = sum(1 for v in verdicts if v["event"] != "absent" and v["present"])
            shown = sum(1 for v in verdicts if v["event"] != "absent")
            progress(f"{label}{record.id} pass {number}/{len(schedule)} (turn {scheduled.turn}): "
                     f"{seconds:.1f} s, {kept}/{shown} facts present, "
                     f"{sum(scrubbed.values())} identifier leak(s){' [pass failed]' if failed else ''}")
        summary = new


def _rows(table: dict[str, Trials]) -> dict[str, Any]:
    rows = {kind: t.to_json() for kind, t in sorted(table.items())}
    total = Trials(sum(t.offered for t in table.values()), sum(t.kept for t in table.values()))
    rows["all"] = total.to_json()
    return rows


def model_check(out: Measurement) -> list[dict[str, Any]]:
    """Measured kept-through-n (n passes since the fact was offered) against r^n and c*r^(n-1).

    ``r_pooled`` is one rate over every trial (capture, intake and survival alike), as the fault model has
    it; ``c`` is capture and intake pooled, ``r`` survival alone.
    """
    entries = [*out.capture.values(), *out.intake.values()]
    first = Trials(sum(t.offered for t in entries), sum(t.kept for t in entries))
    later = Trials(sum(t.offered for t in out.survival.values()), sum(t.kept for t in out.survival.values()))
    if not first.offered:
        return []
    c = first.kept / first.offered
    r = later.kept / later.offered if later.offered else 1.0
    pooled = (first.kept + later.kept) / (first.offered + later.offered)
    return [
        {"passes": n, **trials.to_json(), "r_pooled^n": pooled**n, "c*r^(n-1)": c * r ** (n - 1)}
        for n, trials in sorted(out.kept_through.items())
    ]


def report_of(out: Measurement, *, summarizer: str, policy: ContextPolicy, calls: Sequence[CallInput],
              wall_seconds: float) -> dict[str, Any]:
    """The JSON report of a measurement."""
    entries = [*out.capture.values(), *out.intake.values()]
    first = Trials(sum(t.offered for t in entries), sum(t.kept for t in entries))
    later = Trials(sum(t.offered for t in out.survival.values()), sum(t.kept for t in out.survival.values()))
    seconds = sorted(out.seconds)
    return {
        "summarizer": summarizer, "keep": policy.keep, "every": policy.every,
        "calls": [{"id": c.record.id, "source": c.source} for c in calls],
        "sources": sorted({c.source for c in calls}),
        "attribution": SGD_ATTRIBUTION if any(c.source == "sgd" for c in calls) else None,
        "passes": out.passes, "failed_passes": out.failed_passes, "wall_seconds": round(wall_seconds, 1),
        "seconds_per_pass": {"p50": seconds[len(seconds) // 2] if seconds else None,
                             "max": seconds[-1] if seconds else None},
        "capture": _rows(out.capture), "intake": _rows(out.intake), "survival": _rows(out.survival),
        "survival_by_pass": {str(n): t.to_json() for n, t in sorted(out.survival_by_pass.items())},
        "by_source": {s: {e: t.to_json() for e, t in events.items()} for s, events in sorted(out.by_source.items())},
        "measured": {"capture": first.kept / first.offered if first.offered else None,
                     "r": later.kept / later.offered if later.offered else None},
        "model_check": model_check(out),
        "identifier_leaks": {"passes_with_identifiers": out.identifier_passes, "passes_with_leak": out.passes_with_leak,
                             "values_leaked": out.leaked_values},
        "inversions": out.inversions, "rejected_as_decided": out.rejected_as_decided,
        "details": out.details,
    }


async def measure(calls: Iterable[CallInput], summarizer: Summarizer, policy: ContextPolicy, *,
                  summarizer_name: str, max_passes: int | None = None,
                  progress: Progress | None = None) -> dict[str, Any]:
    """Measures ``summarizer`` over ``calls``; returns the JSON report (see :func:`report_of`)."""
    chosen = list(calls)
    out = Measurement()
    started = time.monotonic()
    for index, call in enumerate(chosen, start=1):
        await measure_call(call, summarizer, policy, out, max_passes=max_passes, progress=progress,
                           label=f"[{index}/{len(chosen)} {call.source}] ")
    return report_of(out, summarizer=summarizer_name, policy=policy, calls=chosen,
                     wall_seconds=time.monotonic() - started)


def estimate_passes(calls: Iterable[CallInput], policy: ContextPolicy, max_passes: int | None) -> int:
    """How many passes :func:`measure` will run (for the progress line)."""
    return sum(len(cadence_passes(policy, c.record.exchanges)[:max_passes]) for c in calls)


def fmt_rate(cell: dict[str, Any]) -> str:
    """``kept/offered  rate (low-high)`` of one cell."""
    if not cell["offered"]:
        return "-"
    low, high = cell["ci95"]
    return f"{cell['kept']}/{cell['offered']} {cell['rate'] * 100:.0f}% ({low * 100:.0f}-{high * 100:.0f})"


def make_measured_summarizer(kind: str, *, temperature: float | None = None, seed: int | None = None,
                             threads: int | None = None) -> tuple[Summarizer, str]:
    """The summarizer ``kind`` (``local`` or ``extractive``) as the settings configure it, and its name.

    ``local`` keeps the settings' threads (all cores but one): on a shared machine llama.cpp with every
    core is fastest idle but collapses when other processes compete (measured: 11 s a pass with two
    threads on two idle cores, over 120 s beside two busy processes, 21 s with one thread either way).

    Raises:
        ValueError: An unknown kind, or the settings (or the missing extra) do not allow it (one line).
    """
    from voice_agent.services.factory import make_local_summarizer
    from voice_agent.settings import SettingsError, load_settings, with_overrides
    from voice_agent.summarizers.extractive import ExtractiveSummarizer

    try:
        settings = load_settings()
        if kind == "extractive":
            return ExtractiveSummarizer(settings.summarizer), "extractive"
        if kind != "local":
            raise ValueError(f"--summarizer takes local or extractive; got {kind!r}")
        settings = with_overrides(settings, summarizer={
            "local_threads": threads, "local_temperature": temperature, "local_seed": seed,
        })
        config = settings.summarizer
        name = f"local ({config.local_model}, temperature {config.local_temperature:g}, seed {config.local_seed})"
        return make_local_summarizer(settings), name
    except SettingsError as exc:
        raise ValueError(str(exc)) from None


def print_report(report: dict[str, Any], out: Any) -> None:
    """The terminal tables of a measurement (``out``: a rich Console)."""
    from rich.table import Table

    title = (f"{report['summarizer']}: {report['passes']} pass(es) over {len(report['calls'])} call(s) "
             f"({', '.join(report['sources'])}), K={report['keep']} S={report['every']}, "
             f"{report['wall_seconds']:.0f} s")
    table = Table(title=title)
    for column in ("fact kind", "capture (1st pass)", "intake (later passes)", "survival per later pass (r)"):
        table.add_column(column, justify="left" if column == "fact kind" else "right")
    kinds = [k for k in dict.fromkeys([*report["capture"], *report["intake"], *report["survival"]]) if k != "all"]
    empty = {"offered": 0}
    for kind in [*kinds, "all"]:
        table.add_row(f"[bold]{kind}[/]" if kind == "all" else kind,
                      *[fmt_rate(report[e].get(kind, empty)) for e in ("capture", "intake", "survival")])
    out.print(table)
    sources = Table(title="By source (all fact kinds)")
    for column in ("source", "capture", "intake", "survival"):
        sources.add_column(column, justify="left" if column == "source" else "right")
    for source, events in report["by_source"].items():
        sources.add_row(source, *[fmt_rate(events.get(e, empty)) for e in ("capture", "intake", "survival")])
    out.print(sources)
    if report["model_check"]:
        check = Table(title="Kept n passes after it was offered: measured vs r^n (one pooled r) vs c*r^(n-1)")
        for column in ("n", "measured", "r_pooled^n", "c*r^(n-1)"):
            check.add_column(column, justify="right")
        for row in report["model_check"]:
            check.add_row(str(row["passes"]), fmt_rate(row), f"{row['r_pooled^n'] * 100:.0f}%",
                          f"{row['c*r^(n-1)'] * 100:.0f}%")
        out.print(check)
    by_pass = ", ".join(f"pass {n}: {fmt_rate(c)}" for n, c in report["survival_by_pass"].items())
    out.print(f"survival by pass number: {by_pass or '-'}")
    measured = report["measured"]
    if measured["capture"] is not None:
        r = measured["r"]
        shown = "-" if r is None else f"{r:.2f}"
        out.print(f"measured: capture c = {measured['capture']:.2f}, r = {shown} "
                  f"(voice-agent policy --capture {measured['capture']:.2f} --retention {shown})")
    leaks = report["identifier_leaks"]
    out.print(f"identifier leaks before the scrub: {leaks['passes_with_leak']} of {leaks['passes_with_identifiers']} "
              f"pass(es) that had identifiers wrote one ({leaks['values_leaked']} value(s); all replaced by roles)")
    for name, label in (("inversions", "inversions (a ruled-out option stated as wanted)"),
                        ("rejected_as_decided", "rejected listed as decided")):
        # A wrong line is copied by every later pass: count it once, with the passes that carried it.
        distinct: dict[tuple[str, str, str], list[int]] = {}
        for item in report[name]:
            distinct.setdefault((item["call"], item["fact"], item["line"]), []).append(item["pass"])
        out.print(f"{label}: {len(distinct)} distinct, in {len(report[name])} pass(es)")
        for (call, fact, line), numbers in list(distinct.items())[:5]:
            out.print(f"  {call} {fact}: {line!r} (passes {', '.join(map(str, numbers))})")
    out.print(f"passes that failed and kept the previous summary: {report['failed_passes']}; "
              f"seconds per pass p50 {report['seconds_per_pass']['p50'] or 0:.1f}, "
              f"max {report['seconds_per_pass']['max'] or 0:.1f}")
    if report["attribution"]:
        out.print(f"[dim]{report['attribution']}[/]")


def run_measurement(kind: str, *, sources: Sequence[str], calls: int | None, passes: int | None, keep: int,
                    every: int, seed: int, temperature: float | None, sgd_path: Path, out: Any) -> dict[str, Any]:
    """``voice-agent eval retention --summarizer KIND``: loads the calls, measures, prints progress and tables.

    Raises:
        ValueError: A bad option, a missing file or an unavailable summarizer (one line).
    """
    import asyncio

    from voice_agent.core.policy import PolicyError

    if calls is not None and calls < 1:
        raise ValueError(f"--calls must be at least 1, got {calls}")
    if passes is not None and passes < 1:
        raise ValueError(f"--passes must be at least 1, got {passes}")
    try:
        policy = ContextPolicy(keep=keep, every=every)
    except PolicyError as exc:
        raise ValueError(str(exc)) from None
    chosen = load_inputs(sources, calls=calls, seed=seed, sgd_path=sgd_path)
    summarizer, name = make_measured_summarizer(kind, temperature=temperature, seed=seed)
    total = estimate_passes(chosen, policy, passes)
    out.print(f"measuring {name} on {len(chosen)} call(s), {total} summary pass(es)"
              + (" (about 15-35 s each)" if kind == "local" else ""))
    done = [0]
    started = time.monotonic()

    def progress(line: str) -> None:
        done[0] += 1
        elapsed = time.monotonic() - started
        eta = elapsed / done[0] * (total - done[0])
        out.print(f"[{done[0]}/{total}, {elapsed:.0f} s, ~{eta:.0f} s left] {line}", highlight=False)

    return asyncio.run(measure(chosen, summarizer, policy, summarizer_name=name, max_passes=passes,
                               progress=progress))
