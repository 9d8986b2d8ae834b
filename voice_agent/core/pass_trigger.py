"""When a pass runs: the cadence, pipecat's threshold rule, or what the recent turns still refer to.

The ``reference`` trigger looks, at the start of every turn, at each older turn not yet summarized and
asks whether anything in the recent turns (the last K) still refers to it:

* an identifier (a ledger value, or any digit-bearing token such as ``ACC-4729-18``) said in both;
* a slot value said in both;
* a topic word (an entity, a product name, a rare content word) said in both: a word counts only while it
  is rare in the call (said in at most ``max(3, 15 %)`` of its turns), so "charge" in a billing call
  refers to nothing;
* an open item: a tool call still waiting for its result, an agent commitment ("I'll look it up when we
  get to the charge") that no later tool result has carried out, a caller question with no answer yet.

A referred-to turn stays raw, even past K (at most K such turns are held; the longest held goes first).
A turn nothing refers to is folded, even inside K ("the call has moved on"), except the last
``floor`` turns. A pass runs once ``batch`` turns are waiting, so passes (model calls) stay few.

Cost per turn: each completed turn's anchors are computed once and cached; a decision looks at the last
K turns and at the turns waiting (at most K held plus ``batch``), and at the ledger and slot values.
Nothing here calls a model or imports pipecat.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from voice_agent.core.call_state import CallState
from voice_agent.core.policy import ScheduledPass, Trigger
from voice_agent.core.tokens import estimate_tokens
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry

PIPECAT_MAX_CONTEXT_TOKENS = 8000
"""pipecat 1.14 ``LLMAutoContextSummarizationConfig.max_context_tokens`` default."""
PIPECAT_MAX_UNSUMMARIZED_MESSAGES = 20
"""pipecat 1.14 ``LLMAutoContextSummarizationConfig.max_unsummarized_messages`` default."""
PIPECAT_MIN_MESSAGES_AFTER_SUMMARY = 4
"""pipecat 1.14 ``LLMContextSummaryConfig.min_messages_after_summary`` default."""

RARE_SHARE = 0.15
"""A topic word refers only while it is said in at most this share of the call's turns (and at least 3)."""

_STOPWORD_TEXT = """
about above after again against also another anything anyway around because been before being below
between both cannot could didn does doesn doing done down during each either else enough even ever every
from further give given going good great have having hello here hers herself himself hmm however into
isn itself just keep know last later let like little look made make many maybe mean might more most much
must myself need never next nice none nothing okay once only other ought ours ourselves over please quite
rather really right said same second see should since some something sorry still such sure take tell
than thank thanks that their theirs them themselves then there these they thing things think this those
though through today told too under until upon very want wanted well were what whatever when where
whether which while will with within without would yeah your yours yourself yourselves sounds fine
call calling help able alright bye goodbye welcome moment already back course usually always often actually
probably certainly basically exactly definitely quick question questions
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
"""Words too common in any call to tie two turns together."""

_WORD = re.compile(r"[a-z][a-z']{3,}")
_ID_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\d[A-Za-z0-9-]*")
_COMMITMENT = re.compile(
    r"\b(i'll|i will|we'll|we will|i'm going to|when we get to|get back to|follow up|come back to)\b", re.I
)


def _normal(text: str) -> str:
    """Lower case, letters and digits only: ``ACC-4729-18`` and ``acc 4729 18`` read the same."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _entry_text(entry: TranscriptEntry) -> str:
    if entry.kind in (EntryKind.CALLER, EntryKind.AGENT):
        return entry.text
    if entry.kind is EntryKind.TOOL_CALL:
        return " ".join(str(v) for v in (entry.arguments or {}).values())
    return " ".join(_leaves(entry.result))


def _leaves(value: object) -> Iterable[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif value is not None:
        yield str(value)


@dataclass(frozen=True)
class TurnAnchors:
    """What one turn could be referred to by, and what it refers with.

    Attributes:
        turn: The turn.
        ids: Normalized digit-bearing tokens (identifiers, amounts, dates said as numbers).
        words: Stemmed content words.
        referring_words: The stemmed content words the caller said and the tool calls carried: what refers back
            (an agent repeating its own stock phrases refers to nothing).
        text: The turn's words, normalized (ledger and slot values are looked for in it).
        caller_values: Normalized digit-bearing tokens the caller said (identifiers, dates, amounts).
        open_item: Why the turn is still open (a pending tool call, a commitment, an unanswered question), or None.
        commitment_at: Entry index of the agent's commitment, if any (a later tool result carries it out).
        answered: Whether the agent made a statement (not a question) in the turn.
        completed_tool_at: Entry index of the turn's last completed tool result (-1: none).
    """

    turn: int
    ids: frozenset[str]
    words: frozenset[str]
    referring_words: frozenset[str]
    text: str
    caller_values: frozenset[str]
    open_item: str | None
    commitment_at: int
    answered: bool
    completed_tool_at: int


def turn_anchors(turn: int, entries: Sequence[TranscriptEntry]) -> TurnAnchors:
    """Reads one turn's anchors from its transcript entries."""
    texts = [_entry_text(e) for e in entries]
    joined = " ".join(texts)
    ids = _digit_tokens(joined)
    caller_values = _digit_tokens(" ".join(e.text for e in entries if e.kind is EntryKind.CALLER))
    words = _content_words(joined)
    referring = _content_words(" ".join(t for e, t in zip(entries, texts, strict=True)
                                        if e.kind in (EntryKind.CALLER, EntryKind.TOOL_CALL)))
    results = {e.tool_call_id for e in entries if e.kind is EntryKind.TOOL_RESULT}
    pending = any(e.kind is EntryKind.TOOL_CALL and e.tool_call_id not in results for e in entries)
    commitment = next((e.index for e in entries if e.kind is EntryKind.AGENT and _COMMITMENT.search(e.text)), -1)
    completed = max((e.index for e in entries
                     if e.kind is EntryKind.TOOL_RESULT and e.outcome is ToolOutcome.COMPLETED), default=-1)
    asked = any(e.kind is EntryKind.CALLER and "?" in e.text for e in entries)
    answered = any(e.kind is EntryKind.AGENT and e.text.strip() and not e.interrupted
                   and not e.text.rstrip().endswith("?") for e in entries)
    open_item = None
    if pending:
        open_item = "a tool call of it is still waiting for its result"
    elif commitment > completed:
        open_item = "the agent's commitment in it is not carried out yet"
    elif asked and not answered:
        open_item = "the caller's question in it has no answer yet"
    return TurnAnchors(turn, ids, words, referring, _normal(joined), caller_values, open_item, commitment,
                       answered, completed)


def _content_words(text: str) -> frozenset[str]:
    return frozenset(_stem(w.strip("'")) for w in _WORD.findall(text.lower()) if w.strip("'") not in STOPWORDS)


def _digit_tokens(text: str) -> frozenset[str]:
    return frozenset(n for n in (_normal(t) for t in _ID_TOKEN.findall(text)) if sum(c.isdigit() for c in n) >= 2)


@dataclass(frozen=True)
class TriggerDecision:
    """One ``reference`` pass, explained: which turns it folded, which it held, and why.

    Attributes:
        turn: The turn at whose start the pass runs.
        folded: (turn, why nothing refers to it any more) per folded turn.
        held: (turn, what still refers to it) per turn kept raw past the floor.
    """

    turn: int
    folded: tuple[tuple[int, str], ...]
    held: tuple[tuple[int, str], ...]


@dataclass
class ReferenceIndex:
    """Each completed turn's anchors, computed once, and how many turns say each word (a cache).

    It is derived from the transcript alone, so a restored call rebuilds it on its first decision.
    """

    anchors: dict[int, TurnAnchors] = field(default_factory=dict)
    word_turns: Counter[str] = field(default_factory=Counter)
    indexed_through: int = 0

    def catch_up(self, state: CallState) -> None:
        """Indexes every completed turn not indexed yet, so word counts are those of turns 1..turn-1.

        Run at every decision: a call resumed from the store, whose cache starts empty, then decides
        exactly as the same call never cut.
        """
        for t in range(self.indexed_through + 1, state.turn):
            self.of(state, t)
        self.indexed_through = max(self.indexed_through, state.turn - 1)

    def of(self, state: CallState, turn: int) -> TurnAnchors:
        """The anchors of ``turn`` (cached once the turn is complete, i.e. before ``state.turn``)."""
        cached = self.anchors.get(turn)
        if cached is not None:
            return cached
        found = turn_anchors(turn, state.transcript.in_turns(turn, turn))
        if turn < state.turn:
            self.anchors[turn] = found
            self.word_turns.update(found.words)
        return found

    def rare(self, word: str, turns: int) -> bool:
        """Whether ``word`` is still rare enough in a call of ``turns`` turns to tie two turns together."""
        return self.word_turns[word] <= max(3, RARE_SHARE * turns)


@dataclass(frozen=True)
class ShownSizes:
    """What a policy's requests show beyond the raw turns, in tokens, for the priced ``reference`` trigger.

    Attributes:
        summary: The summary lane as the requests show it (a budget may show less than the summary holds).
        knowledge: Turn -> the knowledge pinned after that turn's caller words; a pass takes all of it out but the
            current turn's.
    """

    summary: int
    knowledge: Mapping[int, int] = field(default_factory=dict)


class PassTrigger:
    """Decides, per call, which pass runs at the start of a turn, for the policy's trigger.

    ``cadence`` steps the :class:`~voice_agent.core.policy.PolicyTracker` as the calculator does;
    ``threshold`` and ``reference`` decide here and record the pass in the tracker.

    Args:
        lanes_shown: The policy shows the ledger and slots to the model (``lanes``): a value they hold need not
            stay raw. Without them (``rolling``) a turn with a value the caller said stays raw while it may.

    Attributes:
        index: The ``reference`` trigger's cache of anchors.
        decisions: Every ``threshold`` and ``reference`` pass, explained (``voice-agent policy --scenario``).
    """

    def __init__(self, lanes_shown: bool = True) -> None:
        self.lanes_shown = lanes_shown
        self.index = ReferenceIndex()
        self.decisions: list[TriggerDecision] = []
        self.carried = 0.0
        """``cache_price``: what carrying the foldable turns has cost since the last pass, in uncached tokens."""
        self.shown: Callable[[CallState], ShownSizes] | None = None
        """``cache_price``: what the policy's requests show beyond the raw turns (None: the whole summary, no
        knowledge), so the price of a pass is reckoned on what the requests carry."""

    def _pays(self, state: CallState, folds: Sequence[int]) -> bool:
        """Whether a pass folding ``folds`` pays for the cache it breaks (always, without ``cache_price``).

        Each turn the foldable turns stay raw they ride, cached, on the requests: ``price x tokens`` per turn,
        added up since the last pass. A pass changes the prefix, so the request after it is sent uncached once:
        ``(1 - price) x`` what stays. The pass runs when the first has grown to the second, which spaces passes
        about as the square root of (what stays / what each turn adds), the cheapest spacing for this trade.
        """
        price = state.policy.cache_price
        if price is None:
            return True
        folded = set(folds)
        entries = state.raw_entries()
        shown = self.shown(state) if self.shown is not None else ShownSizes(estimate_tokens(state.summary.render()))
        # A pass takes out the turns it folds and the knowledge pinned before the current turn (the assembler's
        # rule); the summary as shown and the turns it keeps are sent again after it.
        leaving = sum(estimate_tokens(e.render()) for e in entries if e.turn in folded)
        leaving += sum(tokens for turn, tokens in shown.knowledge.items() if turn < state.turn)
        staying = sum(estimate_tokens(e.render()) for e in entries if e.turn not in folded) + shown.summary
        self.carried += price * leaving
        return self.carried >= (1.0 - price) * staying

    def schedule(self, state: CallState, context_tokens: int | None = None) -> ScheduledPass | None:
        """The pass due at the start of ``state.turn``, if any (updates the tracker; runs nothing)."""
        trigger = state.policy.trigger
        if trigger is Trigger.REFERENCE:
            return self._reference(state)
        if trigger is Trigger.THRESHOLD:
            return self._threshold(state, context_tokens)
        return state.tracker.on_turn_start(state.turn, context_tokens)

    def _threshold(self, state: CallState, context_tokens: int | None) -> ScheduledPass | None:
        """pipecat's rule: 20 messages since the summary, or 8000 tokens; keep the last 4 messages.

        A message is one transcript entry (utterance, tool call, tool result); a pass folds whole turns,
        the newest it may fold being the last one that leaves at least 4 messages after it.
        """
        tracker, turn = state.tracker, state.turn
        first = tracker.summarized_through + 1
        raw = state.transcript.in_turns(first, turn)
        tokens = context_tokens
        if tokens is None:
            tokens = estimate_tokens(state.summary.render()) + sum(estimate_tokens(e.render()) for e in raw)
        policy = state.policy
        limit = policy.max_context_tokens or PIPECAT_MAX_CONTEXT_TOKENS
        if len(raw) < PIPECAT_MAX_UNSUMMARIZED_MESSAGES and tokens < limit:
            return None
        last = turn
        for kept, entry in enumerate(reversed(raw)):
            if kept >= PIPECAT_MIN_MESSAGES_AFTER_SUMMARY and entry.turn < last:
                break
            last = entry.turn
        last -= 1  # ``last`` was the oldest turn kept; everything before it is folded
        if last < first:
            return None
        scheduled = ScheduledPass(turn=turn, first=first, last=last)
        tracker.advance(scheduled, last)
        why = (f"{len(raw)} messages since the summary (>= {PIPECAT_MAX_UNSUMMARIZED_MESSAGES})"
               if len(raw) >= PIPECAT_MAX_UNSUMMARIZED_MESSAGES else f"~{tokens} tokens (>= {limit})")
        self.decisions.append(TriggerDecision(turn, tuple((u, why) for u in range(first, last + 1)), ()))
        return scheduled

    def _reference(self, state: CallState) -> ScheduledPass | None:
        tracker, policy, turn = state.tracker, state.policy, state.turn
        self.index.catch_up(state)
        through = turn - policy.floor - 1
        # Each turn once: a held turn can also lie above ``summarized_through`` (a pass still running, or a
        # state restored while one was), and a turn counted twice would be shown twice.
        candidates = sorted({*tracker.held, *range(tracker.summarized_through + 1, through + 1)})
        if not candidates:
            return None
        window = range(max(1, turn - policy.keep + 1), turn + 1)
        recent = [self.index.of(state, t) for t in window]
        values = self._lane_values(state)
        held: list[tuple[int, str]] = []
        folded: list[tuple[int, str]] = []
        for u in candidates:
            why = self._referenced(state, self.index.of(state, u), [a for a in recent if a.turn > u], values)
            if why is None:
                later = max(u + 1, window.start)
                folded.append((u, f"nothing in turns {later}-{turn} refers to it"))
            else:
                held.append((u, why))
        while len(held) > policy.keep:  # at most K turns held: the longest held is folded first
            u, why = held.pop(0)
            folded.append((u, f"held longest ({why}); at most K={policy.keep} turns are held"))
        # Priced, the turns past the cap leave at the next pass that pays (they ride, cached, until then): forcing a
        # pass for them breaks the cache nearly every turn on a call full of values (measured: 12 -> 22 breaks).
        pays = self._pays(state, [u for u, _ in folded]) if folded else False
        if len(folded) < policy.batch or not pays:
            return None
        self.carried = 0.0
        folds = tuple(sorted(u for u, _ in folded))
        scheduled = ScheduledPass(turn=turn, first=folds[0], last=folds[-1], turns=folds)
        tracker.advance(scheduled, max(through, tracker.summarized_through), tuple(u for u, _ in held))
        self.decisions.append(TriggerDecision(turn, tuple(sorted(folded)), tuple(held)))
        return scheduled

    @staticmethod
    def _lane_values(state: CallState) -> list[tuple[str, str]]:
        """(what, normalized value) of every ledger and slot value, long enough to mean something."""
        out = [(f"identifier {e.role}", _normal(e.value)) for e in state.ledger.entries]
        for name, slot in state.slots.filled().items():
            for value in slot.value if isinstance(slot.value, list) else [slot.value]:
                out.append((f"slot {name}", _normal(str(value))))
        return [(what, v) for what, v in out if len(v) >= 3]

    def _referenced(
        self, state: CallState, old: TurnAnchors, later: Sequence[TurnAnchors], values: Sequence[tuple[str, str]]
    ) -> str | None:
        """What in ``later`` still refers to ``old`` (or keeps it open), or None."""
        if old.caller_values:
            held = [v for _, v in values] if self.lanes_shown else []
            if any(not any(token in v for v in held) for token in old.caller_values):
                return ("it states a value (digits) no lane holds yet" if self.lanes_shown
                        else "it states a value (digits) only the raw turns hold")
        if old.open_item is not None:
            if old.open_item.startswith("the agent's commitment"):
                if not any(a.completed_tool_at > old.commitment_at for a in later):
                    return old.open_item
            elif old.open_item.startswith("the caller's question"):
                if not any(a.answered for a in later):
                    return old.open_item
            else:
                return old.open_item
        for a in reversed(later):  # the nearest reference is the one worth naming
            for what, value in values:
                if value in old.text and value in a.text:
                    return f"turn {a.turn} repeats {what}"
            shared_ids = old.ids & a.ids
            if shared_ids:
                return f"turn {a.turn} repeats an identifier-like token"  # no value: reasons reach logs
            shared = sorted(w for w in old.words & a.referring_words if self.index.rare(w, state.turn))
            if shared:
                return f"turn {a.turn} repeats the topic word {shared[0]!r}"
        return None
