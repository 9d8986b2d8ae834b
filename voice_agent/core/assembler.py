"""The assembler: lanes -> the messages of one LLM call, with a token estimate per lane."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from voice_agent.core import summary_budget
from voice_agent.core.call_state import CallState
from voice_agent.core.pass_trigger import ShownSizes
from voice_agent.core.summary import EpisodeSummary
from voice_agent.core.summary_budget import LineStanding, SummaryStanding
from voice_agent.core.tokens import estimate_message_tokens
from voice_agent.core.transcript import EntryKind, TranscriptEntry

Message = dict[str, Any]

KNOWN_FACTS_HEADER = "KNOWN FACTS (tool values; quotes are the caller's words; copy exactly):"
MODEL_NOTES_HEADER = "NOTED BY THE AGENT (the model's own words, not verified; confirm before acting):"
LANE_HEADERS = ("KNOWN FACTS", "NOTED BY THE AGENT", "SUMMARY of earlier turns", "KNOWLEDGE (", "HARD CONSTRAINTS")
"""How every lane message the assembler writes begins, whatever role it is sent with (``llm.lane_role``)."""
LANE_ROLE = "developer"
"""Role of the lane messages after the system prompt. LLM vendors without a developer role get
them as user messages (pipecat converts); a system message anywhere but first is deprecated."""
LANE_ORDER = ("system", "constraints", "known_facts", "summary", "retrieved", "recent")


@dataclass(frozen=True)
class AssemblerConfig:
    """What the assembler adds around the lanes.

    Args:
        system_prompt: The agent's instructions (empty: none, the LLM service carries its own).
        hard_constraints: Rules the agent must not break. ``lanes`` states them in full right after the system
            prompt (a part of every request that never changes, so the prompt cache always serves it) and recalls
            them in one line at the end (:data:`CONSTRAINTS_REMINDER`); ``rolling`` and ``window`` restate them in
            full at the end.
        summary_max_tokens: Budget for the summary lane. When over, what nothing refers to goes first, small
            talk before what the agent did; the caller's own statements, requests and rulings never go
            (:mod:`voice_agent.core.summary_budget`) unless the lane reaches its ceiling.
        max_retrieved: Most knowledge chunks injected (precision over recall).
        summary_ceiling_tokens: The lane's hard cap, which keeps it bounded however long the call: over it the
            caller's lines leave too, the ones nothing refers to first. 0: twice ``summary_max_tokens``.
    """

    system_prompt: str = "You are a helpful phone support agent."
    hard_constraints: tuple[str, ...] = ()
    summary_max_tokens: int = 400
    max_retrieved: int = 3
    summary_ceiling_tokens: int = 0

    def __post_init__(self) -> None:
        if self.summary_max_tokens < 1 or self.max_retrieved < 0:
            raise ValueError("summary_max_tokens must be >= 1 and max_retrieved >= 0")
        if self.summary_ceiling_tokens and self.summary_ceiling_tokens < self.summary_max_tokens:
            raise ValueError("summary_ceiling_tokens must be 0 or at least summary_max_tokens")

    @property
    def summary_ceiling(self) -> int:
        """The summary lane's hard cap in tokens."""
        return self.summary_ceiling_tokens or 2 * self.summary_max_tokens


@dataclass
class AssembledContext:
    """The messages for one LLM call and what each lane cost.

    Attributes:
        messages: OpenAI-format messages, lanes in DESIGN order.
        lane_tokens: Estimated tokens per lane.
        summary_lines_dropped: Summary lines left out to respect the budget.
        stable_count: How many leading messages form the stable prefix: they stay the same on the next request
            unless a summary pass runs (the LLM vendor's prompt cache can serve them); the rest is the volatile tail.
        fixed_count: How many leading messages of the stable prefix stay the same on every request of the call,
            passes included (the system prompt, the hard constraints): a cache breakpoint there survives a pass.
    """

    messages: list[Message]
    lane_tokens: dict[str, int] = field(default_factory=dict)
    summary_lines_dropped: int = 0
    stable_count: int = 0
    fixed_count: int = 0

    @classmethod
    def from_lanes(cls, lanes: dict[str, list[Message]]) -> AssembledContext:
        """Flattens lanes, in the given order, with a token estimate per lane."""
        messages: list[Message] = []
        tokens: dict[str, int] = {}
        for name, lane in lanes.items():
            messages.extend(lane)
            tokens[name] = sum(_message_tokens(m) for m in lane)
        return cls(messages=messages, lane_tokens=tokens)

    @property
    def total_tokens(self) -> int:
        """Estimated tokens of the whole request."""
        return sum(self.lane_tokens.values())

    def text(self) -> str:
        """All message text joined, for verbatim-presence checks."""
        parts = []
        for m in self.messages:
            parts.append(str(m.get("content") or ""))
            for call in m.get("tool_calls", []):
                parts.append(call["function"]["arguments"])
        return "\n".join(parts)


def known_facts_block(state: CallState, extra_facts: Sequence[str] = ()) -> str | None:
    """Slots, ledger and any extra verbatim lines, or None when all are empty.

    Only values from tool result fields and the caller's own words stand under the verbatim
    header; a value the model wrote goes below it, marked. Ledger entries that only came as one
    item of a list (every invoice of an account) and were never used stay in the ledger, for
    the guards, but out of the block: it is sent on every request.
    """
    return render_facts(*known_facts_lines(state, extra_facts))


def known_facts_lines(state: CallState, extra_facts: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The KNOWN FACTS lines: (verbatim lines, lines the model noted), each ``- name: value``."""
    held = frozenset(state.ledger.values())
    lines = [f"- {line}" for line in state.slots.render_lines(skip_values=held, verbatim=True)]
    lines += [f"- {line}" for line in _ledger_lines(state)]
    lines += [f"- {line}" for line in extra_facts]
    noted = [f"- {line}" for line in state.slots.render_lines(skip_values=held, verbatim=False)]
    return lines, noted


def render_facts(lines: Sequence[str], noted: Sequence[str], header: str = KNOWN_FACTS_HEADER) -> str | None:
    """A KNOWN FACTS block of ``lines`` and, below its own header, ``noted``; None when both are empty."""
    if not lines and not noted:
        return None
    block = [header, *lines] if lines else []
    if noted:
        block += [MODEL_NOTES_HEADER, *noted]
    return "\n".join(block)


def _ledger_lines(state: CallState) -> list[str]:
    """One line per identifier in play; a value held under several roles is one line, its roles joined.

    A generic role that a more specific role of the same value ends with ("order" beside
    "damaged_item_order") adds nothing and is left out.
    """
    roles: dict[str, list[str]] = {}
    suffix: dict[str, str] = {}
    for entry in state.ledger.entries:
        if entry.listed:
            continue
        roles.setdefault(entry.value, []).append(entry.role)
        line = entry.render()
        suffix[entry.value] = line[line.index(entry.value) + len(entry.value):]
    lines = []
    for value, held in roles.items():
        shown = [r for r in dict.fromkeys(held) if not any(o != r and o.endswith("_" + r) for o in held)]
        lines.append(f"{', '.join(shown)}: {value}{suffix[value]}")
    return lines


def _budgeted_summary(
    summary: EpisodeSummary, max_tokens: int, standings: Sequence[Sequence[LineStanding]] | None = None,
    ceiling: int | None = None,
) -> tuple[str, int]:
    """The summary lane's text within the budget, and the lines left out (:mod:`voice_agent.core.summary_budget`).

    Looked up on the module at every call, so a test can put a deliberately bad budget in its place and see
    the property test fail.
    """
    return summary_budget.budgeted_summary(summary, max_tokens, standings, ceiling)


def entries_to_messages(
    entries: Sequence[TranscriptEntry], after: Mapping[int, Message] | None = None
) -> list[Message]:
    """Transcript entries as OpenAI chat messages, every tool call followed by its result.

    Consecutive calls share one assistant message (parallel calls); a call still in
    flight gets an ``IN_PROGRESS`` result and a result without its call is left out,
    so call/result pairing always holds.

    Args:
        entries: The entries, in order.
        after: Transcript index of a caller entry -> a message placed right after that entry's message (the
            knowledge a turn used stays where that turn put it).
    """
    results = {e.tool_call_id: e for e in entries if e.kind is EntryKind.TOOL_RESULT}
    messages: list[Message] = []
    previous: EntryKind | None = None
    for entry in entries:
        if entry.kind is EntryKind.CALLER:
            messages.append({"role": "user", "content": entry.text})
            if after and entry.index in after:
                messages.append(after[entry.index])
        elif entry.kind is EntryKind.AGENT:
            text = entry.text + (" [interrupted by the caller]" if entry.interrupted else "")
            messages.append({"role": "assistant", "content": text})
        elif entry.kind is EntryKind.TOOL_CALL:
            call = {
                "id": entry.tool_call_id,
                "type": "function",
                "function": {"name": entry.tool_name, "arguments": json.dumps(dict(entry.arguments or {}))},
            }
            if previous is EntryKind.TOOL_CALL:
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        previous = entry.kind
    paired: list[Message] = []
    for message in messages:
        paired.append(message)
        for call in message.get("tool_calls", []):
            result = results.get(call["id"])
            content = json.dumps(result.result, default=str) if result else "IN_PROGRESS"
            paired.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return paired


FACTS_SINCE_HEADER = "KNOWN FACTS, new or changed since the list above (the current value where a name is in both):"
"""The tail's facts: a line new since the pass, changed or added to the list in the prefix. A new fact whose exact
value a message of the prefix holds already (the caller's words, a tool result) is not repeated there."""


@dataclass
class _Stable:
    """What the stable prefix of a call's requests was built from since the last summary pass.

    Attributes:
        state: The call (another call's state starts over).
        summary: The summary the prefix shows (a pass replaces the object).
        first_raw: Transcript index of the first raw entry (a pass moves it).
        facts: The KNOWN FACTS lines written into the prefix when it was (re)built.
        noted: The model-noted lines written there.
        block: That KNOWN FACTS block as rendered (None: no lines), rendered once per pass.
        knowledge: Transcript index of a caller entry -> (its turn, the knowledge message the turn was given),
            placed right after it.
        knowledge_turns: The turns that were given knowledge.
        used: The pinned knowledge the agent's reply used (kept for good).
        summary_text: The summary lane's text within its budget, worked out once per pass (None: no summary).
        summary_dropped: The summary lines the budget left out.
    """

    state: CallState | None = None
    summary: EpisodeSummary | None = None
    first_raw: int | None = None
    facts: frozenset[str] = frozenset()
    noted: frozenset[str] = frozenset()
    block: str | None = None
    knowledge: dict[int, tuple[int, Message]] = field(default_factory=dict)
    knowledge_turns: set[int] = field(default_factory=set)
    used: set[int] = field(default_factory=set)
    summary_text: str | None = None
    summary_dropped: int = 0


class ContextAssembler:
    """Builds one LLM request from the lanes, as a stable prefix and a small volatile tail.

    Order: system prompt; the hard constraints (the same on every request of the call: a pass never breaks the
    cache before them); KNOWN FACTS as they stood at the last summary pass; the summary; the raw turns since,
    each turn's knowledge right after the caller words it answered (kept once the turn is over only if the
    reply used it, and only until the next pass); then the tail: KNOWN FACTS new or changed since the pass, and
    one line that recalls the hard constraints. Between two passes a request only appends to the one before it,
    so the LLM vendor's prompt cache serves everything but the tail; a pass rebuilds the prefix once, from the KNOWN
    FACTS on.
    Every fact is on every request verbatim, in the prefix or in the tail.

    One assembler serves one call at a time (it remembers the prefix it built; another state starts over).
    """

    def __init__(self, config: AssemblerConfig | None = None) -> None:
        self.config = config or AssemblerConfig()
        self._stable = _Stable()
        self._standing = SummaryStanding()

    def build(
        self, state: CallState, retrieved: Sequence[str] = (), extra_facts: Sequence[str] = ()
    ) -> AssembledContext:
        """Assembles the context for the current turn of ``state``.

        Args:
            state: The call.
            retrieved: Knowledge chunks for the current question (at most ``max_retrieved`` are used); the
                first ones a turn gets stay with that turn, after it only if its reply used them.
            extra_facts: More verbatim KNOWN FACTS lines, e.g. the caller's date constraints in their own words.
        """
        raw = state.raw_entries()
        lines, noted = known_facts_lines(state, extra_facts)
        stable = self._stable_for(state, raw, lines, noted)
        self._keep_knowledge(state, stable, raw, retrieved)
        messages: list[Message] = list(system_lane(self.config.system_prompt))
        tokens = {"system": sum(_message_tokens(m) for m in messages)}
        facts = stable.block
        prefix_facts = [{"role": LANE_ROLE, "content": facts}] if facts else []
        dropped = stable.summary_dropped
        summary: list[Message] = []
        if stable.summary_text is not None:
            summary = [{"role": LANE_ROLE, "content": "SUMMARY of earlier turns:\n" + stable.summary_text}]
        callers = _caller_indices(raw)
        knowledge = {i: m for i, (_, m) in stable.knowledge.items() if i in callers}
        recent = entries_to_messages(raw, knowledge)
        fresh = [line for line in lines if line not in stable.facts]
        if fresh:  # a fact new since the pass whose exact value a message above already holds is not sent again
            above = _stable_texts(summary + recent)
            fresh = [line for line in fresh if not _held_above(line, stable.facts, above)]
        fresh_noted = [line for line in noted if line not in stable.noted]
        new_facts = render_facts(fresh, fresh_noted, FACTS_SINCE_HEADER if facts else KNOWN_FACTS_HEADER)
        if facts and not fresh and fresh_noted:  # a noted line that changed must say it replaces the one above
            new_facts = FACTS_SINCE_HEADER + "\n" + str(new_facts)
        tail_facts = [{"role": LANE_ROLE, "content": new_facts}] if new_facts else []
        constraints = lane_of(constraints_message(self.config.hard_constraints))
        reminder = [{"role": LANE_ROLE, "content": CONSTRAINTS_REMINDER}] if constraints else []
        messages += constraints
        fixed_count = len(messages)
        messages += prefix_facts + summary + recent
        stable_count = len(messages)
        messages += tail_facts + reminder
        knowledge_tokens = sum(_message_tokens(m) for m in knowledge.values())
        tokens |= {
            "constraints": sum(_message_tokens(m) for m in constraints + reminder),
            "known_facts": sum(_message_tokens(m) for m in prefix_facts + tail_facts),
            "summary": sum(_message_tokens(m) for m in summary),
            "retrieved": knowledge_tokens,
            "recent": sum(_message_tokens(m) for m in recent) - knowledge_tokens,
        }
        return AssembledContext(messages=messages, lane_tokens=tokens, summary_lines_dropped=dropped,
                                stable_count=stable_count, fixed_count=fixed_count)

    def shown_sizes(self, state: CallState) -> ShownSizes:
        """What this call's requests show beyond the raw turns (for the priced ``reference`` trigger): the summary
        lane as last built, and the knowledge pinned per turn."""
        stable = self._stable
        if stable.state is not state:
            return ShownSizes(0)
        summary = estimate_message_tokens(stable.summary_text) if stable.summary_text is not None else 0
        knowledge: dict[int, int] = {}
        for turn, message in stable.knowledge.values():
            knowledge[turn] = knowledge.get(turn, 0) + _message_tokens(message)
        return ShownSizes(summary, knowledge)

    def _stable_for(
        self, state: CallState, raw: Sequence[TranscriptEntry], lines: Sequence[str], noted: Sequence[str]
    ) -> _Stable:
        """The prefix's memory, rebuilt when a pass changed the summary or moved the raw turns."""
        stable = self._stable
        first = raw[0].index if raw else None
        if stable.state is state and stable.summary is state.summary and stable.first_raw == first:
            return stable
        same_call = stable.state is state
        callers = _caller_indices(raw)
        if not same_call:
            self._standing = SummaryStanding()
        summary_text, summary_dropped = None, 0
        if not state.summary.is_empty():
            # Once per pass (the prefix is rebuilt): what is still in play is read as of now, and the text then
            # stays the same until the next pass, so the prompt cache keeps serving it.
            # As of the turn of the last pass (the drop log has it, and so does a call restored from the store):
            # the same text whenever and wherever the prefix is rebuilt.
            as_of = state.drop_log.events[-1].turn if state.drop_log.events else state.turn
            standings = self._standing.standings(state, state.summary, "\n".join(lines), as_of)
            summary_text, summary_dropped = _budgeted_summary(state.summary, self.config.summary_max_tokens,
                                                              standings, self.config.summary_ceiling)
        # A pass rewrites this part of the prefix anyway: the knowledge earlier turns were given leaves with it, that
        # of turns still raw too (their replies stay, and a later question gets its own); the turn under way keeps its.
        kept = {i: k for i, k in stable.knowledge.items() if i in callers and k[0] >= state.turn}
        self._stable = _Stable(state=state, summary=state.summary, first_raw=first, facts=frozenset(lines),
                               noted=frozenset(noted), block=render_facts(lines, noted),
                               knowledge=kept if same_call else {},
                               knowledge_turns=stable.knowledge_turns if same_call else set(),
                               used=stable.used if same_call else set(),
                               summary_text=summary_text, summary_dropped=summary_dropped)
        return self._stable

    def _keep_knowledge(
        self, state: CallState, stable: _Stable, raw: Sequence[TranscriptEntry], retrieved: Sequence[str]
    ) -> None:
        """Pins the turn's first knowledge right after the caller's words of the turn; unpins what went unused.

        Once its turn is over, a turn's knowledge stays only if the agent's words in that turn used it (a run of
        :data:`USED_WORDS` words in common), and only until the next pass: unused, it would ride on every later
        request. It sat at the end of
        that turn's stable prefix, so taking it out re-sends only what that turn added after it.
        """
        for index, (turn, _) in list(stable.knowledge.items()):
            if turn < state.turn and index not in stable.used:
                agent = " ".join(e.text for e in raw if e.turn == turn and e.kind is EntryKind.AGENT)
                if _uses(agent, str(stable.knowledge[index][1]["content"])):
                    stable.used.add(index)
                else:
                    del stable.knowledge[index]
        if state.turn in stable.knowledge_turns:
            return
        message = retrieved_message(list(retrieved)[: self.config.max_retrieved])
        if message is None:
            return
        for entry in reversed(raw):
            if entry.turn != state.turn:
                return
            if entry.kind is EntryKind.CALLER:
                stable.knowledge[entry.index] = (state.turn, message)
                stable.knowledge_turns.add(state.turn)
                return


_FACT = re.compile(r"^- (?P<name>.+?)(?: \(turn \d+\))?: (?P<value>.*)$", re.S)


def _fact_parts(line: str) -> tuple[str, tuple[str, ...]] | None:
    """A KNOWN FACTS line's name and the exact value(s) it states (a caller quote: each quoted item), or None.

    ``- account: ACC-4729-18`` -> ("account", ("ACC-4729-18",)); ``- timing (turn 8): "not before the 14th"``
    -> ("timing", ("not before the 14th",)); a flagged value (``ACC-1 (UNVERIFIED, caller-stated)``) keeps its
    flag, so it is never found verbatim in a transcript message.
    """
    match = _FACT.match(line)
    if match is None:
        return None
    value = match["value"]
    items = tuple(value[1:-1].split('"; "')) if len(value) > 1 and value[0] == value[-1] == '"' else (value,)
    return match["name"], items


def _stable_texts(messages: Sequence[Message]) -> str:
    """The text of the summary and the raw turns of the stable prefix (knowledge left out: it may leave before the
    next pass), for looking up values verbatim."""
    parts = []
    for m in messages:
        content = str(m.get("content") or "")
        if not content.startswith("KNOWLEDGE ("):
            parts.append(content)
        parts += [call["function"]["arguments"] for call in m.get("tool_calls", [])]
    return "\n".join(parts)


def _held_above(line: str, prefix_lines: frozenset[str], above: str) -> bool:
    """Whether the tail can leave out ``line``, a KNOWN FACTS line new since the pass: its every value is verbatim in
    ``above`` (a caller's words, a tool result, the summary: none of it changes before the next pass, which puts the
    line in the prefix's KNOWN FACTS), and neither its name nor its value is in the prefix's list, where the line
    would replace or add to what the list says (a changed value, a second role of the same identifier)."""
    parts = _fact_parts(line)
    if parts is None:
        return False
    name, values = parts
    for known in prefix_lines:
        other = _fact_parts(known)
        if other is not None and (other[0] == name or set(other[1]) & set(values)):
            return False
    return all(v and v in above for v in values)


def _caller_indices(raw: Sequence[TranscriptEntry]) -> frozenset[int]:
    """Transcript indexes of the caller entries still raw: the only places pinned knowledge can sit."""
    return frozenset(e.index for e in raw if e.kind is EntryKind.CALLER)


USED_WORDS = 5
"""Words in a row the agent's reply must share with a knowledge chunk for the chunk to count as used."""


def _uses(reply: str, chunk: str) -> bool:
    """Whether ``reply`` repeats a run of :data:`USED_WORDS` words of ``chunk``."""
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9']+", reply)]
    runs = {tuple(words[i:i + USED_WORDS]) for i in range(len(words) - USED_WORDS + 1)}
    source = [w.lower() for w in re.findall(r"[A-Za-z0-9']+", chunk)]
    return any(tuple(source[i:i + USED_WORDS]) in runs for i in range(len(source) - USED_WORDS + 1))


def system_lane(prompt: str) -> list[Message]:
    """The system lane: the prompt as the first message, or nothing when the prompt is empty.

    Empty when the prompt is the LLM service's own (a pipecat user's ``system_instruction``, or the system
    message of their own context, which the context stage passes through): no empty system message is sent.
    """
    return [{"role": "system", "content": prompt}] if prompt else []


def lane_of(message: Message | None) -> list[Message]:
    """A lane holding ``message``, or an empty lane."""
    return [message] if message is not None else []


def retrieved_message(chunks: Sequence[str]) -> Message | None:
    """The retrieved-knowledge message, or None without chunks."""
    if not chunks:
        return None
    body = "\n\n".join(f"[{i + 1}] {c}" for i, c in enumerate(chunks))
    return {"role": LANE_ROLE, "content": "KNOWLEDGE (may help with this question):\n" + body}


CONSTRAINTS_REMINDER = "HARD CONSTRAINTS: the rules stated at the top still bind this reply; never break them."
"""The tail's last line under ``lanes``: it recalls the hard constraints near the question without sending them
again uncached on every request (they are stated in full in the stable prefix)."""


def constraints_message(rules: Sequence[str]) -> Message | None:
    """The hard constraints as one lane message, or None without rules."""
    if not rules:
        return None
    body = "\n".join(f"- {r}" for r in rules)
    return {"role": LANE_ROLE, "content": "HARD CONSTRAINTS (never break these):\n" + body}


def _message_tokens(message: Message) -> int:
    text = str(message.get("content") or "")
    for call in message.get("tool_calls", []):
        text += call["function"]["name"] + call["function"]["arguments"]
    return estimate_message_tokens(text)
