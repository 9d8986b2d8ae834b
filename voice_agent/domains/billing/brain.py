"""The billing reference brain: a deterministic stand-in for the LLM.

It sees only what a model would see (the assembled messages and the tool
names), so a fact the lanes lost shows up as a re-ask, exactly as with a real
model. Values are taken from the context in this order: KNOWN FACTS lines,
then the latest tool results (and tool-call arguments), then the summary text,
then what the caller said. It never speaks identifiers or the caller's prose
facts back: that would put them into the raw window again and spoil every
memory measurement.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from voice_agent.agent.brain import BrainReply, ToolCallRequest
from voice_agent.core.dates import (
    ConstraintKind,
    DateConstraint,
    extract_constraints,
    resolve_corrections,
)
from voice_agent.core.dates.binding import DateBinding
from voice_agent.core.dates.signals import without_quotes
from voice_agent.core.guards.date_guard import is_affirmation
from voice_agent.core.spoken_ids import id_shapes, normalize_spoken_ids
from voice_agent.core.summary_budget import content_words
from voice_agent.core.transfer import TRANSFERRED
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK
from voice_agent.policies.pipecat_builtin import SUMMARY_PREFIX, is_pipecat_summary

# --- identifier patterns (spoken forms with spaces are normalised to the written form) --------------------------------

_ACCOUNT = re.compile(r"\bACC[-\s](\d{4})[-\s](\d{2})\b", re.IGNORECASE)
_INVOICE = re.compile(r"\bINV[-\s](\d{4})[-\s](\d{4})\b", re.IGNORECASE)
_ORDER = re.compile(r"\bORD[-\s]([A-Z0-9]{6})\b", re.IGNORECASE)


SPOKEN_ID_SHAPES = ("ACC-####-##", "INV-####-####", "ORD-XXXXXX")
"""How callers spell the billing identifiers out loud (# a digit, X a letter or digit)."""

_SHAPES = id_shapes(SPOKEN_ID_SHAPES)
"""How the billing identifiers are spelled out ("o r d 7 k 4 m 2 p", "a c c 33 18 52"): a model reads those as
the identifiers they are, and so does this brain."""


def _written(text: str) -> str:
    return normalize_spoken_ids(text, _SHAPES) if text else text


def _account_ids(text: str) -> list[str]:
    return [f"ACC-{a}-{b}" for a, b in _ACCOUNT.findall(_written(text))]


def _invoice_ids(text: str) -> list[str]:
    return [f"INV-{a}-{b}" for a, b in _INVOICE.findall(_written(text))]


def _order_ids(text: str) -> list[str]:
    return [f"ORD-{body.upper()}" for body in _ORDER.findall(_written(text))]


_EXTRACTORS: dict[str, Callable[[str], list[str]]] = {
    "account_id": _account_ids,
    "invoice_id": _invoice_ids,
    "order_id": _order_ids,
}

# --- context headers (as the assembler writes them) ---------------------------------------------------------------

_FACTS_PREFIX = "KNOWN FACTS"
_SUMMARY_PREFIX = "SUMMARY"
_KNOWLEDGE_PREFIX = "KNOWLEDGE"
_CONSTRAINTS_PREFIX = "HARD CONSTRAINTS"
# "- account_id: ACC-4729-18", and a caller's quoted words as the assembler writes them:
# "- timing_constraint (turn 8): \"away till the 20th\"", "- caller said (turn 3): \"not a Tuesday\"".
_FACT_LINE = re.compile(r"^-\s*([A-Za-z0-9_\- ]+?)(?:\s*\(turn\s*\d+\))?:\s*(.*?)(?:\s+\(([^()]*)\))?\s*$")
_QUOTED_ITEM = re.compile(r'"([^"]*)"')
_TODAY = re.compile(r"Today is (\d{4}-\d{2}-\d{2})")

# --- intent cues on the latest caller message ----------------------------------------------------------------------

_REQUEST = r"(?:can you|could you|would you|will you|please|i want to|i'd like to|i would like to|let's|go ahead)"
_TRANSFER = re.compile(
    r"\b(?:speak|talk|put me through|transfer me|connect me|pass me)\b.{0,30}\b(?:person|human|someone|somebody"
    r"|specialist|supervisor|manager|agent|advisor)\b|\breal person\b|\bhuman\b",
)
_CREDIT = re.compile(
    r"\b(?:issue|apply|put through|process|go ahead (?:with|and))\b.{0,40}\b(?:credit|refund)\b"
    r"|\b(?:credit|refund)\b.{0,30}\b(?:through|now|go ahead)\b"
    r"|\b(?:can|could|would) you (?:please )?(?:credit|refund)\b",
)
_CALLBACK = re.compile(r"\b(?:call|ring)(?:ing)? (?:me )?back\b|\bcall-?back\b|\bgive me a (?:call|ring)\b")
# The dispute verbs in every inflection ("disputed", "contesting", "challenged").
_DISPUTE_VERB = r"(?:disput|contest|challeng)(?:e|es|ed|ing)?"
_DISPUTE = re.compile(rf"\b{_DISPUTE_VERB}\b")
# "dispute" used as a verb is a request too, whatever comes before it (ASR turns "want" into "went"); so is a
# wish for the charge to be disputed ("I want it challenged", "that needs contesting") and the caller's own
# progressive ("I'm disputing the charge").
_DISPUTE_REQUEST = re.compile(
    _REQUEST + r"|\b(?:open|raise|file|log|start)\b|\bto (?:dispute|contest|challenge)\b"
    r"|\b(?:dispute|contest|challenge) (?:the|this|that|it)\b"
    r"|\b(?:want|wants|wanted|like|need|needs|'d want)\b.{0,40}\b(?:disputed|contested|challenged"
    r"|disputing|contesting|challenging)\b"
    r"|\b(?:i'm|i am|we're|we are)\s+(?:disputing|contesting|challenging)\b"
    r"|\b(?:dispute|challenge)\b.{0,25}\b(?:opened|raised|started|logged|filed|lodged|put in|set up)\b(?![^?]*\?)"
)
# Asking for the problem to be put on record as what it is ("log it as damaged", "I'd want that on record as
# damaged goods"): a dispute, when the words also name its category.
_RECORD_AS = re.compile(
    r"\b(?:log|record|report|flag|mark|register|put)(?:s|ed|ing)? (?:it|that|this|them|one) (?:down )?as\b"
    r"|\bon record as\b"
)
# Refusing a charge without the word "dispute" ("I'm not paying for the second one", "I won't accept that", "it
# shouldn't be on my bill", "not happy to leave it standing"): a dispute, when the words also name its category.
_OBJECTION = re.compile(
    r"\b(?:not|never)\s(?:\w+\s)?(?:happy|okay|ok|willing|prepared)\s(?:to|with|about)\s(?:\w+\s)?"
    r"(?:pay\w*|leav\w*|keep\w*|accept\w*|it|that|this|them|being)\b"
    r"|\b(?:not|never|won't|wont|will\snot|refuse\sto|shouldn't\shave\sto|should\snot\shave\sto|don't|do\snot"
    r"|can't|cannot)\s(?:\w+\s)?(?:be\s)?(?:pay|paying|accept|accepting|having|stand\sfor|standing\sfor|put\sup\swith"
    r"|putting\sup\swith|agree\sto)\s(?:for\b|twice\b|it\b|that\b|this\b|them\b|the\b|a\b|an\b|being\b)"
    r"|\b(?:shouldn't|should\snot|oughtn't)\s(?:be|have\sbeen)\s(?:there|on\s(?:it|my|the|there)|charged|billed)\b"
)
_LIST = re.compile(
    r"(?:\b(?:pull|bring|look|call) up\b|\b(?:can|could|would) you\b.{0,20}\b(?:check|list|find|get|see)\b|\blist\b)"
    r".{0,30}\b(?:invoices|bills|statements)\b",
)
_GET_INVOICE = re.compile(r"\b(?:open|look at|check|go through|what's on|what is on|details of)\b.{0,25}\binvoice\b")
# A wish, by class: a want or a preference said with a modal ("I'd sooner", "I'd rather", "I'd be happier"),
# an adverb of preference ("ideally", "best would be"), "just" softening a request ("can it just stay"), or a
# terse "..., please"; followed by what should happen to the money or the charge.
_WISH = (
    r"(?:what i(?:'d| would) like|what i want|i(?:'d| would) (?:like|love|want|prefer|sooner|rather)"
    r"|i want|i(?:'m| am) (?:\w+ ){0,2}(?:hoping|after)|i(?:'d| would) be (?:\w+ ){0,2}happ(?:y|ier|iest)"
    r"|i(?:'d| would) (?:\w+ ){0,2}(?:sooner|rather|prefer)|ideally|best (?:thing|option|bet)? ?(?:would be|is)"
    r"|(?:can|could|would) (?:it|you|that|the \w+) (?:just|please)|please|rather than|instead"
    r"|(?:can|could|would|will) you(?= (?:please |just )?(?:take|knock|remove|waive|scrap|cancel|get rid)\b))"
)
_OUTCOME = (
    r"(?:credit|credited|refund|refunded|money back|waive|waived|remove|removed|taken off"
    r"|(?:take|taking|knock|knocked|knocking) (?:[\w']+ ){0,4}?off"
    r"|scrap|scrapped|rid of|gone|disappears?|cancel|towards"
    r"|(?:on|onto|to|into|against|with) (?:my|the) (?:account|bill))"
)
_RESOLUTION = re.compile(rf"\b{_WISH}\b.{{0,80}}\b{_OUTCOME}|\b{_OUTCOME}\b.{{0,60}}\bplease\b")
# A wish said without a verb, as a terse caller says it: the form the money should take ("Kettle money as account
# credit", "Refund as credit on the account") or the charge named with what should happen to it ("the extra charge
# removed", "fee waived"). Not in a question ("Is it paid as credit?"), and not after a verb that says it happened
# ("the charge was removed", "I had the fee waived"): those are matched with the whole text.
_ELLIPTICAL_WISH = re.compile(
    r"\bas (?:an? )?(?:account )?(?:credit|refund)\b"
    r"|\b(?:charges?|money|amount|fees?|payments?|difference|extra|duplicate)"
    r" (?:removed|refunded|credited|waived|taken off|knocked off|scrapped|cancelled|reversed)\b"
)
_HAPPENED = re.compile(r"\b(?:was|were|been|had|got|has|have|is|are|get|gets)\b(?: \w+){0,4} "
                       r"(?:removed|refunded|credited|waived|taken off|knocked off|scrapped|cancelled|reversed|paid)\b")
_WISH_SAID = re.compile(rf"{_RESOLUTION.pattern}|{_ELLIPTICAL_WISH.pattern}")


def _wishes(lowered: str) -> bool:
    """Whether the caller's words ask for an outcome: a want or preference said of it, or a verbless wish."""
    if _RESOLUTION.search(lowered):
        return True
    return bool(_ELLIPTICAL_WISH.search(lowered)) and not _QUESTION.search(lowered) and not _HAPPENED.search(lowered)


# An attempt, by tense and aspect: something the caller (or someone for them) already did about it. The
# present perfect ("I've been onto the bank", "I've had a go"), the past simple with a subject ("I rang",
# "my husband phoned", "we went to the shop"), the emphatic past ("I did try"), the past perfect ("I had
# already emailed"), "already" beside a verb of trying or contacting, and being sent on ("they sent me here").
_DID = (r"(?:tried|called|rang|rung|phoned|emailed|contacted|spoke|spoken|wrote|written|messaged|went"
        r"|asked|raised|reported|complained|chatted|sent|returned|took|logged|visited|had a go)")
_DO = r"(?:try|call|ring|phone|email|contact|speak|write|message|go|ask|raise|report|complain|chat|send|return)"
_BEEN = r"been (?:through|onto|on to|on|in touch|in contact|to|trying|calling|ringing|phoning|emailing|chatting)"
_ATTEMPTED = re.compile(
    rf"\b(?:i|we|my \w+|our \w+)(?:'ve| have| had|'d)? (?:already |just |also )?(?:{_DID}|{_BEEN})\b"
    rf"|\b(?:i|we) did (?:already |also )?{_DO}\b"
    rf"|\balready (?:{_DID}|{_BEEN})\b|\b(?:{_DID}|{_BEEN})\b.{{0,40}}\balready\b"
    r"|\btried\b|\bi was on the (?:phone|line|chat|live chat|website|app)\b"
    r"|\b(?:sent|told|asked) me (?:to|over|here|on|back)\b|\bsaid (?:to|i(?:'d| had| should) (?:have to )?)"
    r"(?:call|ring|phone|contact)\b",
)
_REACH = re.compile(r"\b(?:call|ring|reach|contact|phone|available|travelling|traveling|away|busy)\b")
_PROBLEM = re.compile(
    r"\b(?:problem|issue|wrong|charged twice|twice|overcharged|double|duplicate|damaged|broken|error|mistake)\b"
)
_THANKS = re.compile(r"\b(?:thank|thanks|cheers)\b")
_GOODBYE = re.compile(r"\b(?:bye|goodbye|that's (?:everything|all))\b")
_GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening))\b|\bis this (?:the )?billing\b")
_QUESTION = re.compile(r"\?\s*$|^\s*(?:how|what|when|why|where|which|who|is|are|does|do|will|can i|can we)\b")
_AMOUNT = re.compile(r"(?:[$£€]\s?)?\b(\d{1,5}\.\d{2})\b")

_CATEGORY_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("duplicate_charge", re.compile(r"\b(?:twice|duplicate|double|two times|charged again)\b")),
    ("damaged_item", re.compile(r"\b(?:damaged|broken|cracked|faulty|smashed|dented)\b")),
    ("not_received", re.compile(r"\b(?:never arrived|not arrived|didn't arrive|not received|never came)\b")),
    ("wrong_amount", re.compile(r"\b(?:wrong amount|overcharged|too much|wrong price)\b")),
)
_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)
_LOOKUP_FOR = {"account_id": "lookup_account", "invoice_id": "get_invoice", "order_id": "lookup_order"}
_ASK = {
    "account_id": "Could you give me your account number, please? It starts with A C C.",
    "invoice_id": "Which invoice is this about? The month on it is enough.",
    "order_id": "Could you read me the order number, please?",
    "amount": "How much should the credit be for?",
    "date": "Which day would suit you for the callback?",
}
_REASK = {
    "account_id": "Sorry, I want to be sure I have the right account. Could you read me your account number again?",
    "invoice_id": "Sorry, I want to be sure I have the right invoice. Which month's invoice was it?",
    "order_id": "Sorry, I want to be sure I have the right order. Could you read me the order number again?",
    "date": "That day doesn't fit with when you said you could be reached. Which day would work better?",
}
_CONFIRM = {
    "lookup_account": "Thanks, I've found your account. What can I help you with today?",
    "list_invoices": "I can see your recent invoices. Which one would you like to go through?",
    "get_invoice": "I have that invoice open in front of me.",
    "lookup_order": "Thanks, I've found that order.",
    "open_dispute": "I've opened a dispute for that charge, and you'll get the reference by email.",
    "issue_credit": "Done: the credit has been applied to your account.",
    "update_case": "Thanks, I've noted that on your case.",
    "transfer_to_human": (
        "I'm putting you through to a billing specialist now. They can see everything we've covered, "
        "so you won't need to repeat yourself."
    ),
}
# An action asked for again that this call already took (the lanes keep what was done).
_ALREADY = {
    "open_dispute": "That charge is already under dispute; you'll get the reference by email.",
    "issue_credit": "That credit has already been applied to your account.",
}
_OFFERS_DISPUTE = re.compile(r"\bopen a dispute for (?:it|that|them)\?")
"""The agent's own offer ("Would you like me to open a dispute for it?"): a yes to it asks for the dispute."""
# A transfer that did not happen (no transfer target, or the provider failed): the caller hears the truth and
# is offered a callback, which the next turn books (schedule_callback asks for the day).
_NO_TRANSFER = ("I'm sorry, I can't put you through to a colleague right now. I can have a billing specialist "
                "call you back instead. Which day would suit you?")
_SEARCH_DAYS = 90


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


# Clause breaks inside a sentence: punctuation followed by a space ("One more thing: I'm travelling...").
_CLAUSE_BREAK = re.compile(r"[,;:]\s+")


def _trimmed(sentence: str, matches: Callable[[str], bool]) -> str:
    """``sentence`` without the leading clauses that carry nothing ``matches`` needs, verbatim.

    Only leading clauses go: what follows the fact ("..., not refunded to my card") is often
    what makes it a must-keep, and KNOWN FACTS quotes must stay exact spans of the caller's words.
    """
    while (m := _CLAUSE_BREAK.search(sentence)) and matches(sentence[m.end():].lower()):
        sentence = sentence[m.end():]
    return sentence.strip()


def _fact_span(text: str, matches: Callable[[str], bool]) -> str | None:
    """The caller's sentences of ``text`` that ``matches``, each without its empty leading clauses."""
    hits = [_trimmed(s, matches) for s in _sentences(text) if matches(s.lower())]
    return " ".join(hits) if hits else None


def _timing_span(text: str, reference: dt.date) -> str | None:
    """The caller's words that limit when they can be reached, without empty leading clauses."""

    def limits(piece: str) -> bool:
        found = [c for c in extract_constraints(piece, reference) if not c.is_positive]
        return bool(found) and (bool(_REACH.search(piece)) or any(c.blocked for c in found))

    pieces = _sentences(text)
    hits: list[str] = []
    for i, sentence in enumerate(pieces):
        if limits(sentence):
            hits.append(_trimmed(sentence, limits))
        elif hits and i and limits(pieces[i - 1]) and _refers_back(sentence, reference):
            # "Away till the 14th. No calls before then.": the second sentence is the same limit, said of the
            # day the first named; the two are one fact, quoted whole (adjacent, so still the caller's words).
            hits[-1] = f"{hits[-1]} {sentence}"
    span = " ".join(hits)
    return span.rstrip(".!") if span else None


# A time said by pointing back at one already named: "before then", "until that day", "after that date".
_BACK_REFERENCE = re.compile(
    r"\b(?:before|until|till|til|after|by|from|since|past)\s+(?:then|that(?:\s+(?:date|day|time|point))?)\b"
)


def _refers_back(sentence: str, reference: dt.date) -> bool:
    """Whether ``sentence`` names no day of its own and places itself by a day said before ("before then")."""
    return bool(_BACK_REFERENCE.search(sentence.lower())) and not any(
        c.start or c.end or c.weekday is not None for c in extract_constraints(sentence, reference)
    )


_FRAGMENT_WORDS = 4
"""A sentence this short beside a fact is part of it ("Refund to my card? No, put it on the account.")."""
_CONTRAST = re.compile(r"\W*(?:not|no|never|rather|instead|anything but)\b")
"""A sentence beside a wish that says what is not wanted completes it ("Account credit, please. Not the card.")."""


def _matching_sentences(text: str, pattern: re.Pattern[str]) -> str:
    """The caller's words from the first sentence that carries ``pattern`` to the last, verbatim, with a short
    fragment just before or after the run (the whole text if no sentence does alone).

    Whole sentences, not trimmed clauses: what leads into a resolution or an attempt ("the reason I'm ringing
    is their chat in the app: I tried...") is part of the fact, measured on the paraphrased calls; so is a
    terse fragment that completes it ("Not the card.").
    """
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S(?:.*?)(?:[.!?](?=\s|$)|$)", text.strip(), re.S)]
    body = text.strip()
    hits = [i for i, (a, b) in enumerate(spans) if pattern.search(body[a:b].lower())]
    if not hits:
        return body
    lo, hi = hits[0], hits[-1]

    def fragment(i: int) -> bool:
        """A short sentence with a content word, or one that says what is not wanted ("Not the card...")."""
        if not 0 <= i < len(spans):
            return False
        said = body[spans[i][0]:spans[i][1]]
        short = len(said.split()) <= _FRAGMENT_WORDS or bool(_CONTRAST.match(said.lower()))
        return short and bool(content_words(said))

    lo -= fragment(lo - 1)
    hi += fragment(hi + 1)
    return body[spans[lo][0]:spans[hi][1]]


def _holds(items: Sequence[str], invoice: str, order_id: str | None) -> bool:
    """Whether one of ``items`` (a disputed or credited line) is about ``invoice`` and the same order, or no order."""
    for item in items:
        orders = _order_ids(item)
        if invoice in _invoice_ids(item) and (order_id in orders if order_id else not orders):
            return True
    return False


def _category(text: str) -> str | None:
    lowered = text.lower()
    return next((name for name, cue in _CATEGORY_CUES if cue.search(lowered)), None)


def _months_in(text: str) -> list[int]:
    lowered = text.lower()
    return [i + 1 for i, name in enumerate(_MONTHS) if re.search(rf"\b{name}\b", lowered)]


@dataclass(frozen=True)
class _ToolResult:
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: dict[str, Any] | None  # None while in progress or not JSON


@dataclass
class _Context:
    """The assembled messages, sorted into what the brain reads."""

    system_prompt: str = ""
    facts: list[tuple[str, str]] = field(default_factory=list)
    summary: str = ""
    knowledge: list[str] = field(default_factory=list)
    user_texts: list[str] = field(default_factory=list)
    results: list[_ToolResult] = field(default_factory=list)
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    turn_results: list[_ToolResult] = field(default_factory=list)
    trailing: list[_ToolResult] = field(default_factory=list)
    agent_before_latest: str = ""

    @property
    def latest_user(self) -> str:
        return self.user_texts[-1] if self.user_texts else ""

    @property
    def reference_date(self) -> dt.date | None:
        m = _TODAY.search(self.system_prompt)
        return dt.date.fromisoformat(m.group(1)) if m else None

    def fact_values(self, key: str) -> list[str]:
        """Values of KNOWN FACTS lines named ``key``, most recent line last."""
        return [v for k, v in self.facts if k == key]


def _parse(messages: Sequence[Mapping[str, Any]]) -> _Context:
    ctx = _Context()
    calls_by_id: dict[str, tuple[str, dict[str, Any]]] = {}
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    for index, message in enumerate(messages):
        role = message.get("role")
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        if role in ("system", "developer"):
            if text.startswith(_FACTS_PREFIX):
                for line in text.splitlines()[1:]:
                    m = _FACT_LINE.match(line.strip())
                    if m:
                        value = m.group(2).strip()
                        quoted = _QUOTED_ITEM.findall(value)
                        ctx.facts.append((m.group(1).strip(), "; ".join(quoted) if quoted else value))
            elif text.startswith(_KNOWLEDGE_PREFIX):
                if index < last_user:
                    continue  # an earlier question's knowledge stays where its turn put it; this one's follows it
                body = text.split("\n", 1)[1] if "\n" in text else ""
                ctx.knowledge.extend(re.sub(r"^\[\d+\]\s*", "", c).strip() for c in body.split("\n\n") if c.strip())
            elif text.startswith(_CONSTRAINTS_PREFIX):
                continue
            elif not ctx.system_prompt and not text.startswith(_SUMMARY_PREFIX):
                ctx.system_prompt = text
            else:
                # Any other system text is summary: a rolling-summary policy may word it freely.
                ctx.summary += text + "\n"
        elif is_pipecat_summary(role, text):
            # pipecat's summarizer puts its summary in a user message: it is summary, not the caller's words.
            ctx.summary += text[len(SUMMARY_PREFIX):] + "\n"
        elif role == "user":
            ctx.user_texts.append(text)
        elif role == "assistant":
            if text and index < last_user:
                ctx.agent_before_latest = text
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                args = arguments if isinstance(arguments, dict) else {}
                calls_by_id[str(call.get("id"))] = (str(function.get("name")), args)
                ctx.calls.append((str(call.get("id")), str(function.get("name")), args))
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            name, args = calls_by_id.get(call_id, ("", {}))
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = None
            result = _ToolResult(call_id, name, args, parsed if isinstance(parsed, dict) else None)
            ctx.results.append(result)
            if index > last_user:
                ctx.turn_results.append(result)
    for message in reversed([m for m in messages if m.get("role") not in ("system", "developer")]):
        if message.get("role") != "tool":
            break
        found = next((r for r in reversed(ctx.results) if r.call_id == str(message.get("tool_call_id"))), None)
        if found is not None:
            ctx.trailing.insert(0, found)
    return ctx


def _status(result: _ToolResult) -> str:
    return str((result.result or {}).get("status", "")) if result.result is not None else "pending"


def _failed(result: _ToolResult) -> bool:
    return _status(result) in ("rejected", "error", "confirm")


def choose_callback_date(
    latest: str, context_texts: Iterable[str], reference: dt.date
) -> dt.date | None:
    """Picks a callback day the way a careful agent would.

    A day the caller names in ``latest`` is taken as said (the date guard judges it).
    Otherwise the first weekday after ``reference`` that lies inside any window the
    caller offers in ``latest`` ("next week") and that every earlier limit or
    exclusion in ``context_texts`` allows ("travelling until the 14th", "not Tuesday").

    Args:
        latest: The caller's latest message.
        context_texts: Earlier caller messages, KNOWN FACTS values and summary text, oldest first.
        reference: The call's "today".

    Returns:
        The chosen day, or None when no weekday in the next 90 days fits.
    """
    said_now = [c for c in extract_constraints(latest, reference) if _CALLBACK_DATE.admits(c)]
    named = [c.start for c in said_now if c.kind is ConstraintKind.ON and c.start is not None]
    if named:
        return named[0]
    windows = [c for c in said_now if c.is_positive]
    texts = [*context_texts, latest]
    standing = [c for _, c in resolve_corrections(list(enumerate(texts)), reference)]
    limits: list[DateConstraint] = [
        c for c in standing if not c.is_positive and _CALLBACK_DATE.admits(c)
    ]
    for use_windows in (True, False):
        for offset in range(1, _SEARCH_DAYS + 1):
            day = reference + dt.timedelta(days=offset)
            if day.weekday() >= 5:
                continue
            if use_windows and windows and not any(w.allows(day) for w in windows):
                continue
            if all(c.allows(day) for c in limits):
                return day
    return None


class BillingReferenceBrain:
    """Deterministic billing agent implementing the ``Brain`` protocol.

    Routes the latest caller message to a billing intent by keyword, fills tool
    arguments only from values present in the messages, asks the caller when a
    value is missing, and after a tool result either continues the plan, re-asks
    (rejection or error), or confirms briefly without repeating any identifier.
    """

    def respond(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[str]) -> BrainReply:
        """Returns the reply to ``messages`` given the available tool names.

        Args:
            messages: The assembled context in OpenAI format.
            tools: Names of the tools the model may call.
        """
        ctx = _parse(messages)
        available = set(tools)
        if not ctx.user_texts:
            return BrainReply(text="Hello, you're through to billing support. How can I help?")
        # Hard constraints are restated after the recent turns, so look past trailing system messages.
        # The agent's words of a response are recorded when it closes, after its tool call, so
        # the last caller message or tool result decides what this reply answers.
        conversation = [m for m in messages if m.get("role") in ("user", "tool")]
        if conversation and conversation[-1].get("role") == "tool":
            return self._after_tools(ctx, available)
        return self._plan(ctx, available)

    # --- after tool results ---------------------------------------------------------------------------------------

    def _after_tools(self, ctx: _Context, available: set[str]) -> BrainReply:
        for result in ctx.trailing:
            if _status(result) in ("rejected", "confirm"):
                return self._after_rejection(ctx, result, available)
            if _status(result) == "error":
                return self._after_error(result)
        plan = self._plan(ctx, available)
        # A call this turn's date contract answered with a question waits for the caller's answer, whatever else
        # ran beside it: it is not made again in the same turn.
        asked = [r for r in ctx.turn_results if _status(r) == "confirm"]
        fresh = tuple(c for c in plan.tool_calls if not self._done(ctx, c) and not self._same_call(asked, c))
        if fresh:
            return BrainReply(text=plan.text, tool_calls=fresh, asks_for=plan.asks_for)
        if asked:
            return self._after_rejection(ctx, asked[-1], available)
        if plan.asks_for and not plan.tool_calls:
            return plan
        done = [r for r in ctx.trailing if r.result is not None]
        if done and done[-1].name == "transfer_to_human" and _status(done[-1]) != TRANSFERRED:
            return BrainReply(text=_NO_TRANSFER, asks_for="date")
        return BrainReply(text=self._confirmation(done[-1] if done else None))

    @staticmethod
    def _same_call(results: Sequence[_ToolResult], call: ToolCallRequest) -> bool:
        key = json.dumps(call.arguments, sort_keys=True, default=str)
        return any(r.name == call.name and json.dumps(r.arguments, sort_keys=True, default=str) == key
                   for r in results)

    def _done(self, ctx: _Context, call: ToolCallRequest) -> bool:
        """Whether ``call`` already ran in this turn without being rejected or failing."""
        key = json.dumps(call.arguments, sort_keys=True, default=str)
        return any(
            r.name == call.name and json.dumps(r.arguments, sort_keys=True, default=str) == key and not _failed(r)
            for r in ctx.turn_results
        )

    def _after_rejection(self, ctx: _Context, result: _ToolResult, available: set[str]) -> BrainReply:
        body = result.result or {}
        if body.get("guard") == "date":
            # The date contract's confirmation is read back word for word; a refusal asks for another day.
            say = body.get("say")
            if body.get("status") == "confirm" and isinstance(say, str) and say:
                return BrainReply(text=say, asks_for="date")
            return BrainReply(text=_REASK["date"], asks_for="date")
        argument = self._rejected_argument(result)
        value = result.arguments.get(argument) if argument else None
        lookup = _LOOKUP_FOR.get(argument or "")
        attempts = sum(1 for r in ctx.turn_results if r.name == result.name and r.arguments == result.arguments)
        if body.get("verdict") == "unverified" and lookup in available and isinstance(value, str) and attempts < 2:
            call = ToolCallRequest(lookup, {argument or "": value})
            if not self._done(ctx, call):
                return BrainReply(tool_calls=(call,))
        asked = argument or "account_id"
        return BrainReply(text=_REASK.get(asked, _ASK.get(asked, "Could you repeat that for me?")), asks_for=asked)

    @staticmethod
    def _rejected_argument(result: _ToolResult) -> str | None:
        reason = str((result.result or {}).get("reason", ""))
        m = re.search(r"Rejected:\s*[^,]*?\b(\w+)=", reason) or re.search(r"\b(\w+_id|date|amount)\b", reason)
        if m:
            return m.group(1)
        id_args = [k for k in result.arguments if k in _EXTRACTORS]
        return id_args[0] if id_args else None

    @staticmethod
    def _after_error(result: _ToolResult) -> BrainReply:
        if result.name == "transfer_to_human":
            return BrainReply(text=_NO_TRANSFER, asks_for="date")
        error = str((result.result or {}).get("error", "")).lower()
        # The identifier the error names first is the one it is about ("Invoice X does not belong to account Y").
        named = sorted(
            (error.find(word), argument)
            for argument, word in (("account_id", "account"), ("order_id", "order"), ("invoice_id", "invoice"))
            if word in error and argument in result.arguments
        )
        if named:
            argument = named[0][1]
            return BrainReply(text="Sorry, that didn't go through. " + _REASK[argument], asks_for=argument)
        if "amount" in error:
            return BrainReply(text="Sorry, that amount didn't go through. " + _ASK["amount"], asks_for="amount")
        if "date" in error or "weekday" in error or "callback" in error:
            return BrainReply(text="Sorry, that day isn't possible. " + _ASK["date"], asks_for="date")
        return BrainReply(text="Sorry, something went wrong on my side. Could you tell me again what you need?")

    @staticmethod
    def _confirmation(result: _ToolResult | None) -> str:
        if result is None:
            return "All done. Is there anything else I can help with?"
        if result.name == "schedule_callback" and result.result:
            try:
                day = dt.date.fromisoformat(str(result.result.get("date")))
                return f"I've booked a callback for {day.strftime('%A')} the {day.day}{_suffix(day.day)}."
            except ValueError:
                pass
        return _CONFIRM.get(result.name, "All done. Is there anything else I can help with?")

    # --- value lookup ---------------------------------------------------------------------------------------------

    def _find_id(
        self, ctx: _Context, argument: str, fact_keys: Sequence[str], *, from_latest: bool = True
    ) -> str | None:
        """The identifier for ``argument``: latest caller words, KNOWN FACTS, tool results, summary, caller text."""
        extract = _EXTRACTORS[argument]
        if from_latest:
            said = extract(ctx.latest_user)
            if said:
                return said[0]
        for key in fact_keys:
            for value in reversed(ctx.fact_values(key)):
                found = extract(value)
                if found:
                    return found[0]
        for result in reversed(ctx.results):
            if result.result is None or _failed(result):
                continue
            returned = result.result.get(argument)
            if isinstance(returned, str) and extract(returned):
                return extract(returned)[0]
        for _, _, args in reversed(ctx.calls):
            passed = args.get(argument)
            if isinstance(passed, str) and extract(passed):
                return extract(passed)[0]
        found = extract(ctx.summary)
        if found:
            return found[-1]
        for text in reversed(ctx.user_texts[:-1]):
            found = extract(text)
            if found:
                return found[-1]
        return None

    def _account(self, ctx: _Context) -> str | None:
        return self._find_id(ctx, "account_id", ("account", "account_id"))

    def _invoice_for_month(self, ctx: _Context, month: int) -> str | None:
        suffix = f"-{month:02d}"
        for key, value in reversed(ctx.facts):
            if key.startswith("invoice_") and key.endswith(suffix) and _invoice_ids(value):
                return _invoice_ids(value)[0]
        for result in reversed(ctx.results):
            for item in (result.result or {}).get("invoices", []) if result.result else []:
                if isinstance(item, dict) and str(item.get("month", "")).endswith(suffix):
                    return str(item.get("invoice_id"))
        return None

    def _invoice_of_order(self, ctx: _Context, order_id: str) -> str | None:
        for result in reversed(ctx.results):
            body = result.result or {}
            if body.get("order_id") == order_id and isinstance(body.get("invoice_id"), str):
                return str(body["invoice_id"])
            for line in body.get("lines", []) if isinstance(body.get("lines"), list) else []:
                if isinstance(line, dict) and line.get("order_id") == order_id and body.get("invoice_id"):
                    return str(body["invoice_id"])
        return None

    def _dispute_invoice(self, ctx: _Context, order_id: str | None, text: str | None = None) -> str | None:
        said = _invoice_ids(ctx.latest_user if text is None else text)
        if said:
            return said[0]
        if order_id:
            return self._invoice_of_order(ctx, order_id)
        for text in reversed(ctx.user_texts):
            for month in _months_in(text):
                found = self._invoice_for_month(ctx, month)
                if found:
                    return found
        return self._find_id(ctx, "invoice_id", ("invoice",), from_latest=False)

    def _disputed_items(self, ctx: _Context) -> list[str]:
        items = [i.strip() for v in ctx.fact_values("disputed_items") for i in v.split(", ") if i.strip()]
        if items:
            return items
        return [
            str(r.result["disputed_item"]) for r in ctx.results
            if r.name == "open_dispute" and r.result and r.result.get("disputed_item")
        ]

    @staticmethod
    def _did_this_turn(ctx: _Context, tool: str) -> bool:
        """Whether ``tool`` ran in this turn: the call planned again after its result is that one (``_done`` drops
        it), not one asked for again."""
        return any(r.name == tool and r.result is not None and not _failed(r) for r in ctx.turn_results)

    def _credited_items(self, ctx: _Context) -> list[str]:
        """The credits applied in this call: the ``credited_items`` slot, and any result still in the context."""
        items = [i.strip() for v in ctx.fact_values("credited_items") for i in v.split(", ") if i.strip()]
        return items + [
            str(r.result["credited_item"]) for r in ctx.results
            if r.name == "issue_credit" and r.result and not _failed(r) and r.result.get("credited_item")
        ]

    # --- planning -------------------------------------------------------------------------------------------------

    def _plan(self, ctx: _Context, available: set[str]) -> BrainReply:
        text = ctx.latest_user
        lowered = text.lower()
        routes: tuple[tuple[bool, Callable[[_Context], BrainReply]], ...] = (
            (bool(_TRANSFER.search(lowered)), self._transfer),
            (bool(_CREDIT.search(lowered)), self._credit),
            (bool(_CALLBACK.search(lowered)), self._callback),
            (bool(_DISPUTE.search(lowered) and _DISPUTE_REQUEST.search(lowered))
             or bool((_RECORD_AS.search(lowered) or _OBJECTION.search(lowered)) and _category(text)), self._dispute),
            (bool(_LIST.search(lowered)), self._list_invoices),
            (bool(_invoice_ids(text) or (_GET_INVOICE.search(lowered) and _months_in(text))), self._get_invoice),
        )
        reply: BrainReply | None = next((route(ctx) for hit, route in routes if hit), None)
        if reply is None and _OFFERS_DISPUTE.search(ctx.agent_before_latest) and is_affirmation(text) \
                and len(ctx.user_texts) > 1:
            reply = self._dispute(ctx, ctx.user_texts[-2])  # "Would you like me to open a dispute for it?" "Yes."
        agreed = self._agreed_callback(ctx)
        if agreed is not None:
            reply = BrainReply(
                text=reply.text if reply else "", tool_calls=(agreed, *(reply.tool_calls if reply else ())),
                asks_for=reply.asks_for if reply else None,
            )
        note = self._case_note(ctx)
        if reply is None:
            if _account_ids(text):
                reply = self._lookup_account(ctx)
            elif _order_ids(text):
                reply = self._lookup_orders(ctx)
        if note is not None:
            calls = (note, *(reply.tool_calls if reply else ()))
            reply = BrainReply(
                text=reply.text if reply else "", tool_calls=calls, asks_for=reply.asks_for if reply else None
            )
        if reply is None:
            reply = self._chat(ctx)
        usable = tuple(c for c in reply.tool_calls if c.name in available)
        if reply.tool_calls and not usable:
            return BrainReply(text="I can't do that from here, but I can put you through to a specialist who can.")
        return BrainReply(text=reply.text, tool_calls=usable, asks_for=reply.asks_for)

    def _ask(self, argument: str, prefix: str = "") -> BrainReply:
        return BrainReply(text=(prefix + " " + _ASK[argument]).strip(), asks_for=argument)

    def _lookup_account(self, ctx: _Context) -> BrainReply:
        account = _account_ids(ctx.latest_user)[0]
        return BrainReply(tool_calls=(ToolCallRequest("lookup_account", {"account_id": account}),))

    def _lookup_orders(self, ctx: _Context) -> BrainReply:
        known = {str(r.result.get("order_id")) for r in ctx.results if r.result and r.name == "lookup_order"}
        todo = [o for o in dict.fromkeys(_order_ids(ctx.latest_user)) if o not in known]
        if not todo:
            return BrainReply(text="I have those orders in front of me. What would you like me to do with them?")
        return BrainReply(tool_calls=tuple(ToolCallRequest("lookup_order", {"order_id": o}) for o in todo))

    def _list_invoices(self, ctx: _Context) -> BrainReply:
        account = self._account(ctx)
        if account is None:
            return self._ask("account_id", "Of course.")
        return BrainReply(tool_calls=(ToolCallRequest("list_invoices", {"account_id": account}),))

    def _get_invoice(self, ctx: _Context) -> BrainReply:
        said = _invoice_ids(ctx.latest_user)
        invoice = said[0] if said else next(
            (found for m in _months_in(ctx.latest_user) if (found := self._invoice_for_month(ctx, m))), None
        )
        if invoice is not None:
            return BrainReply(tool_calls=(ToolCallRequest("get_invoice", {"invoice_id": invoice}),))
        return self._list_invoices(ctx)

    def _dispute(self, ctx: _Context, said: str | None = None) -> BrainReply:
        """Opens a dispute for what the caller said (``said``: their words, by default the latest)."""
        account = self._account(ctx)
        if account is None:
            return self._ask("account_id", "I can open a dispute for you.")
        text = ctx.latest_user if said is None else said
        orders = _order_ids(text)
        order_id = orders[0] if orders else None
        invoice = self._dispute_invoice(ctx, order_id, text)
        if invoice is None:
            if order_id is not None:
                return BrainReply(tool_calls=(ToolCallRequest("lookup_order", {"order_id": order_id}),))
            if not any(r.name == "list_invoices" and not _failed(r) for r in ctx.results):
                return BrainReply(tool_calls=(ToolCallRequest("list_invoices", {"account_id": account}),))
            return self._ask("invoice_id")
        arguments: dict[str, Any] = {
            "account_id": account,
            "invoice_id": invoice,
            "reason": text.strip(),
            "category": _category(text) or "other",
        }
        if order_id is not None:
            arguments["order_id"] = order_id
        if _holds(self._disputed_items(ctx), invoice, order_id) and not self._did_this_turn(ctx, "open_dispute"):
            # Asked again for a charge already disputed in this call: it is open, not opened twice.
            return BrainReply(text=_ALREADY["open_dispute"])
        return BrainReply(tool_calls=(ToolCallRequest("open_dispute", arguments),))

    def _order_by_role(self, ctx: _Context, category: str) -> str | None:
        for value in reversed(ctx.fact_values(f"{category}_order")):
            found = _order_ids(value)
            if found:
                return found[0]
        return None

    def _credit(self, ctx: _Context) -> BrainReply:
        account = self._account(ctx)
        if account is None:
            return self._ask("account_id", "I can do that.")
        text = ctx.latest_user
        category = _category(text)
        items = self._disputed_items(ctx)
        chosen = next((i for i in reversed(items) if category and category in i), None)
        if chosen is None and items:
            chosen = items[-1]
        invoice: str | None = None
        order_id: str | None = None
        amount: float | None = None
        if chosen is not None:
            invoice = next(iter(_invoice_ids(chosen)), None)
            order_id = next(iter(_order_ids(chosen)), None)
            amounts = _AMOUNT.findall(chosen)
            amount = float(amounts[-1]) if amounts else None
        said_orders = _order_ids(text)
        if said_orders:
            order_id = said_orders[0]
        if category and order_id is None:
            order_id = self._order_by_role(ctx, category)
        invoice = next(iter(_invoice_ids(text)), None) or invoice
        if invoice is None and order_id is not None:
            invoice = self._invoice_of_order(ctx, order_id)
        if invoice is None:
            invoice = self._find_id(ctx, "invoice_id", ("disputed_invoice",), from_latest=False)
        said_amount = _AMOUNT.findall(text)
        if said_amount:
            amount = float(said_amount[0])
        if invoice is None:
            return self._ask("invoice_id")
        if amount is None:
            return self._ask("amount")
        if _holds(self._credited_items(ctx), invoice, order_id) and not self._did_this_turn(ctx, "issue_credit"):
            # Asked again for a credit already applied in this call (KNOWN FACTS keeps it): done, not done twice.
            return BrainReply(text=_ALREADY["issue_credit"])
        arguments: dict[str, Any] = {"account_id": account, "invoice_id": invoice, "amount": amount}
        if order_id is not None:
            arguments["order_id"] = order_id
        return BrainReply(tool_calls=(ToolCallRequest("issue_credit", arguments),))

    def _callback(self, ctx: _Context) -> BrainReply:
        account = self._account(ctx)
        if account is None:
            return self._ask("account_id", "I can arrange that.")
        reference = ctx.reference_date
        if reference is None:
            return self._ask("date")
        known = [v for _, v in ctx.facts if not _EXTRACTORS["account_id"](v)]
        verbatim = [*known, *ctx.user_texts[:-1]]
        summary = [line for line in ctx.summary.splitlines() if line.strip()]
        day = choose_callback_date(ctx.latest_user, [*known, *summary, *ctx.user_texts[:-1]], reference)
        if day is None and summary:
            # The summary may carry a garbled copy of a limit that contradicts the verbatim one:
            # KNOWN FACTS and the caller's own recent words win.
            day = choose_callback_date(ctx.latest_user, verbatim, reference)
        if day is None:
            return self._ask("date")
        if not any(c.kind is ConstraintKind.ON for c in extract_constraints(ctx.latest_user, reference)):
            # The caller named no day: propose one and book it only once they agree.
            return BrainReply(text=f"I can book a callback for {_spoken_day(day)}. Does that work for you?")
        arguments = {"account_id": account, "date": day.isoformat()}
        return BrainReply(tool_calls=(ToolCallRequest("schedule_callback", arguments),))

    def _agreed_callback(self, ctx: _Context) -> ToolCallRequest | None:
        """The callback the agent proposed last, when the caller's latest words agree to it."""
        proposal = ctx.agent_before_latest
        reference = ctx.reference_date
        if reference is None or not _PROPOSES.search(proposal) or not is_affirmation(ctx.latest_user):
            return None
        # A read-back quotes the caller's own words: the day proposed is the one outside the quotes.
        days = [c.start for c in extract_constraints(without_quotes(proposal), reference)
                if c.kind is ConstraintKind.ON]
        account = self._account(ctx)
        if len(days) != 1 or days[0] is None or account is None:
            return None
        return ToolCallRequest("schedule_callback", {"account_id": account, "date": days[0].isoformat()})

    def _transfer(self, ctx: _Context) -> BrainReply:
        return BrainReply(tool_calls=(ToolCallRequest("transfer_to_human", {"reason": ctx.latest_user.strip()}),))

    def _case_note(self, ctx: _Context) -> ToolCallRequest | None:
        text = ctx.latest_user
        lowered = text.lower()
        note: dict[str, Any] = {}
        if _wishes(lowered) and not _CREDIT.search(lowered):
            note["requested_resolution"] = _matching_sentences(text, _WISH_SAID)
        if _ATTEMPTED.search(lowered):
            note["already_attempted"] = _matching_sentences(text, _ATTEMPTED)
        reference = ctx.reference_date
        if reference is not None and not _CALLBACK.search(lowered):
            limits = [c for c in extract_constraints(text, reference) if not c.is_positive]
            # A limit counts as a reachability statement when it blocks days or talks about being reached;
            # "before the 10th" in a question about statements is not one.
            if limits and (_REACH.search(lowered) or any(c.blocked for c in limits)):
                note["timing_constraint"] = _timing_span(text, reference) or " ".join(
                    dict.fromkeys(c.text for c in limits)
                )
        return ToolCallRequest("update_case", note) if note else None

    # --- talk -----------------------------------------------------------------------------------------------------

    def _chat(self, ctx: _Context) -> BrainReply:
        text = ctx.latest_user
        lowered = text.lower()
        if _PROBLEM.search(lowered) and not _QUESTION.search(lowered):
            if self._account(ctx) is None:
                return self._ask("account_id", "I'm sorry to hear that, let's get it sorted.")
            return BrainReply(text="I'm sorry about that. Would you like me to open a dispute for it?")
        if _GREETING.search(lowered) and len(ctx.user_texts) <= 2:
            return BrainReply(text="Yes, you're through to billing support. How can I help?")
        if _QUESTION.search(lowered):
            if ctx.knowledge:
                first = _sentences(ctx.knowledge[0])
                return BrainReply(text=first[0] if first else ctx.knowledge[0])
            return BrainReply(text="I don't have that detail to hand, I'm afraid; our help pages cover it in full.")
        if _GOODBYE.search(lowered):
            return BrainReply(text="You're very welcome. Goodbye!")
        if _THANKS.search(lowered):
            return BrainReply(text="You're very welcome. Is there anything else I can help with?")
        return BrainReply(text="Of course, take your time.")


_PROPOSES = re.compile(r"I can book a callback for|book the callback for")
"""The agent's own proposal, or the date contract's read-back of one."""
def _callback_binding() -> DateBinding:
    param = SCHEDULE_CALLBACK.param("date")
    if param is None:
        raise RuntimeError("schedule_callback has no date parameter")
    return DateBinding.for_param(SCHEDULE_CALLBACK.name, param.name, param.binds, param.topic)


_CALLBACK_DATE = _callback_binding()
"""What binds a callback's day, as schedule_callback.date declares it: when the caller can be reached."""


def _spoken_day(day: dt.date) -> str:
    """'Tuesday the 15th of December', as an agent says it."""
    return f"{day.strftime('%A')} the {day.day}{_suffix(day.day)} of {day.strftime('%B')}"


def _suffix(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
