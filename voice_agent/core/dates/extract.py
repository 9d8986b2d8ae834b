"""Caller sentences to date constraints: a cue-word rule layer over dateparser.

The libraries measured in docs/offline-stack.md §5 lose negation, "except",
"until"/"after" and bare ordinals, and turn identifiers into dates. So the
rules here find short date expressions in normalised text (see ``spoken``),
resolve them (``resolve``: dateparser on canonical phrases, calendar
arithmetic for ordinals/weekdays/weeks), then read the cue words around each
expression to decide what the caller meant by it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache

from dateutil.relativedelta import relativedelta

from voice_agent.core.casefree import CaseFree
from voice_agent.core.dates.model import ConstraintKind, DateConstraint
from voice_agent.core.dates.resolve import (
    day_of_month,
    in_units,
    month_day,
    month_span,
    relative_month,
    week_start,
    weekday_date,
    weekday_day_of_month,
)
from voice_agent.core.dates.spoken import MONTHS, WEEKDAYS, Normalised, normalise
from voice_agent.core.dates.subjects import DateSubject, StatementKind, classify, has_correction_cue

_MON = "|".join(sorted(MONTHS, key=len, reverse=True))
_MON_FULL = "january|february|march|april|may|june|july|august|september|october|november|december"
_WD = "|".join(sorted(WEEKDAYS, key=len, reverse=True))
_YEAR = r"(?:\s,)?\s(?P<y>(?:19|20)\d\d)"
_WDP = rf"(?:(?:{_WD})\s(?:,\s)?)?"
_TO = r"(?:to|-|till|til|until|through|thru)"
_UNITS = r"(?P<u>days?|weeks?|months?|fortnights?)"

# --- Date expressions (on normalised text: lower case, digits, ordinals as "<n>th") -------------------------------

_P_ABS_DM = re.compile(rf"\b{_WDP}(?:the\s)?(?P<d>\d{{1,2}})(?:th)?\s(?:of\s)?(?P<mon>{_MON})(?:{_YEAR})?\b")
_P_ABS_MD = re.compile(rf"\b{_WDP}(?P<mon>{_MON})\s(?:the\s)?(?P<d>\d{{1,2}})(?:th)?(?:{_YEAR})?\b")
_P_RANGE_MD = re.compile(
    rf"\b(?P<mon>{_MON})\s(?:the\s)?(?P<d1>\d{{1,2}})(?:th)?\s(?:{_TO}|and)\s(?:the\s)?(?P<d2>\d{{1,2}})(?:th)?"
    rf"(?:\s(?:of\s)?(?P=mon))?\b"
)
_P_RANGE_DM = re.compile(
    rf"\b(?:the\s)?(?P<d1>\d{{1,2}})(?:th)?\s(?:{_TO}|and)\s(?:the\s)?(?P<d2>\d{{1,2}})(?:th)?\s(?:of\s)?(?P<mon>{_MON})\b"
)
_P_ORD_OF_REL = re.compile(r"\b(?:the\s)?(?P<d>\d{1,2})(?:th)?\sof\s(?P<q>next|this|last)\smonth\b")
_P_BARE_ORD = re.compile(rf"\b(?P<wd>(?:{_WD})\s)?(?P<the>the\s)?(?P<d>\d{{1,2}})th\b")
_P_THE_CARD = re.compile(r"\b(?P<the>the\s)(?P<d>\d{1,2})\b")
_P_IN_UNITS = re.compile(rf"(?:(?<=\bin\s)|(?<=\bwithin\s))(?P<n>\d{{1,3}})\s{_UNITS}(?:\s(?:time|'s\stime))?\b")
_P_UNITS_FROM = re.compile(rf"\b(?P<n>\d{{1,3}})\s{_UNITS}\s(?P<how>from\s(?:now|today)|time|today|later|ago)\b")
_P_SIMPLE = re.compile(
    r"\b(?:the\s)?day\safter\stomorrow\b|\b(?:the\s)?day\sbefore\syesterday\b|\btoday\b|\btonight\b"
    r"|\btomorrow\b|\byesterday\b"
)
_P_WEEK = re.compile(
    r"\b(?:the\s)?week\safter\snext\b"
    r"|\b(?P<q>this\scoming|this|next|last|coming|the\sfollowing|following)\s(?P<w>week|weekend)\b"
    r"|\bthe\s(?P<w2>weekend)\b"
)
_P_WEEK_OF = re.compile(
    rf"\b(?:the\s)?week\s(?:of|starting|beginning|commencing|from)\s(?:the\s)?(?:monday\s(?:,\s)?(?:the\s)?)?"
    rf"(?:(?P<mon2>{_MON})\s(?:the\s)?)?(?P<d>\d{{1,2}})(?:th)?(?:\s(?:of\s)?(?P<mon>{_MON}))?\b"
)
_P_WEEK_ON = re.compile(
    rf"\b(?:a|1)\sweek\s(?:on\s|from\s|this\s|next\s)?(?P<wd>{_WD}|tomorrow|today)\b"
    # "tomorrow week", "Thursday week" (British): the same, said the other way round
    rf"|\b(?P<wd2>{_WD}|tomorrow|today)\s(?:'s\s)?(?:week|weak)\b(?!\s(?:of|on|after|before|starting|beginning))"
)
_P_NTH_WEEK = re.compile(
    rf"\b(?:the\s)?(?:(?P<n>[1-4])th|(?P<last>last))\s(?:full\s)?(?:week|weak)\s(?:of|in)\s(?P<mon>{_MON_FULL})\b"
)
_P_PART_OF_MONTH = re.compile(
    rf"\bthe\s(?:(?P<first>1th|first)|(?P<last>last))\s(?P<n>\d{{1,2}}|few|couple(?:\sof)?)\s(?P<u>days|weeks)"
    rf"\s(?:of|in)\s(?P<mon>{_MON_FULL})\b"
)
_P_WD_WEEK = re.compile(rf"\b(?P<wd>{_WD})\s(?:of\s)?(?P<q>this|next)\sweek\b")
_P_WEEK_WD = re.compile(rf"\b(?P<q>this|next)\sweek\son\s(?:the\s)?(?P<wd>{_WD})\b")  # "next week on Saturday"
_P_MONTH_REL = re.compile(r"\b(?P<q>this|next|last)\smonth\b")
_P_WEEKDAY = re.compile(rf"\b(?:(?P<q>this\scoming|next|this|last|coming)\s)?(?P<wd>{_WD})(?P<pl>s)?\b|\bweekends\b")
_P_MONTH = re.compile(
    r"\b(?:(?P<part>early|mid|late|(?:the\s)?(?:start|beginning|middle|end)\sof)\s(?:-\s)?)?"
    rf"(?P<mon>{_MON_FULL})(?:{_YEAR})?\b"
)

# --- Cue words around an expression ---------------------------------------------------------------------------------

_FILLER = (
    r"(?:\s(?:the|on|a|an|any|anything|time|day|date|at|of|about|around|sometime|some|point|so|well|say|like"
    r"|maybe|perhaps|probably|ideally|just|really|uh|um|er|erm|until|for|either|that|this|end|start|beginning"
    r"|middle|close|whole|entire|rest))*"
)
_EXCLUDE_BEFORE = re.compile(
    r"(?:\bnot|\brather\sthan|\binstead\sof|\bbetter\sthan|\bexcept(?:\sfor)?|\bother\sthan|\bapart\sfrom|\bexcluding|\bbesides|\b(?:any\s\w+|anytime)\sbar"
    r"|\b(?:anything|any\s(?:day|time|date)|everything|whenever)\sbut|\bbut\snot|\bno|\bnever|\bavoid|\bskip"
    r"|n't\s(?:do|make|manage|come|be\sthere|be\saround|be\shome|be\sin|be\sfree|be\savailable)(?:\s(?:is|would\sbe))?"
    r"|\bcannot\s(?:do|make|manage|come)|\bunable\sto\s(?:do|make))" + _FILLER + r"$"
)
_EXCLUDE_AFTER = re.compile(
    r"^(?:that\s|which\s)?(?:'s|is|are|would\sbe|will\sbe|be)?\s?(?:out|no\sgood|bad|not\sgood|impossible|difficult|tricky|a\sno"
    r"|a\sno-go|off|not\spossible|not\sgreat|not\sideal|a\sproblem|taken|full|fully\sbooked|booked"
    r"|not\san\soption|out\sof\sthe\squestion|a\sbad\sday|no\suse|a\snightmare|hopeless|awkward|inconvenient"
    r"|not\sconvenient|a\swrite-off|a\swrite\soff|no\sgo)\b"
    r"|^(?:doesn't|does\snot|won't|will\snot|wouldn't|would\snot|isn't|is\snot|can't|cannot)\s"
    r"(?:work|suit|do|be\sgood|be\spossible|good|possible|ok|okay|fit)\b"
    r"|^(?:i|we)\s(?:can't|cannot|won't|will\snot|am\snot|have\sno)\b|^(?:i'm|we're)\snot\s(?:free|around|available)"
)
_EARLIEST_AFTER = re.compile(
    r"^(?:or\slater|or\safter|and\safter|and\slater|onwards?|on\swards|at\sthe\searliest|at\searliest"
    r"|and\sbeyond|or\sany\stime\safter|going\sforward|forwards?|on)(?:\s*$|\b(?!\s(?:the|a|my)\b))"
)
_LATEST_AFTER = re.compile(r"^(?:or\searlier|or\sbefore|and\sbefore|at\sthe\slatest|at\slatest|latest)\b")
_CUE = re.compile(
    r"\b(?P<c>(?:no|not|nothing|never)\s(?:any\s)?later\sthan|(?:no|not|nothing|never)\s(?:any\s)?(?:earlier|sooner)\sthan"
    r"|not\sbefore|not\safter|not\suntil|not\still|up\sto|up\suntil"
    r"|up\still|prior\sto|ahead\sof|as\sof|starting(?:\sfrom)?|from|until|till|til|through|thru|before|after"
    r"|by|within|since|earliest|latest)\b(?=" + _FILLER + r"$)"
)
_UNTIL_OFFERED = re.compile(
    r"\b(?:any|anytime|anything|whenever|free|fine|ok|okay|good|works?|suits?|available|can|could|happy|around"
    r"|home|reach\w*|call|ring|phone|contact|need|needs|keep|keeping|have|having|use|using|hire|rent\w*|borrow\w*"
    r"|book\w*|stay\w*|want|valid|last|open|run|runs|until\sthen|deadline|due|pay|paid|fixed|price|deal"
    r"|contract|offer|trial|discount|tariff)\b"
)
# The caller is the one kept busy: "I'm on nights till", "till the 6th I'll be living out of boxes".
_UNTIL_MINE = re.compile(r"\b(?:i'm|i\sam|i'll|i\swill|i've|im|we're|we'll|i|we|me|my|our)\b")
# Where they are, which may be where they can be reached: "I'm only in Dundee till the 18th".
_UNTIL_AT = re.compile(
    r"\b(?:in|at)\s(?!work\b|hospital\b|a\s|the\s)[a-z]+\s(?:up\s)?(?:until|till|til|through|thru|to)$"
)
_THEN_AFTER = re.compile(r"^\W*(?:\S+\s){0,3}?(?:,\s)?(?:then|after\sthat|after|from\sthen|and\sthen)\b")
_UNTIL_AFTER = re.compile(r"\b(?:until|till|til|unless\sit's|only)\s(?:some\stime\s|sometime\s|well\s|way\s)?after"
                          + _FILLER + r"$")
_EXTREME_LEAD = re.compile(
    r"\b(?P<c>earliest|soonest|latest)\b(?:\s[\w']+){0,4}\s(?:is|would\sbe|'s|be|will\sbe)(?:\s(?:the|on))?$"
)
_ON_OR = re.compile(r"\b(?P<c>(?:not\s)?on\sor\s(?:before|after))" + _FILLER + r"$")
_NEG = re.compile(r"\b(?:not|never|nothing|none|cannot|unable|no\s(?:way|chance|good))\b|n't\b")
_BLOCKED = re.compile(
    r"\b(?:away|travel+ing|on\s(?:a\s)?trip|abroad|holidays?|vacation|busy|unavailable|hospital|tied\sup|booked\sup"
    r"|fully\sbooked|overseas|out\sof\s(?:town|the\scountry|office|the\soffice)|on\sleave|on\sbusiness"
    r"|working|at\swork|in\ssurgery|stuck|not\s(?:around|available|free|home|back|in)|unreachable|no\ssignal"
    r"|off\s(?:the\s)?grid|asleep|in\shospital|recovering|can't\stake\scalls|cannot\stake\scalls"
    r"|(?:i'm|i\sam|we're|we\sare|be|he's|she's|they're|is)\sout"
    # duties that fill the days: "on twelves", "on nights", "on placement", "on the wards"
    r"|on\s(?:nights|days|earlies|lates|twelves|shifts?|call|placement|the\swards|a\scourse|rota)|placement|shifts"
    r"|booked\s(?:from|solid|every|all|through)|(?:i'm|i\sam|we're|we\sare|stall's|diary's|week's)\sbooked"
    # out of reach in other words: "flat out no calls", "snowed under", "phone's off", "no phone out there"
    r"|flat\sout|snowed\sunder|no\s(?:calls|phone|phones|reception|coverage)|not\s(?:picking\sup|answering)"
    r"|phone(?:'s|\sis|\swill\sbe|s\sare)\s(?:off|in))\b"
)
_OUT_OF_REACH = re.compile(
    r"\b(?:flat\sout|snowed\sunder|no\s(?:calls|phone|phones|reception|coverage)|not\s(?:picking\sup|answering)"
    r"|phone(?:'s|\sis|\swill\sbe|s\sare)\s(?:off|in))\b"
)
"""Words of being out of reach that, later in a sentence, make a span said before them an absence."""
_OFFERED_HERE = re.compile(
    r"(?<!not\s)(?<!n't\s)\b(?:suits?|works?|free|fine|good|ok|okay|available|around|best|ideal)\b")
# "after that" / "from then" / "otherwise" start a clause about the time beyond the date just named:
# "any day before the 2nd works, after that I'm away" - the "away" is not about the 2nd itself.
_AFTER_THAT = r"(?:after|from|beyond|past)\s(?:that|then|this|which)"
_CONJUNCTION = re.compile(
    rf"\b(?:but|and|though|although|however|so|because|cos|whereas|while|or|then|otherwise|{_AFTER_THAT})\b"
)
_COORDINATION = re.compile(r"^(?:and|or|nor|&|and\salso|or\selse|and\son|or\son|and\sthe|or\sthe)?$")
# Every expression holds a digit or one of these; text without any is skipped cheaply.
_HINT = CaseFree(
    r"\d|day|week|weak|month|fortnight|tonight|tomorrow|first|second|third|forth|th\b|jan|feb|mar|apr|may|jun|jul|aug|sep"
    r"|oct|nov|dec|tues|weds|thurs|christmas|xmas|boxing|new\syear|hogmanay|easter|good\sfriday|thanksgiving"
    r"|halloween|bonfire|fawkes"
)
_YEAR_TOKEN = re.compile(r"(?:19|20)\d\d")
_RANGE_LINK = re.compile(
    rf"^(?:(?:right|straight|all\sthe\sway)\s)?(?:{_TO}|up\sto|through\sto|through\still|up\still|up\suntil)$|^and$")
"""What joins two days into one span: "to", "till", "through", "right through to", "all the way to", "and"."""

# --- Sentence-level cues (on the original text, lower-cased) ---------------------------------------------------------

_PAST = re.compile(
    r"\b(?:started|began|came|went|sent|changed|switched|rang|emailed|wrote|signed\sup|joined|noticed|saw|spotted"
    r"|promised|back\sin|used\sto|we\shad|i\shad|(?:i|we|you|they)\scalled|since|disputed|spoke|told\sme"
    r"|(?:i've|i\shave|we've|we\shave|it's|it\shas|has|have|i'd|had)\sbeen"
    r"|charged|charges|(?:the|a|that|this)\scharge|paid|billed|happened|last|ago|yesterday|debited|received"
    r"|arrived|ordered|placed|bought|went\sout|came\sout|took|taken|(?:was|were)(?!\s(?:hoping|wondering|thinking|going|planning|wanting|trying|told"
    r"|asked|supposed|meant|saying|looking|expecting)))\b"
)
_PURPOSES = (
    ("callback", re.compile(r"\b(?:call\s?back|ring\s(?:me\s)?back|call\sme|ring\sme|phone\sme|give\sme\sa\s(?:call|ring)|get\sback\sto\sme)\b")),  # noqa: E501
    ("delivery", re.compile(r"\b(?:deliver(?:y|ed)?|shipping|ship|drop\soff)\b")),
    ("appointment", re.compile(r"\b(?:appointment|visit|engineer|technician|install(?:ation)?|fitting|come\s(?:round|over|out))\b")),  # noqa: E501
)  # fmt: skip


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split(" "))


# A bare ordinal or "the <n>" counts as a day only before words like these (not "the second time").
_FOLLOW_OK = _words(
    "and or nor to till til until through thru at works work is 's was would could should will might may then please "
    "for if but instead so in on onwards onward earliest latest ok okay fine suits suit either maybe perhaps yes no "
    "as - i i'm i'll i'd we we're that that's it it's this because cos since after before when which morning "
    "afternoon evening night any anytime around sometime too also rather only again actually sounds good great "
    "perfect isn't doesn't won't wouldn't can't are be preferably ideally from between not except though although "
    "thanks thank right yeah by you he she they me don't sorry what how is better best i've we've they've there's"
)
# ...and after words like these when said without "the" ("after 3rd", "on fourteenth").
_CUE_PREV = _words(
    "on after before until till til through thru from to by since not except say than or and between is 's be "
    "it's make maybe perhaps about around for prefer like do how but was were"
)


@dataclass
class _Expr:
    """One date expression found in the normalised text."""

    start: int
    end: int
    lo: date
    hi: date
    shape: str  # "day", "span", "weekday" (one day named by weekday) or "weekdays" (recurring)
    weekdays: tuple[int, ...] = ()
    movable: bool = False  # an unqualified weekday: may resolve into a week named in the sentence
    week: date | None = None  # Monday of the week it names: context for unqualified weekdays
    explicit_range: bool = False  # "3 to 9 December": already a range
    redo: Callable[[date], date | None] | None = None  # re-resolve on/after a floor (range ends)
    mode: str = "on"
    anaphor: bool = False  # "then" / "that day" after "until": the day named last before it


@dataclass(frozen=True)
class _Context:
    norm: Normalised
    reference: date
    clause_of: Callable[[int], int]
    past_clauses: frozenset[int]

    def past(self, pos: int) -> bool:
        return self.clause_of(pos) in self.past_clauses


def _token_is_spelled(ctx: _Context, pos: int) -> bool:
    first, _ = ctx.norm.token_range(pos, pos + 1)
    tok = ctx.norm.tokens[first]
    return not ctx.norm.original[tok.start : tok.start + 1].isdigit()


_RANGE_END = re.compile(r"\b(?:to|till|til|until|through|thru)\s(?:the\s)?$")


def _day_ok(ctx: _Context, m: re.Match[str], *, digits_only: bool) -> bool:
    """Whether a bare "<n>th" / "the <n>" reads as a day, not "the second time" or "the 3 of us"."""
    norm = ctx.norm
    first, last = norm.token_range(m.start(), m.end())
    nxt = norm.tokens[last + 1].norm if last + 1 < len(norm.tokens) else None
    prev = norm.tokens[first - 1].norm if first > 0 else None
    after_next = norm.tokens[last + 2].norm if last + 2 < len(norm.tokens) else ""
    # "not the 31st the 25th": one day said straight after another is a correction, still a day.
    next_is_day = nxt == "the" and after_next[:1].isdigit()
    # "I'm away until the 7th now" (a limit moved), not "I'll take the second now" (an option).
    limit_now = nxt == "now" and prev in _LIMIT_CUES
    # "the 4th friday" after "the fourth of December, a Friday?": the day and its weekday, when they agree
    weekday_after = nxt in WEEKDAYS and _agrees(int(m["d"]), WEEKDAYS[nxt], ctx)
    # "to the 11th doing a reno" (speech written without commas): what the caller is doing on those days
    doing = (nxt is not None and len(nxt) > 4 and nxt.endswith("ing")
             and _RANGE_END.search(norm.text[: m.start()]) is not None)
    if (nxt is not None and nxt[0].isalnum() and nxt not in _FOLLOW_OK and not next_is_day and not limit_now
            and not weekday_after and not doing):
        return False
    if nxt is not None and (nxt.startswith("#") or nxt[0].isdigit()):
        return False  # "the second one", "the 3rd 4729": a count, or part of a masked number
    spelled = _token_is_spelled(ctx, m.start("d"))
    if digits_only and spelled:
        return False
    if m.groupdict().get("the") or m.groupdict().get("wd"):
        return True
    if prev in _CUE_PREV:
        return True
    # A written "14th" at the start of a clause is a day; a spoken "first"/"second" there is not.
    return not spelled and (prev is None or not prev[0].isalnum())


def _agrees(day: int, weekday: int, ctx: _Context) -> bool:
    """Whether the next day numbered ``day`` falls on ``weekday``."""
    d = day_of_month(day, ctx.reference, False)
    return d is not None and d.weekday() == weekday


def _abs(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    year = int(m["y"]) if m["y"] else None
    d = month_day(int(m["d"]), MONTHS[m["mon"]], year, ctx.reference, ctx.past(m.start()))
    return _Expr(m.start(), m.end(), d, d, "day") if d else None


def _range_month(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    month, past = MONTHS[m["mon"]], ctx.past(m.start())
    lo = month_day(int(m["d1"]), month, None, ctx.reference, past)
    hi = month_day(int(m["d2"]), month, None, ctx.reference, past)
    if lo is None or hi is None:
        return None
    if hi < lo:  # "December 28 to 3" cannot happen in one month; keep it as the caller's span
        lo, hi = hi, lo
    return _Expr(m.start(), m.end(), lo, hi, "span", explicit_range=True)


def _ord_of_month(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    lo, _ = relative_month({"next": 1, "this": 0, "last": -1}[m["q"]], ctx.reference)
    try:
        d = lo.replace(day=int(m["d"]))
    except ValueError:
        return None
    return _Expr(m.start(), m.end(), d, d, "day")


def _bare_day(ctx: _Context, m: re.Match[str], *, digits_only: bool) -> _Expr | None:
    named_weekday = m.groupdict().get("wd")
    if not named_weekday and not _day_ok(ctx, m, digits_only=digits_only):
        return None  # "Friday the 5th" is a day whatever follows it
    day, past = int(m["d"]), ctx.past(m.start())
    d = day_of_month(day, ctx.reference, past)
    if named_weekday:
        d = weekday_day_of_month(WEEKDAYS[named_weekday.strip()], day, ctx.reference, past) or d
    if d is None:
        return None
    return _Expr(m.start(), m.end(), d, d, "day", redo=lambda floor: day_of_month(day, floor, False))


def _units(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    n, unit = int(m["n"]), m["u"]
    if m.groupdict().get("how") == "ago":
        step = {"d": relativedelta(days=n), "w": relativedelta(weeks=n), "m": relativedelta(months=n)}
        d: date | None = ctx.reference - step.get(unit[0], relativedelta(weeks=2 * n))
    else:
        d = in_units(n, unit, ctx.reference)
    return _Expr(m.start(), m.end(), d, d, "day") if d else None


_P_HOLIDAY = re.compile(
    r"\b(?:christmas\seve|christmas\sday|christmas|xmas|boxing\sday|new\syear'?s?\seve|hogmanay"
    r"|new\syear'?s?(?:\sday)?|easter\s(?:sunday|monday)|good\sfriday|easter|thanksgiving|halloween"
    r"|bonfire\snight|guy\sfawkes|(?:the\s)?day\sof\s(?:reconciliation|goodwill)|reconciliation\sday"
    r"|st\.?\s?stephen'?s(?:\sday)?|saint\sstephen'?s(?:\sday)?|black\sfriday|cyber\smonday"
    r"|veterans'?\sday|remembrance\s(?:day|sunday)|armistice\sday|st\.?\s?andrew'?s\sday)\b"
)


def _holiday_day(word: str, year: int) -> tuple[date, date] | None:
    """The day (or days) a holiday name means in ``year``: Christmas is the 25th, Easter its weekend."""
    from dateutil.easter import easter

    word = re.sub(r"^the\s|\.", "", word.replace("'s", "").replace("'", "")).replace("saint ", "st ")
    word = re.sub(r"^st(?=\w)", "st ", word)
    fixed = {"christmas eve": (12, 24), "christmas day": (12, 25), "christmas": (12, 25), "xmas": (12, 25),
             "boxing day": (12, 26), "new years eve": (12, 31), "new year eve": (12, 31), "hogmanay": (12, 31),
             "halloween": (10, 31), "bonfire night": (11, 5), "guy fawkes": (11, 5),
             # South Africa, Ireland, the US and the UK
             "day of reconciliation": (12, 16), "reconciliation day": (12, 16), "day of goodwill": (12, 26),
             "st stephen": (12, 26), "st stephen day": (12, 26), "st stephens": (12, 26),
             "st stephens day": (12, 26), "veterans day": (11, 11), "veterans' day": (11, 11),
             "remembrance day": (11, 11), "armistice day": (11, 11), "st andrew day": (11, 30)}
    if word in fixed:
        month, day = fixed[word]
        d = date(year, month, day)
        return d, d
    if word.startswith("new year"):
        d = date(year + 1, 1, 1)
        return d, d
    if word in ("thanksgiving", "black friday", "cyber monday"):
        first = date(year, 11, 1)
        d = first + timedelta(days=(3 - first.weekday()) % 7 + 21)
        d += timedelta(days={"thanksgiving": 0, "black friday": 1, "cyber monday": 4}[word])
        return d, d
    if word == "remembrance sunday":
        first = date(year, 11, 1)
        d = first + timedelta(days=(6 - first.weekday()) % 7 + 7)
        return d, d
    sunday = easter(year)
    return {"easter": (sunday - timedelta(days=2), sunday + timedelta(days=1)),
            "easter sunday": (sunday, sunday), "easter monday": (sunday + timedelta(days=1),) * 2,
            "good friday": (sunday - timedelta(days=2),) * 2}.get(word)


def _holiday(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    """A holiday by name, the next one on or after the call's day ("not before Christmas", "after Easter")."""
    word = m.group()
    for year in (ctx.reference.year - 1, ctx.reference.year, ctx.reference.year + 1):
        found = _holiday_day(word, year)
        if found is not None and found[1] >= ctx.reference:
            lo, hi = found
            return _Expr(m.start(), m.end(), lo, hi, "day" if lo == hi else "span")
    return None


def _simple(ctx: _Context, m: re.Match[str]) -> _Expr:
    word = m.group()
    offset = {"today": 0, "tonight": 0, "tomorrow": 1, "yesterday": -1}.get(word)
    if offset is None:
        offset = 2 if "after" in word else -2
    d = ctx.reference + timedelta(days=offset)
    return _Expr(m.start(), m.end(), d, d, "day")


def _week(ctx: _Context, m: re.Match[str]) -> _Expr:
    this_monday = week_start(ctx.reference)
    q = m["q"] or ""
    weekend = (m["w"] or m["w2"]) == "weekend"
    if "after" in m.group():
        monday = this_monday + timedelta(days=14)
    elif q in ("next", "the following", "following"):
        monday = this_monday + timedelta(days=7)
    elif q == "last":
        monday = this_monday - timedelta(days=7)
    else:  # this / coming / "the weekend"
        monday = this_monday
    if weekend:
        lo, hi = monday + timedelta(days=5), monday + timedelta(days=6)
    else:
        lo, hi = monday, monday + timedelta(days=6)
        if q in ("this", "this coming", "coming", "") and not ctx.past(m.start()):
            lo = max(lo, ctx.reference)  # the part of this week that is still to come
    return _Expr(m.start(), m.end(), lo, hi, "span", week=None if weekend else monday)


def _week_on(ctx: _Context, m: re.Match[str]) -> _Expr:
    """"a week on Tuesday" (British): the coming Tuesday plus seven days; "a week tomorrow" likewise."""
    word = m["wd"] or m["wd2"]
    if word in ("tomorrow", "today"):
        base = ctx.reference + timedelta(days=1 if word == "tomorrow" else 0)
    else:
        base = weekday_date(WEEKDAYS[word], ctx.reference, None, False)
    d = base + timedelta(days=7)
    return _Expr(m.start(), m.end(), d, d, "day")


def _week_of(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    """"the week of the 7th": Monday to Sunday of the week holding that day."""
    past = ctx.past(m.start())
    month = m["mon"] or m["mon2"]
    if month:
        d = month_day(int(m["d"]), MONTHS[month], None, ctx.reference, past)
    else:
        d = day_of_month(int(m["d"]), ctx.reference, past)
    if d is None:
        return None
    monday = week_start(d)
    return _Expr(m.start(), m.end(), monday, monday + timedelta(days=6), "span", week=monday)


def _nth_week(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    """"the first week of December": days 1-7 of the month (the last seven for "the last week"), widened to the
    Monday-to-Sunday weeks that share three days or more with them, since callers count a month's weeks either way."""
    first = month_day(1, MONTHS[m["mon"]], None, ctx.reference, ctx.past(m.start()))
    if first is None:
        return None
    if m["last"]:
        end = first + relativedelta(months=1) - timedelta(days=1)
        start = end - timedelta(days=6)
    else:
        start = first + timedelta(days=7 * (int(m["n"]) - 1))
        end = start + timedelta(days=6)
    def shares(monday: date) -> int:
        return sum(start <= monday + timedelta(days=k) <= end for k in range(7))

    # widened to a Monday-to-Sunday week only where that week shares three days or more with the seven: "the last
    # week of November" (the 24th to the 30th, a Monday) is not the week of December the 30th starts
    lo = week_start(start) if shares(week_start(start)) >= 3 else start
    hi = week_start(end) + timedelta(days=6) if shares(week_start(end)) >= 3 else end
    return _Expr(m.start(), m.end(), lo, hi, "span")


def _part_of_month(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    """"the first three days of December", "the last two weeks of December": that many days from the month's start
    or back from its end ("few" taken wide, as seven days or three weeks: a span ruled out errs on the long side).
    Its "last" is the month's end, not a word of the past."""
    past = ctx.past(m.start()) and not m["last"]
    first = month_day(1, MONTHS[m["mon"]], None, ctx.reference, past)
    if first is None:
        return None
    n = {"few": 0, "couple": 2, "couple of": 2}.get(m["n"])
    weeks = m["u"] == "weeks"
    days = (3 * 7 if weeks else 7) if n == 0 else (n or int(m["n"])) * (7 if weeks else 1)
    end_of_month = first + relativedelta(months=1) - timedelta(days=1)
    if m["last"]:
        return _Expr(m.start(), m.end(), max(first, end_of_month - timedelta(days=days - 1)), end_of_month, "span")
    return _Expr(m.start(), m.end(), first, min(end_of_month, first + timedelta(days=days - 1)), "span")


def _weekday_of_week(ctx: _Context, m: re.Match[str]) -> _Expr:
    monday = week_start(ctx.reference) + timedelta(days=7 if m["q"] == "next" else 0)
    d = monday + timedelta(days=WEEKDAYS[m["wd"]])
    return _Expr(m.start(), m.end(), d, d, "day", week=monday)


def _month_rel(ctx: _Context, m: re.Match[str]) -> _Expr:
    lo, hi = relative_month({"this": 0, "next": 1, "last": -1}[m["q"]], ctx.reference)
    return _Expr(m.start(), m.end(), lo, hi, "span")


def _weekday(ctx: _Context, m: re.Match[str]) -> _Expr:
    if m["wd"] is None:  # "weekends"
        return _Expr(m.start(), m.end(), ctx.reference, ctx.reference, "weekdays", weekdays=(5, 6))
    wd, q = WEEKDAYS[m["wd"]], m["q"]
    if m["pl"]:
        return _Expr(m.start(), m.end(), ctx.reference, ctx.reference, "weekdays", weekdays=(wd,))
    qual = {"this coming": "coming"}.get(q or "", q)
    d = weekday_date(wd, ctx.reference, qual, ctx.past(m.start()))
    return _Expr(
        m.start(),
        m.end(),
        d,
        d,
        "weekday",
        weekdays=(wd,),
        movable=q is None,
        redo=(lambda floor: floor + timedelta(days=(wd - floor.weekday()) % 7)) if q is None else None,
    )


_MONTH_LEAD = _words("in during before after until till by from through throughout of for around since")


def _month(ctx: _Context, m: re.Match[str]) -> _Expr | None:
    first, _ = ctx.norm.token_range(m.start(), m.end())
    prev = ctx.norm.tokens[first - 1].norm if first > 0 else None
    part_word = (m["part"] or "").split(" ")[-2:] if m["part"] else []
    if not part_word and prev not in _MONTH_LEAD:
        return None  # "may" and "march" are verbs too: a lone month needs a lead-in word
    part = None
    if part_word:
        head = part_word[0] if part_word[-1] == "of" else part_word[-1]
        part = {"early": "early", "start": "early", "beginning": "early", "mid": "mid", "middle": "mid"}.get(
            head, "late"
        )
    year = int(m["y"]) if m["y"] else None
    lo, hi = month_span(MONTHS[m["mon"]], ctx.reference, ctx.past(m.start()), part)
    if year is not None:
        lo, hi = lo.replace(year=year), hi.replace(year=year)
    return _Expr(m.start(), m.end(), lo, hi, "span")


_Finder = tuple[re.Pattern[str], Callable[[_Context, re.Match[str]], _Expr | None]]
_FINDERS: tuple[_Finder, ...] = (
    (_P_RANGE_MD, _range_month),
    (_P_RANGE_DM, _range_month),
    (_P_ABS_DM, _abs),
    (_P_ABS_MD, _abs),
    (_P_ORD_OF_REL, _ord_of_month),
    (_P_WEEK_OF, _week_of),
    (_P_NTH_WEEK, _nth_week),
    (_P_PART_OF_MONTH, _part_of_month),
    (_P_WEEK_ON, _week_on),
    (_P_WD_WEEK, _weekday_of_week),
    (_P_WEEK_WD, _weekday_of_week),
    (_P_BARE_ORD, lambda c, m: _bare_day(c, m, digits_only=False)),
    (_P_THE_CARD, lambda c, m: _bare_day(c, m, digits_only=True)),
    (_P_IN_UNITS, _units),
    (_P_UNITS_FROM, _units),
    (_P_SIMPLE, _simple),
    (_P_HOLIDAY, _holiday),
    (_P_WEEK, _week),
    (_P_MONTH_REL, _month_rel),
    (_P_WEEKDAY, _weekday),
    (_P_MONTH, _month),
)


# What a finder's every match holds, so a finder is not run over text without it: a month name or a weekday
# name at the start of a word, or the word "week". Most utterances name no month and no weekday.
_MONTH_NAME = re.compile(rf"\b(?:{_MON})")
_WEEKDAY_NAME = re.compile(rf"\b(?:{_WD})|\bweekends\b")
_NEEDS: dict[re.Pattern[str], tuple[str, ...]] = {
    _P_RANGE_MD: ("month",), _P_RANGE_DM: ("month",), _P_ABS_DM: ("month",), _P_ABS_MD: ("month",),
    _P_MONTH: ("month",), _P_WEEK_OF: ("week",), _P_NTH_WEEK: ("month",), _P_PART_OF_MONTH: ("month",),
    _P_WEEK_ON: ("week",), _P_WEEK: ("week",),
    _P_WD_WEEK: ("weekday", "week"), _P_WEEK_WD: ("weekday", "week"), _P_WEEKDAY: ("weekday",),
}


def _find_expressions(ctx: _Context) -> list[_Expr]:
    """All expressions, longest first where they overlap (finder order breaks ties)."""
    found: list[tuple[int, int, int, _Expr]] = []
    text = ctx.norm.text
    held = {"month": bool(_MONTH_NAME.search(text)), "weekday": bool(_WEEKDAY_NAME.search(text)),
            "week": "week" in text}
    for rank, (pattern, build) in enumerate(_FINDERS):
        if not all(held[need] for need in _NEEDS.get(pattern, ())):
            continue  # it cannot match here
        for m in pattern.finditer(text):
            expr = build(ctx, m)
            if expr is not None:
                found.append((expr.start, -(expr.end - expr.start), rank, expr))
    found.sort(key=lambda t: t[:3])
    chosen: list[_Expr] = []
    for _, _, _, expr in found:
        if not chosen or expr.start >= chosen[-1].end:
            chosen.append(expr)
    return chosen


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = list(pattern.finditer(text))
    return found[-1] if found else None


def _trim_to_conjunction(pre: str) -> str:
    """The part of ``pre`` after its last conjunction: "I can't do Monday but" says nothing about what follows."""
    last = _last_match(_CONJUNCTION, pre)
    return pre[last.end() :].strip() if last else pre


# Words after a date that say the reason that follows is about the time beyond it, not the date itself:
# "before the 9th, I'm camping with no signal from then", "only that week, I'm away either side of it".
_BEYOND = re.compile(
    rf"\b(?:{_AFTER_THAT}|otherwise|either\sside|outside\s(?:of\s)?(?:that|it|those|then)"
    r"|the\srest\sof\sthe\stime|any\sother\stime)\b"
)


def _post_blocked(post: str) -> bool:
    """Whether the words after a date say the caller is away on it ("the 3rd, I'm in hospital")."""
    return not _BEYOND.search(post) and bool(_BLOCKED.search(_cut_at_conjunction(post)))


def _cut_at_conjunction(post: str) -> str:
    m = _CONJUNCTION.search(post)
    return post[: m.start()].strip() if m else post


_I_SAID = re.compile(r"\bi\s(?:said|told\syou|put)(?:\s(?:the|on))?$")
_I_MEANT = re.compile(r"\bi\s(?:meant|mean)\b")
# "hang on, not the 31st of August, August 20th": the day after the one taken back is the new one.
_CORRECTION_LEAD = re.compile(r"\b(?:hang\son|hold\son|wait|sorry|actually|i\smean|no)\b")
_INTERJECTION = re.compile(r"^(?:(?:no|nope|sorry|oh|er|erm|um|uh|wait)\s)+(?:it's\s|the\s)?$")


_LIMIT_CUES = frozenset(("until", "till", "til", "before", "after", "from", "since", "by", "through", "thru"))


def _mode(pre: str, post: str, *, followed: bool = False, sentence_pre: str = "", sentence_post: str = "") -> str:
    """What the cue words around one expression make of it.

    ``followed``: another date comes later in the clause, so "and before" after this one
    introduces that date ("after the 14th and before the 25th"), not "the 14th or before".
    ``sentence_pre``: the sentence up to the expression; a clause that is only a cue
    (", until the 8th") takes "away" or "busy" from the clause before it.
    """
    last_cue = _last_match(_CUE, _trim_to_conjunction(pre))
    limit_last = last_cue is not None and last_cue["c"] in _LIMIT_CUES
    # "I'm not around until March the 8th": the limit word, not the "not", says what the date is.
    if (_EXCLUDE_BEFORE.search(pre) and not limit_last) or _EXCLUDE_AFTER.search(post):
        return "exclude"
    if limit_last and last_cue is not None and not pre[: last_cue.start()].strip() and sentence_pre:
        pre = sentence_pre  # the clause is just the cue: read the sentence before it
    if not followed and _EARLIEST_AFTER.search(post):
        return "earliest"
    if not followed and _LATEST_AFTER.search(post):
        return "until"
    lead = _EXTREME_LEAD.search(pre)
    if lead:  # "the earliest I can do is the 12th", "latest would be the 22nd"
        return "earliest" if lead.group("c") in ("earliest", "soonest") else "until"
    on_or = _ON_OR.search(pre)
    if on_or:  # "not on or before the 4th": the "or" here joins two cues, it does not start a new clause
        return {"not on or before": "after_strict", "on or before": "until", "not on or after": "before"}.get(
            on_or.group("c"), "earliest"
        )
    near = _trim_to_conjunction(pre)
    if _UNTIL_AFTER.search(near):
        # "don't call me until after the 14th", "not till after the 14th": the 15th at the earliest.
        return "after_strict"
    blocked = bool(_BLOCKED.search(near) or _post_blocked(post))
    cue = _last_match(_CUE, near)
    if cue is None:
        return "exclude" if blocked or _NEG.search(near) else "on"
    word, negated = cue["c"], bool(_NEG.search(near[: cue.start()]))
    if word in ("not until", "not till"):
        return "earliest"
    if word in ("until", "till", "til", "through", "thru", "up to", "up until", "up till"):
        if negated:
            return "earliest"
        # "until X" is a window the caller offers only when they say so ("any day until", "free till", "need
        # the van till"); otherwise it is how long something keeps them busy: "on nights till the 20th",
        # "living out of boxes till the 6th".
        after = _cut_at_conjunction(post)
        # "nights till Sunday, then I'm free": the words after "then" are about the days after the limit.
        offered = _UNTIL_OFFERED.search(near) or (_UNTIL_OFFERED.search(after) and not _THEN_AFTER.match(post))
        # No one offering the window and no place named: whoever is kept busy ("placement through the 4th", "up to
        # the 27th it's every day"), the days up to it are out; a window is offered in words ("any day till").
        return "until_blocked" if blocked or (not offered and not _UNTIL_AT.search(near)) else "until"
    if word in ("before", "prior to", "ahead of"):
        return "earliest" if negated or blocked else "before"
    if word in ("not before", "earliest") or (
        word.endswith(" than") and ("earlier" in word or "sooner" in word)
    ):
        return "earliest"
    if word.endswith(" than") and "later" in word:
        return "until"
    if word == "after":
        return "latest" if negated or blocked else "after"
    if word in ("not after", "latest"):
        return "latest"
    if word in ("no later than", "by", "within"):
        return "until"
    # from / starting / as of / since
    if negated or blocked or _UNREACHABLE.search(sentence_post):
        # "from the 12th it's the Christmas rush, I am not picking up a phone": busy from then on
        return "day_before"
    if (_ACTIVITY.search(near) and _UNTIL_MINE.search(near) and not _UNTIL_OFFERED.search(near)
            and not _RETURNING.search(near)):
        return "day_before"  # "we're shearing from the 30th": kept busy from then on, not free from then
    return "earliest"


def _constraints(expr: _Expr, mode: str) -> list[tuple[ConstraintKind, date | None, date | None, int | None, bool]]:
    """(kind, start, end, weekday, blocked) tuples for one expression read in ``mode``."""
    K = ConstraintKind
    lo, hi = expr.lo, expr.hi
    if expr.shape == "weekdays":
        return [(K.EXCLUDE_WEEKDAY, None, None, wd, True) for wd in expr.weekdays] if mode == "exclude" else []
    single = expr.shape in ("day", "weekday")
    if mode == "exclude":
        if expr.shape == "weekday" and expr.movable:  # "not Tuesday": every Tuesday, unless a week was named
            return [(K.EXCLUDE_WEEKDAY, None, None, expr.weekdays[0], True)]
        return [(K.EXCLUDE_DATE, lo, lo, None, True)] if single else [(K.RANGE, lo, hi, None, True)]
    if mode == "until_blocked":
        return [(K.UNTIL, None, hi, None, True)]
    if mode == "until":
        return [(K.UNTIL, None, hi, None, False)]
    if mode == "before":
        return [(K.BEFORE, None, lo - timedelta(days=1), None, False)]
    if mode == "latest":
        return [(K.BEFORE, None, hi, None, False)]
    if mode == "day_before":
        return [(K.BEFORE, None, lo - timedelta(days=1), None, False)]
    if mode == "after":
        # "after the 3rd" is loose speech for "from the 3rd"; "after next week" starts once it is over.
        return [(K.AFTER, lo if single else hi + timedelta(days=1), None, None, False)]
    if mode == "after_strict":
        return [(K.AFTER, (lo if single else hi) + timedelta(days=1), None, None, False)]
    if mode == "earliest":
        return [(K.AFTER, lo, None, None, False)]
    return [(K.ON, lo, lo, None, False)] if single else [(K.RANGE, lo, hi, None, False)]


def _boundaries(norm: Normalised) -> tuple[list[int], list[int]]:
    """Clause and sentence break positions in the normalised text.

    A comma before a year ("December 14, 2026") belongs to the date, not a break.
    """
    clauses: list[int] = []
    sentences: list[int] = []
    tokens = norm.tokens
    for i, (tok, off) in enumerate(zip(tokens, norm.offsets, strict=True)):
        if len(tok.norm) != 1 or tok.norm not in ".!?;,:":
            continue
        if tok.norm == "," and i + 1 < len(tokens) and _YEAR_TOKEN.fullmatch(tokens[i + 1].norm):
            continue
        if tok.norm == "," and 0 < i < len(tokens) - 1 and tokens[i - 1].norm in WEEKDAYS and (
            tokens[i + 1].norm in MONTHS or tokens[i + 1].norm[:1].isdigit() or tokens[i + 1].norm == "the"
        ):
            continue  # "Wednesday, August 25th": one date, not two clauses
        clauses.append(off)
        if tok.norm not in ",:":
            sentences.append(off)
    return clauses, sentences


def _index_of(breaks: list[int], pos: int) -> int:
    return bisect.bisect_left(breaks, pos)  # breaks are in text order


def _segment(norm: Normalised, breaks: list[int], index: int) -> tuple[int, int]:
    """Normalised span of the ``index``-th clause or sentence."""
    start = breaks[index - 1] + 1 if index > 0 else 0
    end = breaks[index] if index < len(breaks) else len(norm.text)
    return start, end


def _original(norm: Normalised, start: int, end: int) -> str:
    piece = norm.text[start:end].strip()
    if not piece:
        return ""
    lead = start + (len(norm.text[start:end]) - len(norm.text[start:end].lstrip()))
    s, e = norm.original_span(lead, lead + len(piece))
    return norm.original[s:e].strip()


def _clause_text(norm: Normalised, clauses: list[int], e: _Expr) -> str:
    """The normalised clause that holds ``e``."""
    start, end = _segment(norm, clauses, _index_of(clauses, e.start))
    return norm.text[start:end]


def _purpose(sentence: str) -> str | None:
    for name, pattern in _PURPOSES:
        if pattern.search(sentence):
            return name
    return None


_UNREACHABLE = re.compile(
    r"\b(?:not|never|won't|can't|cannot|no)\s(?:be\s)?(?:picking\sup|pick\sup|answering|answer|taking\scalls|take\scalls"
    r"|reachable|contactable|near\sa\sphone|on\sthe\sphone)|\bphone(?:'s|\sis|\swill\sbe)\s(?:off|in\sa\slocker)"
    r"|\bno\s(?:phone|signal|calls)\b"
)
"""The caller saying they cannot be reached, anywhere in the sentence: "I am not picking up a phone"."""
_ACTIVITY = re.compile(
    r"\b(?!(?:start|begin|call|ring|phon|morn|even|noth|anyth|someth|everyth|dur|be|br|th|k|s)ing\b)[a-z]{2,}ing\b")
"""A verb of doing something ("shearing", "decorating"), not a cue or a noun ("starting", "morning", "nothing")."""
_RETURNING = re.compile(r"\b(?:back|home|return\w*|free|around|about|off)\b")
"""Being back or free from a day on ("I'm back from the 30th"): that day opens the window."""

MAX_EXPRESSIONS = 48
"""Most dates read from one utterance (the first and the last half of them)."""

_FROM_THEN = re.compile(r"\b(?:from\s(?:then|that\sday)|then\son)\b")
"""Words that start a stretch at the day just named: "from then I'm flat out till"."""
_AFTER_THEN = re.compile(r"\b(?:after\sthat|and\sthen|afterwards)\b")
"""Words that start a stretch the day after the one just named: "the 20th, and after that I'm away till"."""
_SETTING_OFF = re.compile(r"\b(?:go|goes|going|leave|leaves|leaving|fly|flies|flying|head|heading|set\soff|start"
                          r"|starts|starting|begin|begins|beginning|off\sto|away\sto)\b")
"""Words of setting off on the day named next: "I go on the 23rd", "it starts about the 14th"."""
_STAY = re.compile(
    r"^\W*(?:[\w']+\s){0,4}?for\s(?P<fuzzy>(?:about|around|roughly|approximately|maybe|probably|like)\s)?"
    r"(?:a\s|the\s)?(?P<n>\d{1,2}|few|couple(?:\sof)?)?\s?(?P<u>days?|nights?|weeks?|fortnight)\b(?P<rest>.*)$"
)
_STAY_BARE = re.compile(r"^\W*(?P<n>\d{1,2})\s(?P<u>days?|nights?|weeks?)\b(?P<rest>.*)$")
"""A count straight after the day, without "for": "starting Monday, four days of it"."""
_OPEN_ENDED = re.compile(r"\b(?:or\s(?:more|longer|so)|at\sleast|could\sbe\s(?:more|longer)|maybe\s(?:more|longer)"
                         r"|depending|depends|not\ssure|who\sknows|as\slong\sas|until|till|or\stwo)\b")
_STAY_DAYS = {"day": 1, "night": 1, "week": 7, "fortnight": 14}
_RECURRING = re.compile(
    r"^\s?(?:(?:a|1|per|every|each|in\sa|in\s1|out\sof)\s(?:\d\s)?(?:week|weeks|fortnight|month|day|shift|rota)\b"
    r"|(?:on|off)\b)")  # "3 days on, 4 off": a rota
"""After a count of days: a rate ("for 5 days a week") or a rota ("3 days on"), kept from then on, not a stay."""


def _stay(after: str) -> int | None:
    """How many days a stay said after a day lasts ("for five days", "for about a week"), with a margin for
    "about"; None when none is said or it may run on ("for a week or more", "depending")."""
    m = _STAY.match(after) or _STAY_BARE.match(after)
    if m is None or _OPEN_ENDED.search(after) or _RECURRING.match(m["rest"]):
        return None
    if m["n"] is None and m["u"].endswith("s"):
        return None  # "for weeks", "for days": no end said
    n = {"few": 5, "couple": 2, "couple of": 2}.get(m["n"] or "") or int(m["n"] or 1)
    unit = m["u"].rstrip("s")
    days = n + 1 if unit == "night" else n * _STAY_DAYS[unit]  # three nights from the 23rd: home on the 26th
    return -(-days * 3 // 2) if m.groupdict().get("fuzzy") or m["n"] == "few" else days


_NOT_BACK = re.compile(r"(?:\bnot|n't|\bnever)\s(?:be\s)?(?:back|home|return\w*)\b")
"""Not being back until a day: the time away ends the day before it."""


def _pair_ranges(norm: Normalised, exprs: list[_Expr], clause_of: Callable[[int], int]) -> list[_Expr]:
    """Joins "from E1 till E2" / "between E1 and E2" / "E1 to E2" into one span."""
    out: list[_Expr] = []
    i = 0
    while i < len(exprs):
        e1 = exprs[i]
        if i + 1 < len(exprs) and clause_of(e1.start) == clause_of(exprs[i + 1].start):
            e2 = exprs[i + 1]
            link = norm.text[e1.end : e2.start].strip()
            before = norm.text[: e1.start].rstrip()
            if _RANGE_LINK.match(link) and (link != "and" or before.endswith("between")) and e2.shape != "weekdays":
                hi = e2.hi
                if hi < e1.lo and e2.redo is not None:
                    hi = e2.redo(e1.lo) or hi
                if hi >= e1.lo:
                    out.append(_Expr(e1.start, e2.end, e1.lo, hi, "span", explicit_range=True))
                    i += 2
                    continue
        out.append(e1)
        i += 1
    return out


_UNTIL_THEN = re.compile(
    r"\b(?:until|till|til|through|thru|up\sto|up\suntil|up\still)\s(?P<a>then|that\sday|that\sdate)\b")
"""An absence that runs "until then": the end is the day named last before it ("not before the 14th, I'm away
until then")."""


def _anaphors(norm: Normalised, exprs: list[_Expr], reference: date) -> list[_Expr]:
    """``exprs`` with each "until then" / "till that day" read as the day (or span) named last before it, when that
    day is still to come (an absence cannot end on a day gone by)."""
    added: list[_Expr] = []
    for m in _UNTIL_THEN.finditer(norm.text):
        start, end = m.start("a"), m.end("a")
        before = [e for e in exprs if e.end <= start and e.shape in ("day", "span", "weekday")]
        if before and before[-1].hi < reference:
            continue
        if not before or any(e.start < end and start < e.end for e in exprs):
            continue
        named = before[-1]
        added.append(_Expr(start, end, named.lo, named.hi, "day" if named.lo == named.hi else "span", anaphor=True))
    return sorted([*exprs, *added], key=lambda e: e.start) if added else exprs


@lru_cache(maxsize=8192)
def _extract(text: str, reference: date) -> tuple[DateConstraint, ...]:
    if not _HINT.found(text):
        return ()  # most utterances name no date: skip the rule layer
    norm = normalise(text)
    clauses, sentences = _boundaries(norm)

    def clause_of(pos: int) -> int:
        return _index_of(clauses, pos)

    past = frozenset(i for i in range(len(clauses) + 1) if _PAST.search(norm.text[slice(*_segment(norm, clauses, i))]))
    ctx = _Context(norm, reference, clause_of, past)
    exprs = _anaphors(norm, _pair_ranges(norm, _find_expressions(ctx), clause_of), reference)
    if len(exprs) > MAX_EXPRESSIONS:
        # A recogniser looping on "the 9th the 9th ..." would cost seconds on the event loop that every call of the
        # worker shares: the first and the last dates are read (no caller names this many in one breath).
        half = MAX_EXPRESSIONS // 2
        exprs = exprs[:half] + exprs[-half:]

    # An unqualified weekday in a sentence that names a week is that week's weekday ("next week except Wednesday").
    weeks = [e for e in exprs if e.week is not None]
    for e in exprs:
        same = [w for w in weeks if _index_of(sentences, w.start) == _index_of(sentences, e.start)]
        if e.movable and same:
            week = min(same, key=lambda w: abs(w.start - e.start))
            e.lo = e.hi = (week.week or week.lo) + timedelta(days=e.weekdays[0])
            e.movable = False

    _pin_weekdays(norm, exprs, sentences)

    out: list[DateConstraint] = []
    prev: _Expr | None = None
    for n, e in enumerate(exprs):
        c_start, c_end = _segment(norm, clauses, clause_of(e.start))
        same_clause = prev is not None and clause_of(prev.start) == clause_of(e.start)
        pre_from = max(c_start, prev.end) if prev is not None and same_clause else c_start
        # The next date of the same clause (expressions are in text order).
        nxt = [x.start for x in exprs[n + 1 : n + 2] if clause_of(x.start) == clause_of(e.start)]
        pre = norm.text[pre_from : e.start].strip()
        post = norm.text[e.end : min([c_end, *nxt])].strip()
        if e.explicit_range:
            pre = re.sub(r"\b(?:from|between)$", "", pre).strip()
        if prev is not None and same_clause and _COORDINATION.match(pre) and not (
            not pre and prev.mode == "exclude" and _CORRECTION_LEAD.search(norm.text)
        ):
            mode = prev.mode  # "not Tuesday or Wednesday": the list shares its cue
        elif _I_SAID.search(pre) and _I_MEANT.search(norm.text):
            mode = "exclude"  # "I said the 15th, I meant the 22nd": the day taken back
        elif e.shape == "day" and _INTERJECTION.match(pre + " ") and not _EXCLUDE_AFTER.search(post):
            mode = "on"  # "no no the fifteenth": a correction to that day, not a day ruled out
        else:
            s_from = _segment(norm, sentences, _index_of(sentences, e.start))[0]
            s_to = _segment(norm, sentences, _index_of(sentences, e.start))[1]
            mode = _mode(pre, post, followed=bool(nxt), sentence_pre=norm.text[s_from : e.start].strip(),
                         sentence_post=norm.text[e.end : s_to])
            if e.explicit_range and mode != "exclude":
                # "unreachable from the 1st to the 5th": a span they are away is ruled out, not offered.
                if _BEYOND.search(post):  # "from the 3rd to the 9th, I'm away either side": the span is free
                    mode = "exclude" if _BLOCKED.search(_trim_to_conjunction(pre)) else "on"
                else:
                    near = _trim_to_conjunction(pre) + " " + _cut_at_conjunction(post)
                    # "from the 7th to the 11th, flat out, no calls": the rest of the sentence up to a conjunction
                    away = (_BLOCKED.search(near) or _BLOCKED.search(_clause_text(norm, clauses, e))
                            or (_OUT_OF_REACH.search(rest := _cut_at_conjunction(norm.text[e.end : s_to]))
                                and not _OFFERED_HERE.search(rest)))
                    mode = "exclude" if away else "on"
        e.mode = mode
        s_index = _index_of(sentences, e.start)
        sentence = _original(norm, *_segment(norm, sentences, s_index))
        lowered = sentence.lower()
        local = " ".join(
            p for p in (_trim_to_conjunction(pre), norm.text[e.start : e.end], _cut_at_conjunction(post)) if p
        )
        s_lo, s_hi = _segment(norm, sentences, s_index)
        head = " ".join(p for p in (_trim_to_conjunction(pre), norm.text[e.start : e.end]) if p)
        reading = classify(local, norm.text[s_lo:s_hi], mode=mode, past=ctx.past(e.start), head=head)
        if reading.subject is DateSubject.TRIP and mode == "exclude":
            mode = "on"  # "I'm travelling to Rome on the 3rd": where they will be, not a day ruled out
        spans = _constraints(e, mode)
        if e.anaphor and mode != "until_blocked":
            spans = []  # only an absence "until then" is read ("I'll have the van until then" says nothing new)
        if mode in ("until_blocked", "after_strict") and prev is not None and prev.mode == "on" and (
                prev.lo <= e.hi and _index_of(sentences, prev.start) == s_index):
            # "starts about the 14th and from then I'm flat out till Christmas", "I go on the 23rd and I'm there
            # till after New Year": the time kept busy runs from the day named before it, not from today.
            between = norm.text[prev.end : e.start]
            lead = norm.text[s_lo : prev.start]
            if _AFTER_THEN.search(between):  # "... Friday the 20th, and after that I'm away till": the day after
                spans = [(ConstraintKind.RANGE, prev.hi + timedelta(days=1), e.hi, None, True)]
            elif _FROM_THEN.search(between) or _SETTING_OFF.search(lead):
                spans = [(ConstraintKind.RANGE, prev.lo, e.hi, None, True)]
        # a day, or a weekday the rules pinned to one day ("starting Monday")
        one_day = e.shape == "day" or (e.shape == "weekday" and e.lo == e.hi)
        stay = _stay(norm.text[e.end : s_hi]) if mode == "day_before" and one_day else None
        if stay is None and mode == "on" and one_day and _SETTING_OFF.search(norm.text[s_lo : e.start]):
            stay = _stay(norm.text[e.end : s_hi])  # "I'm off to Leeds on the 25th for two days": away that long
        if stay is not None:
            # "in hospital from the 23rd for about a week": busy for that long, not from then on
            spans = [(ConstraintKind.RANGE, e.lo, e.lo + timedelta(days=stay - 1), None, True)]
        if (mode == "earliest" and prev is not None and prev.mode == "on" and prev.lo < e.lo
                and _index_of(sentences, prev.start) == s_index and _NOT_BACK.search(norm.text[prev.end : e.start])
                and _SETTING_OFF.search(norm.text[s_lo : prev.start])):
            # "I'm off to Jean's on the 30th and I'll not be back till the Thursday": away from the day named
            # before it until the day back, not only "from the Thursday"
            spans = [(ConstraintKind.RANGE, prev.lo, e.lo - timedelta(days=1), None, True)]
        for kind, start, end, weekday, blocked in spans:
            item = DateConstraint(
                kind=kind,
                start=start,
                end=end,
                weekday=weekday,
                text=sentence,
                purpose=_purpose(lowered),
                blocked=blocked,
                correction=reading.kind is StatementKind.CORRECTION or has_correction_cue(norm.text[s_lo:s_hi]),
                subject=reading.subject,
                statement=reading.kind,
                topic=reading.topic,
                role=reading.role,
            )
            if item not in out:
                out.append(item)
        prev = e
    return tuple(out)


_APPOSITION = re.compile(r"^(?:\s|,|\.|-|'s\b|\b(?:the|then|that's|that|is|it's|on|so|yes|yeah|aye|fine|good|ok|okay"
                         r"|grand|great|perfect|works|suits|please)\b)*$")
"""What may stand between a weekday and the day number it names ("Saturday then, the 28th", "the 4th, Friday")."""
_A_WEEKDAY = re.compile(r"(?:,|\b(?:that's|that\sis|it's|it\sis|which\sis|which's))\s(?:a|an)\s$")
"""What says a weekday is the weekday of the day just named: "the 3rd of December, a Thursday"."""
_AFTER_A_DAY = re.compile(r"\b(?:the|until|till|til|through|thru|to|before|by|back|while)\s$")
"""Words before a weekday that make it the next such day after a day just named ("on the 30th ... back the
Thursday", "from Monday the 30th till Thursday")."""


def _pin_weekdays(norm: Normalised, exprs: list[_Expr], sentences: list[int]) -> None:
    """Places an unqualified weekday by the day numbers said beside it, in place.

    A weekday beside a day number that falls on it is that day ("Saturday then, the 28th", "the 4th, Friday");
    "the Thursday" or "till Thursday" after a later day named in the same sentence is the next Thursday from that
    day ("off on Monday the 30th and not back till the Thursday"), not the nearest to today.
    """
    for i, e in enumerate(exprs):
        if e.shape != "weekday" or not e.movable:
            continue
        sentence = _index_of(sentences, e.start)
        # "the 3rd of December, a Thursday", "would the 3rd work for you, that's a Thursday?"
        named = [o for o in exprs[:i] if o.shape == "day" and _index_of(sentences, o.start) == sentence]
        if named and named[-1].lo.weekday() == e.weekdays[0] and _A_WEEKDAY.search(norm.text[: e.start]):
            e.lo = e.hi = named[-1].lo
            e.movable = False
            continue
        for j in (i + 1, i - 1):
            if not 0 <= j < len(exprs):
                continue
            o = exprs[j]
            gap = norm.text[e.end : o.start] if j > i else norm.text[o.end : e.start]
            if (o.shape == "day" and o.lo.weekday() == e.weekdays[0] and len(gap) <= 24
                    and _APPOSITION.match(gap) and _index_of(sentences, o.start) == sentence):
                e.lo = e.hi = o.lo
                e.movable = False
                break
        else:
            days = [o for o in exprs[:i] if o.shape == "day" and _index_of(sentences, o.start) == sentence]
            if days and days[-1].lo > e.lo and e.redo is not None and _AFTER_A_DAY.search(norm.text[: e.start]):
                placed = e.redo(days[-1].lo)
                if placed is not None:
                    e.lo = e.hi = placed
                    e.movable = False


def extract_constraints(text: str, reference: date) -> list[DateConstraint]:
    """Reads the date constraints in one utterance.

    Resolution is against ``reference`` only (never the machine clock). Digit
    runs in identifier contexts (account/order/invoice/card/phone numbers,
    three or more digit groups, mixed letters and digits) never become dates;
    a bare number is a day only as an ordinal ("14th", "fourteenth"), beside a
    month name, or after "the".

    Args:
        text: The utterance, as transcribed.
        reference: The day the call takes place.

    Returns:
        The constraints, in the order said. See ``DateConstraint`` for the
        meaning of each kind and of ``blocked``.
    """
    return list(_extract(text, reference))


def clear_cache() -> None:
    """Drops cached extractions (for benchmarks of the cold path)."""
    _extract.cache_clear()
    weekdays_allowed.cache_clear()
    relative_month.cache_clear()


_WEEKDAYS_OK = re.compile(
    rf"\b(?P<wd>{_WD})s\s(?:are\s|is\s|'re\s)?(?:ok|okay|fine|good|alright|all\sright|free|no\sproblem|not\sa\sproblem)\b"
    rf"|\b(?P<wd2>{_WD})s\s(?:work|suit)\b"
)


@lru_cache(maxsize=8192)
def weekdays_allowed(text: str) -> frozenset[int]:
    """Weekdays the caller now says are fine ("sorry, Fridays are OK, it's Tuesdays that are bad").

    A later utterance like this lifts an earlier "no Fridays". Cached like the extraction: the
    guard asks again for every utterance on every check.
    """
    names = (m["wd"] or m["wd2"] for m in _WEEKDAYS_OK.finditer(normalise(text).text))
    return frozenset(WEEKDAYS[n] for n in names if n in WEEKDAYS)
