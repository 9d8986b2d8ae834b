"""What a date statement is about, and what kind of statement it is.

The cue-word layer in ``extract`` says *when* (a day, a window, a limit); this module says
*about what* and *what for*, from the words around the date expression:

* subject: the caller's availability (when they can be reached), a trip (where they will be),
  a booking's dates (a car, a room, a flight, a callback), a charge period (what was billed
  when), a deadline for something else ("I'll let you know by Monday"), or none;
* kind: a constraint (limits the dates), an event (something happens then), a request (asks
  for that date), a correction (replaces an earlier date), or none;
* topic and role: the thing booked ("car", "hotel", "callback") and which end of it
  ("start": pick-up, check-in, departure; "end": drop-off, check-out, return).

Tools say which subjects bind each date parameter (``ToolParam.binds``); only binding
statements can block or confirm a date. Everything here is plain word lists over the text the
caller said: no model, no state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class DateSubject(StrEnum):
    """What a date statement is about."""

    AVAILABILITY = "availability"
    TRIP = "trip"
    BOOKING = "booking"
    CHARGE_PERIOD = "charge_period"
    DEADLINE = "deadline"
    NONE = "none"


class StatementKind(StrEnum):
    """What a date statement does."""

    CONSTRAINT = "constraint"
    EVENT = "event"
    REQUEST = "request"
    CORRECTION = "correction"
    NONE = "none"


@dataclass(frozen=True)
class Reading:
    """The classification of one date expression in its clause.

    Attributes:
        subject: What it is about.
        kind: What it does.
        topic: The thing it is about ("car", "hotel", "flight", "callback", ...), if said.
        role: "start" or "end" of that thing (pick-up / drop-off), if said.
    """

    subject: DateSubject
    kind: StatementKind
    topic: str | None = None
    role: str | None = None


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(alternatives) + r")\b")


# Being reached, or not: the subject of a callback.
_REACH = _rx(
    r"call(?:s|ed|ing)?", r"ring(?:s|ing)?", r"phone(?:s|d)?", r"reach(?:ed)?", r"contact(?:ed)?", r"get\shold",
    r"speak", r"talk", r"call\s?backs?", r"get\sback\sto\sme",
    r"(?:i'm|i\sam|we're|be|i'll\sbe|i'd\sbe)\s(?:\w+\s)?free",
    r"free\s(?:on|from|after|any|all|most|every)", r"available", r"availability",
    r"(?:be|i'm|i\sam|we're|not)\saround", r"(?:be|i'm|i\sam|we're|not)\s(?:at\s)?home", r"in\sthe\soffice",
    r"pick\sup\sthe\sphone", r"answer\sthe\sphone", r"catch\sme", r"try\sme",
    r"reachable", r"unreachable", r"hear\sfrom\syou", r"follow\sup",
)
_UNREACHABLE = _rx(
    r"away", r"abroad", r"unavailable", r"busy", r"travel+ing", r"on\s(?:a\s)?trip", r"on\sholiday",
    r"on\svacation", r"on\sleave", r"out\sof\s(?:town|the\scountry|office|the\soffice|reach)", r"tied\sup",
    r"in\shospital", r"off\sgrid", r"no\ssignal", r"overseas", r"on\sbusiness", r"booked\sup", r"snowed\sunder",
    r"not\s(?:around|available|free|reachable|home|back|in)",
    r"(?:can't|cannot|won't\sbe\sable\sto)\s(?:talk|take\scalls)",
    r"(?:i'm|i\sam|we're|we\sare|i'll\sbe|i\swill\sbe)\sout", r"unreachable", r"off\sthe\sgrid",
    r"in\s(?:surgery|hospital|a\smeeting|meetings|court|class|exams?|theatre|bed)",
    r"at\s(?:work|the\sdentist|the\sdoctor'?s?)",
    r"asleep", r"working\s(?:away|nights|late|all\sday|double\sshifts?)", r"work\snights", r"no\sphone",
    r"hopeless", r"recovering", r"off\s(?:the\s)?grid",
    r"(?:no|won't\shave\s(?:a|any)|without\s(?:a|any)?|not\shave\s(?:a|any))\s?(?:phone(?:\sline)?|signal|reception|internet|wi-?fi)",
    r"phone\s(?:is\s|will\sbe\s)?(?:off|switched\soff|dead)",
)
# Hedged: "I might be away next week, not sure yet" states no limit yet.
_HEDGE = _rx(r"might", r"may\sbe", r"maybe", r"possibly", r"not\ssure", r"perhaps", r"could\sbe", r"not\scertain",
             r"don't\sknow\syet", r"no\sidea\syet")
_WINDOW = _rx(r"any", r"anytime", r"only", r"whenever", r"whichever", r"either", r"all", r"ha(?:s|ve)\sto\sbe",
              r"must\sbe", r"needs?\sto\sbe", r"it'll\shave\sto")
# "... would suit me, I'm away otherwise": the days named are the only ones, a constraint and not a wish.
_ONLY_THEN = _rx(r"otherwise", r"either\sside", r"outside\s(?:of\s)?(?:that|those|it|then)",
                 r"the\srest\sof\sthe\stime")
# Where the caller will be: a trip is an event, not a blocked day, unless they say they cannot be reached.
_TRIP = _rx(
    r"fly(?:ing)?\s(?:to|out|in|into|back|home|over)", r"flying", r"trip\sto", r"travel+ing\sto", r"travel\sto",
    r"visit(?:ing)?", r"going\s(?:to|up\sto|down\sto|over\sto)", r"heading\s(?:to|out|up|down)",
    r"driv(?:e|ing)\s(?:to|up|down)",
    r"(?:be|i'm|i\sam|we're|we'll\sbe|i'll\sbe)\s(?:in|at)\s(?!the\soffice|work|hospital|a\smeeting|meetings|surgery"
    r"|court|class|exams?|bed|the\sdentist|the\sdoctor|home)[a-z]+",
    r"staying\s(?:in|at|with)", r"wedding", r"conference", r"festival", r"arriv(?:e|ing|es)", r"land(?:s|ing)\sin",
    r"leav(?:e|ing)\sfor", r"back\sfrom", r"moving\s(?:to|house)", r"move\sto\s[a-z]+", r"in\stown",
    r"off\sto", r"on\sthe\sroad", r"cruise", r"stag\sdo", r"hen\sdo", r"flight\shome", r"flies", r"leaves\sfrom",
)
# Someone else's plans, or a thing's dates, say nothing about the caller: "my daughter flies in on the 12th".
_THIRD_PARTY = re.compile(
    r"^\W*(?:my|our|his|her|their|the)\s(?:\w+\s)?(?:son|daughter|wife|husband|partner|mum|mom|dad"
    r"|brother|sister|friend|boss|kids?|family|parents|neighbou?r|colleague)s?\b"
)
_HELD_THING = re.compile(
    r"\b(?:need|have|keep|keeping|borrow\w*|got|rent\w*|hire\w*|booked|lend\w*|using|use)\s(?:the|a|my|our|his|her"
    r"|their)\s(?P<thing>[a-z]+)"
    # "I'll actually need it until March 10th": the thing named before, kept until then
    r"|\b(?:need|keep|keeping|have|using|use)\s(?P<it>it|them)\s(?:\w+\s)?(?=(?:until|till|til|through|thru)\b)"
)
# A clause whose subject is a product or offer: "my free trial of the calling bundle runs until the 29th".
_THING_SUBJECT = re.compile(
    r"^\W*(?:my|the|our|your|this|that)\s(?:[\w-]+\s){0,5}?(?:trial|offer|contract|discount|deal|bundle|plan|package"
    r"|subscription|warranty|promotion|promo|price|rate|tariff)s?\b(?!\s(?:me|you))"
)
_THING_DEADLINE = re.compile(
    r"\b(?:credit|refund|cheque|check|router|parcel|package|payment|money|transfer|letter|card|form|paperwork"
    r"|documents?|trial|offer|promo(?:tion)?|warranty|contract|deal|discount|bundle)s?\b"
)
_CHARGE = _rx(
    r"bill(?:s|ed|ing)?", r"charg(?:e|es|ed|ing)", r"fees?", r"invoices?", r"statements?", r"payments?", r"paid",
    r"debit(?:s|ed)?", r"direct\sdebit", r"price", r"prices", r"costs?", r"subscriptions?", r"renew(?:al|ed|s)?",
    r"overcharged", r"tariff", r"rose", r"went\sup", r"gone\sup", r"increase[ds]?", r"instal+ments?",
    r"premium", r"rate",
    r"(?:phone|data|price|payment|family|mobile|broadband|tv|pricing|monthly)\splan",
    r"account\swas", r"taken\sout", r"came\sout", r"went\sout", r"discount",
    r"balance", r"usage", r"money", r"paperless", r"line\srental", r"meter", r"readings?", r"overdue", r"quid",
    r"pounds", r"dollars", r"euros", r"cancell?ed", r"refund(?:ed)?", r"took\sthe", r"package", r"contract",
    r"disput(?:e|es|ed|ing)", r"transactions?", r"credit(?:ed|s)?", r"compensation",
)
# Habit, not a date: "every Monday I get a text", "the bill usually comes on a Tuesday".
_HABIT = _rx(r"every", r"each", r"usually", r"always", r"normally", r"generally", r"typically", r"in\sa\srow")
# The caller's own later action: a deadline for something else, not a limit on the booking.
_OWN_DEADLINE = re.compile(
    r"\b(?:i|we)(?:'ll|\swill|\scan|\sshould|'d|\swould|\sneed\sto|\shave\sto|\smust|'ve\sgot\sto)?\s"
    r"(?:let\syou\sknow|get\sback\sto\syou|decide|confirm|send|email|e-mail|post|upload|pay|sort|think\sabout"
    r"|check|find\sout|have\san\sanswer|talk\sto|ask|call\syou|ring\syou|phone\syou|come\sback\sto\syou|return"
    r"|submit|fill|sign|book|finish|hand\sin|drop\sit|call|ring|phone|contact|speak\sto|see)\b"
    r"|\b(?:due|deadline|expires?|expiry|runs\sout|valid\suntil|valid\still)\b"
)
_RETURN_IT = re.compile(r"\b(?:return|drop|bring)(?:ing)?\s(?:it|them)(?:\sback|\soff)?\b")
_BOOK = _rx(
    r"book(?:ing|ed)?", r"reserv(?:e|ation|ed)", r"schedul(?:e|ed)", r"arrange", r"set\sup", r"put\sme\sdown",
    r"rent(?:al|ing)?", r"hire", r"need\s(?:a|the|it|one)", r"want\s(?:a|the|it)", r"get\sme", r"tickets?",
    r"pick\s?-?\s?up", r"drop\s?-?\s?off", r"check\s?-?\s?(?:in|out)", r"depart(?:ure|ing)?", r"return(?:ing)?",
    r"leav(?:e|ing)", r"come\sback", r"coming\sback",
)
_TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("callback", _rx(r"call(?:\sme)?\s?back", r"callbacks?", r"ring\s(?:me\s)?back", r"call\sme", r"ring\sme",
                     r"phone\sme", r"give\sme\sa\s(?:call|ring|bell)", r"get\sback\sto\sme", r"reach\sme",
                     r"contact\sme", r"catch\sme", r"try\sme", r"follow\sup",
                     # the agent's side of it: "I can book a specialist to call you on the 3rd"
                     r"(?:call|ring|phone)\syou(?:\sback)?")),
    ("car", _rx(r"cars?", r"vans?", r"vehicles?", r"suv", r"trucks?", r"minibus", r"sedan", r"hatchback", r"rental",
                r"hire\scar", r"pick\s?-?\s?(?:it|the\s\w+)\s?up", r"drop\s?-?\s?(?:it|the\s\w+)\soff",
                r"pick-?up\s(?:date|time|location)", r"drop-?off")),
    ("hotel", _rx(r"hotels?", r"rooms?", r"check\s?-?\s?in", r"check\s?-?\s?out", r"checking\s(?:in|out)",
                  r"(?:\d+|#num|a)\snights?", r"suite", r"airbnb", r"apartment", r"motel", r"b\s?&\s?b",
                  r"cottage", r"villa", r"flat", r"cabin", r"lodge", r"chalet")),
    ("flight", _rx(r"flights?", r"fly(?:ing)?", r"plane", r"airline", r"outbound", r"return\sflight")),
    ("bus", _rx(r"bus(?:es)?", r"coach", r"trains?", r"rail")),
    ("event", _rx(r"tickets?", r"shows?", r"concerts?", r"games?", r"match", r"events?", r"gig", r"play")),
    ("restaurant", _rx(r"tables?", r"dinner", r"lunch", r"restaurant", r"brunch")),
    ("appointment", _rx(r"appointments?", r"engineer", r"technician", r"install(?:ation)?", r"fitting",
                        r"viewing", r"come\s(?:round|over|out)")),
    ("delivery", _rx(r"deliver(?:y|ed)?", r"shipping", r"ship(?:ped)?", r"courier", r"parcel")),
)
_START = _rx(r"pick(?:ing)?\s?-?\s?(?:it\s)?up", r"collect", r"check\s?-?\s?in", r"checking\sin", r"depart(?:ure|ing)?",
             r"leav(?:e|ing)", r"outbound", r"start(?:ing)?", r"arriv(?:e|al|ing)", r"going\sout", r"fly\sout",
             r"begin(?:ning)?")
_END = _rx(r"drop(?:ping)?\s?-?\s?(?:it\s)?off", r"return(?:ing)?", r"bring\s(?:it|the\s\w+)\sback",
           r"check\s?-?\s?out",
           r"checking\sout", r"coming\sback", r"come\sback", r"fly(?:ing)?\s(?:back|home)", r"back\shome",
           r"end(?:ing)?", r"keep\s(?:it|the\s\w+)")
_CORRECTION = re.compile(
    r"\b(?:actually|instead|make\sit|make\sthat|make\s(?:the|my)\s[\w-]+(?:\s[\w-]+)?\s(?:the|on|for)"
    r"|change\s(?:it|that|this|the\s[\w-]+(?:\sdate)?)\sto|move\s(?:it|that|this|the\s[\w-]+(?:\sdate)?)\s(?:to|back\sto|forward\sto)"
    r"|push\s(?:it|that|the\s[\w-]+)\s(?:back\s)?to|bring\s(?:it|that|the\s[\w-]+)\sforward\sto|reschedule"
    r"|switch\s(?:it\s|that\s)?to|swap\s(?:it\s)?(?:to|for)|rather|scratch\sthat|on\ssecond\sthoughts?"
    r"|no\swait|wait,?\sno|oh\swait|hang\son|hold\son|i\smeant?|correction|change\sof\splans?|let's\smake\sit"
    r"|better\smake\sit"
    # the caller's circumstances changed: "good news, I'm back early", "my trip got extended"
    r"|back\searly|cut\sshort|plans?\s(?:have\s)?changed|(?:got|been|was|is)\s(?:extended|cancel+ed|moved|postponed)"
    r"|(?:is|are|'s)\s(?:fine|ok|okay|good)\snow"
    r"|not\sthe\s\w+,?\s(?:the|it's|but)|i\ssaid\sthe|i\sshould\shave\ssaid|my\smistake|my\sbad)\b"
    r"|^\W*(?:no|nope|wait)\b[\s,.]+(?:no[\s,.]+)?(?:it's\s|it\sis\s|make\sit\s"
    r"|i\smeant?\s|i\ssaid\s|rather\s|on\s|for\s)?(?:the\s)?(?:\d|mon|tue|wed|thu|fri|sat|sun|jan|feb|mar|apr|may|jun"
    r"|jul|aug|sep|oct|nov|dec|next|this|tomorrow|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
    r"|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twent|thirt)"
)
_SMALL_TALK = _rx(
    r"weather(?:'s|\shas|\swas)\sbeen", r"weather\swas", r"rained", r"snowed", r"birthday", r"anniversary",
    r"christmas",
    r"new\syear", r"holidays\sare", r"kids", r"school", r"long\sweek", r"crazy\sweek", r"busy\sweek", r"weekend\swas",
    r"how\swas", r"how\sare", r"hope\syou", r"have\sa\s(?:good|great|nice|lovely)", r"enjoy", r"match\swas",
    r"game\swas", r"football", r"traffic", r"news",
)
_QUESTION_WHY = re.compile(r"\b(?:how\scome|why|what\shappened|is\sit\snormal|is\sthat\snormal)\b")
_NEGATED_CONCERN = re.compile(
    r"\b(?:make\ssure|ensure|so\sthat|so|don't\swant|do\snot\swant|hope|worried|afraid|scared|again|twice)\b"
)


def has_correction_cue(sentence: str) -> bool:
    """Whether a (normalised) sentence carries a correction cue ("actually", "make it", "no, the 6th")."""
    return bool(_CORRECTION.search(sentence))


def topic_of(text: str) -> str | None:
    """The thing ``text`` talks about booking ("car", "hotel", "callback", ...), if any."""
    lowered = text.lower()
    return next((name for name, pattern in _TOPICS if pattern.search(lowered)), None)


def role_of(text: str) -> str | None:
    """"start" (pick-up, check-in, departure) or "end" (drop-off, check-out, return), if ``text`` says which."""
    lowered = text.lower()
    start, end = _START.search(lowered), _END.search(lowered)
    if start and end:
        return "start" if start.start() > end.start() else "end"  # the nearer cue wins, said last
    return "start" if start else "end" if end else None


def classify(local: str, sentence: str, *, mode: str, past: bool, head: str | None = None) -> Reading:
    """Reads what one date expression is about and what it does.

    Args:
        local: The words around the expression, within its clause (lower case), the expression included.
        sentence: The whole sentence (lower case): the topic may be named away from the date.
        mode: How the cue words read the expression ("on", "exclude", "until", "until_blocked", ...).
        past: Whether its clause is in the past tense.
        head: The words before the expression and the expression itself: after a limit ("before the
            15th, we're on a cruise from then") what follows the date is the reason, not a trip to book.

    Returns:
        The reading.
    """
    limit = mode != "on"
    blocked = mode in ("exclude", "until_blocked")
    topic = topic_of(local) or topic_of(sentence)
    role = role_of(local)
    correction = has_correction_cue(sentence)

    if _HEDGE.search(local) and (blocked or _UNREACHABLE.search(local)):
        return Reading(DateSubject.AVAILABILITY, StatementKind.NONE, None)
    trip = bool(_TRIP.search(head if limit and head is not None else local))
    if _UNREACHABLE.search(local) and (mode not in ("on", "exclude") or not trip):
        # "I'm away until the 14th", "I'm busy on the 3rd": the caller cannot be reached.
        return Reading(DateSubject.AVAILABILITY, StatementKind.CONSTRAINT, topic if topic == "callback" else None)
    reach = bool(_REACH.search(local)) and not _THIRD_PARTY.search(local)
    if _THIRD_PARTY.search(local) and not _REACH.search(local):
        return Reading(DateSubject.NONE, StatementKind.EVENT, None)
    held = _HELD_THING.search(local)
    if held and limit and not blocked and not reach:
        # "I need the van till the 8th", "we have the cottage until the 3rd": that thing's dates.
        named = held["thing"]
        thing = (topic_of(named) if named else None) or topic or named  # "a compact car": the car
        return Reading(DateSubject.BOOKING, StatementKind.CONSTRAINT, thing, role)
    if blocked and not _BOOK.search(local) and not _THIRD_PARTY.search(local) and not _CHARGE.search(local):
        # "Not the fifteenth please, I've got a hospital appointment": the caller rules the day out.
        return Reading(DateSubject.AVAILABILITY, StatementKind.CONSTRAINT, topic if topic == "callback" else None)
    if limit and (_THING_DEADLINE.search(local) or _THING_SUBJECT.match(local)) and not _asks_call(local):
        # "please have the credit applied by the 20th": a deadline for something else.
        return Reading(DateSubject.DEADLINE, StatementKind.CONSTRAINT, None)
    # "I will return the car / it on the 12th": the end of what they book, not a deadline for a thing they owe.
    booked_end = (role is not None and topic not in (None, "callback")) or bool(_RETURN_IT.search(local))
    if _OWN_DEADLINE.search(local) and not booked_end and not (reach and topic == "callback" and not _own_call(local)):
        return Reading(DateSubject.DEADLINE, StatementKind.CONSTRAINT, topic, role)
    if _CHARGE.search(local) and not (reach or topic == "callback"):
        return Reading(DateSubject.CHARGE_PERIOD, StatementKind.EVENT, None)
    if _HABIT.search(local) and not limit:
        return Reading(DateSubject.CHARGE_PERIOD if _CHARGE.search(sentence) else DateSubject.NONE,
                       StatementKind.NONE, None)
    if _QUESTION_WHY.search(sentence) or (past and not correction):
        subject = DateSubject.CHARGE_PERIOD if _CHARGE.search(sentence) else DateSubject.NONE
        return Reading(subject, StatementKind.EVENT, topic, role)
    if trip and not _BOOK.search(local) and topic != "callback":
        if limit and mode != "exclude" and _UNREACHABLE.search(sentence):
            # "I'm at my daughter's till Sunday and there's no signal there": a stay that cuts them off.
            return Reading(DateSubject.AVAILABILITY, StatementKind.CONSTRAINT, None)
        return Reading(DateSubject.TRIP, StatementKind.EVENT, None, role)
    if _SMALL_TALK.search(local) and not (reach or _BOOK.search(local) or limit):
        return Reading(DateSubject.NONE, StatementKind.NONE, None)
    if (_CHARGE.search(sentence) and _NEGATED_CONCERN.search(sentence) and not reach
            and topic in (None,) and not _BOOK.search(local)):
        # "make sure I'm not billed twice again next month": a worry about charges, not a date to book.
        return Reading(DateSubject.CHARGE_PERIOD, StatementKind.EVENT, None)

    if (topic is None and role is None) or topic == "callback" or reach:
        subject = DateSubject.AVAILABILITY
        topic = topic if topic == "callback" else None
    else:
        subject = DateSubject.BOOKING
    if correction and not blocked:
        return Reading(subject, StatementKind.CORRECTION, topic, role)
    if limit or _WINDOW.search(local) or _ONLY_THEN.search(sentence):
        return Reading(subject, StatementKind.CONSTRAINT, topic, role)
    return Reading(subject, StatementKind.REQUEST, topic, role)


def _asks_call(local: str) -> bool:
    """Whether the caller asks to be called ("call me", "ring me back"), not just says a calling word."""
    return topic_of(local) == "callback"


def _own_call(local: str) -> bool:
    """Whether the caller says they will call (not that they want a call): "I'll call you by Friday"."""
    return bool(re.search(r"\b(?:i|we)(?:'ll|\swill|\scan)\s(?:call|ring|phone)\syou\b", local))
