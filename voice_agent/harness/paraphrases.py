"""Paraphrased caller lines: the same scripted call, told in other words.

A scripted call (``config/scenarios/NAME.yaml``) measures the agent on one wording of each caller line. The
files in ``config/scenarios/paraphrases/NAME.yaml`` give, for every caller utterance that carries a tracked
fact, several rewordings that keep the same facts and intent, some of them written the way a speech
recogniser would emit them. They were written apart from the agent: they are an instrument, not a fit to any
parser.

File schema (documented again at the top of every file)::

    scenario: billing_dispute          # the scenario id; must equal the file name
    lines:
      - utterance: 4                   # index into the scenario's turns; must be a caller utterance
        original: "..."                # the scripted text, checked equal to the scenario's
        variants:
          - text: "..."                # the reworded utterance
            facts: {already_attempted: "..."}  # fact key -> exact substring of text carrying the fact
            ids: {account_id: stt}     # identifier facts only: as_written | stt
            asr: false                 # true: written as a recogniser would (lowercase, no punctuation...)
            note: "..."                # optional: which slips an ASR variant carries

``ids`` says how an identifier's span is written: ``as_written`` is the canonical form exactly
(``ACC-4729-18``); ``stt`` is the same letters and digits in the same order with a recogniser's spacing,
case and separators (``acc 4729 18``, ``ACC 47 29 18``, ``ord-7k4m2p``).

:func:`variants` builds whole scenarios from them: variant ``v`` replaces every paraphrased caller line by its
``v``-th rewording and points each affected fact's ``value`` at the new span. Actions are left alone: they
are the ground truth of what should be done, even where an argument quotes the original caller text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from voice_agent.harness.scenarios import SCENARIO_DIR, Fact, Scenario, Utterance

PARAPHRASE_DIR = SCENARIO_DIR / "paraphrases"
"""Where paraphrase files live (``SCENARIO_ID.yaml``)."""

MIN_VARIANTS = 3
"""Every fact-carrying caller line has at least this many variants."""

IdForm = Literal["as_written", "stt"]
"""How an identifier span is written: the canonical form exactly, or as a recogniser emits it."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Variant(_Model):
    """One rewording of a caller utterance.

    Attributes:
        text: The reworded utterance.
        facts: Fact key to the exact substring of ``text`` that carries the fact.
        ids: For identifier facts, how the span is written (``as_written`` or ``stt``).
        asr: Whether the text is written as a speech recogniser would emit it.
        note: Free text, e.g. which recogniser slips the variant carries.
    """

    text: str = Field(min_length=1)
    facts: dict[str, str] = Field(default_factory=dict)
    ids: dict[str, IdForm] = Field(default_factory=dict)
    asr: bool
    note: str | None = None

    @model_validator(mode="after")
    def _spans_in_text(self) -> Variant:
        for key, span in self.facts.items():
            if not span.strip():
                raise ValueError(f"fact {key!r} has an empty span")
            if span not in self.text:
                raise ValueError(f"fact {key!r}: span {span!r} is not a substring of the text")
        for key in self.ids:
            if key not in self.facts:
                raise ValueError(f"ids names {key!r}, which has no span in facts")
        return self


class Line(_Model):
    """The rewordings of one caller utterance.

    Attributes:
        utterance: Index into the scenario's turns (a caller utterance).
        original: The scripted text, checked equal to the scenario's.
        variants: The rewordings, in order; variant ``v`` of a scenario uses ``variants[v]``.
    """

    utterance: int = Field(ge=0)
    original: str
    variants: list[Variant] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> Line:
        seen: set[str] = {_squash(self.original)}
        for number, variant in enumerate(self.variants):
            if _squash(variant.text) in seen:
                raise ValueError(
                    f"variant {number} repeats the original or an earlier variant (ignoring case and punctuation)"
                )
            seen.add(_squash(variant.text))
        return self


class Paraphrases(_Model):
    """Every paraphrased caller line of one scenario.

    Attributes:
        scenario: The scenario id.
        lines: One entry per paraphrased caller utterance.
    """

    scenario: str
    lines: list[Line]

    @model_validator(mode="after")
    def _unique_utterances(self) -> Paraphrases:
        seen: set[int] = set()
        for line in self.lines:
            if line.utterance in seen:
                raise ValueError(f"utterance {line.utterance} appears twice")
            seen.add(line.utterance)
        return self

    def line(self, utterance: int) -> Line | None:
        """The line for ``utterance``, or None when it is not paraphrased."""
        return next((line for line in self.lines if line.utterance == utterance), None)


def _squash(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def alnum(text: str) -> str:
    """The letters and digits of ``text``, upper-cased: an identifier without its separators."""
    return re.sub(r"[^0-9A-Za-z]", "", text).upper()


def paraphrase_path(scenario_id: str, directory: Path | str = PARAPHRASE_DIR) -> Path:
    """The paraphrase file of ``scenario_id``."""
    return Path(directory) / f"{scenario_id}.yaml"


def available(scenario_id: str, directory: Path | str = PARAPHRASE_DIR) -> bool:
    """Whether ``scenario_id`` has a paraphrase file."""
    return paraphrase_path(scenario_id, directory).is_file()


def _yaml_line(text: str, loc: tuple[int | str, ...]) -> int:
    """The 1-based source line of the YAML node at ``loc`` (as far down as it can be followed)."""
    try:
        node: yaml.Node | None = yaml.compose(text)
    except yaml.YAMLError:
        return 1
    if node is None:
        return 1
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            child = next((value for key, value in node.value if key.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1


def _one_line(path: Path, text: str, exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    where = ".".join(str(part) for part in loc) or "(top)"
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}:{_yaml_line(text, loc)}: {where}: {message}{more}"


def load_paraphrases(scenario_id: str, directory: Path | str = PARAPHRASE_DIR) -> Paraphrases:
    """Loads the paraphrase file of a scenario.

    Args:
        scenario_id: The scenario id, e.g. ``billing_dispute``.
        directory: Where paraphrase files live.

    Returns:
        The parsed file.

    Raises:
        FileNotFoundError: No paraphrase file; the message lists the scenarios that have one.
        ValueError: The file is not valid YAML or does not match the schema; a one-line message
            ``FILE:LINE: field.path: problem``.
    """
    path = paraphrase_path(scenario_id, directory)
    if not path.is_file():
        have = ", ".join(sorted(p.stem for p in Path(directory).glob("*.yaml"))) or "(none)"
        raise FileNotFoundError(f"{path}: no paraphrases for scenario {scenario_id!r}; available: {have}")
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = int(mark.line) + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{path}:{line}: not valid YAML: {problem}") from exc
    try:
        paraphrases = Paraphrases.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_one_line(path, text, exc)) from exc
    if paraphrases.scenario != scenario_id:
        line = _yaml_line(text, ("scenario",))
        raise ValueError(f"{path}:{line}: scenario: is {paraphrases.scenario!r}, expected {scenario_id!r}")
    return paraphrases


def fact_lines(scenario: Scenario) -> dict[int, list[Fact]]:
    """Utterance index to the facts the caller states or mentions there, for every fact-carrying utterance."""
    lines: dict[int, list[Fact]] = {}
    for fact in scenario.facts:
        for utterance in sorted({fact.stated_turn, *fact.caller_mention_turns}):
            lines.setdefault(utterance, []).append(fact)
    return dict(sorted(lines.items()))


def check(paraphrases: Paraphrases, scenario: Scenario, min_variants: int = MIN_VARIANTS) -> list[str]:
    """What is wrong with ``paraphrases`` as rewordings of ``scenario`` (empty when nothing is).

    Checks that the file names the scenario; that every line is a caller utterance whose text equals
    ``original``; that every fact-carrying caller utterance has a line with at least ``min_variants``
    variants, one of them ASR-like; that each variant gives a span for exactly the facts of its utterance;
    and that identifier spans keep the canonical letters and digits, written as their ``ids`` form says.

    Args:
        paraphrases: The loaded file.
        scenario: The scenario it rewords.
        min_variants: The fewest variants a line may have.

    Returns:
        One message per problem, each naming the utterance (and variant) concerned.
    """
    problems: list[str] = []
    if paraphrases.scenario != scenario.id:
        problems.append(f"file is for scenario {paraphrases.scenario!r}, not {scenario.id!r}")
    needed = fact_lines(scenario)
    for utterance in needed:
        if paraphrases.line(utterance) is None:
            keys = ", ".join(f.key for f in needed[utterance])
            problems.append(f"utterance {utterance}: carries {keys} but has no paraphrases")
    for line in paraphrases.lines:
        where = f"utterance {line.utterance}"
        if line.utterance >= len(scenario.turns):
            problems.append(f"{where}: the scenario has only {len(scenario.turns)} utterances")
            continue
        turn = scenario.turns[line.utterance]
        if turn.speaker != "caller":
            problems.append(f"{where}: is an {turn.speaker} utterance, not a caller one")
        if line.original != turn.text:
            problems.append(f"{where}: original {line.original!r} differs from the scenario's {turn.text!r}")
        if len(line.variants) < min_variants:
            problems.append(f"{where}: has {len(line.variants)} variants, fewer than {min_variants}")
        if not any(v.asr for v in line.variants):
            problems.append(f"{where}: has no ASR-like variant")
        facts = {f.key: f for f in needed.get(line.utterance, [])}
        for number, variant in enumerate(line.variants):
            problems.extend(_variant_problems(f"{where} variant {number}", variant, facts))
    return problems


def _variant_problems(where: str, variant: Variant, facts: dict[str, Fact]) -> list[str]:
    problems: list[str] = []
    missing = sorted(set(facts) - set(variant.facts))
    extra = sorted(set(variant.facts) - set(facts))
    if missing:
        problems.append(f"{where}: no span for {', '.join(missing)}")
    if extra:
        problems.append(f"{where}: spans for {', '.join(extra)}, which are not facts of this utterance")
    for key, fact in facts.items():
        span = variant.facts.get(key)
        if span is None or fact.kind != "identifier":
            continue
        canonical = fact.canonical or fact.value
        form = variant.ids.get(key)
        if form is None:
            problems.append(f"{where}: identifier {key} has no ids form (as_written or stt)")
        elif form == "as_written" and span != canonical:
            problems.append(f"{where}: {key} is marked as_written but {span!r} is not {canonical!r}")
        elif form == "stt" and (span == canonical or alnum(span) != alnum(canonical)):
            problems.append(f"{where}: {key} is marked stt but {span!r} is not a respelling of {canonical!r}")
    return problems


def variants(scenario: Scenario, count: int = MIN_VARIANTS, directory: Path | str = PARAPHRASE_DIR) -> list[Scenario]:
    """Paraphrased copies of ``scenario``.

    Copy ``v`` (0-based) replaces every paraphrased caller line by its ``v``-th variant and sets each fact
    first stated on such a line to the variant's span; ``canonical``, the turns, ``kind`` and
    ``needed_turn`` are kept, and so are the actions (the ground truth of what should be done). Its id is
    ``f"{scenario.id}~p{v + 1}"``.

    Args:
        scenario: The scripted call.
        count: How many copies to make.
        directory: Where paraphrase files live.

    Returns:
        ``count`` scenarios.

    Raises:
        FileNotFoundError: The scenario has no paraphrase file.
        ValueError: ``count`` is below 1, or the file does not fit the scenario (stale ``original``, a
            missing line or span, fewer than ``count`` variants on a line...).
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    paraphrases = load_paraphrases(scenario.id, directory)
    problems = check(paraphrases, scenario, min_variants=count)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"{paraphrase_path(scenario.id, directory)}: {problems[0]}{more}")
    copies: list[Scenario] = []
    for number in range(count):
        chosen = {line.utterance: line.variants[number] for line in paraphrases.lines}
        turns: list[Utterance] = [
            turn.model_copy(update={"text": chosen[index].text}) if index in chosen else turn.model_copy()
            for index, turn in enumerate(scenario.turns)
        ]
        facts: list[Fact] = [
            fact.model_copy(update={"value": chosen[fact.stated_turn].facts[fact.key]}, deep=True)
            if fact.stated_turn in chosen
            else fact.model_copy(deep=True)
            for fact in scenario.facts
        ]
        update = {"id": f"{scenario.id}~p{number + 1}", "turns": turns, "facts": facts}
        copies.append(scenario.model_copy(update=update, deep=True))
    return copies
