"""Broad word classes for the date contract: what could bind a date, and what makes a yes less than firm.

The cue-word engine (``extract``, ``subjects``) reads *what* a caller said about dates; these classes
only say *whether* an utterance could be about when, or could be less than a plain yes. They are
deliberately wide: a false hit costs a question to the caller ("shall I book Thursday the 26th?"),
a miss can book a day the caller ruled out. Each class is a kind of word (negation, contrast,
hedge, past tense, a time word, an absence), never a sentence.

Matching runs on the engine's normalised text (lower case, spoken numbers as digits, ordinals as
``<n>th``, identifiers masked), so "the fourteen th" and "the 14th" are the same here.
"""

from __future__ import annotations

import re
from functools import lru_cache

from voice_agent.core.dates.spoken import normalise

WEEKDAY_WORDS = _WEEKDAY = (r"mon(?:day)?s?|tue(?:s|sday)?s?|wed(?:s|nesday)?s?|thu(?:r|rs|rsday)?s?|fri(?:day)?s?"
                            r"|saturdays?|sundays?")
MONTH_WORDS = _MONTH = (r"january|february|march|april|june|july|august|september|october|november|december"
          r"|jan|feb|apr|jun|jul|aug|sept?|oct|nov|dec")
_PERIOD = (
    r"christmas|xmas|easter|new\syears?|hogmanay|boxing\sday|bank\sholidays?|holidays?|hols|half[\s-]?term|term"
    r"|thanksgiving|halloween|bonfire\snight|hanukk?ah|diwali|ramadan|eid|passover|st\s?patrick'?s"
    r"|payday|pay\sday|summer|winter|spring|autumn|festive|midterms?|semester|exams?"
    r"|day\sof\s(?:reconciliation|goodwill)|reconciliation\sday|st\.?\s?stephen'?s|black\sfriday|cyber\smonday"
    r"|veterans'?\sday|remembrance\s(?:day|sunday)|armistice\sday|st\.?\s?andrew'?s"
)
_RELATIVE = (
    r"today|tonight|tomorrow|yesterday|week(?:s|end|ends|day|days|night|nights)?|weak(?:end|ends)?|fortnight"
    r"|months?|years?|mornings?|afternoons?|evenings?|nights?|days?|dates?|daytimes?|overnight"
    r"|soon|later|earlier|asap|then"
)
_ORDINAL = r"\d{1,2}th|\d{1,2}(?:st|nd|rd)|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|teen\sth"

TIME_WORD = re.compile(
    rf"\b(?:{_WEEKDAY}|{_MONTH}|{_PERIOD}|{_RELATIVE}|{_ORDINAL})\b"
    r"|\bmay\s(?:the\s)?\d|\d\s(?:of\s)?may\b|\bin\smay\b|\bthe\s\d{1,2}\b|\b\d{1,2}\s?/\s?\d{1,2}\b"
)
"""Any word about when: a weekday, a month, a holiday or term, a relative day or part of day, an ordinal."""

_CLOCK = (r"(?:#num|\d{1,2}(?![\d]|th\b|st\b|nd\b|rd\b)(?:[:.]\d\d)?(?:\s?(?:am|pm|o'clock|ish|in\sthe\s\w+))?"
          r"|noon|midday|lunch(?:time)?|dinner(?:time)?|tea\s?time|school\spick\s?up|work|my\sshift|me\sshift)\b")
LIMIT_WORD = re.compile(
    rf"\b(?:until|till|til|through|thru|before|after|from|since|by|between|during|within|starting|beginning"
    rf"|ending|over)\s(?!(?:about\s|around\s)?{_CLOCK})(?:[\w']+\s){{0,3}}?(?:{TIME_WORD.pattern})"
    r"|\b(?:until|till|til)\s(?:then|that)\b|\b(?:after|before|from|since)\s(?:that|then|this|which)\b"
    r"|\b(?:onwards?|no\slater|no\searlier|no\ssooner|at\sthe\s(?:earliest|latest)|all\s(?:week|month)"
    r"|(?:sooner|earlier|later)\sthan)\b"
)
"""A limit word before a time word: "after the 14th", "from Monday", "until then" ("from Washington" and "after
ten in the morning" limit no day)."""

UNAVAILABLE = re.compile(
    r"\b(?:away|abroad|busy|travel\w*|trip|flying|fly|flight|hospital|surgery|operation|op|appointments?|shifts?"
    r"|nights|rota|working|work|job|asleep|sleep\w*|school|college|uni|court|funeral|wedding|visit\w*"
    r"|staying|leave|(?<!of\s)course|training|exams?|recital|party|match|gym|dentist|doctor\w*|clinic|unavailable|gone"
    r"|moving\s(?:house|home|in|out)|move\s(?:house|home|in|out)|moves\sin|removals?"
    r"|occupied|tied|booked|signal|sick|ill|poorly|recover\w*|treatment|chemo|carer|caring|looking\safter"
    r"|childcare|nursery|interview|meeting|holiday|camping|cruise|conference|festival|site|overseas|out\sof"
    r"|in\sbed|bed\srest|laid\sup|off\ssick|physio|dialysis|funeral|hospice)\b"
)
"""Words about an absence, a duty or an event that fills the caller's days."""

FREE = re.compile(r"\b(?:free|available|around|home|off|reachable|flexible|ok|okay|fine|good|works?|suits?)\b")
"""Words of being reachable (a day off, at home, free)."""

_DAY_WORD = rf"(?:{_WEEKDAY}|\d{{1,2}}th|\d{{1,2}})"
FOR_THE_DAY = re.compile(
    r"\b(?:i'm|im|i\sam|we're|we\sare|i'll\sbe|ill\sbe|i\scan\sbe|be|are|is|'s)\s"
    r"(?:usually\s|always\s|normally\s|totally\s|completely\s|pretty\s|mostly\s|all\s)?(?:free|available|reachable)\b"
    r"|\b(?:free|available)\s(?:on|all\sday|every|most|any|that)\b"
    rf"|\brest\s?days?\b|\bdays?\soff\b|\b{_DAY_WORD}\soff\b"
    rf"|\b{_DAY_WORD}\s?(?:'s|is|are|would\sbe|will\sbe|'d\sbe|'ll\sbe)?\s(?:still\s|really\s|perfectly\s|absolutely\s"
    r"|much\s)?(?:fine|good|ok|okay|suits?|better|best|perfect|great|grand|ideal|lovely|brilliant)\b"
)
"""Words that speak for a day: the caller is free then, it is a day off, the day suits ("Tuesdays are my days
off", "I've Monday and Tuesday off", "the 1st is still fine"). Only with no word against it (see
:func:`speaks_for`)."""

AGAINST = ("negation", "contrast", "hedge", "past", "limit", "absence")
"""The word classes of :func:`doubts` that say something against a day or make a statement less than plain."""

WHEREABOUTS = re.compile(r"\b(?:off|out|free|available|around|reach\w*|back|return\w*|home|phone|gone|whole|all)\b")
"""Neutral words about where the caller is: they make a time word a statement about being reached."""

NEGATION = re.compile(r"\b(?:(?<!why\s)not(?!\s(?:a\s(?:problem|bother|worry)|an\sissue)\b)|never|nothing|none|nope|nah"
                      r"|cannot|can't|won't|isn't|aren't|doesn't|don't|without"
                      r"|dont|cant|wont|isnt|doesnt|aint|cannae|canny|canna|dinnae|didnae|wouldnae|willnae"
                      # a day called bad: "a write-off", "forget it", "mad", "no go"
                      r"|write\s?-?\s?off|written\soff|forget\sit|no\sgo|no-go|nightmare|hopeless|mad|manic|hectic|chaos"
                      r"|crazy|rubbish|impossible|out\sof\sthe\squestion|bad|awful|terrible|tricky|difficult|awkward"
                      r"|avoid|skip|rule\sout|ruled\sout|clash\w*|scrap|cancel|worst|least|rather\snot"
                      # taking a day back: "forget the 9th", "drop the 9th", "never mind the 9th"
                      r"|forget|drop|bin|ignore|never\s?mind|strike|don't\sbother|knock\s(?:it|that)\soff|on\sthe\shead"
                      r"|(?:is|was|'s|are|were|be)\s(?:totally\s|completely\s)?out)\b"
                      r"|n't\b|\b(?:no|nae)\b(?!\s(?:problem|worries|bother|rush|hurry|doubt|issues?)\b)")
"""Negation: "no", "not", "n't", "never" (but not "no problem", "no worries", "not a bother", "sure, why not")."""

CONTRAST = re.compile(
    r"\b(?:but|except|unless|although|though|however|apart\sfrom|other\sthan|rather|instead|actually|wait|hang\son"
    r"|hold\son|scratch|sorry|oops|correction|i\smean|joking|kidding|change|swap|switch|move\sit|make\sit|otherwise"
    r"|whereas|only\sif|as\slong\sas|providing|provided)\b"
)
"""Contrast and correction: "but", "except", "actually", "hang on", "make it", "instead"."""

HEDGE = re.compile(
    r"\b(?:maybe|perhaps|might|possibly|probably|suppose|guess|not\ssure|unsure|or|either|whichever|could\sbe"
    r"|depends|depending|hopefully|reckon|think|dunno|don't\sknow|let\sme\scheck|ish|roughly|or\sso|yeah\sright"
    # "this Thursday" / "next Thursday": which one is arguable
    r"|(?:this|next)\s(?:coming\s)?(?:mon|tue|wed|thu|fri|sat|sun)\w*"
    # deferring: "I need to ask my wife", "let me look at the calendar", "I'll get back to you"
    r"|ask\s(?:my|the|her|him|them)|let\syou\sknow|get\sback|see\sif|have\sa\slook|look\sat|diary"
    # "I'll check with my wife", "need to check the rota" defer; "aye, check" and "can you check it's a Friday" do not
    r"|(?:i'll|i\swill|i'd|i\sneed\sto|need\sto|have\sto|got\sto|gotta|must|should|might|i\scan|i'm\sgoing\sto"
    r"|gonna|i\sjust\sneed\sto|wanna)\s(?:just\s|quickly\s|first\s)?(?:double[\s-]?)?check"
    r"|check\s(?:with|wi|my|me|our|the\s(?:diary|calendar|rota|roster)|if|whether|first|again|and)"
    r"|calendar|pardon|come\sagain)\b"
    # "if" makes a condition, but "if that's alright" / "if you can" only asks politely
    r"|\bif\b(?!\s(?:that's|that\sis|it's|it\sis)\s(?:alright|all\sright|ok|okay|fine|possible|easier|no\strouble)"
    r"|\syou\s(?:can|could|would|don't\smind)|\sposs(?:ible)?\b)"
)
"""Hedges and alternatives: "maybe", "I think", "or", "if" (but not a polite "if that's alright")."""

PAST = re.compile(
    r"\b(?:was|were|did|had|rang|phoned|called|paid|went|came|billed|charged|ago|last|yesterday|used\sto"
    r"|already|spoke|sent|received|happened|started|ended|expired|renewed|wasn't|weren't|didn't|hadn't)\b"
)
"""Past tense: "I rang on the 14th", "it was billed on the 3rd", "it wasn't my fault" describe what happened, not
what to book."""

ACTION = "zzdo"
"""What the date contract reads in place of a date tool's own verb ("cancel", "moving out"): the caller naming
the tool's action with a day asks for it (:mod:`voice_agent.core.guards.tool_verbs`)."""

REQUEST = re.compile(
    r"\b(?:zzdo|call|ring|phone|book|schedule|pencil|arrange|set\s(?:it|that|one)\sup|put\s(?:me|it|that)(?:\sdown)?"
    r"|works?|suits?|good|fine|great|ok|okay|perfect|best|ideal|prefer|let's|lets|go\s(?:with|for)|do\s(?:it|that)"
    r"|please|can\syou|could\syou|can\swe|could\swe|can\sdo|would|want|like|need|try|say|shall|yes|yeah|yep|yup|sure"
    r"|lovely|brilliant|happy"
    r"|grand|cool|champion|sound|spot\son|that's\sit|bang\son|cracking|ta|cheers|thanks|thank)\b"
)
"""Words that ask for or accept something: "call me", "book it", "works", "suits", "please", "yes"."""

QUESTION = re.compile(r"\b(?:(?:what|which)\s(?:day|date|one)|when|pardon|sorry|eh|(?<!uh\s-\s)(?<!uh\s)huh"
                      r"|come\sagain)\b")
"""A reply that asks back about the day ("yeah, what day is that?", "sorry?") does not accept it."""

STATE = re.compile(
    r"\b(?:i'm|i\sam|im|i'll\sbe|ill\sbe|i\swill\sbe|we're|we\sare|we'll\sbe|i've\sgot|ive\sgot|i\shave"
    r"|we've\sgot|we\shave|i've|ive|that's\swhen|that\sis\swhen|is\swhen|speaker\s\d)\b"
    # "I'm happy with that", "I'm okay with Thursday": content with the day, not where the caller is
    r"(?!\s(?:(?:perfectly|quite|very|really|totally)\s)?(?:happy|okay|ok|fine|good|easy|grand|glad|content|free)"
    r"(?:\s(?:with|wi)\s(?:that|it|this|the\s\w+|\w+day)|\s?[,.!]|$))"
    # "I'm free on the 3rd", "I'm home all day", "I'm thinking the 3rd": reachable, or choosing, not elsewhere
    r"(?!\s(?:free|available|around|about|home|reachable|thinking|hoping)\b)"
)
"""The caller saying where they are or what they have on ("I'm in Spain", "that's when I've got the op"):
a statement about the day, not a plain yes or request."""

_NOT_A_DAY = (r"time|times|thing|things|bill|bills|sim|one|call|calls|payment|payments|charge|charges|letter|month"
              r"|week|year|instal+ment|go|attempt|floor|grade|contract|invoice|statement|engineer|visit|of\sthe\s\d")
SPAN_WORD = re.compile(
    rf"\b(?:{_WEEKDAY}|{_MONTH}|{_PERIOD}|today|tonight|tomorrow|weekends?|weak\s?ends?|fortnight)\b"
    r"|\b(?:this|next|last|that|the|coming|following|whole|all)\s(?:week|weak|month|year)\b"
    # an ordinal, but not "a second" / "one minute": the normaliser writes "second" as 2th
    rf"|(?<!\ba\s)(?<!\bone\s)(?<!\bthe\s1th\s)\b\d{{1,2}}(?:th|st|nd|rd)\b(?!\s(?:{_NOT_A_DAY})\b)"
    r"|\bmay\s(?:the\s)?\d|\d\s(?:of\s)?may\b|\bin\smay\b"
)
"""Words that name a day or a span of days ("Thursday", "Christmas", "next week", "the 14th"; not "day",
"morning", "a month" or "the first bill", which name none)."""

_RAW_ORDINAL = re.compile(r"\d{1,2}\s?(?:st|nd|rd|th)\b|\b\d{1,2}\s?[-/]\s?\d{1,2}\b", re.IGNORECASE)


_COUNTED_THINGS = (r"\s(?:#num|one|ones|times?|charges?|payments?|items?|orders?|invoices?|bills?|lines?|attempts?"
                   r"|calls?|letters?|emails?|messages?|person|people|places?|go)\b")
_COUNTED = re.compile(rf"\b(?:{_ORDINAL}){_COUNTED_THINGS}")
_RAW_COUNTED = re.compile(rf"\b\d{{1,2}}\s?(?:st|nd|rd|th){_COUNTED_THINGS}", re.IGNORECASE)


def _uncounted(normalised: str) -> str:
    """``normalised`` without ordinals that count a thing ("that second one", "the first time", "the 2nd charge"):
    the engine reads no date there, and neither may the signals ("I'm not happy to leave that second one standing"
    is about a charge, not the 2nd)."""
    return _COUNTED.sub(" ", normalised)


def names_days(text: str) -> bool:
    """Whether ``text`` names a day or a span (see :data:`SPAN_WORD`), also where the engine's normaliser masked
    it as an identifier ("in hospital 25th-27th")."""
    return (SPAN_WORD.search(_uncounted(norm(text))) is not None
            or _RAW_ORDINAL.search(_RAW_COUNTED.sub(" ", text)) is not None)

ANAPHORA = re.compile(
    r"\b(?:before|after|till|until|by|from|since|around|about|away|busy|out|off|working|there|abroad)\s(?:\w+\s)?then\b"
    r"|\b(?:i'm|im|i\sam|we're|i'll\sbe|ill\sbe|not)\s(?:[\w']+\s){0,3}then\b"
    r"|\bthat\s(?:day|date|week|weekend|time)\b|\bthose\s(?:days|dates|weeks)\b"
)
"""Words that point back at a day already named: "I'm away then", "not that week" (not "go on then")."""

ONLY = re.compile(
    rf"\b(?:only\s(?:[\w']+\s){{0,2}}?(?:{_WEEKDAY}|days?|weeks?|weekends?|time|the\s\d|\d{{1,2}}(?:th|st|nd|rd))|(?:{_WEEKDAY})\sonly"
    r"|except|other\sthan|apart\sfrom|any\s\w+\sbut|anything\sbut|but\snot|or\snothing|just\sthe"
    r"|(?:has|have|needs?|must|got)\sto\sbe|nothing\s(?:but|before"
    r"|until|till|after)|every\s(?:day|week|\w+day)|whole\s(?:week|weak|month|fortnight|weekend)"
    r"|all\s(?:week|weak|month|weekend|fortnight)|weekends|weekdays"
    r"|(?:my|the)\s(?:one|1|#num|only)\s(?:free\s)?(?:day|week|weekend|time)|(?:one|1|#num)\sfree)\b"
)
"""Words that make a statement about other days too: "only Mondays", "any day but Thursday", "the whole week"."""

_ACK_WORDS = frozenset({
    "yes", "yeah", "yep", "yup", "aye", "ok", "okay", "right", "alright", "sure", "great", "lovely", "perfect",
    "brilliant", "cheers", "thanks", "thank", "ta", "sorted", "grand", "cool", "fine", "good", "mm", "huh",
    "bye", "goodbye", "see", "you", "too", "and", "please", "nothing", "else", "that's", "all", "it", "everything",
    "much", "appreciated", "appreciate", "have", "a", "nice", "day", "one", "take", "care", "love", "pet", "mate",
    "amazing", "wonderful", "smashing", "champion", "very", "lot", "for", "your", "help", "again", "then", "so",
    "well", "that", "is", "will", "do", "evening", "weekend", "week", "christmas"
})
"""Words a reply may be made of and still only acknowledge or say goodbye ("thanks, bye", "lovely, cheers pet")."""
_WORD = re.compile(r"[a-z']+")

ACCEPT = re.compile(
    r"\b(?:thanks|thank\syou|cheers|ta|lovely|perfect|great|brilliant|sorted|grand|champion|smashing|ideal"
    r"|that\sworks|works\sfor\sme|suits|that's\sfine|fine\sby\sme|sounds\sgood|happy\swith\sthat|nice\sone)\b"
)
"""Words that accept what the agent just said ("thanks", "lovely", "that works"); narrower than :data:`REQUEST`."""

QUOTED = re.compile(r'"([^"]*)"|“([^”]*)”')
"""A quoted span: a read-back quotes the caller between double quotes."""


DURATION = re.compile(
    r"\bfor\s(?:a\s|the\s|about\s|around\s|another\s|at\sleast\s)?(?:few\s|couple\s(?:of\s)?|\d+\s|#num\s|several\s|some\s"
    r"|whole\s|full\s)?(?:days?|nights?|weeks?|fortnight|months?)\b"
    r"|(?:\b|#)(?:a|an|couple\sof|few|\d+|num|several|some)\s(?:or\s(?:\d+|#num)\s)?(?:more\s)?"
    r"(?:days?|nights?|weeks?|fortnight|months?)\b"
    r"|(?:\b\d+|#num)\s?-?\s?(?:day|night|week)\b|\b(?:days?|nights?|weeks?|fortnight)\s(?:later|after)\b(?!\snext\b)"
    r"|\b(?:the\s)?(?:week|weak|days?|fortnight|month)\s(?:after|following|afterwards)\b(?!\snext\b)|\bafter\s(?:that|it)\b"
    r"|\b(?:a|one|the|whole|full)\s(?:week|weak|fortnight)\b(?!\safter\snext\b)|\bweeks?\s(?:off|out)\b"
)
"""A stretch that starts on a day named: "in on the 7th for five days", "laid up for the week after" ("the week
after next" names a week; it is no stretch)."""

RETURN = re.compile(r"\b(?:back|return\w*|home\s(?:on|from|by)|get\sin|land\w*|fly\w*\shome)\b")
"""Coming back on a day named: the caller is away before it ("back from Australia on the 13th")."""

COMING = re.compile(r"\b(?:i|i'm|im|we|we're|i'll|ill|we'll|will|get|gets|getting|due|until|till|not|won't)\b")
"""Words that make a return the caller's own, still to come ("I get back on the 13th", not "back the 15th" about a
past trip)."""

_SUITING_WORK = re.compile(
    r"\b((?:could|would|should|might|may|will|does|do|that'll|it'll|that|this|it)\s)works?"
    r"(?=\s?(?:$|[.,;!?]|for\s(?:me|us|you|everyone|both)\b|fine\b|well\b|better\b|best\b|ok\b|okay\b|out\b))"
    r"|\b()works?(?=\s?(?:\?|for\syou\b))"
)
""""Work" that means suiting ("the 10th would work for me", "that works"), not a job ("I will work all day")."""

_DAY_WORKS = re.compile(r"(\b\d{1,2}th\s(?:could|would|should|might|may|will)\s)works?\b")
""""The 14th might work or the 15th": a day that would suit, whatever follows (not "the 14th I might work")."""

_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
"""Zero-width and soft-hyphen characters: invisible in speech, they split words ("a\u200bway")."""


_YEAH_NO = re.compile(r"\b(?:yeah|yes|ja|yep)\s?,?\s?no\s?,?\s?"
                      r"(?=(?:that's|thats|that\sis|it's|its|that'll|that\swill)\s"
                      r"(?:fine|grand|good|great|perfect|ok|okay|sound|lekker|sorted|lovely|be\sfine|do|work)\b)")
""""yeah no, that's grand" (Irish, Australian and South African English): the "no" is no refusal."""

_NOTHING_ON = re.compile(
    r"\b(?:i've|ive|i\shave|we've|we\shave)\s(?:got\s)?(?:nothing|nowt|nought|naught)\s(?:else\s)?on\b")
""""I've nowt else on", "I have nothing on": the caller is free."""

_DAYS_OFF = re.compile(
    r"\b(?:i've|ive|i\shave|we've|we\shave)\s(?:got\s)?(?P<days>(?:the\s)?(?:" + _WEEKDAY + r"|\d{1,2}th)"
    r"(?:(?:\s?,\s?|\s(?:and|or|&)\s)(?:the\s)?(?:" + _WEEKDAY + r"|\d{1,2}th))*)"
    r"\s(?:off|free)\b(?!\s(?:to|for|on|at|in))"
)
""""I've Monday and Tuesday off", "we've got the 3rd free": days off work, offered, not where the caller is."""

_KEEP = re.compile(
    r"\b(?:no\schanges?|nothing(?:'s|\sis|\sto)?\s(?:changed|changes|changing|to\schange|change)"
    r"|(?:i'll|we'll|i\swill|we\swill)\snot\s(?:change|move)\s(?:it|that)"
    r"|(?:don't|do\snot|won't|will\snot|not\sgoing\sto|not\sgonna|never\smind\schanging)\s(?:change|move|touch)"
    r"\s(?:it|that|anything|a\sthing))(?!\s(?:to|for|from)\b)\b"
)
"""A change said not to happen ("no change", "I'll not change it", "don't change anything"): the day is kept
(not "don't change it to the 9th", "can't change my shift")."""


@lru_cache(maxsize=4096)
def norm(text: str) -> str:
    """The engine's normalised form of ``text`` (lower case, numbers as digits, ordinals as ``<n>th``).

    A change said not to happen reads "keep it" (see :data:`_KEEP`). Cached: the contract reads every utterance
    of the call again at each date-bearing action.
    """
    n = _DAY_WORKS.sub(r"\1suits", _SUITING_WORK.sub(r"\1suits", normalise(_INVISIBLE.sub("", text)).text))
    n = _DAYS_OFF.sub(r"free \g<days>", _NOTHING_ON.sub("i'm free", n))
    return _YEAH_NO.sub("yeah ", _KEEP.sub("keep it", n))


def without_quotes(text: str) -> str:
    """``text`` without quoted spans: a read-back quotes the caller, and the quotes are not the agent's proposal."""
    return QUOTED.sub(" ", text)


def has_time_word(text: str) -> bool:
    """Whether ``text`` says anything about when (see :data:`TIME_WORD`)."""
    return bool(TIME_WORD.search(norm(text)))


def doubts(text: str) -> list[str]:
    """See :func:`_doubts` (cached: the contract reads every utterance again at each date-bearing action)."""
    return list(_doubts(text))


@lru_cache(maxsize=8192)
def _doubts(text: str) -> tuple[str, ...]:
    """The classes of word in ``text`` that make a yes or a named day less than firm, in a fixed order.

    ``negation``, ``contrast``, ``hedge``, ``past``, ``limit`` (a day made into a span), ``absence``, ``state``
    (where the caller is or what they have on).
    """
    n = norm(text)
    found = []
    for name, pattern in (("negation", NEGATION), ("contrast", CONTRAST), ("hedge", HEDGE), ("past", PAST),
                          ("limit", LIMIT_WORD), ("absence", UNAVAILABLE), ("state", STATE)):
        if pattern.search(n):
            found.append(name)
    return tuple(found)


OUT = re.compile(r"\b(?:out|off\s(?:to|for|on)|gone|away)\b")
"""Being out or off somewhere ("so I'm out", "off to my mum's"): never a word for the day."""


def speaks_for(text: str) -> bool:
    """Whether ``text`` only speaks for the days it names: a word of being free or of suiting, and no word of any
    class against a day (negation, contrast, a hedge, the past, a limit, an absence, a stretch or a return).

    "Rest days are Fridays and Saturdays" and "I've Monday and Tuesday off" speak for those days; "I do the food
    bank every Thursday", "Thursdays I'm off to my mum's" and "I'm free after the 9th" do not.
    """
    n = norm(text)
    if not FOR_THE_DAY.search(n) or set(doubts(text)) & set(AGAINST):
        return False
    return not (DURATION.search(n) or RETURN.search(n) or OUT.search(n))


def could_bind(text: str) -> bool:
    """Whether a caller utterance could limit a date: a time word with a limit, an absence or a negation."""
    n = _uncounted(norm(text))
    if not TIME_WORD.search(n):
        return False
    if PAST.search(n) and not (UNAVAILABLE.search(n) or NEGATION.search(n)):
        return False  # "I rang about it on the 14th" tells what happened
    return any(p.search(n) for p in (LIMIT_WORD, UNAVAILABLE, WHEREABOUTS, NEGATION, CONTRAST))


def accepts(text: str) -> bool:
    """Whether ``text`` accepts what was just said (see :data:`ACCEPT`)."""
    return bool(ACCEPT.search(norm(text)))


def only_acknowledges(text: str) -> bool:
    """Whether ``text`` only acknowledges or says goodbye ("thanks, bye", "lovely, cheers pet").

    Word by word (no backtracking, whatever a recogniser repeats): every word is one of :data:`_ACK_WORDS`, and
    "no" only as "no thanks" / "no, that's all" / "no, nothing else".
    """
    n = norm(text)
    if any(ch.isdigit() for ch in n):
        return False
    words = _WORD.findall(n)
    for i, w in enumerate(words):
        if w == "no":
            if i + 1 >= len(words) or words[i + 1] not in ("thanks", "thank", "that's", "nothing"):
                return False
        elif w not in _ACK_WORDS:
            return False
    return bool(words)


_CLAUSE = re.compile(
    r"[,.;:!?]+|\s(?=(?:but|though|although|except|unless|because|cos|cause|coz|so|and\sthen|whereas)\s)"
)


def clauses(text: str) -> list[str]:
    """See :func:`_clauses` (cached, as :func:`doubts`)."""
    return list(_clauses(text))


@lru_cache(maxsize=8192)
def _clauses(text: str) -> tuple[str, ...]:
    """``text`` cut at punctuation and before "but", "so", "because"...: each piece says one thing about a day.

    A piece that names no day but says something against one ("Thursday the 26th. Not a chance.", "the 26th,
    so I'll be in Leeds") stays with the piece before it.
    """
    out: list[str] = []
    for piece in (c.strip() for c in _CLAUSE.split(text)):
        if not piece:
            continue
        n = norm(piece)
        against = UNAVAILABLE.search(n) or STATE.search(n) or ANAPHORA.search(n) or (
            NEGATION.search(n) and not PAST.search(n))  # "..., so it wasn't my fault": what happened, said apart
        if out and not names_days(piece) and against:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return tuple(out)


def questions(text: str) -> bool:
    """Whether ``text`` asks something back (see :data:`QUESTION`)."""
    return bool(QUESTION.search(norm(text)))


def asks(text: str) -> bool:
    """Whether ``text`` holds a word that asks for or accepts something (see :data:`REQUEST`)."""
    return bool(REQUEST.search(norm(text)))
