"""The per-turn record of a call, judged from outside: what the model received, what ran, what was heard.

Pure logic, no pipecat: the observer adapter feeds it frames' contents. A turn is one
exchange (the caller speaks, the agent answers, tool calls included), numbered from 1
as the call numbers it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from voice_agent.call.session import CallSession
from voice_agent.core.assembler import LANE_HEADERS
from voice_agent.core.caller_history import message_text
from voice_agent.core.tokens import estimate_tokens
from voice_agent.core.tool_spec import ParamKind
from voice_agent.core.transcript import EntryKind
from voice_agent.policies.pipecat_builtin import is_pipecat_summary

MEMORY_ROLES = frozenset({"system", "developer"})
"""Roles of the messages a policy adds besides the raw turns (KNOWN FACTS, summary, knowledge, rules); pipecat's
summary, a ``user`` message, is memory too."""
_WORD = re.compile(r"[A-Za-z0-9]+")
_NEGATED = re.compile(r"\b(?:not|no|never|except|other than|instead of)\b|n't\b", re.I)
"""An agent sentence that names a ruled-out option to exclude it is not an offer."""
_MAX_ID_PIECES = 6
"""An identifier said in pieces ("ACC 4729 18") spans at most this many words."""


def canonical(value: str) -> str:
    """Letters and digits only, upper case."""
    return "".join(c for c in value if c.isalnum()).upper()


def _content(message: Mapping[str, Any]) -> str:
    text = message_text(message.get("content"))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        text += " " + json.dumps(calls, default=str)
    return text


def _is_memory(message: Mapping[str, Any], text: str) -> bool:
    """A message a policy added (a lane, sent as ``developer``, ``system`` or, by ``llm.lane_role``, ``user``;
    pipecat's summary), not the caller's words."""
    return (message.get("role") in MEMORY_ROLES or is_pipecat_summary(message.get("role"), text)
            or text.startswith(LANE_HEADERS))


def _sentences(texts: Sequence[str]) -> list[str]:
    """The sentences of what the agent said."""
    return [s for text in texts for s in re.split(r"(?<=[.!?])\s+", text) if s]


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield str(value)


@dataclass(frozen=True)
class WatchedFact:
    """A fact whose fate a recorder follows (a scenario's ground truth, never shown to the call).

    Attributes:
        key: The fact's name.
        forms: Exact forms that count as present (the caller's words, the canonical value).
        stated_turn: Turn the caller stated it.
        needed_turn: Turn that needs it (None: presence at need is not scored).
        ask_cues: Words of a question that asks for it again ("account number").
        rejected_option: What the caller ruled out ("Tuesday"): offering it again is counted.
    """

    key: str
    forms: tuple[str, ...]
    stated_turn: int
    needed_turn: int | None = None
    ask_cues: tuple[str, ...] = ()
    rejected_option: str | None = None

    def present(self, text: str) -> bool:
        """Any form appears verbatim in ``text``."""
        return any(f and f in text for f in self.forms)


@dataclass
class TurnRecord:
    """One turn as a recorder saw it.

    Attributes:
        turn: Turn number.
        caller: The caller's words, as the call heard them.
        agent: What the agent said, as heard.
        interrupted: The caller barged in on the agent.
        first_response_ms: From the first inference of the turn to the agent's first released words.
        requests: LLM requests made (tool re-runs included).
        tokens: Estimated tokens of the first request, as the model received it.
        lane_tokens: The call's own per-lane token estimate of that request (for the printout).
        facts_present: Watched fact -> present verbatim in what the model received (first request).
        facts_in_memory: Watched fact -> present in the policy's messages (not the raw turns).
        guard_verdicts: Every guard verdict of the turn (names, never values).
        rejections: Tool calls the guards refused.
        executed: Tool calls that ran.
        unledgered: Executed identifier arguments that neither the caller nor an earlier tool result gave.
        reasks: Watched facts the agent asked for again after the caller had given them.
        rejected_offers: Watched facts whose ruled-out option the agent offered or booked again.
        output_blocks: Output guard checks that fired.
        summary_pass: The summary pass at the start of the turn: watched facts in and out.
        retrieval: What knowledge retrieval did for the turn.
        errors: Errors the pipeline reported (a service that broke), and every failed LLM attempt (a
            timeout or an error, with the retry or the line that followed) from ``session.llm_failures``.
    """

    turn: int
    caller: str = ""
    agent: list[str] = field(default_factory=list)
    interrupted: bool = False
    first_response_ms: float | None = None
    requests: int = 0
    tokens: int = 0
    lane_tokens: dict[str, int] = field(default_factory=dict)
    facts_present: dict[str, bool] = field(default_factory=dict)
    facts_in_memory: dict[str, bool] = field(default_factory=dict)
    guard_verdicts: list[dict[str, str]] = field(default_factory=list)
    rejections: list[dict[str, str]] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    unledgered: list[dict[str, str]] = field(default_factory=list)
    reasks: list[str] = field(default_factory=list)
    rejected_offers: list[str] = field(default_factory=list)
    output_blocks: list[str] = field(default_factory=list)
    summary_pass: dict[str, Any] | None = None
    retrieval: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    closed: bool = False


class CallRecorder:
    """Builds :class:`TurnRecord` s for one call from what an observer reports.

    It reads the call only to number turns and to copy the guards' own logs; presence,
    tokens, latency, re-asks and the unledgered-identifier audit come from the frames:
    the messages the LLM received, the tool results that came back, the words released.

    Args:
        session: The call observed.
        facts: Facts to follow (a scenario's).
        slow_answer_ms: A turn whose first agent words come later than this (or never) is recorded as an
            error, measured on the recorder's own clock; None: latency is only reported.
    """

    def __init__(
        self, session: CallSession, facts: Sequence[WatchedFact] = (), slow_answer_ms: float | None = None
    ) -> None:
        self.session = session
        self.facts = tuple(facts)
        self.slow_answer_ms = slow_answer_ms
        self.turns: list[TurnRecord] = []
        self.errors: list[str] = []
        self._caller_texts: dict[str, None] = {}
        self._tool_values: set[str] = set()
        self._results_seen: set[str] = set()
        self._passes_seen = 0
        self._llm_failures_seen = 0
        self._early_errors: list[tuple[int, str]] = []
        self.done: list[tuple[str, dict[str, Any]]] = []
        """Every tool call that ran and did what it was asked (no refusal, error or question back), in order."""

    @property
    def current(self) -> TurnRecord | None:
        """The turn in progress, or the last one."""
        return self.turns[-1] if self.turns else None

    def _open(self, turn: int, now: float) -> TurnRecord:
        current = self.current
        if current is not None and current.turn == turn:
            return current
        if current is not None:
            self.close_turn()
        record = TurnRecord(turn=turn, started=now)
        self.turns.append(record)
        # Errors of this turn seen before the LLM got its context (the recognizer's, the retrieval stage's).
        record.errors.extend(message for at, message in self._early_errors if at == turn)
        self._early_errors = [(at, message) for at, message in self._early_errors if at > turn]
        return record

    def context_received(self, messages: Sequence[Mapping[str, Any]], now: float | None = None) -> None:
        """The LLM received ``messages`` (the assembled context of one inference)."""
        now = time.perf_counter() if now is None else now
        record = self._open(max(self.session.turn, 1), now)
        first = record.requests == 0  # the turn's first request is measured whole; a re-run only for caller words
        texts = [_content(m) if first or m.get("role") == "user" else "" for m in messages]
        for message, text in zip(messages, texts, strict=True):
            if message.get("role") == "user" and not _is_memory(message, text):
                self._caller_texts.setdefault(text, None)
        record.requests += 1
        if not first:
            return
        whole = "\n".join(texts)
        memory = "\n".join(t for m, t in zip(messages, texts, strict=True)
                           if _is_memory(m, t))
        record.tokens = sum(estimate_tokens(t) for t in texts)
        if self.session.last_context is not None:
            record.lane_tokens = dict(self.session.last_context.lane_tokens)
        record.facts_present = {f.key: f.present(whole) for f in self.facts}
        record.facts_in_memory = {f.key: f.present(memory) for f in self.facts}

    def agent_words(self, now: float | None = None) -> None:
        """The agent's words were released towards the caller."""
        record = self.current
        if record is not None and record.first_response_ms is None and not record.closed:
            now = time.perf_counter() if now is None else now
            record.first_response_ms = (now - record.started) * 1000

    def _sourced(self, value: str) -> bool:
        """Did the caller say ``value`` (in any spacing) or an earlier tool result hold it?"""
        target = canonical(value)
        if not target:
            return True
        if target in self._tool_values:
            return True
        for text in self._caller_texts:
            words = [canonical(w) for w in _WORD.findall(text)]
            for i in range(len(words)):
                joined = ""
                for piece in words[i : i + _MAX_ID_PIECES]:
                    joined += piece
                    if joined == target:
                        return True
                    if len(joined) >= len(target):
                        break
        return False

    def tool_result(self, name: str, tool_call_id: str, arguments: Mapping[str, Any], result: Any) -> None:
        """A tool call came back with ``result`` (a guard's refusal, an error or the tool's answer)."""
        if tool_call_id in self._results_seen:
            return
        self._results_seen.add(tool_call_id)
        record = self.current
        refused = isinstance(result, Mapping) and result.get("status") == "rejected" and "guard" in result
        # A call the turn's tool cap stopped never reached the tool: neither executed nor done.
        stopped = isinstance(result, Mapping) and result.get("status") == "stopped"
        if record is not None and refused:
            # What the model was told, as the frame carries it: the call's own guard log is not needed.
            verdict = str(result.get("verdict"))
            record.rejections.append({"tool": name, "guard": str(result["guard"]), "verdict": verdict})
        if record is not None and not refused and not stopped:
            record.executed.append(name)
            record.rejected_offers.extend(self._booked_rejected(record.turn, arguments))
            tool = self.session.domain.tool(name)
            for param in tool.params_of(ParamKind.IDENTIFIER) if tool is not None else ():
                value = arguments.get(param.name)
                if isinstance(value, str) and value and not self._sourced(value):
                    record.unledgered.append({"tool": name, "argument": param.name})
        if not refused:
            self._tool_values.update(canonical(v) for v in _leaves(result))
            failed = not isinstance(result, Mapping) or "error" in result or result.get("status") in (
                "rejected", "error", "confirm", "stopped")
            if not failed:
                self.done.append((name, dict(arguments)))

    def error(self, message: str, turn: int | None = None) -> None:
        """The pipeline reported an error, in ``turn`` (None: the turn whose record is open).

        An error of a turn whose record is not open yet (the LLM has not received its context) joins
        that turn's record when it opens, not the previous one's; one of an earlier turn joins that turn's.
        """
        self.errors.append(message)
        current = self.current
        if turn is None or (current is not None and current.turn == turn):
            if current is not None:
                current.errors.append(message)
            return
        if current is None or turn > current.turn:
            self._early_errors.append((turn, message))
            return
        earlier = next((r for r in reversed(self.turns) if r.turn == turn), current)
        earlier.errors.append(message)

    def close_turn(self) -> TurnRecord | None:
        """Completes the current turn's record from the call's logs and the words heard (idempotent)."""
        record = self.current
        if record is None or record.closed:
            return record
        record.closed = True
        session, turn = self.session, record.turn
        for entry in session.state.transcript.in_turns(turn, turn):
            if entry.kind is EntryKind.CALLER:
                record.caller = f"{record.caller} {entry.text}".strip()
            elif entry.kind is EntryKind.AGENT:
                record.agent.append(entry.text)
                record.interrupted = record.interrupted or entry.interrupted
        for event in session.guard_events:
            if event.turn == turn:
                record.guard_verdicts.extend(event.verdicts)  # every verdict, "ok" too: only the call knows those
        record.output_blocks = [check for t, check in session.output_blocks if t == turn]
        record.retrieval = dict(session.retrieval_by_turn.get(turn, {}))
        # Only passes up to this turn are consumed: the next turn's pass may already be in the log. A pass
        # run in the background joins the first record closed after it landed, under the turn it ran at.
        for summary_pass in session.summary_passes[self._passes_seen :]:
            if summary_pass.landed > turn:
                break
            self._passes_seen += 1
            if summary_pass.landed <= turn:
                record.summary_pass = {
                    "turn": summary_pass.turn,
                    "facts_in": sorted(f.key for f in self.facts if f.present(summary_pass.text_in)),
                    "facts_out": sorted(f.key for f in self.facts if f.present(summary_pass.text_out)),
                }
        # The LLM's failures (timeouts and errors, each with what followed) come from the call's own log,
        # written by its LLM watchdog; a failure logged after its turn closed joins the next record.
        for failure in session.llm_failures[self._llm_failures_seen :]:
            self.error(failure.describe())
        self._llm_failures_seen = len(session.llm_failures)
        # The recorder's own clock: an answer that came too late (or never) is a failure whatever the call logged.
        late = record.first_response_ms is None or record.first_response_ms > (self.slow_answer_ms or 0)
        if self.slow_answer_ms is not None and record.requests and late and not record.interrupted:
            waited = "no answer" if record.first_response_ms is None else f"{record.first_response_ms:.0f} ms"
            self.error(f"turn {turn}: the caller waited {waited} (limit {self.slow_answer_ms:.0f} ms)")
        record.reasks = self._reasks(record)
        record.rejected_offers.extend(self._offered_rejected(record))
        return record

    def _offered_rejected(self, record: TurnRecord) -> list[str]:
        """Watched facts whose ruled-out option an agent sentence puts forward again."""
        sentences = _sentences(record.agent)
        out = []
        for fact in self.facts:
            if fact.rejected_option is None or fact.stated_turn >= record.turn:
                continue
            option = re.compile(rf"\b{re.escape(fact.rejected_option)}s?\b", re.I)
            out += [fact.key for s in sentences if option.search(s) and not _NEGATED.search(s)]
        return out

    def _booked_rejected(self, turn: int, arguments: Mapping[str, Any]) -> list[str]:
        """Watched facts whose ruled-out weekday an executed call's date falls on."""
        out = []
        for value in arguments.values():
            try:
                day = dt.date.fromisoformat(str(value))
            except ValueError:
                continue
            for fact in self.facts:
                option = (fact.rejected_option or "").lower()
                if fact.stated_turn < turn and option and day.strftime("%A").lower() == option:
                    out.append(fact.key)
        return out

    def _reasks(self, record: TurnRecord) -> list[str]:
        """Watched facts already stated that one of the agent's questions asks for again."""
        questions = [s.lower() for s in _sentences(record.agent) if "?" in s]
        return [
            f.key for f in self.facts
            if f.stated_turn < record.turn and f.ask_cues
            and any(cue.lower() in q for q in questions for cue in f.ask_cues)
        ]
