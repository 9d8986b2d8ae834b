"""Seeded long billing calls that end in a callback, each with a clean, a bad and (when corrected) a stale twin.

A call runs 30 to 60 utterances, caller first and strictly alternating: greeting, account lookup,
invoice talk, the caller's availability constraint stated early (sometimes changed later, sometimes
with a second one), small-talk and billing distractors full of month, week and day words, then a
``schedule_callback`` near the end, asked for by the caller or proposed by the agent and agreed to,
sometimes corrected before it is booked.

Every record is a call record (``../shared/docs/call-record.md``). Three twins share the turns and
differ only in the callback's ``date`` argument:

* ``clean`` (``expect: {}``): a weekday that meets every binding constraint, which the caller asked
  for or agreed to. ``expect_cite_turns`` lists the caller utterances that did;
* ``bad`` (id ``<clean>-bad-date``, ``expect: {"date_guard": "conflict"}``): a weekday that breaks
  one binding constraint (``broken`` says which) and meets the others; ``expect_cite_turns`` is
  where that constraint was said;
* ``stale`` (id ``<clean>-stale-date``, ``expect: {"date_guard": "superseded"}``), only when the
  caller corrected the date: the date they gave (or agreed to) and later replaced; it meets every
  binding constraint, so only the correction makes it wrong. ``expect_cite_turns``: the replaced and
  the replacing utterance.

The ground truth comes from this module's own date arithmetic (:mod:`datetime`) over the
constraints it chose before wording them; nothing is read back from the text, and the date engine
(:mod:`voice_agent.core.dates`) is never called. Wordings are drawn from many templates with random
fill (names, amounts, months, weekdays, cities, services, speech-recognition slips), and a date is
only ever worded in a form that names it unambiguously against the call's ``reference_date``.
Dates near a constraint's boundary (within a day of a date the caller named) are never chosen as a
clean, bad or stale value, so no label hangs on how "until" or "after" treats its end day.

Extra fields (call-record loaders ignore unknown fields): ``twin_role``, ``twin``,
``perturbation`` (``of``, ``kind``, ``action``, ``arg``), ``expect_verdict``, ``expect_cite_turns``
(utterance indices, numbered from 0 like ``stated_turn``), ``call_class``, ``flags``, ``traps``,
``broken``, ``constraints`` and ``distractors`` (the ground truth the words were made from).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

CALL_CLASSES: tuple[str, ...] = (
    "away_until", "not_before", "before", "no_weekday", "except_week", "except_day", "window", "changed",
)
"""The primary binding constraint of a call; ``changed``: stated early, then replaced by the caller."""

RuleKind = Literal["blocked_until", "not_before", "before", "no_weekday", "blocked_span", "blocked_day", "window"]

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
_ORDINAL_WORDS = (
    "", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
    "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth",
    "twentieth", "twenty-first", "twenty-second", "twenty-third", "twenty-fourth", "twenty-fifth", "twenty-sixth",
    "twenty-seventh", "twenty-eighth", "twenty-ninth", "thirtieth", "thirty-first",
)
_CARDINAL_STEMS = {4: "four", 6: "six", 7: "seven", 8: "eigh", 9: "nine", 10: "ten", 11: "eleven", 13: "thirteen",
                   14: "fourteen", 15: "fifteen", 16: "sixteen", 17: "seventeen", 18: "eighteen", 19: "nineteen"}
"""Days whose spoken ordinal a recogniser splits as "fourteen th"."""

CALLER_NAMES = ("Maria", "James", "Priya", "Tom", "Aisha", "Wei", "Sean", "Olga", "Kwame", "Lucy", "Diego", "Hannah",
                "Raj", "Fatima", "Bill", "Yuki", "Ngozi", "Pete", "Sofia", "Marek", "Chloe", "Ahmed", "Grace", "Luis")
AGENT_NAMES = ("Sam", "Alex", "Jordan", "Robin", "Casey", "Morgan", "Jamie", "Taylor", "Riley", "Dana")
CITIES = ("Denver", "Boston", "Chicago", "Leeds", "Glasgow", "Phoenix", "Dallas", "Cork", "Lisbon", "Atlanta",
          "Toronto", "Manchester", "Seattle", "Austin", "Bristol", "Memphis", "Dublin", "Houston", "Cardiff", "Ottawa")
SERVICES = ("the streaming add-on", "CloudVault Pro", "the sports package", "the international calling bundle",
            "the router rental", "the premium support plan", "the family plan", "the data booster",
            "the device insurance", "the HD channels pack", "the landline bundle", "the cloud backup plan")
PROBLEMS = (
    "I think I've been charged twice for {service}", "my bill's gone up and nobody told me why",
    "there's a charge for {service} I never asked for", "I was promised a credit that never turned up",
    "my direct debit went out twice", "the last invoice is way higher than it should be",
    "I cancelled {service} but I'm still paying for it",
)
AWAY_REASONS = ("I'm having an operation", "I'm at my mum's and there's no signal", "I'm on a course with my phone off",
                "I'm working offshore", "we're on a cruise", "I'm in hospital", "I'm out of the country",
                "I'm on a silent retreat", "I'm camping up north with no signal")
DAY_REASONS = ("I've got a hospital appointment", "that's my mum's funeral", "I'm in court all day",
               "it's my son's graduation", "I'm on jury duty that day", "I'm moving house that day",
               "I've got the dentist and then work", "I'm at a wedding")
WEEKDAY_REASONS = ("I work a double shift", "that's my dialysis day", "I'm at my allotment all day",
                   "I have the kids all day", "I volunteer at the food bank", "I'm on the early shift",
                   "I visit my dad in the care home")


# -- dates and how to say them --------------------------------------------------------------------------------------


def ordinal(n: int) -> str:
    """``14th``, ``1st``, ``22nd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def monday_of(d: dt.date) -> dt.date:
    """The Monday of ``d``'s Monday-to-Sunday week."""
    return d - dt.timedelta(days=d.weekday())


def next_with_day(reference: dt.date, day: int) -> dt.date | None:
    """The first date after ``reference`` whose day of the month is ``day`` (what "the 14th" names)."""
    year, month = reference.year, reference.month
    for _ in range(3):
        try:
            candidate = dt.date(year, month, day)
        except ValueError:
            candidate = None
        if candidate is not None and candidate > reference:
            return candidate
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return None


def bare_ordinal_names(d: dt.date, reference: dt.date) -> bool:
    """Whether "the Nth" on its own names ``d``: within four weeks, and not the reference's own day number."""
    return 0 < (d - reference).days <= 27 and d.day != reference.day and next_with_day(reference, d.day) == d


def _spelled(n: int) -> str:
    return _ORDINAL_WORDS[n]


def say_day(d: dt.date, reference: dt.date, rng: random.Random, *, plain: bool = False) -> str:
    """A spoken form that names ``d`` and nothing else, against ``reference``.

    Args:
        d: The day (after ``reference``).
        reference: The call's today.
        rng: Chooses among the forms that fit.
        plain: Only the unmistakable forms (month and day, weekday and day), for agent lines.
    """
    days = (d - reference).days
    weekday = WEEKDAYS[d.weekday()]
    month = MONTHS[d.month - 1]
    forms: list[tuple[str, float]] = [
        (f"{month} {ordinal(d.day)}", 1.0), (f"the {ordinal(d.day)} of {month}", 1.0),
        (f"{weekday}, {month} {ordinal(d.day)}", 0.6),
    ]
    if not plain:
        forms += [(f"{month} the {_spelled(d.day)}", 0.4), (f"the {_spelled(d.day)} of {month}", 0.4)]
    if bare_ordinal_names(d, reference):
        forms += [(f"{weekday} the {ordinal(d.day)}", 1.5)]
        if not plain:
            forms += [(f"the {ordinal(d.day)}", 2.0), (f"the {_spelled(d.day)}", 1.0),
                      (f"the {d.day} {ordinal(d.day)[-2:]}", 0.3)]
            if d.day in _CARDINAL_STEMS:
                forms.append((f"the {_CARDINAL_STEMS[d.day]} th", 0.2))
    if not plain:
        if days == 1:
            forms.append(("tomorrow", 1.0))
        if days == 2:
            forms.append(("the day after tomorrow", 0.6))
        if 1 <= days <= 6:
            forms.append((weekday, 1.0))
            if monday_of(d) == monday_of(reference):
                forms.append((f"this {weekday}", 0.8))
        if monday_of(d) == monday_of(reference) + dt.timedelta(days=7):
            forms += [(f"{weekday} next week", 1.0), (f"next week on {weekday}", 0.4)]
            if d.weekday() <= reference.weekday():
                forms.append((f"next {weekday}", 0.8))
        if 1 <= days - 7 <= 6:
            forms += [(f"a week on {weekday}", 0.4), (f"a week from {weekday}", 0.3)]
        if days == 7:
            forms.append(("a week today", 0.4))
        if days == 8:
            forms.append(("a week tomorrow", 0.4))
    texts, weights = zip(*forms, strict=True)
    chosen: str = rng.choices(texts, weights=weights)[0]
    return chosen


def say_week(monday: dt.date, reference: dt.date, rng: random.Random) -> str:
    """A spoken form of the Monday-to-Sunday week starting ``monday``."""
    this = monday_of(reference)
    forms = [f"the week of {say_day(monday, reference, rng, plain=True)}"]
    if monday > reference and bare_ordinal_names(monday, reference):
        forms += [f"the week of the {ordinal(monday.day)}", f"the week of the {ordinal(monday.day)}"]
    if monday == this + dt.timedelta(days=7):
        forms += ["next week", "next week", "the whole of next week"]
    if monday == this + dt.timedelta(days=14):
        forms += ["the week after next"]
    return rng.choice(forms)


def asr_slips(text: str, rng: random.Random) -> str:
    """The same words as a speech recogniser might hand them over: no capitals or punctuation, split ordinals..."""
    out = text
    if rng.random() < 0.7:
        out = out.lower()
    if rng.random() < 0.6:
        out = re.sub(r"[.,!?;:]", "", out)
    if rng.random() < 0.3:
        out = out.replace("'", "")
    out = re.sub(r"\b(\d{1,2})(st|nd|rd|th)\b", lambda m: f"{m.group(1)} {m.group(2)}" if rng.random() < 0.5
                 else m.group(0), out)
    out = re.sub(r"\bweek\b", lambda m: "weak" if rng.random() < 0.3 else m.group(0), out)
    out = re.sub(r"\bfourth\b", lambda m: "forth" if rng.random() < 0.5 else m.group(0), out)
    if rng.random() < 0.3:
        out = rng.choice(("um ", "uh ", "so ", "yeah ")) + out
    return out


# -- the ground truth: constraints ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One constraint the caller states, as the generator means it (not as any reader reads it).

    Attributes:
        kind: ``blocked_until`` (blocked on and before ``end``), ``not_before`` (allowed from ``start``),
            ``before`` (allowed up to ``end``), ``no_weekday``, ``blocked_span`` / ``blocked_day``
            (``start``..``end`` blocked), ``window`` (only ``start``..``end`` allowed).
        start: First day of the span, inclusive.
        end: Last day of the span, inclusive.
        weekday: For ``no_weekday``, 0 = Monday.
        named: The dates the caller named; no clean, bad or stale date lies within a day of one.
    """

    kind: RuleKind
    start: dt.date | None = None
    end: dt.date | None = None
    weekday: int | None = None
    named: tuple[dt.date, ...] = ()

    def allows(self, d: dt.date) -> bool:
        """Whether a callback on ``d`` keeps to this constraint."""
        if self.kind == "no_weekday":
            return d.weekday() != self.weekday
        inside = (self.start is None or d >= self.start) and (self.end is None or d <= self.end)
        if self.kind in ("blocked_until", "blocked_span", "blocked_day"):
            return not inside
        return inside

    def clear_of(self, d: dt.date) -> bool:
        """Whether ``d`` is more than a day away from every date the caller named (no boundary reading needed).

        A single ruled-out day has no boundary to read: every day is clear of it.
        """
        if self.kind == "blocked_day":
            return True
        return all(abs((d - n).days) >= 2 for n in self.named)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"kind": self.kind, "start": self.start.isoformat() if self.start else None,
                "end": self.end.isoformat() if self.end else None, "weekday": self.weekday,
                "named": [n.isoformat() for n in self.named]}


@dataclass
class Stated:
    """A constraint as said: the rule, the caller's words, the agent's reply, and whether it still binds."""

    rule: Rule
    text: str
    agent: str
    binding: bool = True
    turn: int = -1
    replaced_by: int | None = None


def _pick(rng: random.Random, options: Sequence[str], **fill: str) -> str:
    template = rng.choice(options)
    text = template.format(**fill)
    return text[0].upper() + text[1:] if template.startswith("{") else text


def _weekday_plural(w: int) -> str:
    return WEEKDAYS[w] + "s"


def _rule_away_until(rng: random.Random, ref: dt.date) -> Stated:
    x = ref + dt.timedelta(days=rng.randint(6, 20))
    said = say_day(x, ref, rng)
    text = _pick(rng, (
        "I'm away until {x}, so there's no point calling before then.",
        "Just so you know, I'm travelling for work until {x} and I can't take calls.",
        "I'm out of the country till {x} and my phone won't work over there.",
        "I won't be reachable until {x}, {reason}.",
        "I'm on holiday until {x}, so nobody will pick up.",
        "Heads up, I'm not around until {x}, {reason}.",
        "I'm off grid until {x}, so don't bother ringing before that.",
        "I'll be unreachable until {x}, {reason}.",
        "Oh, before I forget, I'm away till {x}.",
    ), x=said, reason=rng.choice(AWAY_REASONS))
    agent = _pick(rng, ("Noted, no calls before then.", "Thanks, I'll put that on the account.", "Got it.",
                        "Understood, I've made a note."))
    return Stated(Rule("blocked_until", end=x, named=(x,)), text, agent)


def _rule_not_before(rng: random.Random, ref: dt.date) -> Stated:
    x = ref + dt.timedelta(days=rng.randint(5, 18))
    said = say_day(x, ref, rng)
    after = rng.random() < 0.35
    if after:  # "until after X": X itself is out too
        text = _pick(rng, ("Please don't call me until after {x}.", "Don't ring me till after {x}, I'm snowed under.",
                           "Nothing until after {x}, please."), x=said)
        rule = Rule("not_before", start=x + dt.timedelta(days=1), named=(x,))
    else:
        text = _pick(rng, (
            "Please don't call me before {x}.", "Nothing before {x}, please.",
            "No sooner than {x}, I'm swamped until then.", "Not any earlier than {x}, if you don't mind.",
            "The earliest I can do is {x}.", "It can't be before {x}, {reason}.",
            "From {x} onwards is fine, not before.", "not before {x} please",
        ), x=said, reason=rng.choice(AWAY_REASONS))
        rule = Rule("not_before", start=x, named=(x,))
    agent = _pick(rng, ("OK, I'll make sure of that.", "Noted.", "No problem, I'll keep that in mind.", "Sure."))
    return Stated(rule, text, agent)


def _rule_before(rng: random.Random, ref: dt.date) -> Stated:
    x = ref + dt.timedelta(days=rng.randint(12, 24))
    said = say_day(x, ref, rng)
    inclusive = rng.random() < 0.4
    if inclusive:
        text = _pick(rng, ("It needs to be no later than {x}, I'm moving abroad after that.",
                           "I need the call by {x} at the latest, then I'm gone for a month.",
                           "No later than {x} please, after that I'm unreachable."), x=said)
        rule = Rule("before", end=x, named=(x,))
    else:
        text = _pick(rng, ("It has to be before {x}, I'm moving house after that and won't have a phone line.",
                           "Any day before {x} works, after that I'm away for a month.",
                           "Can it be sometime before {x}? After that I'm travelling and can't take calls.",
                           "It'll need to be before {x}, {reason} from then."), x=said,
                      reason=rng.choice(AWAY_REASONS))
        rule = Rule("before", end=x - dt.timedelta(days=1), named=(x,))
    agent = _pick(rng, ("Understood.", "That should be fine.", "OK, noted.", "Right, I'll keep it before then."))
    return Stated(rule, text, agent)


def _rule_no_weekday(rng: random.Random, ref: dt.date, avoid: int | None = None) -> Stated:
    # Every wording is about the weekday every week ("Tuesdays", "a Tuesday"), never "Tuesday" alone, which
    # could mean only the coming one.
    w = rng.choice([i for i in range(5) if i != avoid])
    text = _pick(rng, (
        "I can't do {ws}, {reason}.", "Any day but {ws}.", "Not on a {w}, please, {reason}.",
        "{ws} are no good for me, {reason}.", "Anything except a {w}, {reason}.", "I'm never home on {ws}.",
        "just not {ws} yeah", "Please avoid {ws}, {reason}.", "I can never do a {w}.",
    ), w=WEEKDAYS[w], ws=_weekday_plural(w), reason=rng.choice(WEEKDAY_REASONS))
    agent = _pick(rng, (f"No {_weekday_plural(w)}, got it.", "Noted.", "OK, I'll avoid that day.", "Sure thing."))
    return Stated(Rule("no_weekday", weekday=w), text, agent)


def _rule_except_week(rng: random.Random, ref: dt.date) -> Stated:
    monday = monday_of(ref) + dt.timedelta(days=7 * rng.randint(1, 3))
    said = say_week(monday, ref, rng)
    text = _pick(rng, (
        "Any time except {wk}, {reason}.", "Just not {wk}, {reason}.", "I'm away {wk}, so not then.",
        "{wk} is out, {reason}.", "anything but {wk}", "Avoid {wk} if you can, I really won't be able to talk.",
    ), wk=said, reason=rng.choice(AWAY_REASONS))
    agent = _pick(rng, ("OK, not that week.", "Noted.", "Right, I'll steer clear of that week."))
    end = monday + dt.timedelta(days=6)
    return Stated(Rule("blocked_span", start=monday, end=end, named=(monday, end)), text, agent)


def _rule_except_day(rng: random.Random, ref: dt.date) -> Stated:
    x = ref + dt.timedelta(days=rng.randint(3, 20))
    while x.weekday() >= 5:
        x += dt.timedelta(days=1)
    said = say_day(x, ref, rng)
    text = _pick(rng, (
        "Just not {x}, {reason}.", "Anything but {x}, {reason}.", "{x} is out, {reason}.",
        "Not {x} please, {reason}.", "Any day except {x}.", "The only day I can't do is {x}.",
    ), x=said, reason=rng.choice(DAY_REASONS))
    agent = _pick(rng, ("OK, not that day.", "Noted.", "Sure, I'll avoid that one."))
    return Stated(Rule("blocked_day", start=x, end=x, named=(x,)), text, agent)


def _rule_window(rng: random.Random, ref: dt.date) -> Stated:
    if rng.random() < 0.3:
        monday = monday_of(ref) + dt.timedelta(days=7 * rng.randint(1, 2))
        said = say_week(monday, ref, rng)
        text = _pick(rng, ("It'll have to be {wk}, that's the only time I'm home.",
                           "Only {wk} works for me, I'm away either side of it.",
                           "I'm only around {wk}, so it has to be then."), wk=said)
        end = monday + dt.timedelta(days=6)
        return Stated(Rule("window", start=monday, end=end, named=(monday, end)), text,
                      _pick(rng, ("OK, that week then.", "Noted.")))
    a = ref + dt.timedelta(days=rng.randint(3, 10))
    b = a + dt.timedelta(days=rng.randint(7, 13))
    sa, sb = say_day(a, ref, rng), say_day(b, ref, rng)
    if rng.random() < 0.5:  # "after A but before B": both named days are out
        text = _pick(rng, ("After {a} but before {b}, that's when I'm home.", "It has to be after {a} and before {b}.",
                           "Any time after {a} but before {b} please."), a=sa, b=sb)
        rule = Rule("window", start=a + dt.timedelta(days=1), end=b - dt.timedelta(days=1), named=(a, b))
    else:
        text = _pick(rng, ("Sometime between {a} and {b} would suit me, I'm away otherwise.",
                           "Any day from {a} to {b}, that's the only stretch I'm home.",
                           "I'm only free from {a} till {b}."), a=sa, b=sb)
        rule = Rule("window", start=a, end=b, named=(a, b))
    return Stated(rule, text, _pick(rng, ("OK, I'll keep it in that window.", "Noted.", "Got it.")))


_BUILDERS: dict[str, Callable[[random.Random, dt.date], Stated]] = {
    "away_until": _rule_away_until, "not_before": _rule_not_before, "before": _rule_before,
    "no_weekday": _rule_no_weekday, "except_week": _rule_except_week, "except_day": _rule_except_day,
    "window": _rule_window,
}


def _changed(rng: random.Random, ref: dt.date) -> tuple[Stated, Stated, str]:
    """An early constraint and the later one that replaces it, with the flavour of the change."""
    flavour = rng.choice(("back_early", "extended", "weekday_swap"))
    if flavour == "weekday_swap":
        first = _rule_no_weekday(rng, ref)
        assert first.rule.weekday is not None
        second_rule = _rule_no_weekday(rng, ref, avoid=first.rule.weekday).rule
        assert second_rule.weekday is not None
        text = _pick(rng, (
            "Actually, {old} are fine now, it's {new} I can't do.",
            "Sorry, I got that wrong earlier, {old} are OK, it's {new} that are bad.",
            "Change of plan with my shifts, {old} are fine, but not {new}.",
        ), old=_weekday_plural(first.rule.weekday), new=_weekday_plural(second_rule.weekday))
        return first, Stated(second_rule, text, "Thanks, I've updated that."), flavour
    first = _rule_away_until(rng, ref)
    assert first.rule.end is not None
    if flavour == "back_early":
        y = first.rule.end - dt.timedelta(days=rng.randint(4, 7))
        y = max(y, ref + dt.timedelta(days=2))
        said = say_day(y, ref, rng)
        text = _pick(rng, ("Good news, I'm back early, so anything after {y} is fine now.",
                           "Actually my trip got cut short, I'm home from {y}, so any day after that.",
                           "Update on the dates: I'm only away until {y} now."), y=said)
        return first, Stated(Rule("blocked_until", end=y, named=(y,)), text, "Great, I've changed that."), flavour
    z = first.rule.end + dt.timedelta(days=rng.randint(5, 9))
    said = say_day(z, ref, rng)
    text = _pick(rng, ("Bad news, my trip got extended, I'm away until {z} now.",
                       "Actually I'm going to be away longer, until {z}.",
                       "Sorry, change of plan, I won't be back until {z}, so nothing before then."), z=said)
    return first, Stated(Rule("blocked_until", end=z, named=(z,)), text, "OK, I've updated that."), flavour


# -- the call ---------------------------------------------------------------------------------------------------------


@dataclass
class _Beat:
    """One exchange: the caller's utterance and the agent's reply, with the roles they play."""

    caller: str
    agent: str
    role: str = "filler"
    slips: bool = True


@dataclass
class _Call:
    rng: random.Random
    ref: dt.date
    name: str
    agent_name: str
    account: str
    distractors: list[dict[str, Any]] = field(default_factory=list)
    used: set[str] = field(default_factory=set)


_UNITS = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def number_words(n: int) -> str:
    """``n`` (1..999) in words: ``one hundred and twelve``."""
    if n >= 100:
        rest = n % 100
        return f"{_UNITS[n // 100]} hundred" + (f" and {number_words(rest)}" if rest else "")
    if n < 20:
        return _UNITS[n]
    return _TENS[n // 10] + (f"-{_UNITS[n % 10]}" if n % 10 else "")


def _amount(rng: random.Random) -> str:
    whole = rng.randint(8, 140)
    if rng.random() < 0.5:
        return f"${whole}.{rng.choice(('99', '50', '00', '49'))}"
    return rng.choice((f"{whole} dollars", f"{number_words(whole)} pounds", f"{number_words(whole)} quid",
                       f"{number_words(whole)} ninety-nine"))


def _past_month(ref: dt.date, back: int) -> str:
    index = (ref.month - 1 - back) % 12
    return MONTHS[index]


def _filler(call: _Call) -> _Beat:
    rng, ref = call.rng, call.ref
    service, amt, amt2 = rng.choice(SERVICES), _amount(rng), _amount(rng)
    month, month2 = _past_month(ref, rng.randint(1, 2)), _past_month(ref, rng.randint(3, 4))
    pairs = (
        (f"Why is there a {amt} charge for {service}?", f"That's {service}. It was added on the {month} invoice."),
        (f"I never signed up for {service}.", "I can see it was added online. I'll note that you didn't authorise it."),
        ("Can you read me the last three payments?", f"Sure: {amt}, {amt2} and {_amount(rng)}, all by direct debit."),
        (f"Is the {month} invoice the one with the double charge?", f"Yes, that invoice shows {service} twice."),
        ("How much is my balance right now?", f"Your balance is {amt}."),
        ("Can I get all of that in writing?", "Yes, I'll email you a summary after the call."),
        ("Hang on, the dog's going mad, sorry.", "No problem, take your time."),
        ("Sorry, can you say that again?", "Of course. The duplicate charge is being reviewed."),
        ("Who am I speaking to, sorry?", f"My name's {call.agent_name}."),
        ("Will this affect my credit score?", "No, a billing dispute doesn't affect your credit score."),
        ("Can I switch to paying by card instead?", "Yes, I can change that once we've sorted the charge."),
        (f"I've been with you for {rng.randint(2, 15)} years, you know.", f"Thanks for staying with us, {call.name}."),
        ("Is there a cheaper plan?", f"There's the basic plan at {amt} a month, without {service}."),
        ("The app keeps logging me out as well.", "That's a known issue, reinstalling it usually fixes it."),
        ("Right, let me grab a pen.", "Sure, no rush."),
        ("Can you check nothing else was billed twice?", f"I've checked the last six invoices, only {service} was."),
        (f"What was the {month2} bill, out of interest?", f"The {month2} bill was {amt2}."),
        ("OK.", "Is there anything else on the bill that looks wrong?"),
        ("Is my email address still the same on there?", "Yes, it's the one ending in the same domain as before."),
        ("Does the refund go back to my card?", "It goes back to the account as a credit unless you ask otherwise."),
        ("Sorry, I'm on speaker, my hands are full.", "That's fine, I can hear you."),
        ("Why does this always happen to me?", "I'm sorry, it's frustrating. Let's get it fixed."),
        (f"Can you take {service} off altogether?", f"Yes, I can remove {service} from your next bill."),
        ("How long will the investigation take?", "Usually a few working days once it's opened."),
    )
    fresh = [p for p in pairs if p[0] not in call.used] or list(pairs)  # no line twice in a call while any is left
    caller, agent = rng.choice(fresh)
    call.used.add(caller)
    return _Beat(caller, agent)


def _dated_distractor(call: _Call, plan: _Plan, kind: str) -> _Beat:
    """A date-bearing line that binds nothing about the callback, its date chosen to tempt a misreading.

    A trip falls on the clean date or on another day every binding constraint allows (never the bad or stale one),
    so "you can still get me on my mobile" never contradicts a blocked day.
    """
    rng, ref, clean = call.rng, call.ref, plan.clean
    city, service = rng.choice(CITIES), rng.choice(SERVICES)
    if kind == "month_words":
        caller, agent = rng.choice((
            ("How come the fee rose this month?", f"The price of {service} went up this month."),
            ("Please make sure I'm not billed twice again next month.", "I'll add a note so next month's bill is "
                                                                         "checked."),
            (f"Last month it was {_amount(rng)} and this month it's {_amount(rng)}.", f"The difference is {service}."),
            ("Will the credit show up on next month's bill?", "Yes, it'll be on next month's statement."),
            ("The price went up at the start of the month without any warning.", "I'm sorry, you should have had a "
                                                                                  "letter."),
            ("the week before last I got two bills", "I can see both, one of them was sent in error."),
            ("This is the third month in a row it's gone up.", "I can see that, I'm sorry."),
            ("Sorry, it's been a crazy week.", "No worries at all."),
            ("The kids are off school this week, so it's chaos here.", "I can imagine!"),
            ("Is the discount still on for next month?", "Yes, it runs for the rest of the year."),
        ))
        call.distractors.append({"type": kind, "date": None})
        return _Beat(caller, agent, role="distractor")
    if kind == "trip":
        free = [d for d in _weekdays_between(ref + dt.timedelta(days=2), ref + dt.timedelta(days=35))
                if d not in (plan.bad, plan.stale) and all(s.rule.allows(d) for s in plan.stated if s.binding)]
        day = clean if rng.random() < 0.4 or not free else rng.choice(free)
        said = say_day(day, ref, rng)
        caller = _pick(rng, (
            "By the way, I'm flying to {c} on {d}, but I'll have my phone with me.",
            "I'll be in {c} on {d} for work, you can still get me on my mobile.",
            "We're driving up to {c} on {d} to see my mum, so money's tight with the trip.",
            "My flight to {c} is on {d}, that's partly why I want the money back.",
            "I'm at a wedding in {c} on {d}, and my phone's always on.",
        ), c=city, d=said)
        call.distractors.append({"type": "trip_same_day" if day == clean else "trip", "date": day.isoformat()})
        return _Beat(caller, _pick(rng, ("Sounds nice.", "Thanks, good to know.", "Lovely.", "OK.")), "distractor")
    if kind == "deadline":
        day = clean - dt.timedelta(days=rng.randint(2, 8)) if rng.random() < 0.7 else clean + dt.timedelta(days=3)
        day = max(day, ref + dt.timedelta(days=1))
        said = say_day(day, ref, rng)
        caller, agent = rng.choice((
            (f"I'll let you know by {said} whether I want to keep {service}.", "No rush."),
            (f"The next payment's due on {said}, isn't it?", "Yes, that's the next due date."),
            (f"I'll have the letter from the bank by {said}, I can send it then.", "That's fine, email it over."),
            (f"You've got until {said} to sort the refund, or I'm going to the ombudsman.",
             "I understand. We'll get it resolved."),
        ))
        kind_label = "deadline_before_callback" if day < clean else "deadline"
        call.distractors.append({"type": kind_label, "date": day.isoformat()})
        return _Beat(caller, agent, role="distractor")
    # an "until" limit on something else
    covering = rng.random() < 0.5
    day = clean + dt.timedelta(days=rng.randint(2, 6)) if covering else clean - dt.timedelta(days=rng.randint(2, 6))
    day = max(day, ref + dt.timedelta(days=1))
    said = say_day(day, ref, rng)
    caller, agent = rng.choice((
        (f"The promo rate only runs until {said}, right?", "Yes, the promotional rate ends then."),
        (f"My free trial of {service} runs until {said}.", "That's right, it becomes paid after that."),
        (f"We've got a rental van till {said} for the move, that's another bill I'm juggling.",
         "Moving is expensive, I know."),
        (f"My son has the car till {said}, so I can't get to the post office.", "No need, it can all be done online."),
        (f"The discount's good through {said}, isn't it?", "Yes, through that date."),
        (f"I need the van till {said}, so that's eating my budget too.", "I understand."),
    ))
    call.distractors.append({"type": "limit_covering" if day >= clean else "limit_before", "date": day.isoformat()})
    return _Beat(caller, agent, role="distractor")


def _weekdays_between(first: dt.date, last: dt.date) -> list[dt.date]:
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    return [d for d in days if d.weekday() < 5]


def _choose(rng: random.Random, candidates: Sequence[dt.date], preferred: Sequence[dt.date] = ()) -> dt.date | None:
    if preferred and rng.random() < 0.6:
        return rng.choice(list(preferred))
    return rng.choice(list(candidates)) if candidates else None


@dataclass
class _Plan:
    call_class: str
    stated: list[Stated]
    clean: dt.date
    bad: dt.date
    broken: int
    stale: dt.date | None
    mode: str
    flags: list[str]


def _plan(rng: random.Random, ref: dt.date, call_class: str) -> _Plan | None:
    """Constraints, then the clean, bad and stale dates, by date arithmetic alone (None: no fit, draw again)."""
    flags: list[str] = []
    if call_class == "changed":
        first, second, flavour = _changed(rng, ref)
        first.binding = False
        stated = [first, second]
        target = 1
        flags.append(f"changed:{flavour}")
    else:
        stated = [_BUILDERS[call_class](rng, ref)]
        target = 0
        if rng.random() < 0.3:
            extra = (_rule_except_day(rng, ref) if call_class == "no_weekday"
                     else _rule_no_weekday(rng, ref))
            stated.append(extra)
            flags.append("two_constraints")
    binding = [s.rule for s in stated if s.binding]
    horizon = _weekdays_between(ref + dt.timedelta(days=3), ref + dt.timedelta(days=45))
    fits = [d for d in horizon if all(r.allows(d) and r.clear_of(d) for r in binding)]
    if not fits:
        return None
    lifted = [d for d in fits if any(not s.rule.allows(d) for s in stated if not s.binding)]
    clean = _choose(rng, fits, lifted)
    assert clean is not None
    if clean in lifted:
        flags.append("clean_was_blocked_before_the_change")
    rule = stated[target].rule
    others = [r for r in binding if r is not rule]
    bad_pool = [d for d in _weekdays_between(ref + dt.timedelta(days=1), ref + dt.timedelta(days=50))
                if not rule.allows(d) and rule.clear_of(d) and all(r.allows(d) for r in others) and d != clean]
    if not bad_pool:
        return None
    old_ok = ([d for d in bad_pool if all(s.rule.allows(d) for s in stated if not s.binding)]
              if call_class == "changed" else [])
    bad = _choose(rng, bad_pool, old_ok)
    assert bad is not None
    if bad in old_ok:
        flags.append("bad_allowed_before_the_change")
    stale: dt.date | None = None
    mode = rng.choices(("asked", "agreed", "rejected_then_agreed", "counter"), weights=(45, 25, 15, 15))[0]
    if rng.random() < 0.45:
        near = [d for d in fits if d != clean and d != bad and 1 <= abs((d - clean).days) <= 12]
        stale = rng.choice(near) if near else None
    if stale is not None:
        flags.append("correction")
    flags.append(f"mode:{mode}")
    return _Plan(call_class, stated, clean, bad, target, stale, mode, flags)


def _lead_in(rng: random.Random) -> str:
    return rng.choice(("So what happens now?", "OK, so how do we fix this?", "Right. What's next?",
                       "Can someone who deals with this call me back?", "I'd like someone to ring me back about it.",
                       "So will somebody call me?"))


def _ask_day(rng: random.Random) -> str:
    return rng.choice((
        "I'll get a billing specialist to call you back to finish this. What day suits you?",
        "A specialist will need to ring you back. Which day works for you?",
        "I can book a callback from the billing team. When's good for you?",
        "Let's get a callback booked with a specialist. What day would you like?",
    ))


def _request(rng: random.Random, said: str) -> str:
    text = _pick(rng, (
        "Can someone call me back on {d}?", "{d} would be good.", "Could they ring me {d}?", "Let's say {d}.",
        "Put me down for {d}, please.", "{d}, in the morning if possible.", "How about {d}?",
        "I'd like the callback on {d}.", "Call me on {d}, that's best.", "Can you do {d}?",
    ), d=said)
    return text


def _agree(rng: random.Random, day: dt.date) -> str:
    return rng.choice((
        "Yes, that works.", f"Sure, {WEEKDAYS[day.weekday()]}'s fine.", "Perfect, go ahead.", "Yeah, that's fine.",
        "Yep.", "That'd be great, thanks.", "mm-hm, sounds good", "OK, book it.", "Lovely, thank you.",
        "yeah go for it", "That should be fine.", f"{WEEKDAYS[day.weekday()]} works for me.",
    ))


def _propose(rng: random.Random, said: str) -> str:
    return _pick(rng, ("I can book a specialist to call you on {d}. Does that work?",
                       "The first slot I have is {d}. Would that be OK?", "How about {d}?",
                       "I've got {d} available, shall I take it?", "Would {d} suit you?"), d=said)


def _reject(rng: random.Random, stated: Stated) -> str:
    rule = stated.rule
    if rule.kind == "no_weekday" and rule.weekday is not None:
        return rng.choice((f"No, that's a {WEEKDAYS[rule.weekday]}, I told you I can't do those.",
                           f"That won't work, it's a {WEEKDAYS[rule.weekday]}."))
    return rng.choice(("No, that won't work, remember what I said earlier.", "No, I told you, I can't do then.",
                       "That's no good, I'm not available then.", "No, sorry, that's exactly when I can't."))


def _correct(rng: random.Random, old: str, new: str) -> str:
    text = _pick(rng, (
        "Actually, can you make that {n} instead?", "Sorry, I said {o}, I meant {n}.", "Hang on, not {o}, {n}.",
        "Oh wait, scratch that, {n} is better for me.", "sorry could we do {n} rather than {o}",
        "I've just looked at the calendar, {n} would be better than {o}.", "Can we move the callback to {n}?",
        "Sorry to be a pain, could it be {n} instead of {o}?",
    ), o=old, n=new)
    return text


def _flatten(beats: Sequence[_Beat], rng: random.Random) -> list[dict[str, str]]:
    turns: list[dict[str, str]] = []
    for beat in beats:
        caller = asr_slips(beat.caller, rng) if beat.slips and rng.random() < 0.18 else beat.caller
        turns += [{"speaker": "caller", "text": caller}, {"speaker": "agent", "text": beat.agent}]
    return turns


def generate_call(index: int, seed: int = 0, call_class: str | None = None) -> list[dict[str, Any]]:
    """One call's twins: clean, bad and (when the caller corrected the date) stale, as call-record dicts.

    Args:
        index: The call's number (part of its id and its random stream).
        seed: The run's seed.
        call_class: The primary constraint (one of :data:`CALL_CLASSES`); default: by ``index``.
    """
    rng = random.Random(seed * 1_000_003 + index)
    klass = call_class or CALL_CLASSES[index % len(CALL_CLASSES)]
    base = dt.date(2026, 1, 5)
    plan: _Plan | None = None
    ref = base
    for _ in range(200):  # a draw whose constraints leave no room is simply drawn again
        ref = base + dt.timedelta(days=rng.randint(0, 700))
        plan = _plan(rng, ref, klass)
        if plan is not None:
            break
    if plan is None:
        raise RuntimeError(f"no {klass} call fits after 200 draws (seed {seed}, call {index})")
    call = _Call(rng, ref, rng.choice(CALLER_NAMES), rng.choice(AGENT_NAMES),
                 f"ACC-{rng.randint(1000, 9999)}-{rng.randint(10, 99)}")
    return _build(call, plan, f"datecall-{seed}-{index:03d}")


def _build(call: _Call, plan: _Plan, call_id: str) -> list[dict[str, Any]]:
    rng, ref = call.rng, call.ref
    total = rng.randint(16, 30)  # exchanges: 32..60 utterances
    gap = rng.randint(0, 3) if plan.stale is not None else 0
    confirm = rng.random() < 0.6
    after = rng.randint(0, 2)
    tail = 1 + (2 if plan.mode == "rejected_then_agreed" else 1) + (1 + gap if plan.stale else 0) + int(confirm) \
        + after + 2
    problem = _pick(rng, PROBLEMS, service=rng.choice(SERVICES))
    beats: list[_Beat] = [
        _Beat(f"Hi, I'm calling because {problem}.", f"I'm sorry to hear that, I'm {call.agent_name}. Can I take "
                                                      "your account number?", "greeting"),
        _Beat(rng.choice(("Sure, it's {a}.", "Yeah, {a}.", "It's {a}.")).format(a=call.account),
              f"Thanks, {call.name}. I've found your account.", "account", slips=False),
    ]
    beats += [_filler(call) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.4:
        beats[-1] = _Beat(beats[-1].caller, beats[-1].agent + " We may need a specialist to call you back. Is there "
                                                             "anything I should know about when to reach you?")
    said_at: dict[int, _Beat] = {}  # index in plan.stated -> the beat that says it
    said_at[0] = _Beat(plan.stated[0].text, plan.stated[0].agent, "constraint")
    beats.append(said_at[0])
    # The middle: fillers and tempting distractors, with the change or second constraint inside.
    kinds = rng.sample(("trip", "deadline", "limit", "month_words", "month_words"), k=rng.randint(2, 4))
    middle: list[_Beat] = [_dated_distractor(call, plan, k) for k in kinds]
    while len(beats) + len(middle) + len(plan.stated) - 1 + tail < total:
        middle.append(_filler(call))
    rng.shuffle(middle)
    for offset, stated in enumerate(plan.stated[1:], start=1):
        said_at[offset] = _Beat(stated.text, stated.agent, "constraint")
        middle.insert(min(len(middle), rng.randint(1 + offset, max(2 + offset, len(middle) - 1))), said_at[offset])
    beats += middle
    # The callback. Beat indices whose caller utterance asked for / agreed to the clean (and the stale) date:
    cite: list[_Beat] = []
    stale_cite: list[_Beat] = []
    rejected: _Beat | None = None
    first = plan.stale if plan.stale is not None else plan.clean  # the first date settled on
    first_said = say_day(first, ref, rng)
    agent_said = say_day(first, ref, rng, plain=True)
    wording = {first: agent_said}
    beats.append(_Beat(_lead_in(rng), _ask_day(rng), "ask"))
    settled: _Beat
    if plan.mode in ("asked", "counter"):
        wording[first] = first_said
        if plan.mode == "asked":
            settled = _Beat(_request(rng, first_said), rng.choice((f"OK, {agent_said}.", "Sure, I can do that.",
                                                                  "Let me check... yes, that's free.")), "request")
        else:
            offer = plan.bad if rng.random() < 0.5 else next(
                (d for d in _weekdays_between(ref + dt.timedelta(days=2), ref + dt.timedelta(days=40))
                 if d not in (first, plan.clean, plan.bad) and all(s.rule.allows(d) for s in plan.stated if s.binding)),
                plan.bad)
            beats[-1].agent = _propose(rng, say_day(offer, ref, rng, plain=True))
            settled = _Beat(rng.choice(("Could we do {d} instead?", "What about {d} instead?",
                                        "I'd rather {d}, if that's possible.")).format(d=first_said),
                            f"Of course, {agent_said} it is.", "request")
    else:
        if plan.mode == "rejected_then_agreed":
            beats[-1].agent = _propose(rng, say_day(plan.bad, ref, rng, plain=True))
            rejected = _Beat(_reject(rng, plan.stated[plan.broken]),
                             _pick(rng, ("Sorry about that. What about {d}?", "My mistake. {d} then?",
                                         "Apologies. I could do {d} instead."), d=agent_said), "reject")
            beats.append(rejected)
        else:
            beats[-1].agent = _propose(rng, agent_said)
        settled = _Beat(_agree(rng, first), rng.choice(("Great.", "Lovely.", "Perfect.")), "agree")
    beats.append(settled)
    (stale_cite if plan.stale else cite).append(settled)
    if plan.stale is not None:
        beats += [_filler(call) for _ in range(gap)]
        clean_said = say_day(plan.clean, ref, rng)
        wording[plan.clean] = clean_said
        fix = _Beat(_correct(rng, say_day(plan.stale, ref, rng), clean_said),
                    rng.choice((f"No problem, {say_day(plan.clean, ref, rng, plain=True)} instead.",
                                "Sure, I've changed it.", "That's fine.")), "correction")
        beats.append(fix)
        cite.append(fix)
        stale_cite.append(fix)
    if confirm:
        beats[-1].agent = rng.choice((
            "So that's a callback on {d}, shall I book it?", "Just to confirm, {d} for the callback?",
            "Right, I'll book the callback for {d}. OK?")).format(d=say_day(plan.clean, ref, rng, plain=True))
        yes = _Beat(rng.choice(("Yes please.", "That's right.", "Yep, go ahead.", "yes thats it", "Yes, book it.")),
                    "", "confirm")
        beats.append(yes)
        cite.append(yes)
    action_beat = len(beats) - 1
    beats[action_beat].agent = rng.choice(("Done, you're booked in.", "All booked, a specialist will call you.",
                                           "That's booked for you now."))
    beats += [_filler(call) for _ in range(after)]
    beats.append(_Beat(rng.choice(("Great, thanks. Is there anything else I need to do?", "Thanks. Anything else?")),
                       "No, that's everything for now.", "closing"))
    beats.append(_Beat(rng.choice(("No, that's all, bye.", "Cheers, bye.", "Thanks for your help, bye.")),
                       "Thanks for calling, goodbye.", "closing"))
    turns = _flatten(beats, rng)

    def at(beat: _Beat) -> int:  # beat k's caller utterance is 2k, its agent reply 2k+1
        return 2 * next(i for i, b in enumerate(beats) if b is beat)

    for index, stated in enumerate(plan.stated):
        stated.turn = at(said_at[index])
    return _records(call, plan, call_id, turns, 2 * action_beat + 1, sorted(at(b) for b in cite),
                    sorted(at(b) for b in stale_cite), None if rejected is None else at(rejected),
                    wording[plan.clean], wording.get(plan.stale) if plan.stale else None)


def _records(
    call: _Call, plan: _Plan, call_id: str, turns: list[dict[str, str]], action_turn: int, cite: list[int],
    stale_cite: list[int], rejected_at: int | None, clean_wording: str, stale_wording: str | None,
) -> list[dict[str, Any]]:
    facts: list[dict[str, Any]] = [
        {"key": "account_id", "value": call.account, "canonical": call.account, "stated_turn": 2, "kind": "identifier"},
        {"key": "schedule_callback.date", "value": clean_wording, "canonical": plan.clean.isoformat(),
         "stated_turn": cite[0], "kind": "date_constraint", "caller_mention_turns": cite,
         "other_values_stated_for_slot": [stale_wording] if stale_wording else []},
    ]
    for stated in plan.stated:
        facts.append({"key": "callback.availability", "value": turns[stated.turn]["text"],
                      "stated_turn": stated.turn, "kind": "date_constraint",
                      "prose_limit_phrase": bool(re.search(r"\b(?:until|till|no later than)\b", stated.text))})
    account = {"account_id": call.account}
    lookup = {"turn": 3, "tool": "lookup_account", "args": dict(account)}
    common: dict[str, Any] = {
        "source": "generated", "domain": "billing", "reference_date": call.ref.isoformat(), "turns": turns,
        "facts": facts,
        "tools": {"lookup_account": {"account_id": "identifier"},
                  "schedule_callback": {"account_id": "identifier", "date": "date"}},
        "call_class": plan.call_class, "flags": plan.flags, "traps": sorted({d["type"] for d in call.distractors}),
        "constraints": [{**s.rule.to_json(), "turn": s.turn, "binding": s.binding, "text": turns[s.turn]["text"]}
                        for s in plan.stated],
        "distractors": call.distractors,
    }

    def record(rid: str, role: str, day: dt.date, verdict: str, cites: list[int], **extra: Any) -> dict[str, Any]:
        action = {"turn": action_turn, "tool": "schedule_callback", "args": {**account, "date": day.isoformat()}}
        return {"id": rid, **common, "actions": [lookup, action],
                "expect": {} if verdict == "ok" else {"date_guard": verdict}, "twin_role": role,
                "expect_verdict": verdict, "expect_cite_turns": cites, **extra}

    out = [record(call_id, "clean", plan.clean, "ok", cite)]
    broken = plan.stated[plan.broken]
    out.append(record(f"{call_id}-bad-date", "bad", plan.bad, "conflict",
                      sorted([broken.turn] + ([rejected_at] if rejected_at is not None else [])), twin=call_id,
                      broken={**broken.rule.to_json(), "turn": broken.turn},
                      perturbation={"of": call_id, "kind": "bad-date", "action": 1, "arg": "date"}))
    if plan.stale is not None:
        out.append(record(f"{call_id}-stale-date", "stale", plan.stale, "superseded", stale_cite, twin=call_id,
                          perturbation={"of": call_id, "kind": "stale-date", "action": 1, "arg": "date"}))
    return out


def generate_calls(n: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` calls (the classes in turn), each as its twins: clean, bad, and stale when it has a correction.

    Args:
        n: Number of calls (clean twins); the records number 2n plus one per corrected call.
        seed: Same seed, same calls.

    Returns:
        Call-record dicts, each call's twins together (clean first).
    """
    return [rec for i in range(n) for rec in generate_call(i, seed)]


def write_calls(path: Path | str, n: int = 60, seed: int = 0) -> int:
    """Writes :func:`generate_calls` as JSON Lines; returns the number of records written."""
    records = generate_calls(n, seed)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return len(records)
