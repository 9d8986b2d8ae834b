"""The date guard: a date argument must fit what the caller said, re-read in full at check time.

The guard re-reads every caller utterance of the transcript lane (never a
summary), so a constraint from turn 3 still binds at turn 200. Extraction is
cached per transcript entry, so a re-read does no repeated work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from voice_agent.core.dates import WEEKDAY_NAMES, ConstraintKind, DateConstraint, extract_constraints, supersedes
from voice_agent.core.dates.binding import DateBinding
from voice_agent.core.dates.corrections import keeps_until, lifts
from voice_agent.core.dates.extract import weekdays_allowed
from voice_agent.core.dates.signals import norm, without_quotes
from voice_agent.core.dates.subjects import StatementKind, role_of, topic_of
from voice_agent.core.read_ahead import ReadAhead
from voice_agent.core.tool_spec import ParamKind, ToolSpec
from voice_agent.core.transcript import EntryKind, TranscriptEntry, TranscriptLane

_ISO = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[T ][\d:.+\-Z]*)?")
_AFFIRM_START = re.compile(
    r"^\W*(?:(?:uh|um|er|erm|oh|well|right|mm|so|and|please|(?:he|she|they|mum|dad)\s(?:says|said))\W+)*"
    r"(?:yes|yeah|yep|yup|uh-?\s?huh|mm-?\s?hmm|mhm|ok|okay|sure|perfect|great|fine|lovely|brilliant|excellent|cool"
    r"|alright|all\sright"
    r"|aye|ta|sorted|grand|champion|nice\sone|bang\son|cheers|go\son|that'll\sdo|that'd\sdo|righto|right\sthen"
    r"|that's\s(?:right|correct|it)|that\sis\s(?:right|correct)|exactly|spot\son|book\sit"
    r"|that'd\sbe\s(?:great|good|fine|perfect|lovely|ideal)|that\sshould\sbe\s(?:fine|ok|okay|good)|i\ssuppose\sso"
    r"|suppose\sso|go\son\sthen|i\sguess\sso|fair\senough|deal|done"
    r"|absolutely|definitely|correct|right|go\sahead|please\sdo|sounds\s(?:good|great|fine|perfect)"
    r"|that\s(?:works|sounds|would\sbe)|that's\s(?:fine|great|good|perfect|lovely|ok|okay)|works\sfor\sme"
    # assent in other words: "no problem", "not a bother", "of course", "you bet", "sound", "I can do that"
    r"|no\s(?:problem|worries|bother)|not\sa\s(?:problem|bother)|of\scourse|certainly|you\sbet|sound|by\sall\smeans"
    r"|can\sdo|(?:i|we)\scan\sdo\s(?:that|it|then|the\s\w+|\w+day)"
    # South African, Indian, American, Irish, Australian: "ja", "haan", "alrighty", "shot", "deadly", "sweet"
    r"|(?:i\s|we\s)?(?:think|guess|reckon)\sso|(?:i\s|we\s)?(?:guess|reckon)\s(?:that|it|thursday|\w+day)'ll\sdo"
    r"|ja|jah|yebo|haan|alrighty|righty|(?:you\s)?betcha|shot|sharp|lekker|deadly|sweet|no\sissues?|why\snot"
    r"|(?:that's|it's)\sa\sdate|sounds\slike\sa\splan|lovely\sjob|let's\s(?:go\swith|do)\s(?:that|it|the\s\w+|\w+day)"
    r"|(?:that'd|that\swould|that\swill|that'll)\sbe\s(?:just\s)?(?:fine|great|good|perfect|lovely|ideal|grand|brilliant)"
    r"|book\s(?:me|it|us)\s(?:in|down)|put\s(?:me|us)\s(?:down|in)|(?:i'm|i\sam)\s(?:happy|okay|ok|fine|good)"
    r"|(?:that's|that\sis|it's|it\sis)\s(?:no|not\sa)\s(?:problem|bother)"
    # more of the same: "yessir", "for sure", "that's the one", "lock it in", "too easy", "nae bother"
    r"|yes\s?sir|yes\s?ma'?am|yah|for\ssure|(?:a\s)?hundred\sper\s?cent|100\sper\s?cent|that's\sthe\sone"
    r"|(?:please\s|kindly\s)?do\sthat|lock\sit\sin|happy\sdays|kindly\s(?:book|do|go\sahead)|too\seasy"
    r"|(?:that|it)\sis\s(?:fine|good|ok|okay|perfect|correct|right)|is\sfine|sounds\sabout\sright"
    r"|(?:y'all|you\sall|you)\s(?:can\s)?go\sahead|na[ey]\sbother)\b"
)
_AFFIRM_ANY = re.compile(
    r"\b(?:that\sworks|sounds\sgood|works\sfor\sme|that's\sfine|that's\sperfect|let's\sdo\sthat)\b"
    r"|\w's\s(?:good|fine|great|perfect|ok|okay)\b|\b(?:yes|yeah|yep)\W*$"
    # the day itself approved: "Thursday is okay", "Thursday is suiting me", "Thursday it is", "the 3rd it is"
    r"|\b(?:mon|tues?|wednes|thurs?|fri|satur|sun)(?:day)?s?(?:\s(?:morning|afternoon|evening))?"
    r"(?:'s|'d\sbe|\s(?:is|would\sbe|will\sbe|should\sbe))\s(?:just\s)?(?:okay|ok|fine|good"
    r"|great|perfect|grand|lovely|suiting|lekker|better|ideal|no\s(?:problem|bother|bother\sat\sall))\b"
    r"|\b(?:\w+day|\d{1,2}(?:st|nd|rd|th)?)\sit\sis(?:\sthen)?\W*$"
    # the day with a word of suiting or an hour only: "Thursday would suit", "Thursday, that'll do", "Thursday
    # morning", "any time Thursday"
    r"|\b(?:mon|tues?|wednes|thurs?|fri|satur|sun)(?:day)?\s(?:would|will|should)\ssuit\b|\bthat'll\sdo\W*$"
    r"|^\W*(?:(?:mon|tues?|wednes|thurs?|fri|satur|sun)(?:day)?\W+)?(?:any\s?time|(?:in\sthe\s)?(?:morning|afternoon"
    r"|evening)|after\slunch|first\sthing)(?:\W+(?:on\s)?(?:(?:mon|tues?|wednes|thurs?|fri|satur|sun)(?:day)?|that\sday)"
    r")?(?:\W+(?:is\sfine|please|thanks|then))?\W*$"

    # A verb of suiting or going ahead ("that suits me", "go for it"), and a bare approving word as the whole
    # reply ("Good.", "Very good.", "Marvellous."): the refusal words below still veto them.
    r"|\bsuits?\s(?:me|us)\b|\bgo\sfor\sit\b|^\W*100\s?%\W*$"
    r"|^\W*(?:(?:very|really|all|jolly)\s)?(?:good|marvellous|wonderful|smashing|super|splendid|ideal|terrific"
    r"|fab|fabulous|fantastic|magic|cracking|lush)\b(?:\W+(?:yes|yeah|yep|thanks|thank\syou|then|please))*\W*$"
)
_REFUSE = re.compile(r"\b(?:no(?!\s(?:problem|bother|worries)\b)|nope|not|n't|never|actually|instead|rather)\b|n't\b")


class DateVerdict(StrEnum):
    """The date guard's verdict on one date argument."""

    OK = "ok"
    CONFLICT = "conflict"
    """Breaks a constraint the caller stated (and did not take back)."""
    UNCONFIRMED = "unconfirmed"
    """The caller never said this date, nor agreed to it when the agent proposed it."""
    SUPERSEDED = "superseded"
    """The caller said this date, then corrected it to another."""


@dataclass(frozen=True)
class Citation:
    """Where the caller (or, for a proposal, the agent) said it.

    Attributes:
        turn: The turn (0 only when the caller has said nothing yet).
        words: The words, verbatim.
    """

    turn: int
    words: str


@dataclass(frozen=True)
class DateCheck:
    """The verdict on one date argument.

    Attributes:
        verdict: See :class:`DateVerdict`.
        argument: Parameter name.
        value: The date passed, or None when the argument is not an ISO date.
        reason: Text for the model, fit to return as the tool result.
        citations: The turns and words behind the verdict (at least one unless OK).
    """

    verdict: DateVerdict
    argument: str
    value: date | None
    reason: str
    citations: tuple[Citation, ...]

    @property
    def accepted(self) -> bool:
        """Whether the call may run as far as this argument is concerned."""
        return self.verdict is DateVerdict.OK

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "verdict": self.verdict.value,
            "argument": self.argument,
            "value": self.value.isoformat() if self.value else None,
            "reason": self.reason,
            "citations": [{"turn": c.turn, "words": c.words} for c in self.citations],
        }


@dataclass(frozen=True)
class SaidDates:
    """One utterance and the dates read from it (an agent's without the caller's words it quotes)."""

    index: int
    turn: int
    kind: EntryKind
    text: str
    constraints: tuple[DateConstraint, ...]
    asked: str = ""  # the agent's words before it, which gave a bare day its topic and role


class _LaneRead:
    """How far :meth:`DateGuard._read_shared` has read which lane (a cache, rebuilt when it does not match)."""

    def __init__(self) -> None:
        # A plain reference: the guard lives as long as its call; a deep copy of the call maps it to its own lane.
        self.lane: TranscriptLane | None = None
        self.length = 0
        self.last: TranscriptEntry | None = None
        self.asked = ""
        self.said: list[SaidDates] = []
        self.generation = 0
        """Bumped on every reset, so caches derived from ``said`` know they must start over."""

    def matches(self, transcript: TranscriptLane) -> bool:
        """Whether ``transcript`` is the lane read so far, with every entry read still in place."""
        if self.lane is not transcript or len(transcript) < self.length:
            return False
        return self.last is None or transcript.since(self.length - 1)[0] is self.last

    def reset(self, transcript: TranscriptLane) -> None:
        """Starts over on ``transcript``."""
        self.lane = transcript
        self.length, self.last, self.asked, self.said = 0, None, "", []
        self.generation += 1

    def advance(self, last: TranscriptEntry, asked: str) -> None:
        """Records that the lane was read up to and including ``last``."""
        self.length, self.last, self.asked = last.index + 1, last, asked


@dataclass(frozen=True)
class _Statement:
    """A positive date statement: the caller named it, or agreed to the agent's proposal of it."""

    pos: int  # entry index of the caller's words
    constraint: DateConstraint
    citations: tuple[Citation, ...]


@dataclass(frozen=True)
class _Analysis:
    """One full read of the lane."""

    said: list[SaidDates]
    callers: list[tuple[SaidDates, DateConstraint]]
    corrections: list[tuple[SaidDates, DateConstraint]]
    statements: list[_Statement]
    standing: list[_Statement]


def parse_date_argument(value: Any) -> date | None:
    """An ISO ``yyyy-mm-dd`` (optionally with a time) or a date object, else None."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str) and (m := _ISO.fullmatch(value.strip())):
        try:
            return date.fromisoformat(m.group(1))
        except ValueError:
            return None
    return None


def is_affirmation(text: str) -> bool:
    """Whether a reply agrees to what was just proposed ("yes", "that works", "sounds good")."""
    lowered = text.lower().replace("’", "'")
    if _AFFIRM_START.search(lowered):
        return True
    return bool(_AFFIRM_ANY.search(lowered)) and not _REFUSE.search(lowered)


def _explain(d: date, c: DateConstraint) -> str:
    """Why ``d`` breaks ``c``, and what to ask for instead."""
    if c.kind is ConstraintKind.EXCLUDE_WEEKDAY and c.weekday is not None:
        name = WEEKDAY_NAMES[c.weekday]
        return f"{d} is a {name}. Ask the caller for a day that is not a {name}."
    if c.kind is ConstraintKind.EXCLUDE_DATE:
        return f"{d} is the day they ruled out. Ask the caller for another date."
    if c.blocked and c.start is None:
        return f"{d} falls inside that. Ask the caller for a date after {c.end}."
    if c.blocked:
        return f"{d} falls inside that ({c.start} to {c.end}). Ask the caller for a date outside it."
    if c.start is not None and d < c.start:
        if c.end is not None:
            return f"{d} is outside {c.start} to {c.end}, the window they gave. Ask the caller for a date in it."
        return f"{d} is before {c.start}, the earliest they allowed. Ask the caller for a date on or after {c.start}."
    if c.start is not None:
        return f"{d} is outside {c.start} to {c.end}, the window they gave. Ask the caller for a date in it."
    return f"{d} is after {c.end}, the latest they allowed. Ask the caller for a date on or before {c.end}."


def _distance(d: date, c: DateConstraint) -> int:
    if c.contains(d):
        return 0
    ends = [abs((x - d).days) for x in (c.start, c.end) if x is not None]
    return min(ends) if ends else 10_000


class DateGuard:
    """Checks date arguments against everything the caller said about dates.

    Only statements about what a parameter books bind it (``DateBinding``): a callback's date
    is bound by when the caller can be reached, not by their flight or a charge period.

    Args:
        reference: The day of the call; all dates resolve against it.
        binding: What binds a date when no tool parameter says (``constraints``, ``violations``,
            the output guard's finder).
    """

    def __init__(self, reference: date, binding: DateBinding | None = None) -> None:
        self.reference = reference
        self.binding = binding or DateBinding()
        self._said: dict[int, SaidDates] = {}
        self._analysis: dict[DateBinding, tuple[tuple[SaidDates, ...], _Analysis]] = {}
        # Derived caches, rebuilt from the lane whenever they do not match it (never serialised state): the
        # lane read so far and each binding's caller constraints so far, so a re-read costs only the entries
        # appended since the last one and the context stage stays flat however long the call is.
        self._lane_read = _LaneRead()
        self._caller_constraints: dict[DateBinding, tuple[int, int, list[tuple[int, DateConstraint]]]] = {}
        # Caller words read at an interim transcript, keyed by everything the read depends on: the words, the
        # reference date and the agent's words before them (which give a bare day its topic and role).
        self.caller_ahead: ReadAhead[tuple[str, date, str], tuple[DateConstraint, ...]] = ReadAhead()

    # -- reading the lane --------------------------------------------------------------------------------------------

    def _read(self, transcript: TranscriptLane) -> list[SaidDates]:
        """Caller and agent utterances with their constraints (a copy of the incremental read)."""
        return list(self._read_shared(transcript))

    def _read_shared(self, transcript: TranscriptLane) -> list[SaidDates]:
        """The incremental read itself: only entries appended since the last read of this lane are read.

        The lane is append-only, so the read so far stays valid while it is the same lane object and the
        last entry read is still in place; anything else (another lane, a lane rebuilt from a store) is
        read from the start. The returned list is the cache: callers must not change it.
        """
        read = self._lane_read
        if not read.matches(transcript):
            read.reset(transcript)
        new = transcript.since(read.length)
        if not new:
            return read.said
        asked = read.asked  # the agent's last words: "when will you return the car?" tells what a bare "the 9th" is for
        for entry in new:
            if entry.kind is not EntryKind.CALLER and entry.kind is not EntryKind.AGENT:
                continue
            said = self._said.get(entry.index)
            context = asked if entry.kind is EntryKind.CALLER else ""
            if said is None or said.text != entry.text or said.kind is not entry.kind or said.asked != context:
                found = (self.caller_ahead.take((entry.text, self.reference, context))
                         if entry.kind is EntryKind.CALLER else None)
                if found is None:
                    found = (self._constraints_of(entry.text, context) if entry.kind is EntryKind.CALLER
                             else self._agent_constraints(entry.text))
                said = SaidDates(entry.index, entry.turn, entry.kind, entry.text, found, context)
                self._said[entry.index] = said
            if entry.kind is EntryKind.AGENT:
                asked = entry.text
            read.said.append(said)
        read.advance(new[-1], asked)
        return read.said

    def _constraints_of(self, text: str, asked: str) -> tuple[DateConstraint, ...]:
        """The constraints in ``text``, a bare day taking its topic and role from ``asked`` (the agent's words)."""
        found = extract_constraints(text, self.reference)
        if asked:
            found = [_in_answer_to(asked, c) for c in found]
        return tuple(found)

    def _agent_constraints(self, text: str) -> tuple[DateConstraint, ...]:
        """The days the agent names itself: a read-back's quotes of the caller are the caller's, not a proposal."""
        return tuple(extract_constraints(without_quotes(text), self.reference))

    def utterances(self, transcript: TranscriptLane) -> list[SaidDates]:
        """Caller and agent utterances in order, each with the dates read from it (a copy of the read)."""
        return self._read(transcript)

    def read_ahead(self, transcript: TranscriptLane) -> None:
        """Reads now what was appended since the last read, so the next check or context build need not.

        For the agent's reply as it is recorded: the caller is listening then, nobody is waiting on it.
        """
        self._read_shared(transcript)

    def read_ahead_caller(self, text: str, transcript: TranscriptLane) -> None:
        """Reads the caller's words before they are final (an interim transcript), as their turn will read them.

        The read is kept (the last few, see :class:`~voice_agent.core.read_ahead.ReadAhead`) under the words,
        the reference date and the agent's words before them as the lane has them now; a final with the same
        key takes it instead of extracting. A final that differs in any of them is read as usual.

        Args:
            text: The caller's words so far, exactly as the turn will record them.
            transcript: The call's lane (read up to its end first, so the agent's words before are current).
        """
        self._read_shared(transcript)
        key = (text, self.reference, self._lane_read.asked)
        if key not in self.caller_ahead:
            self.caller_ahead.put(key, self._constraints_of(text, key[2]))

    def constraints(self, transcript: TranscriptLane) -> list[tuple[int, DateConstraint]]:
        """Every binding constraint the caller stated, as ``(turn, constraint)``, oldest first."""
        return list(self.caller_constraints(transcript))

    def caller_constraints(self, transcript: TranscriptLane) -> Sequence[tuple[int, DateConstraint]]:
        """:meth:`constraints` without the copy: the guard's own list, for readers that keep up with it.

        The list is appended to as the lane grows and replaced by a new one when the lane is read from the
        start (another lane, another binding), so a reader that remembers the list and how far it read need
        only look at what follows. Never change it.
        """
        said = self._read_shared(transcript)
        generation, done, found = self._caller_constraints.get(self.binding, (-1, 0, []))
        if generation != self._lane_read.generation:
            done, found = 0, []
        found.extend(
            (s.turn, c)
            for s in said[done:]
            if s.kind is EntryKind.CALLER
            for c in s.constraints
            if self.binding.admits(c)
        )
        self._caller_constraints[self.binding] = (self._lane_read.generation, len(said), found)
        return found

    def _statements(self, said: list[SaidDates], binding: DateBinding) -> list[_Statement]:
        """Dates the caller named, plus agent proposals the caller's next utterance agreed to."""
        out: list[_Statement] = []
        reply: SaidDates | None = None
        agreed: list[_Statement] = []
        for s in reversed(said):  # walking backwards, ``reply`` is the next caller utterance after ``s``
            if s.kind is EntryKind.CALLER:
                reply = s
                continue
            proposed = {
                c.start for c in s.constraints if c.kind is ConstraintKind.ON and not c.blocked and binding.admits(c)
            }
            # One proposed day only: "Thursday or Friday?" - "yes" agrees to neither in particular.
            if len(proposed) == 1 and reply is not None and is_affirmation(reply.text):
                day = next(iter(proposed))
                said_yes = DateConstraint(
                    ConstraintKind.ON, day, day, None, reply.text, topic=topic_of(s.text), role=role_of(s.text),
                    statement=StatementKind.REQUEST,
                )
                cites = (Citation(s.turn, s.text), Citation(reply.turn, reply.text))
                agreed.append(_Statement(reply.index, said_yes, cites))
        for s in said:
            if s.kind is EntryKind.CALLER:
                out += [
                    _Statement(s.index, c, (Citation(s.turn, c.text),))
                    for c in s.constraints
                    if c.is_positive and binding.admits(c)
                ]
        return sorted(out + agreed, key=lambda st: st.pos)

    def _analyse(self, transcript: TranscriptLane, binding: DateBinding | None = None) -> _Analysis:
        """The lane read in full for one binding; rebuilt only when an utterance was added."""
        binding = binding or self.binding
        said = self._read(transcript)
        # The same SaidDates objects (cached per entry) in the same order: nothing new to analyse. Tuple equality
        # checks identity first, so this compare is cheap.
        key = tuple(said)
        cached = self._analysis.get(binding)
        if cached is not None and cached[0] == key:
            return cached[1]
        callers = [
            (s, c) for s in said if s.kind is EntryKind.CALLER for c in s.constraints if binding.admits(c)
        ]
        # Only a sentence with a correction cue, or a restated limit ("up to the 12th" after "until the
        # 10th"), can replace or lift anything, so only those are scanned.
        limits = (ConstraintKind.UNTIL, ConstraintKind.BEFORE, ConstraintKind.AFTER)
        corrections = [(s, c) for s, c in callers if c.correction or c.kind in limits]
        statements = self._statements(said, binding)
        standing = [
            st
            for st in statements
            if not any(s.index > st.pos and supersedes(c, st.constraint) for s, c in corrections)
        ]
        analysis = _Analysis(said, callers, corrections, statements, standing)
        self._analysis[binding] = (key, analysis)
        return analysis

    # -- rules -------------------------------------------------------------------------------------------------------

    def _violations(self, d: date, a: _Analysis) -> list[tuple[SaidDates, DateConstraint]]:
        out: list[tuple[SaidDates, DateConstraint]] = []
        for s, c in a.callers:
            if c.allows(d):
                continue
            if c.is_positive:
                # Windows are alternatives: only outside every standing window (or named day) is a conflict.
                if c.kind is ConstraintKind.ON or c.end is None or c.end < self.reference:
                    continue
                if any(st.constraint.contains(d) for st in a.standing):
                    continue
                if not any(st.constraint is c for st in a.standing):
                    continue
            elif not c.blocked and c.start is None and c.end is not None and c.end < self.reference:
                continue  # "I paid before the 10th of November" is history, not a limit on scheduling
            lifted = any(
                later.index > s.index and (lifts(lc, later.constraints, c) or (lc.is_positive and lc.contains(d)))
                for later, lc in a.corrections
            ) or (
                c.kind is ConstraintKind.EXCLUDE_WEEKDAY
                and c.weekday is not None
                and any(
                    later.index > s.index
                    and later.kind is EntryKind.CALLER
                    and c.weekday in weekdays_allowed(later.text)
                    for later in a.said
                )
            )
            if not lifted:
                out.append((s, c))
        return out

    def violations(self, d: date, transcript: TranscriptLane) -> list[tuple[int, DateConstraint]]:
        """The caller's standing constraints that ``d`` breaks, as ``(turn, constraint)``."""
        return [(s.turn, c) for s, c in self._violations(d, self._analyse(transcript))]

    def violation_finder(self, transcript: TranscriptLane) -> Callable[[str], list[str]]:
        """A finder for the output guard: reasons why dates named in agent text break the caller's constraints."""

        def find(text: str) -> list[str]:
            reasons: list[str] = []
            for c in extract_constraints(without_quotes(text), self.reference):
                if c.kind is ConstraintKind.ON and c.start is not None:
                    for turn, broken in self.violations(c.start, transcript):
                        reasons.append(f"Caller said on turn {turn}: '{broken.text}'. {_explain(c.start, broken)}")
            return reasons

        return find

    def check_date(
        self,
        argument: str,
        raw: Any,
        transcript: TranscriptLane,
        tool_name: str = "the tool",
        binding: DateBinding | None = None,
    ) -> DateCheck:
        """The verdict on one date argument value.

        Args:
            argument: Parameter name.
            raw: The value the model passed (ISO ``yyyy-mm-dd`` expected).
            transcript: The call's transcript lane; read, never modified.
            tool_name: For the reason text.
            binding: What binds this parameter (default: the guard's own).

        Returns:
            The check, with citations of the caller's own words: for ``ok``, the turn that asked for
            or agreed to the date and every binding limit it meets.
        """
        a = self._analyse(transcript, binding)
        said = a.said
        callers = [s for s in said if s.kind is EntryKind.CALLER]
        d = parse_date_argument(raw)
        if d is None:
            cite = (Citation(callers[-1].turn, callers[-1].text),) if callers else (Citation(0, ""),)
            return DateCheck(
                DateVerdict.UNCONFIRMED,
                argument,
                None,
                f"{argument}={raw!r} is not a date. Pass an ISO date (yyyy-mm-dd) that the caller said or agreed to.",
                cite,
            )

        broken = self._violations(d, a)
        if broken:
            parts = [f"Caller said on turn {s.turn}: '{c.text}'. {_explain(d, c)}" for s, c in broken]
            cites = tuple(dict.fromkeys(Citation(s.turn, c.text) for s, c in broken))
            return DateCheck(DateVerdict.CONFLICT, argument, d, " ".join(parts), cites)

        hits = [st for st in a.statements if st.constraint.contains(d)]
        for_role = (binding or self.binding).role
        if hits:
            last = max(hits, key=lambda st: st.pos)
            for s, c in a.callers:
                if s.index <= last.pos:
                    continue
                # "need it until the 10th" names the 10th as the end day, so it moves a drop-off on the 9th too.
                other_day = not c.contains(d) or (for_role == "end" and keeps_until(c) and c.end != d)
                if other_day and echoes_day(s.text, c, d):
                    continue  # "lovely, Friday then": the day settled, by its weekday or bare number
                # "is there a backup day?" - "the 5th": a second choice, not a new day
                offered = c.correction or not _ADDITION_ASKED.search(s.asked.lower())
                replaced = supersedes(c, last.constraint, for_role, one_day=for_role is None) and offered
                newer = [c] if replaced and other_day else []
                if newer:
                    instead = newer[-1].describe()
                    reason = (
                        f"Caller said on turn {last.citations[-1].turn}: '{last.citations[-1].words}', then "
                        f"corrected it on turn {s.turn}: '{newer[-1].text}'. {d} is the old date; use the corrected "
                        f"one ({instead})."
                    )
                    cites = (*last.citations, Citation(s.turn, newer[-1].text))
                    return DateCheck(DateVerdict.SUPERSEDED, argument, d, reason, cites)
            met = self._met(d, a, last)
            return DateCheck(DateVerdict.OK, argument, d, f"{d} matches what the caller said.", (*last.citations, *met))

        named = self._named_limit(d, a.callers)
        if named is not None:
            s, c, later = named
            if later is None:
                reason = f"{d} is the limit the caller named on turn {s.turn}: '{c.text}'."
                return DateCheck(DateVerdict.OK, argument, d, reason, (Citation(s.turn, c.text),))
            t, moved = later
            reason = (
                f"Caller said on turn {s.turn}: '{c.text}', then moved it on turn {t.turn}: '{moved.text}'. "
                f"{d} is the old limit; use the new one ({moved.describe()})."
            )
            return DateCheck(DateVerdict.SUPERSEDED, argument, d, reason,
                             (Citation(s.turn, c.text), Citation(t.turn, moved.text)))
        return self._unconfirmed(argument, d, said, tool_name, a.callers)

    @staticmethod
    def _met(d: date, a: _Analysis, statement: _Statement) -> tuple[Citation, ...]:
        """The caller's standing limits that ``d`` meets (besides the statement itself), as citations."""
        out: list[Citation] = []
        for s, c in a.callers:
            if c is statement.constraint or c.is_positive or not c.allows(d):
                continue
            if any(later.index > s.index and supersedes(lc, c) for later, lc in a.corrections):
                continue
            cite = Citation(s.turn, c.text)
            if cite not in out and cite not in statement.citations:
                out.append(cite)
        return tuple(out)

    @staticmethod
    def _named_limit(
        d: date, callers: list[tuple[SaidDates, DateConstraint]]
    ) -> tuple[SaidDates, DateConstraint, tuple[SaidDates, DateConstraint] | None] | None:
        """The caller's open limit whose boundary is ``d`` ("until March 10th", "from the 8th").

        A caller who says "I need the car until the 10th" has named the 10th, so a drop-off on
        the 10th is not an unconfirmed date. ``callers`` holds only statements that bind the
        parameter. Returns the latest such limit and, when a later limit replaced it, that one.
        """
        found = None
        for i, (s, c) in enumerate(callers):
            if c.blocked or c.kind not in (ConstraintKind.UNTIL, ConstraintKind.AFTER):
                continue
            if d != (c.end if c.kind is ConstraintKind.UNTIL else c.start):
                continue
            later = next(((t, lc) for t, lc in callers[i + 1 :] if t.index > s.index and supersedes(lc, c)), None)
            found = (s, c, later)
        return found

    def _unconfirmed(
        self,
        argument: str,
        d: date,
        said: list[SaidDates],
        tool_name: str,
        binding_callers: list[tuple[SaidDates, DateConstraint]],
    ) -> DateCheck:
        ask = f"Confirm the date with the caller before calling {tool_name}."
        for i, s in enumerate(said):
            if s.kind is EntryKind.AGENT and any(c.kind is ConstraintKind.ON and c.start == d for c in s.constraints):
                reply = next((r for r in said[i + 1 :] if r.kind is EntryKind.CALLER), None)
                cites = [Citation(s.turn, s.text)]
                heard = "the caller has not answered yet"
                if reply is not None:
                    cites.append(Citation(reply.turn, reply.text))
                    heard = f"the caller answered on turn {reply.turn}: '{reply.text}'"
                reason = f"The agent proposed {d} on turn {s.turn} but the caller did not agree ({heard}). {ask}"
                return DateCheck(DateVerdict.UNCONFIRMED, argument, d, reason, tuple(cites))
        callers = [s for s in said if s.kind is EntryKind.CALLER]
        dated = list(binding_callers)  # only statements about this date: never small talk
        if dated:
            s, c = min(dated, key=lambda sc: (_distance(d, sc[1]), -sc[0].index))
            reason = (
                f"The caller never said {d} and did not agree to it. The closest they said, on turn {s.turn}: "
                f"'{c.text}'. {ask}"
            )
            return DateCheck(DateVerdict.UNCONFIRMED, argument, d, reason, (Citation(s.turn, c.text),))
        if callers:
            last = callers[-1]
            reason = f"The caller never mentioned a date (last said on turn {last.turn}: '{last.text}'). {ask}"
            return DateCheck(DateVerdict.UNCONFIRMED, argument, d, reason, (Citation(last.turn, last.text),))
        return DateCheck(
            DateVerdict.UNCONFIRMED, argument, d, f"The caller has not said anything yet. {ask}", (Citation(0, ""),)
        )

    def check(self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane) -> list[DateCheck]:
        """Checks every DATE-kind argument present in ``arguments``.

        Args:
            tool: The tool's spec; DATE parameters are marked there, never guessed from names.
            arguments: The arguments the model produced.
            transcript: The call's transcript lane, re-read in full; never modified.

        Returns:
            One check per DATE parameter present, in parameter order.
        """
        return [
            self.check_date(
                p.name,
                arguments[p.name],
                transcript,
                tool.name,
                DateBinding.for_param(tool.name, p.name, p.binds, p.topic),
            )
            for p in tool.params_of(ParamKind.DATE)
            if p.name in arguments
        ]


def constraints_in_transcript(transcript: TranscriptLane, reference: date) -> list[tuple[int, DateConstraint]]:
    """Every constraint the caller stated in ``transcript``, as ``(turn, constraint)`` (extraction is cached)."""
    return DateGuard(reference).constraints(transcript)


_ECHO_BLOCKERS = re.compile(
    r"\b(?:next|this|following|after|before|week|fortnight|month|instead|other|another|not|no|till|until|from"
    r"|january|february|march|april|may|june|july|august|september|october|november|december)\b"
)


def echoes_day(text: str, c: DateConstraint, d: date) -> bool:
    """Whether ``c`` (read from the caller's ``text``) only names ``d`` again by its weekday or its bare day number
    ("lovely, Friday then", "the 29th, great"): the resolver placed it on the nearest such day, but nothing in the
    words points anywhere but the day settled."""
    if c.kind is not ConstraintKind.ON or c.blocked or c.start is None or c.start != c.end:
        return False
    n = norm(text)
    if _ECHO_BLOCKERS.search(n):
        return False
    numbers = {int(m.group(1)) for m in re.finditer(r"\b(\d{1,2})(?:th|st|nd|rd)?\b", n)}
    weekday = c.start.weekday() == d.weekday() and re.search(WEEKDAY_NAMES[d.weekday()].lower()[:3], n)
    if numbers:
        return numbers == {d.day} and c.start.day == d.day and (not weekday or c.start.weekday() == d.weekday())
    return bool(weekday)


def _in_answer_to(asked: str, c: DateConstraint) -> DateConstraint:
    """``c`` with the topic and role of the agent's question when the caller's words name neither."""
    if (c.topic is not None and c.role is not None) or c.kind is not ConstraintKind.ON:
        # A limit says what it is about itself, and "from the 12th to the 14th" spans both ends of what
        # was asked: only a bare day answers the question.
        return c
    if not _ASKS_FOR.search(asked.lower()):
        return c  # "that invoice shows the router twice." asked nothing: the caller's next day is not about it
    topic, role = c.topic or topic_of(asked), c.role or role_of(asked)
    if (topic, role) == (c.topic, c.role):
        return c
    return replace(c, topic=topic, role=role)


# The agent asked for a second choice: the day the caller then names is another option.
_ADDITION_ASKED = re.compile(
    r"\b(?:backup|back-up|another\s(?:day|date|option)|second\schoice|alternative|as\swell|also)\b[^.!]*\?"
)
# The agent asked for something: a question, or a request ("please tell me the day you'll return it").
_ASKS_FOR = re.compile(
    r"\?|\b(?:tell\sme|let\sme\sknow|please\s(?:say|give|confirm|choose|pick)|when|which\s(?:day|date))\b"
)
