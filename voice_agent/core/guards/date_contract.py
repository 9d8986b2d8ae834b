"""The date contract: a date-bearing tool call runs, is confirmed with the caller, or is refused.

A date runs only when the caller asked for or agreed to that exact day, firmly, after every
statement that could bind it, and no reader (the cue-word rules, and the model reader when one is
configured) finds a binding statement it breaks. Otherwise the agent **confirms**: it reads back the
caller's own words (the binding statements, verbatim) with the day, and the call runs only after
the caller's yes, which is then the latest thing they said. A clear break the caller never agreed
to (one the rules read; a break only the model reads is a disagreement, so a question) is **refused**
with its citation. A day the caller later replaced never runs: whatever they said
after it, naming a time or taking something back, turns a run into a question.

Safety comes from the structure, not from reading every wording right: the cue words only ever
*add* reasons to ask (see :mod:`voice_agent.core.dates.signals`), and a run needs a firm yes or a
firm request of that exact day as the caller's last word on dates.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from functools import lru_cache
from typing import Any

from voice_agent.core.dates import signals
from voice_agent.core.dates.binding import DateBinding
from voice_agent.core.dates.extract import extract_constraints
from voice_agent.core.dates.model import WEEKDAY_NAMES, ConstraintKind, DateConstraint
from voice_agent.core.dates.reading import DateReading, ReadStatement
from voice_agent.core.dates.subjects import DateSubject, StatementKind
from voice_agent.core.guards.date_guard import (
    Citation,
    DateCheck,
    DateGuard,
    DateVerdict,
    SaidDates,
    echoes_day,
    is_affirmation,
)
from voice_agent.core.guards.tool_verbs import VerbMask, action_phrase, action_verbs, own_action
from voice_agent.core.tool_spec import ParamKind, ToolSpec
from voice_agent.core.transcript import EntryKind, TranscriptLane

_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_RELATIVE = re.compile(r"\b(?:after|before|next|following|(?:this|that)\s(?:\w+day|day|week|one)|week|fortnight"
                       r"|tomorrow|today|tonight|other|another|instead|later|earlier|one\safter|one\sbefore)\b")
_LIMIT_KINDS = (ConstraintKind.EXCLUDE_DATE, ConstraintKind.EXCLUDE_WEEKDAY, ConstraintKind.AFTER,
                ConstraintKind.BEFORE)
"""Readings that say which days are out (or the earliest or latest allowed), not a window asked for."""
MAX_READBACK = 6
"""Most caller statements read back in one confirmation (the breaking ones first)."""


class DateAction(StrEnum):
    """What happens to a date-bearing tool call."""

    RUN = "run"
    CONFIRM = "confirm"
    REFUSE = "refuse"


class Why(StrEnum):
    """Why the contract decided as it did (a short code for reports; ``reason`` says it in words)."""

    ASKED_LAST = "asked_last"
    """The caller firmly asked for or agreed to this day, and said nothing about dates after."""
    NOT_A_DATE = "not_a_date"
    NOT_ASKED = "not_asked"
    """The caller never firmly asked for or agreed to this exact day."""
    SAID_MORE = "said_more"
    """After asking for it the caller said more about dates, or took something back."""
    BREAKS = "breaks"
    """A reader finds a statement of the caller's that this day breaks."""
    COULD_BIND = "could_bind"
    """The caller said something about this day (or days like it) that no reader could place: read it back."""
    READERS_DISAGREE = "readers_disagree"
    """The rules would run it; the model reader finds a statement it breaks."""
    MODEL_FAILED = "model_failed"
    """The model reader failed or timed out and the call holds a statement that could bind the day."""


@dataclass(frozen=True)
class DateDecision:
    """The contract's decision on one date argument.

    Attributes:
        action: Run, confirm or refuse.
        why: The short reason code.
        argument: Parameter name.
        value: The date passed (None when it is not an ISO date).
        reason: For the model and the logs, citing turns.
        citations: The caller's statements behind it, verbatim (read back on confirm, cited on refuse).
        readback: What the agent says to confirm ("" unless the action is confirm).
        rules: The cue-word reader's verdict.
        model: The model reader's statements this day breaks (verified quotes), when a model read the call.
        reading: The model reading used, if any.
    """

    action: DateAction
    why: Why
    argument: str
    value: date | None
    reason: str
    citations: tuple[Citation, ...]
    readback: str
    rules: DateCheck
    model: tuple[ReadStatement, ...] = ()
    reading: DateReading | None = None

    @property
    def runs(self) -> bool:
        """Whether the tool may run as far as this argument is concerned."""
        return self.action is DateAction.RUN

    def result(self) -> dict[str, Any]:
        """The tool result the model reads instead of running the tool (confirm or refuse)."""
        out: dict[str, Any] = {
            "status": "confirm" if self.action is DateAction.CONFIRM else "rejected",
            "guard": "date",
            "verdict": self.action.value,
            "reason": self.reason,
            "citations": [{"turn": c.turn, "words": c.words} for c in self.citations],
        }
        if self.readback:
            out["say"] = self.readback
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "action": self.action.value, "why": self.why.value, "argument": self.argument,
            "value": self.value.isoformat() if self.value else None, "reason": self.reason,
            "citations": [{"turn": c.turn, "words": c.words} for c in self.citations],
            "readback": self.readback, "rules": self.rules.to_json(),
            "model": [{"turn": s.turn, "quote": s.quote, "polarity": s.polarity.value} for s in self.model],
            "reading": self.reading.to_json() if self.reading else None,
        }


def spoken_date(d: date) -> str:
    """"Thursday 26 November": the form a read-back uses (the rules read it back as that one day)."""
    return f"{d.strftime('%A')} {d.day} {d.strftime('%B')}"


def readback_line(d: date, quotes: Sequence[str], what: str = "that", action: str | None = None) -> str:
    """The confirmation the agent says: the caller's own words, verbatim, then the day.

    ``what`` is the thing booked ("the callback"); a tool that books nothing says its ``action`` instead
    ("cancel the subscription").
    """
    said = " and ".join(f'"{q}"' for q in quotes)
    if action is not None:
        if not quotes:
            return f"Just to confirm, shall I {action} on {spoken_date(d)}?"
        return f"Before I {action}: you said {said}. Shall I still {action} on {spoken_date(d)}?"
    if not quotes:
        return f"Just to confirm, shall I book {what} for {spoken_date(d)}?"
    return f"Before I book it: you said {said}. Shall I still book {what} for {spoken_date(d)}?"


class DateContract:
    """Decides run, confirm or refuse for date arguments, over a call's :class:`DateGuard`.

    Args:
        guard: The call's date guard (the cue-word reader, with its per-utterance cache).
    """

    def __init__(self, guard: DateGuard) -> None:
        self.guard = guard

    def decide(
        self, tool: ToolSpec, arguments: Mapping[str, Any], transcript: TranscriptLane,
        reading: DateReading | None = None,
    ) -> list[DateDecision]:
        """One decision per DATE parameter present in ``arguments``, in parameter order.

        Args:
            tool: The tool's spec; DATE parameters are marked there.
            arguments: The arguments the model produced.
            transcript: The call's transcript lane (re-read in full; never modified).
            reading: The model reader's reading at this action, if a model read the call.
        """
        return [
            self.decide_date(p.name, arguments[p.name], transcript, tool.name,
                             DateBinding.for_param(tool.name, p.name, p.binds, p.topic), reading)
            for p in tool.params_of(ParamKind.DATE)
            if p.name in arguments
        ]

    def decide_date(
        self, argument: str, raw: Any, transcript: TranscriptLane, tool_name: str = "the tool",
        binding: DateBinding | None = None, reading: DateReading | None = None,
    ) -> DateDecision:
        """The decision on one date argument value (see the module docstring)."""
        binding = binding or self.guard.binding
        rules = self.guard.check_date(argument, raw, transcript, tool_name, binding)
        d = rules.value
        what = "the callback" if binding.topic in (None, "callback") else f"the {binding.topic}"
        # A tool that books nothing known ("cancel_subscription") reads back its own action, not a callback.
        named = tool_name != "the tool"  # a tool call, not a bare check of a day
        action = action_phrase(tool_name) if binding.topic is None and named else None
        # The tool's own words are its action, not a limit on the day (a callback keeps its long-tuned reading).
        mask = VerbMask(action_verbs(tool_name),
                        own_action(tool_name) if binding.topic != "callback" and named else None)
        if d is None:
            return DateDecision(DateAction.REFUSE, Why.NOT_A_DATE, argument, None, rules.reason, rules.citations, "",
                                rules)
        said = mask.said(self.guard.utterances(transcript))
        model_breaks = tuple(s for s in reading.statements if s.excludes(d)) if reading and reading.ok else ()
        rule_breaks = rules.verdict in (DateVerdict.CONFLICT, DateVerdict.SUPERSEDED)
        assent = _last_assent(said, d, self.guard.reference)
        # What a read-back quotes: the caller's words about this day (so the yes to it answers them all), then
        # their other limits.
        touching = _touching(said if assent is None else said[: assent + 1], d, self.guard.reference)
        binding_said = [*touching, *_binding_statements(said, binding)]

        def decision(verdict: DateAction, why: Why, reason: str, cites: Sequence[Citation]) -> DateDecision:
            cites = tuple(dict.fromkeys(mask.citation(c) for c in cites))
            line = ""
            if verdict is DateAction.CONFIRM:
                line = readback_line(d, [c.words for c in cites[:MAX_READBACK]], what, action)
            return DateDecision(verdict, why, argument, d, reason, cites, line, rules, model_breaks, reading)

        model_cites = [Citation(s.turn, s.quote) for s in model_breaks]
        if assent is None:
            named = any(s.kind is EntryKind.CALLER and any(c.kind is ConstraintKind.ON and c.start == d
                                                             for c in s.constraints) for s in said)
            if rules.verdict is DateVerdict.SUPERSEDED or (rule_breaks and not named):
                return decision(DateAction.REFUSE, Why.BREAKS, rules.reason, rules.citations)
            if rule_breaks:
                # The caller named this very day themselves: a limit the rules read may be misread, so ask.
                return decision(DateAction.CONFIRM, Why.BREAKS,
                                f"{rules.reason} They also named {d} themselves: read back their words and ask.",
                                [*rules.citations, *binding_said])
            if model_breaks:
                # Only the model reads a break: the readers disagree, so the caller is asked, not refused.
                quoted = "; ".join(f"turn {c.turn}: '{c.words}'" for c in model_cites)
                return decision(DateAction.CONFIRM, Why.READERS_DISAGREE,
                                f"A second reading finds the caller's words against {d} ({quoted}). Read them back "
                                "(the 'say' line) and book only after their yes.", [*model_cites, *binding_said])
            reason = (f"The caller has not firmly asked for or agreed to {d} as their last word on dates. Read back "
                      f"their words and the day (say exactly the 'say' line), then call {tool_name} again only "
                      "after they say yes.")
            return decision(DateAction.CONFIRM, Why.NOT_ASKED, reason, binding_said)
        heard = said[assent]
        acknowledged = _read_back(said, assent)
        later = [s for s, asked in _with_asked(said[assent + 1 :], said[assent].text)
                 if _unsettles(s, d, self.guard.reference, asked)]
        if later and rule_breaks and any(c.turn > heard.turn for c in rules.citations):
            # What the caller said after asking for it is itself a clear break: "actually no, make it the 25th".
            return decision(DateAction.REFUSE, Why.BREAKS, rules.reason, rules.citations)
        if later:
            cites = [Citation(s.turn, s.text) for s in later if s.kind is EntryKind.CALLER] or binding_said
            reason = (f"The caller asked for {d} on turn {heard.turn}, then said more about dates or took something "
                      f"back. Read back their words and the day (the 'say' line) and call {tool_name} again only "
                      "after they say yes.")
            return decision(DateAction.CONFIRM, Why.SAID_MORE, reason, [*cites, *binding_said])
        unheard_rules = [c for c in rules.citations if rule_breaks and not _in(mask.text(c.words), acknowledged)]
        if unheard_rules:
            return decision(DateAction.CONFIRM, Why.BREAKS,
                            f"{rules.reason} Read back their words (the 'say' line) before booking.",
                            [*unheard_rules, *binding_said])
        # Whatever the readers made of them, the caller's words about this day (or its weekday, its month, "then",
        # "only Mondays") that the yes did not answer are read back: a run needs them heard. Words said before the
        # caller named this day in their own words are answered by that naming (the day came from them, after),
        # unless they name this very day: "the 9th is my dad's funeral" needs its read-back.
        named_turn = _last_naming(said[: assent + 1], d, self.guard.reference)
        unheard = [c for c in touching
                   if not _in(c.words, acknowledged)
                   and (c.turn >= named_turn or _names_the_day(c.words, d, self.guard.reference))]
        if unheard:
            return decision(DateAction.CONFIRM, Why.COULD_BIND,
                            f"The caller said things about {d} (or days like it) before agreeing to it. Read them "
                            "back (the 'say' line) and book only after their yes.", unheard)
        # A yes to the agent's day after the caller last chose another ("I'd rather the 11th" ... "So the 9th?"
        # "yep"): their own choice and their yes disagree, so ask.
        chose = _last_choice(said[:assent], self.guard.reference)
        # ("aye, Thursday" to "How about Thursday the 3rd?" names the day proposed by its weekday, no other day)
        if chose is not None and chose[0] >= named_turn and not _same_day(chose[2], d) and not (
                _bare_weekday(chose[1]) and chose[2][0].weekday() == d.weekday()):
            return decision(DateAction.CONFIRM, Why.SAID_MORE,
                            f"The caller last chose another day (turn {chose[0]}) before saying yes to {d}. Read "
                            "back their words and the day (the 'say' line) and book only after their yes.",
                            [Citation(chose[0], chose[1]), *binding_said])
        unheard_model = [c for c in model_cites if not _in(mask.text(c.words), acknowledged)]
        if unheard_model:
            return decision(DateAction.CONFIRM, Why.READERS_DISAGREE,
                            f"A second reading finds the caller's words against {d}. Read them back (the 'say' line).",
                            [*unheard_model, *binding_said])
        if reading is not None and not reading.ok and binding_said:
            unheard = [c for c in binding_said if not _in(c.words, acknowledged)]
            if unheard:
                return decision(DateAction.CONFIRM, Why.MODEL_FAILED,
                                f"The second reading failed ({reading.error}); the caller said things that could "
                                "limit the day. Read them back (the 'say' line).", unheard)
        return DateDecision(DateAction.RUN, Why.ASKED_LAST, argument, d,
                            f"The caller asked for or agreed to {d} on turn {heard.turn}.",
                            (mask.citation(Citation(heard.turn, heard.text)),), "", rules, model_breaks, reading)


# -- reading the utterances ------------------------------------------------------------------------------------------


def _in(words: str, spoken: str) -> bool:
    return bool(spoken) and signals.norm(words) in signals.norm(spoken)


def _names_only(constraints: Sequence[DateConstraint], d: date) -> bool:
    """Whether every date read names exactly ``d`` (and at least one does)."""
    return bool(constraints) and all(
        c.kind is ConstraintKind.ON and c.start == d and c.end == d and not c.blocked for c in constraints
    )


_CHOICE = re.compile(r"\b(?:suits?|like|want|prefer|good|best|better|works?|convenient|easiest|shall|should|can|could"
                     r"|would|call|ring|phone|book|callback|free|available|ok|okay|fine)\b")
"""Words of a question that asks the caller to choose a day for the call."""


@lru_cache(maxsize=4096)
def _asked_for_a_day(agent: str) -> bool:
    """Whether the agent asked which day suits (not which days are bad: "any days you can't do?")."""
    # The question is the sentence that ends in "?": "nothing's taken until it's corrected. When would you like
    # the callback?" asks for a day.
    if "?" not in agent:
        return False
    asked = [q for q in re.split(r"(?<=[.!?])\s+", agent) if q.rstrip().endswith("?")]  # linear, whatever the length
    # "call you back" asks about the call, not where the caller will be ("when are you back?")
    n = re.sub(r"\b(?:call|ring|phone|get)\s(?:you\s|me\s)?back\b", "call", signals.norm(" ".join(asked)))
    if not asked or any(p.search(n) for p in (signals.NEGATION, signals.UNAVAILABLE, signals.PAST,
                                                      signals.WHEREABOUTS)):
        return False  # "any days you can't do?", "when are you back?", "when was the bill dated?"
    # A day to choose ("when suits?", "which day would you like?") or a day proposed ("Tuesday the 15th then?"),
    # not the date of something else ("what date is the move?", "which day is it?").
    return bool(signals.TIME_WORD.search(n) or "when" in n.split()) and (
        _CHOICE.search(n) is not None or signals.SPAN_WORD.search(n) is not None)


def _replies(said: Sequence[SaidDates]) -> Iterator[tuple[int, SaidDates, list[SaidDates]]]:
    """Each caller utterance in ``said`` with its index and the agent lines just before it (what it answers)."""
    agents: list[SaidDates] = []
    for i, s in enumerate(said):
        if s.kind is EntryKind.AGENT:
            agents.append(s)
            continue
        yield i, s, agents
        agents = []


def _answers_a_question_for_a_day(agents: Sequence[SaidDates]) -> bool:
    return any(_asked_for_a_day(a.text) for a in agents)


def _last_assent(said: Sequence[SaidDates], d: date, reference: date) -> int | None:
    """The index in ``said`` of the caller's last firm request of, or yes to, exactly ``d``.

    Firm: no word of doubt (see :func:`signals.doubts`). A request names only ``d`` and asks for it (or
    answers the agent's question for a day); a yes answers agent lines that together propose only ``d``, and
    may echo it ("aye, the 29th", "yeah Friday": the day number or the weekday of that day, nothing else).
    """
    found = None
    for i, s, agents in _replies(said):
        # What the caller said about something else in the same breath ("I rang on the 14th, nobody got back,
        # so ring me the 24th"; "ha, we had ours in October. The 26th, yes") neither asks nor doubts.
        text, own = _without_asides(s, reference)
        # "the 3rd, the kitchen's finished by then": the "by then" is why the day suits, no doubt of it
        doubt = signals.doubts(_about_when(text))
        if not text or (doubt and not (doubt == ["limit"] and _ready_by_then(signals.norm(text), own, d, False))):
            continue
        proposed = bool(agents) and _proposes([c for a in agents for c in a.constraints], d,
                                              " ".join(a.text for a in agents))
        # "I suppose the 9th could work?" asks back: no yes; "Great. And can you credit the fee now?" is a yes
        yes = ((is_affirmation(text) or signals.accepts(text)) and not signals.questions(text)
               and not _asks_back(text)) or _yes_then_another_matter(text)
        asked = signals.asks(text) or _answers_a_question_for_a_day(agents)
        # A bare weekday ("Monday, thank you") is a request for the nearest one only in the resolver's reading:
        # which Monday the caller means is read back, never assumed.
        bare = _bare_weekday(text)
        # "Yes. Is that a Friday?" asks about the day after the fact: no request, whatever it names ("Could you
        # call me on the 10th?" is one)
        asked = asked and not _asks_about_when_after(text)
        requested = bool(own) and (yes or asked) and (
            (_names_only(own, d) and not bare) or (bare and _picks_by_weekday(agents, text, own, d)))
        # "go with Thursday", "Thursday in the morning please" to "How about Thursday the 3rd?": the day proposed
        chosen = yes or (bool(own) and signals.asks(text) and not _asks_back(text))
        if requested or (proposed and chosen and _echoes(text, own, d)):
            found = i
    return found


def _firm_yes(text: str) -> bool:
    """A yes or an acceptance that asks nothing back."""
    return ((is_affirmation(text) or signals.accepts(text)) and not signals.questions(text)
            and not text.rstrip().endswith("?"))


_SENTENCE_END = re.compile(r"(?<=[.!])\s+")


def _yes_then_another_matter(text: str) -> bool:
    """A yes said first, then something about another matter that names no day, points back at none and doubts
    nothing ("Great. And can you go ahead and credit the fee now?"): the yes stands; the question after it is not
    about the day ("Great. Is that a Tuesday?" or "Yes. Will I be back by then?" are)."""
    parts = _SENTENCE_END.split(text.strip(), maxsplit=1)
    if len(parts) < 2:
        return False
    first, rest = parts
    return (_firm_yes(first) and not signals.names_days(rest) and not signals.has_time_word(rest)
            and signals.ANAPHORA.search(signals.norm(rest)) is None and not signals.doubts(rest))


def _picks_by_weekday(agents: Sequence[SaidDates], text: str, own: Sequence[DateConstraint], d: date) -> bool:
    """Whether a bare weekday ("the Thursday please") picks ``d`` from the days the agent just offered: ``d`` is
    among them and is the only one on that weekday ("I have Wednesday the 2nd or Thursday the 3rd"). A weekday
    placed in a week ("Thursday week", "next Thursday", "Thursday fortnight") is its own day, never a pick."""
    if _WEEK_PLACED.search(signals.norm(text)):
        return False
    offered = {c.start for a in agents for c in a.constraints
               if c.kind is ConstraintKind.ON and c.start is not None and c.start == c.end}
    picked = {c.start.weekday() for c in own if c.start is not None}
    return d in offered and picked == {d.weekday()} and [o.weekday() for o in offered].count(d.weekday()) == 1


_WEEK_PLACED = re.compile(r"\b(?:week|weeks|weak|fortnight|next|this|coming|following|after|last|before)\b")
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")
"""One sentence of a reply, with its closing mark."""


def _asks_back(text: str) -> bool:
    """Whether a reply asks back instead of saying yes: its first sentence is a question ("I suppose the 9th could
    work?"), or a later one asks about when ("Yes. Can it be later?"). A later question about something else
    ("aye, morning. Do I send the bills back?") leaves the yes a yes."""
    sentences = [m[0].strip() for m in _SENTENCE.finditer(text.strip())]
    return bool(sentences) and (sentences[0].endswith("?") or _asks_about_when_after(text))


def _asks_about_when_after(text: str) -> bool:
    """Whether a sentence after the first asks about when ("Yes. Is that a Friday?", "Okay. Can it be later?")."""
    sentences = [m[0].strip() for m in _SENTENCE.finditer(text.strip())]
    return any(q.endswith("?") and signals.has_time_word(q) for q in sentences[1:])


def _aside(clause: str, reference: date) -> bool:
    """Whether a caller's clause is about something else, not when to book: what happened ("I rang about it on the
    14th", "nobody got back to me", "we had ours in October": past tense, or only days before today) or a date of
    a charge or a thing ("the bill's dated the 1st", "the new SIM's arriving on the 21st").

    Only with no word against a day but the past, what the caller has or a limit, and nothing pointing back at
    a day ("that day", "then"): "the 26th, I had the dentist then" is no aside.
    """
    n = signals.norm(clause)
    if not set(signals.doubts(clause)) <= {"past", "state", "limit"} or signals.ANAPHORA.search(n):
        return False
    found = extract_constraints(clause, reference)
    if not found:
        # no day at all: only a past tense clause ("nobody got back to me", "I was told to wait")
        return "past" in signals.doubts(clause) and not signals.TIME_WORD.search(n)
    if all(c.end is not None and c.end < reference for c in found):
        return True
    # a thing's date, not asked for ("can you cancel my subscription on the 31st" asks for it)
    return not signals.asks(clause) and all(
        c.statement is StatementKind.EVENT and c.subject in (DateSubject.CHARGE_PERIOD, DateSubject.NONE)
        for c in found)


def _without_asides(s: SaidDates, reference: date) -> tuple[str, tuple[DateConstraint, ...]]:
    """A caller's words without their asides (see :func:`_aside`), and the dates read from what is left."""
    pieces = signals.clauses(s.text)
    asides = [p for p in pieces if _aside(p, reference)]
    if not asides:
        return s.text, s.constraints
    spans = {(c.kind, c.start, c.end, c.weekday) for p in asides for c in extract_constraints(p, reference)}
    kept = ", ".join(p for p in pieces if p not in asides)
    return kept, tuple(c for c in s.constraints if (c.kind, c.start, c.end, c.weekday) not in spans)


def _last_naming(said: Sequence[SaidDates], d: date, reference: date) -> int:
    """The turn of the caller's last request in ``said`` that names ``d`` in their own words (0 if none).

    Naming: a clause whose days are only ``d`` (or its bare day number, "the 29th", with no month), with no word
    against it (negation, absence, a limit, where the caller is), in a line that asks for it or answers the
    agent's question for a day; a hedge or a correction to it is still naming ("the 9th, maybe", "make it the
    11th instead"). "the 9th" answering "what day does she land?" names an event, not the call. The last
    utterance (the yes) also names ``d`` when it echoes the day just proposed by its number or weekday ("yeah
    friday the elevent").
    """
    found_turn = 0
    for i, s, agents in _replies(said):
        echo = i == len(said) - 1 and bool(s.constraints) and _echoes(s.text, s.constraints, d)
        if echo or (_same_day(_first_choice(s.text, reference), d)
                    and (signals.asks(s.text) or _answers_a_question_for_a_day(agents))):
            found_turn = s.turn
    return found_turn


def _last_choice(said: Sequence[SaidDates], reference: date) -> tuple[int, str, tuple[date, bool]] | None:
    """The caller's last request of one day in ``said`` (any day): its turn, words and the day."""
    last = None
    for _i, s, agents in _replies(said):
        choice = _first_choice(s.text, reference)
        # said in answer to a question for a day, as a correction ("I'd rather the 11th"), or with a word of
        # booking ("put it the 11th"); "it's the October one that's wrong" chooses nothing
        if choice is not None and (_CHOOSING.search(signals.norm(s.text)) or "contrast" in signals.doubts(s.text)
                                   or _answers_a_question_for_a_day(agents)):
            last = (s.turn, s.text, choice)
    return last


_DAY_NAMED = re.compile(rf"\b\d{{1,2}}(?:th|st|nd|rd)\b|\bthe\s\d{{1,2}}\b|\b(?:{signals.WEEKDAY_WORDS})\b|\btoday\b"
                        r"|\btomorrow\b")
"""An ordinal ("the 9th", "the nine"), a weekday, today or tomorrow: what names one day (the normaliser writes
"the October one" as "the october 1", which names none)."""

_CHOOSING = re.compile(r"\b(?:call|ring|phone|book|put\s(?:it|me)|make\sit|move\sit|schedule|pencil|go\s(?:with|for)"
                       r"|rather|prefer|better|instead"
                       # "Friday then, Friday the 27th": a day settled on after what went before
                       rf"|(?:{signals.WEEKDAY_WORDS}|\d{{1,2}}th)\sthen)\b")
"""Words that make a day named a choice for the booking."""


def _first_choice(text: str, reference: date) -> tuple[date, bool] | None:
    """The single day the caller's own clauses name as a choice (hedged or corrected to it), and whether a month
    was named with it; None when no clause does, or they name different days."""
    days: set[tuple[date, bool]] = set()
    weekdays: set[date] = set()
    for clause in signals.clauses(text):
        n = signals.norm(clause)
        if _LEADING_NO.match(n):
            # "the 3rd, no actually the 4th": the days before are taken back, the day after the "no" is the choice
            days.clear()
            weekdays.clear()
            n = _LEADING_NO.sub("", n)
        if not signals.names_days(clause) or not set(signals.doubts(n)) <= {"hedge", "contrast"}:
            continue
        if not _DAY_NAMED.search(signals.norm(clause)):
            continue  # a month or a holiday alone ("the October one") is no one day
        found = extract_constraints(clause, reference)
        if found and all(c.kind is ConstraintKind.ON and not c.blocked and c.start == c.end and c.start is not None
                         for c in found):
            month_named = re.search(rf"\b(?:{_MONTHS})\b", signals.norm(clause)) is not None
            days.update((c.start, month_named) for c in found if c.start is not None)
            if _bare_weekday(clause):
                weekdays.update(c.start for c in found if c.start is not None)
    # "any day but Friday": the clause "Friday" is no choice when the whole reply rules that day out
    if days:
        against = [c for c in extract_constraints(text, reference) if c.blocked]
        days = {(day, m) for day, m in days if not any(c.covers(day) for c in against)}
    # "he says Friday then, Friday the 27th": a bare weekday beside a day on that weekday is that day
    numbered = {day.weekday() for day, _ in days if day not in weekdays}
    days = {(day, m) for day, m in days if day not in weekdays or day.weekday() not in numbered}
    return days.pop() if len(days) == 1 else None


def _same_day(choice: tuple[date, bool] | None, d: date) -> bool:
    """Whether a day the caller named is ``d``: the same date, or its bare day number with no month named."""
    if choice is None:
        return False
    day, month_named = choice
    return day == d or (day.day == d.day and not month_named)


_PINNED = re.compile(rf"\b(?P<wd>{signals.WEEKDAY_WORDS})\s(?:the\s)?(?P<n>\d{{1,2}})(?:th|st|nd|rd)\b"
                     rf"|\b(?P<n2>\d{{1,2}})(?:th|st|nd|rd)\s(?P<wd2>{signals.WEEKDAY_WORDS})\b")
"""A weekday said with a day number ("monday the 30th", "the 30th monday")."""


def _next_with_day(number: int, reference: date) -> date | None:
    """The first day numbered ``number`` on or after ``reference`` (within a year)."""
    year, month = reference.year, reference.month
    for _ in range(13):
        try:
            day = date(year, month, number)
        except ValueError:
            day = None
        if day is not None and day >= reference:
            return day
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return None


def _pinned(m: re.Match[str], reference: date) -> tuple[int, bool]:
    """A weekday said with a day number: the number, and whether the next day with that number is that weekday."""
    number = int(m["n"] or m["n2"])
    day = _next_with_day(number, reference)
    return number, day is not None and WEEKDAY_NAMES[day.weekday()].lower().startswith((m["wd"] or m["wd2"])[:3])


def _muddled(n: str, reference: date) -> bool:
    """Whether a normalised clause says a weekday with a day number that is not that weekday, and no month ("monday
    the 8th" when the 8th is a Tuesday): which day the caller means is not known."""
    return re.search(rf"\b(?:{_MONTHS})\b", n) is None and any(
        not _pinned(m, reference)[1] for m in _PINNED.finditer(n))


def _unpinned(n: str, d: date, reference: date) -> str:
    """A normalised clause with each weekday said with another day's number written as that number alone.

    "could you ring on monday the 30th" names the 30th, not every Monday: the weekday is pinned to the next day
    with that number (only when that day does fall on that weekday; "monday the 8th", when the 8th is a
    Tuesday, keeps its Monday). A weekday said with ``d``'s own number is kept.
    """
    def one(m: re.Match[str]) -> str:
        number, agrees = _pinned(m, reference)
        return f"the {number}th" if agrees and number != d.day else m.group(0)

    return _PINNED.sub(one, n)


def _offers(words: str, d: date, reference: date) -> bool:
    """Whether a clause only offers days, ``d`` among them, hedged at most ("the 14th might work or the 15th
    either"): every day read is one day asked for, and no word but a hedge is said of them."""
    found = extract_constraints(words, reference)
    return (bool(found) and set(signals.doubts(words)) <= {"hedge"} and not signals.OUT.search(signals.norm(words))
            and all(c.kind is ConstraintKind.ON and not c.blocked for c in found) and any(c.start == d for c in found))


def _names_the_day(words: str, d: date, reference: date) -> bool:
    """Whether a clause names ``d`` by its day number or its weekday ("the 9th is my dad's funeral", "Wednesdays I'm
    at the allotment"): a statement about that very day, which only a read-back of it answers.

    A correction *to* the day is not one: after the last word of contrast before the day ("no wait, the 1st is
    better", "I mean I can do the 4th instead") nothing is said against it.
    """
    n = _unpinned(signals.norm(words), d, reference)
    days = list(re.finditer(rf"\b{d.day}(?:th|st|nd|rd)?\b|\b{_weekday_stem(d)}", n))
    if not days or signals.speaks_for(words):
        return False  # "rest days are Fridays and Saturdays" names Saturday only to speak for it
    if _offers(words, d, reference):
        return False  # "the 14th might work, or the 15th": the day offered, not spoken against
    before = n[: days[-1].start()]
    turns = list(signals.CONTRAST.finditer(before))
    if turns:
        after = n[turns[-1].start():]
        if not any(p.search(after) for p in (signals.NEGATION, signals.UNAVAILABLE, signals.STATE)):
            return False
    return True


def _bare_weekday(text: str) -> bool:
    """Whether ``text`` names a day only by its weekday: no day number, no month ("Monday", "on the Tuesday")."""
    n = signals.norm(text)
    return (re.search(rf"\b(?:{signals.WEEKDAY_WORDS})\b", n) is not None
            and re.search(r"\d", n) is None and re.search(rf"\b(?:{_MONTHS})\b", n) is None)


def _proposes(constraints: Sequence[DateConstraint], d: date, text: str = "") -> bool:
    """Whether agent lines propose ``d``: they name that day, and any other span they name holds it.

    A limit the agent restates that ``d`` keeps ("so not the week of the 23rd. How about the 3rd?", "you're away
    till the 30th. Could we say the 3rd?") is no other day offered; the first slot named ("the earliest we have is
    Thursday the 3rd") names that day.
    """
    first_slot = _FIRST_SLOT.search(signals.norm(text)) is not None
    named = [c for c in constraints if (c.start == d and c.end == d)
             or (first_slot and c.kind is ConstraintKind.AFTER and c.start == d)]
    return bool(named) and all(
        (c.start == d and c.end == d) or c in named
        or (not c.blocked and c.weekday is None and c.kind not in _LIMIT_KINDS and c.contains(d))
        or ((c.blocked or c.kind in _LIMIT_KINDS) and c.allows(d))
        for c in constraints
    )


_FIRST_SLOT = re.compile(r"\b(?:earliest|first\s(?:available|free|slot|opening)|next\s(?:available|free|slot|opening)"
                         r"|soonest)\b")
"""The agent naming its first free slot: "the earliest we have is Thursday the 3rd"."""


def _echoes(text: str, own: Sequence[DateConstraint], d: date) -> bool:
    """Whether a yes's own dates only repeat ``d`` as just proposed: none, the day itself, or its bare day number
    or bare weekday ("aye, the 29th", "yeah Friday"). Another day, a month or a holiday named is not an echo."""
    n = signals.norm(text)
    if _RELATIVE.search(n):
        return False  # "yes, the day after", "great, next Thursday", "yes, tomorrow": another day
    if not own:
        return not signals.SPAN_WORD.search(n)
    has_month = bool(re.search(rf"\b(?:{_MONTHS})\b", n))
    has_number = bool(re.search(r"\b\d{1,2}(?:th|st|nd|rd)?\b", n))
    weekdays = {w for w, name in enumerate(WEEKDAY_NAMES) if re.search(rf"\b{name.lower()[:3]}", n)}
    for c in own:
        if c.kind is not ConstraintKind.ON or c.start is None or c.blocked:
            return False
        if c.start == d:
            continue
        if has_month or (weekdays and weekdays != {d.weekday()}):
            return False
        if has_number and c.start.day != d.day:
            return False
        if not has_number and weekdays != {d.weekday()}:
            return False  # an echo names the day's number or its weekday ("Christmas Eve" is neither)
    return True


def _read_back(said: Sequence[SaidDates], index: int) -> str:
    """What the agent quoted of the caller (in double quotes) in the lines ``said[index]`` answers, or ""."""
    quoted: list[str] = []
    i = index - 1
    while i >= 0 and said[i].kind is EntryKind.AGENT:
        quoted[:0] = [m.group(1) or m.group(2) for m in signals.QUOTED.finditer(said[i].text)]
        i -= 1
    return " | ".join(quoted)


_NOTHING_ELSE = re.compile(
    r"\b(?:no|nope|nah)\b[\s,.!]*(?=(?:that's|thats|that\sis|nothing|thanks|thank|i'm\sgood|all\sgood))", re.IGNORECASE)
"""A "no" that only answers "anything else?" ("no, that's everything", "no thanks")."""


def _with_asked(said: Sequence[SaidDates], before: str) -> Iterator[tuple[SaidDates, str]]:
    """Each utterance with the agent's words just before it ("" when the caller spoke last)."""
    asked = ""
    for s in said:
        yield s, asked
        asked = s.text if s.kind is EntryKind.AGENT else ""


_ASKS_THE_TIME = re.compile(r"\b(?:what\stime|any\s(?:particular\s)?time|time\sof\sday|best\stime|morning|afternoon"
                            r"|evening|am|pm|o'clock|lunch\w*)\b")
"""An agent's question about the hour of the day booked ("Any particular time?", "Morning or afternoon?")."""
_AN_HOUR = re.compile(r"(?:#num|\b\d{1,2}(?!\d|th\b))(?:[:.]\d\d)?|\b(?:morning|afternoon|evening|lunch\w*|noon|midday"
                      r"|tea\s?time|first\sthing|any\s?time|after\s(?:work|school))\b")
"""An hour or a part of the day ("after five", "2 pm", "afternoon", "first thing")."""


def _names_the_hour(text: str, asked: str) -> bool:
    """Whether a reply only gives the hour the agent asked for: "After five, when I finish the work" answering "Any
    particular time?" names no day, doubts nothing, and says what the caller has on only of the hours."""
    if "?" not in asked or not _ASKS_THE_TIME.search(signals.norm(asked)):
        return False
    n = signals.norm(text)
    return (_AN_HOUR.search(n) is not None and not signals.SPAN_WORD.search(n) and not signals.ANAPHORA.search(n)
            and set(signals.doubts(text)) <= {"absence", "state"})


_CONTACT = re.compile(r"\b(?:cell|mobile|landline|phone|number|email|e-mail|text|whatsapp|voicemail)\b")


def _about_when(text: str) -> str:
    """``text`` without its clauses about how to reach the caller ("Cell though", "but ring the landline"): no time
    word and no doubt but a "but" or "though", so their contrast is about the number, not the day."""
    return ", ".join(c for c in signals.clauses(text) if not (
        _CONTACT.search(signals.norm(c)) and not signals.has_time_word(c) and set(signals.doubts(c)) <= {"contrast"}))


_REACHABLE = re.compile(
    r"\b(?:i'll|i\swill|i'm|i\sam|we'll|we\swill|we're|we\sare)\s(?:[\w']+\s){0,3}?(?:in|home|around|about|free|available)"
    r"(?=\s?(?:$|[,.!]|all\sday|that\sday|then|on\sthe\sday|anyway|for\s(?:it|the\scall)))"
    r"|\b(?:waiting|sat|sitting)\sby\sthe\sphone\b|\bkeep\s(?:my|the)\sphone\son\b"
)
"""Words of being in for the call: "I'll make sure I'm in", "I'll be home that day", "I'll keep my phone on"."""
_POINTER = re.compile(r"\b(?:that\sday|that\sdate|then|on\sthe\sday|all\sday)\b")
_HOUR_ASKED = re.compile(r"\bwhat\s(?:time|hour)\b|\b(?:when|what\stime)\sroughly\b")


def _settled_words(text: str) -> bool:
    """Whether a reply after the yes, naming no day, speaks only of the day settled: being in for the call, "talk
    then", or which hour ("what time roughly?"). No negation and no word of doubt but where the caller will be."""
    n = signals.norm(text)
    doubt = set(signals.doubts(text))
    if signals.NEGATION.search(n) or (signals.TIME_WORD.search(_POINTER.sub(" ", n)) and not _HOUR_ASKED.search(n)):
        return False
    if _REACHABLE.search(n):
        return doubt <= {"state"}
    if _HOUR_ASKED.search(n):
        return doubt <= {"hedge"}
    return bool(_POINTER.search(n)) and not doubt


def _unsettles(s: SaidDates, d: date, reference: date, asked: str = "") -> bool:
    """Whether an utterance after the caller's yes could change the day: anything from the caller but an
    acknowledgement, a goodbye, an aside about something else (see :func:`_aside`) or the hour the agent asked
    for; from the agent, another day named."""
    if s.kind is EntryKind.AGENT:
        # The agent restating the day ("Tuesday the 1st is booked") changes nothing; naming another day might.
        return any(not (c.start == d and c.end == d) for c in s.constraints)
    text, own = _without_asides(s, reference)
    if not text:
        return False  # "I rang twice last week and nobody called": what happened
    if not own and _names_the_hour(text, asked):
        return False  # "after five, when I finish work", answering "any particular time?"
    # "no, that's everything" answers "anything else?": its "no" says nothing about the day.
    text = _NOTHING_ELSE.sub("", text)
    if not own and _settled_words(text):
        return False  # "I'll be in all day", "talk then", "what time roughly?": about the day settled
    if signals.only_acknowledges(text) or signals.doubts(_about_when(text)):
        return not signals.only_acknowledges(text)
    # No word of doubt: it unsettles only by naming a day other than this one ("cheers, Wednesday then" and "yes,
    # the home number, on the Tuesday" echo it; "my flatmate wants to change the name" names none).
    if any(not (c.start == d and c.end == d) and not echoes_day(text, c, d) for c in own):
        return True
    return bool(signals.TIME_WORD.search(signals.norm(text))) and not own


def _touching(said: Sequence[SaidDates], d: date, reference: date) -> list[Citation]:
    """The caller's clauses that say anything about ``d`` other than a firm request of it.

    A clause touches ``d`` when a date read from it holds ``d``, it names ``d``'s weekday or month (without a day
    number), it points back ("then", "that day"), it speaks of other days too ("only", "except", "the whole
    week"), or it names a day or span the rules could not read. "Thursdays are my golf day", "I'll be in Spain on
    the 26th" and "26th? no." all touch the 26th; "I rang on the 14th" does not.
    """
    out: list[Citation] = []
    for _i, s, agents in _replies(said):
        offered = _answers_a_question_for_a_day(agents)
        named_d = False  # the clause before named ``d`` and no other day
        for clause in signals.clauses(s.text):
            cite, named_d = _clause_touches(clause, s.text, d, reference, offered, named_d)
            if cite:
                out.append(Citation(s.turn, clause))
    return out


@lru_cache(maxsize=16384)
def _clause_touches(clause: str, whole: str, d: date, reference: date, offered: bool,
                    named_d: bool) -> tuple[bool, bool]:
    """Whether one caller clause (of the utterance ``whole``) touches ``d`` (see :func:`_touching`), and whether it
    names ``d`` and no other day (for the clause after it). Cached: the contract reads every clause again at each
    date-bearing action."""
    weekday = _weekday_stem(d)
    month = d.strftime("%B").lower()
    n = signals.norm(clause)
    spans = signals.names_days(clause)
    anaphora = signals.ANAPHORA.search(n) is not None
    here = extract_constraints(clause, reference) if spans else []
    ready_by = anaphora and _ready_by_then(n, here, d, named_d)
    after = bool(here) and _names_only(here, d)
    if ready_by:
        if not here:
            return False, after  # "the 21st. The shop's quieter by then": a reason the day named suits
        anaphora = False
    if not spans and not anaphora:
        return False, after
    doubts = set(signals.doubts(clause)) - ({"limit"} if ready_by else set())
    if "past" in doubts and not doubts & {"negation", "absence", "state"}:
        return False, after  # what happened: "it was off from the 2nd", "I've had it since March"
    if offered and _only_days(n) and re.search(rf"\b{weekday}|\b{d.day}th\b", _unpinned(n, d, reference)):
        return False, after  # "so Tuesdays or Thursdays", answering "when works?": the days offered, ``d`` too
    if signals.speaks_for(clause) and not signals.ONLY.search(n):
        return False, after  # "rest days are Fridays and Saturdays", "the 1st is still fine": for the days it names
    found = extract_constraints(clause, reference)
    if found and all(c.end is not None and c.end < reference for c in found) and (
            doubts & {"negation", "absence", "state"}) and any(
            c.start is not None and c.start.day == d.day for c in found):
        found = []  # "I told you the 26th was a no go": this day's number read as a past day, said against
    if (found and doubts <= {"hedge"} and signals.FREE.search(n) and any(c.covers(d) for c in found)
            and all(c.kind is ConstraintKind.ON and not c.blocked for c in found)):
        return False, after  # "the 14th might work or the 15th": days offered, ``d`` among them, nothing against it
    if found and _names_only(found, d) and (doubts <= {"hedge", "contrast"} or (
            _LEADING_NO.match(n) and set(signals.doubts(_LEADING_NO.sub("", n))) <= {"hedge", "contrast"})):
        return False, after  # a request of this very day, hedged or corrected ("the 2nd I guess", "make it the 2nd")
    risky = bool(doubts & {"negation", "absence", "limit", "state"})
    # Every Thursday, or the caller's November: "Thursdays are my golf day", "I'm away in November".
    recurring = re.search(rf"\b(?:every|each|most|all)\s{weekday}|\b{weekday}\w*s\b", n) is not None
    month_named = re.search(rf"\b{month}\b", n) is not None and not re.search(r"\b\d{1,2}th\b", n)
    # "monday the 30th" names the 30th: it says nothing of another Monday
    singular = re.search(rf"\b{weekday}", _unpinned(n, d, reference)) is not None and not recurring
    # A stretch from a day named ("in on the 7th for five days") or a return after this day ("back from
    # Australia on the 13th"): the rules read one day, the caller is away for more.
    # the rules read the stretch themselves ("in hospital from the 23rd for five days"): no need to guess
    stretch = any(c.blocked and c.kind is ConstraintKind.RANGE and c.start is not None and c.end is not None
                  and c.end > c.start for c in found)
    spread = bool(found) and (
        (signals.DURATION.search(n) is not None and not stretch
         and any(c.start is not None and 0 <= (d - c.start).days <= 31 for c in found))
        or (signals.RETURN.search(n) is not None and signals.COMING.search(signals.norm(whole)) is not None
            and any(c.start is not None and 0 < (c.start - d).days <= 62 for c in found)
            # "going on the 5th and not back till the 12th": the rules read when the time away starts
            and not any(c.blocked and c.kind is ConstraintKind.RANGE and c.start is not None and c.start > d
                        for c in found)))
    if spread:
        return True, after
    touches = (
        any(c.covers(d) for c in found)
        or recurring or month_named
        or (singular and risky)
        # "not Monday the 8th" when the 8th is a Tuesday: the Monday the 7th or Tuesday the 8th
        or (risky and _muddled(n, reference) and re.search(rf"\b{d.day}th\b|\b{weekday}", n) is not None)
        or anaphora
        or signals.ONLY.search(n) is not None
        # a day or span the rules could not read, said with a limit or an absence, that could be this day
        or (not found and risky and not _other_days_only(n, d))
    )
    return touches and not _understood_and_allowed(clause, found, d, reference), after



_LEADING_NO = re.compile(
    r"^\W*(?:no|nah|nope|naw)\W+(?=(?:(?:actually|wait|sorry|hang\son|i\smean|rather|make\sit)\W+)*"
    r"(?:the\s)?\d{1,2}th\b)")
"""A "no" that opens a correction to the day named straight after it ("no actually the 4th"): it takes back the
day before, not this one."""
_BY_THEN = re.compile(r"\b(?:by|before)\s(?:\w+\s)?then\b")
_READY = re.compile(r"\b(?:done|finished|sorted|ready|over|quieter|calmer|settled|back|home|free|paid|wrapped\sup)\b")


def _ready_by_then(n: str, here: Sequence[DateConstraint], d: date, named_d: bool) -> bool:
    """Whether "by then" in a normalised clause points at ``d``, the day the caller has just named, to say why it
    suits ("Friday the 27th works, roof's done by then"; "the 21st. The shop's quieter by then"): something ready by
    that day, not a limit on it. Any other limit, pointer back, or word of doubt leaves the clause as it was."""
    if not _BY_THEN.search(n):
        return False
    rest = _BY_THEN.sub(" ", n)
    if (signals.ANAPHORA.search(rest) or signals.LIMIT_WORD.search(rest) or not _READY.search(rest)
            or set(signals.doubts(rest)) - {"hedge", "contrast"}):
        return False
    return _names_only(here, d) if here else named_d


_LIST_WORDS = re.compile(r"\b(?:so|or|and|then|either|the|on|any|a|well|um|uh|er|erm|like|maybe|perhaps|probably"
                         r"|only|just|mostly|usually|normally|best|ideally|preferably)\b|[,.;:!?'-]")


def _only_days(n: str) -> bool:
    """Whether a normalised clause is only a list of days ("so tuesdays or thursdays", "maybe the 14th or the 15th"):
    nothing is said of them but that they are offered."""
    rest = _LIST_WORDS.sub(" ", signals.SPAN_WORD.sub(" ", n))
    return signals.SPAN_WORD.search(n) is not None and not rest.strip()


def _weekday_stem(d: date) -> str:
    """The first three letters of ``d``'s weekday ("thu"): every spelling callers and recognisers use starts so."""
    return WEEKDAY_NAMES[d.weekday()].lower()[:3]


def _other_days_only(n: str, d: date) -> bool:
    """Whether the only days a normalised clause names are weekdays or months other than ``d``'s."""
    words = [m.group(0) for m in signals.SPAN_WORD.finditer(n)]
    weekday, month = _weekday_stem(d), d.strftime("%B").lower()[:3]
    names = [w for w in words if re.fullmatch(rf"(?:{signals.WEEKDAY_WORDS})", w)
             or re.fullmatch(rf"(?:{signals.MONTH_WORDS})", w)]
    return bool(words) and len(names) == len(words) and not any(w.startswith((weekday, month)) for w in names)


def _understood_and_allowed(clause: str, found: Sequence[DateConstraint], d: date, reference: date) -> bool:
    """Whether the rules read the days of ``clause`` and, read with the clause's own words, they allow ``d``.

    The rules give the span; whether the span is when the caller can or cannot be reached is read again here
    from broad word classes: absence or negation words, or the caller saying where they are or what they have
    on ("I've got a refit all next week", "I'll be in Spain on the 26th") without a word of being free, make it
    a span they cannot be reached in. "then" and "that week" point at days the clause does not name: never read.
    """
    n = signals.norm(clause)
    named = {day for c in found for day in (c.start, c.end) if day is not None}
    if not found or (signals.ANAPHORA.search(n) and len({(c.start, c.end) for c in found}) != 1 and len(named) != 1):
        # "then" / "that week" point at a day this clause does not name (one it names: that one, however many
        # limits it sets on it: "not before the 14th, I'm away until then")
        return False
    if _muddled(n, reference):
        return False  # "I can't do Monday the 8th" when the 8th is a Tuesday: the Monday or the 8th, not known
    free = signals.FREE.search(n) is not None and signals.NEGATION.search(n) is None
    away = (signals.NEGATION.search(n) is not None or signals.UNAVAILABLE.search(n) is not None
            or (signals.STATE.search(n) is not None and not free))
    windows = [c for c in found if not c.blocked and c.kind not in _LIMIT_KINDS]
    if signals.ONLY.search(n) and windows and not any(c.covers(d) for c in windows):
        return False  # "Monday or nothing", "it has to be a Monday": the days named are the only ones
    weekday = _weekday_stem(d)
    if away and re.search(rf"\b(?:every|each|on|most)\s{weekday}|\b{weekday}\w*s\b", n):
        return False  # "I'm at the allotment every Thursday": every one of them, not the date the rules picked
    for c in found:
        if c.kind in _LIMIT_KINDS or c.blocked:
            if not c.allows(d):
                return False
        elif away and c.covers(d):  # away inside the span
            return False
    # Windows asked for or offered ("the 14th might work or the 15th"): ``d`` must be one of them.
    return away or not windows or any(c.covers(d) for c in windows)


def _binding_statements(said: Sequence[SaidDates], binding: DateBinding) -> list[Citation]:
    """The caller's statements that could bind the day: limits the rules read, and time words the rules could not."""
    out = []
    for s in said:
        if s.kind is not EntryKind.CALLER:
            continue
        admitted = [c for c in s.constraints if binding.admits(c)]
        limits = [c for c in admitted if not (c.kind is ConstraintKind.ON and not c.blocked)]
        # Whatever the rules made of it (nothing, or a date about something else), a time word with an absence,
        # a limit or a negation could still bind: "my father-in-law arrives on the 7th, that's the week gone".
        if limits or (not admitted and signals.could_bind(s.text)):
            out.append(Citation(s.turn, s.text))
    return out
