"""Call records and hand-written scenarios (the same schema, JSON Lines or YAML).

See ``shared/docs/call-record.md`` (beside this repository). Utterances are numbered from 0; exchanges (turns in
the DESIGN sense: the caller speaks, the agent answers) from 1. Caller utterance
``i`` belongs to exchange ``i // 2 + 1``; an action with ``turn: N`` is issued
before utterance ``N``, in exchange ``(N - 1) // 2 + 1``.

Our extension: a fact may carry ``needed_turn``, the utterance index of the
caller utterance at which the fact is needed.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from voice_agent.datafiles import data_path

SCENARIO_DIR = data_path("scenarios")
"""Where named scenarios live (``NAME.yaml``)."""

FactKind = Literal["identifier", "date_constraint", "other"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Utterance(_Record):
    """One utterance."""

    speaker: Literal["caller", "agent"]
    text: str


class Fact(_Record):
    """Ground truth for scoring: something the caller said that the call must keep.

    Attributes:
        key: Fact name.
        value: The caller's wording.
        canonical: The normalised form an action uses.
        stated_turn: Utterance index of the caller's first mention.
        kind: ``identifier``, ``date_constraint`` or ``other``.
        needed_turn: Utterance index of the caller utterance at which the fact is needed (our extension).
        caller_mention_turns: Every utterance where the caller mentions it.
        other_values_stated_for_slot: Earlier values the caller later replaced (a stale-value trap).
        prose_limit_phrase: Stated with "until", "till", "no later than".
        subkind: Finer kind ("place", "date", "time"...), when the source gives one.
        ask_cues: Words of an agent question that asks for this fact ("account number"); a recorder
            counts such a question after the fact was stated as a re-ask (our extension).
        rejected_option: The option the caller ruled out ("Tuesday"); a recorder counts the agent
            offering it again (our extension).
    """

    key: str
    value: str
    canonical: str | None = None
    stated_turn: int
    kind: FactKind
    needed_turn: int | None = None
    caller_mention_turns: list[int] = Field(default_factory=list)
    other_values_stated_for_slot: list[str] = Field(default_factory=list)
    prose_limit_phrase: bool = False
    subkind: str | None = None
    ask_cues: list[str] = Field(default_factory=list)
    rejected_option: str | None = None


class Action(_Record):
    """A tool call, issued after utterances ``0..turn-1`` and before utterance ``turn``."""

    turn: int
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class Link(_Record):
    """Joins a fact to an action argument."""

    fact: int
    action: int
    arg: str
    distance: int | None = None
    restated_by_caller_last6: bool | None = None


class Scenario(_Record):
    """One call record (a replayable, scoreable call)."""

    id: str
    source: str = "scenario"
    domain: str
    reference_date: dt.date | None = None
    turns: list[Utterance]
    facts: list[Fact] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    tools: dict[str, dict[str, str]] | None = None
    expect: dict[str, str] | None = None
    links: list[Link] = Field(default_factory=list)

    @property
    def exchanges(self) -> int:
        """Number of exchanges (DESIGN turns) in the call."""
        return (len(self.turns) - 1) // 2 + 1 if self.turns else 0

    def caller_turns(self) -> list[tuple[int, str]]:
        """(exchange number from 1, caller text) for every caller utterance, in order."""
        return [(i // 2 + 1, t.text) for i, t in enumerate(self.turns) if t.speaker == "caller"]

    def fact(self, key: str) -> Fact:
        """The fact named ``key``.

        Raises:
            KeyError: No such fact.
        """
        for fact in self.facts:
            if fact.key == key:
                return fact
        raise KeyError(f"{self.id} has no fact {key!r}; facts: {', '.join(f.key for f in self.facts)}")

    def fact_stated_turn(self, fact: Fact) -> int:
        """The exchange on which the caller first stated ``fact``."""
        return fact.stated_turn // 2 + 1

    def fact_needed_turn(self, fact: Fact) -> int | None:
        """The exchange on which ``fact`` is needed.

        From ``needed_turn`` when given, else the first action whose arguments hold the
        fact's canonical value; None when neither says.
        """
        if fact.needed_turn is not None:
            return fact.needed_turn // 2 + 1
        if fact.canonical is None:
            return None
        for action in sorted(self.actions, key=lambda a: a.turn):
            if any(_holds(value, fact.canonical) for value in action.args.values()):
                return (action.turn - 1) // 2 + 1
        return None

    def actions_in_exchange(self, exchange: int) -> list[Action]:
        """The actions issued during ``exchange``."""
        return [a for a in self.actions if (a.turn - 1) // 2 + 1 == exchange]


def _holds(value: Any, canonical: str) -> bool:
    if isinstance(value, list):
        return any(_holds(v, canonical) for v in value)
    return str(value) == canonical


def list_scenarios(directory: Path | str = SCENARIO_DIR) -> list[str]:
    """Names of the scenarios in ``directory`` (file names without ``.yaml``), sorted."""
    return sorted(p.stem for p in Path(directory).glob("*.yaml"))


def load_scenario(name_or_path: str | Path, directory: Path | str = SCENARIO_DIR) -> Scenario:
    """Loads a scenario by name (``directory/NAME.yaml``) or by path.

    Args:
        name_or_path: A scenario name such as ``billing_dispute``, or a path to a YAML or JSON file.
        directory: Where names are looked up.

    Raises:
        FileNotFoundError: No such scenario; the message lists the available names.
        ValueError: The file does not match the call-record schema.
    """
    candidate = Path(name_or_path)
    path = candidate if candidate.suffix in (".yaml", ".yml", ".json") or candidate.exists() else None
    if path is None:
        path = Path(directory) / f"{name_or_path}.yaml"
    if not path.is_file():
        available = ", ".join(list_scenarios(directory)) or "(none)"
        raise FileNotFoundError(f"no scenario {str(name_or_path)!r} (looked for {path}); available: {available}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: not a valid call record: {exc}") from exc


@dataclass(frozen=True)
class RecordError:
    """A call-record line that could not be read.

    Attributes:
        line: 1-based line number in the file.
        message: What was wrong with it.
    """

    line: int
    message: str


def load_call_records(path: Path | str) -> tuple[list[Scenario], list[RecordError]]:
    """Reads a JSON Lines file of call records.

    A malformed line is reported with its line number and skipped; it never aborts
    the whole run. Blank lines are ignored.

    Args:
        path: The ``.jsonl`` file.

    Returns:
        (records read, errors by line).
    """
    records: list[Scenario] = []
    errors: list[RecordError] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(Scenario.model_validate(json.loads(line)))
            except json.JSONDecodeError as exc:
                errors.append(RecordError(number, f"invalid JSON: {exc.msg} at column {exc.colno}"))
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
                errors.append(RecordError(number, f"not a call record: {problems}"))
    return records, errors
