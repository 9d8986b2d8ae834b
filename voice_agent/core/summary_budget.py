"""The summary lane's budget: what is still in play stays, what nothing refers to goes first.

The summary a pass writes can outgrow the tokens the lane may take on every request. What the
budget leaves out is decided by two things, never by when a line was first said:

* its **class**. The caller's own statements, requests and rulings (what they want done, what they
  already tried, what they ruled out: the lines a summary usually loses) are never left out for the
  budget: they stay even when the lane goes over it. What may go, in this order: lines whose caller
  words KNOWN FACTS already quotes (redundant), the caller's questions (small talk the agent answered),
  what the agent did (decided), and last the agent's promises (commitments);
* its **last use**: the latest completed turn that still refers to the line's turn (an identifier or
  a rare topic word said in both, as the ``reference`` pass trigger reads references,
  :mod:`voice_agent.core.pass_trigger`). A line nothing refers to goes before a line something
  still refers to; among equals, the one used least recently goes first.

So the lane never shows less of what the caller said than the summary holds: a fact a summary keeps
under ``rolling`` (no lanes, no budget) is under ``lanes`` either in the summary lane or in KNOWN FACTS.
Pure core: no pipecat, no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from voice_agent.core.call_state import CallState
from voice_agent.core.pass_trigger import STOPWORDS, ReferenceIndex
from voice_agent.core.summary import EpisodeSummary
from voice_agent.core.tokens import estimate_message_tokens_of_length
from voice_agent.core.transcript import EntryKind


class LineClass(IntEnum):
    """What a summary line is, in the order the budget leaves lines out (lowest first)."""

    REDUNDANT = 0
    """Caller words KNOWN FACTS already quotes."""
    SMALL_TALK = 1
    """A caller question the call answered (every sentence with content ends with "?")."""
    DECIDED = 2
    """What the agent or a tool did."""
    COMMITMENT = 3
    """The agent's promise, verbatim."""
    CALLER = 4
    """The caller's statement, request or ruling: never left out for the budget."""


KEPT_WHOLE = frozenset({LineClass.CALLER})
"""Classes the budget never leaves out (the lane goes over its budget rather than lose them)."""

_TURN = re.compile(r"^turn (\d+):\s*")
_CALLER_WORDS = re.compile(r"^turn \d+: caller (?:said|asked): ")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[a-z][a-z']{3,}")
_ACKNOWLEDGEMENT_TEXT = """
okay yes yeah yep nope sure fine great perfect brilliant lovely cheers thanks thank alright right good
cool super wonderful excellent awesome hmm i'll i've i'm it's that's there's what's we're you're
"""
ACKNOWLEDGEMENTS = frozenset(_ACKNOWLEDGEMENT_TEXT.split())
"""Words that carry no fact of their own ("Perfect, thank you.")."""


def content_words(text: str) -> list[str]:
    """The words of ``text`` that can carry a fact: not function words, not acknowledgements."""
    words = (w.strip("'") for w in _WORD.findall(text.lower().replace("\u2019", "'")))
    return [w for w in words if w and w not in STOPWORDS and w not in ACKNOWLEDGEMENTS]


def is_question(text: str) -> bool:
    """Whether ``text`` asks something and says nothing else: a question, and no other sentence with content."""
    sentences = [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]
    asked = [s for s in sentences if s.endswith("?")]
    return bool(asked) and not any(content_words(s) for s in sentences if not s.endswith("?"))


@dataclass(frozen=True)
class LineStanding:
    """One rendered summary line as the budget sees it.

    Attributes:
        line_class: Its class.
        turn: The turn it came from (0: unknown, the oldest).
        last_use: The latest turn that still refers to it (its own turn when none does).
    """

    line_class: LineClass
    turn: int = 0
    last_use: int = 0

    def eviction_key(self) -> tuple[bool, int, int, int]:
        """Lines with a smaller key leave first: unreferenced before referenced, then class, then last use."""
        return (self.last_use > self.turn, int(self.line_class), self.last_use, self.turn)


def _body(section: str, line: str) -> str | None:
    """The caller's own words a line carries, or None when it carries none (an agent line, a model's line)."""
    if section == "Rejected":
        return line.rsplit(" (because ", 1)[0]
    match = _CALLER_WORDS.match(line)
    return line[match.end():] if match else None


def classify_line(section: str, line: str, known_facts: str = "") -> LineClass:
    """The class of one rendered line of ``section`` (a title of :meth:`EpisodeSummary.render_sections`).

    Lines a model wrote (no ``turn N: caller ...`` prefix) are classed by section alone: established,
    pending and rejected lines count as the caller's.
    """
    if section == "Commitments":
        return LineClass.COMMITMENT
    if section == "Decided":
        return LineClass.DECIDED
    body = _body(section, line)
    if body is not None and known_facts and _carried(body, known_facts):
        return LineClass.REDUNDANT
    if section == "Established" and body is not None and is_question(body):
        return LineClass.SMALL_TALK
    return LineClass.CALLER


def _carried(body: str, known_facts: str) -> bool:
    """Whether one KNOWN FACTS line quotes every sentence of ``body`` that carries content."""
    sentences = [s.strip().rstrip(".!?") for s in _SENTENCE.split(body.strip()) if content_words(s)]
    if not sentences:
        return False
    return any(all(s.lower() in fact for s in sentences) for fact in known_facts.lower().splitlines())


@dataclass
class SummaryStanding:
    """Per call: the latest turn that said each rare topic word and each identifier-like token.

    Kept up incrementally (each completed turn read once, through the trigger's :class:`ReferenceIndex`),
    so working out which summary lines are still in play costs a dictionary look-up per word.
    """

    index: ReferenceIndex = field(default_factory=ReferenceIndex)
    latest_word: dict[str, int] = field(default_factory=dict)
    latest_id: dict[str, int] = field(default_factory=dict)
    callers: list[tuple[int, str]] = field(default_factory=list)
    through: int = 0
    ruling_turns: dict[str, int] = field(default_factory=dict)
    """A ruling's words -> the caller turn that said them (looked up once: rulings stay from pass to pass)."""

    def catch_up(self, state: CallState, as_of: int | None = None) -> None:
        """Reads every turn before ``as_of`` (default: every completed turn) not read yet, in order.

        Only turns before ``as_of`` are ever read (the word counts are theirs), so what is in play as of a
        pass is the same whenever it is worked out: in the call itself, or in a call resumed from the store.
        """
        as_of = state.turn if as_of is None else min(as_of, state.turn)
        for turn in range(self.through + 1, as_of):
            anchors = self.index.of(state, turn)
            for word in anchors.referring_words:
                self.latest_word[word] = turn
            for token in anchors.ids:
                self.latest_id[token] = turn
            self.callers += [(turn, e.text) for e in state.transcript.in_turns(turn, turn)
                             if e.kind is EntryKind.CALLER]
        self.through = max(self.through, as_of - 1)

    def last_use(self, state: CallState, turn: int, as_of: int | None = None) -> int:
        """The latest turn before ``as_of`` (default: the current turn) after ``turn`` that refers to it
        (``turn`` itself when none does). Turns at or after ``as_of`` must not have been read
        (:meth:`catch_up` with the same ``as_of``)."""
        as_of = state.turn if as_of is None else as_of
        if turn <= 0 or turn >= as_of:
            return turn
        old = self.index.of(state, turn)
        last = turn
        for token in old.ids:
            last = max(last, self.latest_id.get(token, 0))
        for word in old.words:
            if self.index.rare(word, as_of):
                last = max(last, self.latest_word.get(word, 0))
        return last

    def standings(
        self, state: CallState, summary: EpisodeSummary, known_facts: str = "", as_of: int | None = None
    ) -> list[list[LineStanding]]:
        """Each rendered line's standing, section by section, as of the turns before ``as_of`` (default: the
        turns completed so far). Reading goes forward only: a later ``as_of`` than a call before it is fine, an
        earlier one is read as that call's."""
        as_of = state.turn if as_of is None else min(as_of, state.turn)
        as_of = max(as_of, self.through + 1)
        self.catch_up(state, as_of)
        callers = self.callers
        out: list[list[LineStanding]] = []
        for (title, lines), commitments in zip(summary.render_sections(), _commitment_turns(summary), strict=True):
            row = []
            for i, line in enumerate(lines):
                line_class = classify_line(title, line, known_facts)
                if title == "Commitments":
                    turn = commitments[i]
                elif title == "Rejected":
                    turn = self.ruling_turns.get(line, -1)
                    if turn < 0:
                        turn = self.ruling_turns[line] = _line_turn(title, line, callers)
                else:
                    turn = _line_turn(title, line, callers)
                row.append(LineStanding(line_class, turn, self.last_use(state, turn, as_of)))
            out.append(row)
        return out


def _commitment_turns(summary: EpisodeSummary) -> list[list[int]]:
    return [[], [], [], [], [c.turn for c in summary.commitments]]


def _line_turn(section: str, line: str, callers: Sequence[tuple[int, str]]) -> int:
    match = _TURN.match(line)
    if match:
        return int(match.group(1))
    if section == "Rejected":  # the caller's words, without a turn: the caller line that holds them
        head = _body(section, line) or ""
        probe = head[:40].lower()
        for turn, text in reversed(callers):
            if probe and probe in text.lower():
                return turn
    return 0


def budgeted_summary(
    summary: EpisodeSummary, max_tokens: int, standings: Sequence[Sequence[LineStanding]] | None = None,
    ceiling: int | None = None,
) -> tuple[str, int]:
    """The summary as text within ``max_tokens`` where it can be, and how many lines were left out.

    Lines leave in :meth:`LineStanding.eviction_key` order; lines of :data:`KEPT_WHOLE` classes do not leave
    for ``max_tokens``, only for ``ceiling`` (the hard cap that keeps the lane bounded however long the call:
    then the caller's lines leave too, the ones nothing refers to and least recently used first). Without
    ``standings`` each line is classed by its section and words alone, its turn read from its ``turn N:``
    prefix, nothing counted as referring to it. Every kept line keeps its place.
    """
    sections = summary.render_sections()
    if standings is None:
        turns = _commitment_turns(summary)
        standings = [
            [LineStanding(classify_line(title, line),
                          turns[s][i] if title == "Commitments" else _line_turn(title, line, ()), 0)
             for i, line in enumerate(lines)]
            for s, (title, lines) in enumerate(sections)
        ]
    standings = [[LineStanding(x.line_class, x.turn, max(x.last_use, x.turn)) for x in row] for row in standings]
    # The rendered length, kept as lines leave. A section renders as "Title:" and one "\n- line" per line;
    # sections are joined by "\n".
    chars = [len(title) + 1 + sum(len(line) + 3 for line in lines) for title, lines in sections]
    counts = [len(lines) for _, lines in sections]
    keys = [((standings[s][i].eviction_key(), s, i), standings[s][i].line_class in KEPT_WHOLE)
            for s, (_, lines) in enumerate(sections) for i in range(len(lines))]
    order = sorted(key for key, kept in keys if not kept)
    last_resort = sorted(key for key, kept in keys if kept)
    left_out: set[tuple[int, int]] = set()

    def length() -> int:
        shown = [c for c, n in zip(chars, counts, strict=True) if n]
        return sum(shown) + len(shown) - 1 if shown else 0

    for limit, candidates in ((max_tokens, order), (ceiling, last_resort)):
        if limit is None:
            continue
        for _, s, i in candidates:
            if estimate_message_tokens_of_length(length()) <= limit:
                break
            left_out.add((s, i))
            chars[s] -= len(sections[s][1][i]) + 3
            counts[s] -= 1
    text = "\n".join(
        f"{title}:\n" + "\n".join(f"- {line}" for i, line in enumerate(lines) if (s, i) not in left_out)
        for s, (title, lines) in enumerate(sections) if counts[s]
    )
    return text, len(left_out)
