"""What the agent does when its LLM fails, so the caller is never left in silence. Pure logic, no pipecat.

A *request* is one inference the call asks for (a caller turn, or a re-run after tool results); an
*attempt* is one try at it. An attempt fails when no first output arrives within
``first_token_timeout_secs``, when the answer is not finished within ``total_timeout_secs``, or when
the service reports an error. A failed attempt is retried ``retries`` times with the same context
(never after a permanent error: a rejected key or an unknown model stays rejected). A request whose
attempts all failed is a *failed request*, and the caller hears a line instead of nothing:

* the first failed request of the call: a short apology ("Sorry, give me a moment.");
* the next ones, before the ``transfer_after_failures``-th: the apology with an offer of a callback;
* the ``transfer_after_failures``-th: the call is handed to a human (the domain's transfer tool, which builds
  the handoff card and, in a served call, moves the phone call), and the caller is told so; without a
  transfer tool, or when the tool did not move the call (no transfer target, a provider that failed),
  the callback offer again;
* any failure after the transfer: a holding line.

The counts are per call and never reset: an LLM that fails every third turn still reaches the transfer.
The timeouts, retries, threshold and tool caps are the ``llm`` settings section
(:class:`voice_agent.settings.LLMConfig`), taken unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry
from voice_agent.settings import LLMConfig


class FailureKind(StrEnum):
    """Why an attempt failed."""

    FIRST_TOKEN_TIMEOUT = "first_token_timeout"
    """No output at all (no text, no tool call) within the first-token timeout."""
    TOTAL_TIMEOUT = "total_timeout"
    """Output started but the answer was not finished within the total timeout."""
    ERROR = "error"
    """The service reported an error."""
    EMPTY = "empty"
    """The answer ended with no text and no tool call (an empty answer, or a tool call whose arguments were
    not JSON, which the vendor's pipecat service drops)."""
    CUT_STREAM = "cut_stream"
    """The answer's stream ended before the LLM vendor said it was finished: the fragment is not an answer."""
    TOOL_LOOP = "tool_loop"
    """The model kept calling tools in one turn (past the cap, or the same refused call again): stopped."""


class RecoveryAction(StrEnum):
    """What follows a failure."""

    RETRY = "retry"
    APOLOGIZE = "apologize"
    OFFER_CALLBACK = "offer_callback"
    TRANSFER = "transfer"
    HOLD = "hold"
    NONE = "none"
    """An error outside any inference: nobody is waiting for an answer, nothing to do but record it."""


TRANSFER_TOOL = "transfer_to_human"
"""The domain tool that hands the call over; a domain without it is never transferred."""


def longest_silence_secs(config: LLMConfig) -> float:
    """Longest a caller waits, with an LLM that never answers, before hearing a recovery line."""
    return (config.retries + 1) * config.first_token_timeout_secs


@dataclass(frozen=True)
class RecoveryLines:
    """What the agent says instead of the answer that did not come."""

    apology: str = "Sorry, give me a moment."
    callback: str = (
        "Sorry, I'm having some trouble on my side. I can have a specialist call you back, "
        "or put you through to a colleague now. Which would you prefer?"
    )
    transfer: str = (
        "I'm sorry for the trouble. I'm transferring you to a colleague now, and they'll see everything "
        "we've covered so far."
    )
    hold: str = "A colleague will be with you shortly. Thank you for holding."
    tool_loop: str = (
        "Sorry, I couldn't get that done just now. I can have a colleague call you back about it, or we can "
        "try again. What would you prefer?"
    )

    def line(self, action: RecoveryAction) -> str | None:
        """The line said for ``action`` (None for a retry or nothing)."""
        return {
            RecoveryAction.APOLOGIZE: self.apology,
            RecoveryAction.OFFER_CALLBACK: self.callback,
            RecoveryAction.TRANSFER: self.transfer,
            RecoveryAction.HOLD: self.hold,
        }.get(action)


@dataclass(frozen=True)
class LLMFailure:
    """One failed attempt, as the call's log keeps it.

    Attributes:
        turn: The turn it happened in.
        kind: Why it failed.
        detail: The timeout or the service's error message.
        attempt: Its attempt number within its request, from 1 (0: an error outside any inference).
        action: What followed.
    """

    turn: int
    kind: FailureKind
    detail: str
    attempt: int
    action: RecoveryAction

    def describe(self) -> str:
        """One line for records and logs."""
        return f"LLM {self.kind.value} (attempt {self.attempt}): {self.detail} -> {self.action.value}"


def decide(
    config: LLMConfig,
    *,
    attempt: int,
    failed_requests: int,
    transferred: bool = False,
    can_transfer: bool = True,
    permanent: bool = False,
) -> RecoveryAction:
    """What to do after attempt ``attempt`` (from 1) of a request failed.

    Args:
        config: The ``llm`` settings section (retries and the transfer threshold).
        attempt: The attempt that failed.
        failed_requests: Requests of the call that failed before this one.
        transferred: The call was already handed to a human.
        can_transfer: The call can be handed over (the domain has the transfer tool and it has not been refused).
        permanent: The error will recur whatever is retried (rejected credentials, an unknown model).
    """
    if attempt <= config.retries and not permanent:
        return RecoveryAction.RETRY
    failed = failed_requests + 1
    if transferred:
        return RecoveryAction.HOLD
    if failed >= config.transfer_after_failures and can_transfer:
        return RecoveryAction.TRANSFER
    return RecoveryAction.APOLOGIZE if failed == 1 else RecoveryAction.OFFER_CALLBACK


class LLMRecovery:
    """The per-call counts behind :func:`decide`.

    Args:
        config: The ``llm`` settings section (retries and the transfer threshold).
        can_transfer: The domain has the transfer tool.
    """

    def __init__(self, config: LLMConfig, *, can_transfer: bool = True) -> None:
        self.config = config
        self.can_transfer = can_transfer
        self.attempt = 0
        """Attempts started of the request in flight."""
        self.failed_requests = 0
        self.transferred = False

    def start_attempt(self, *, retry: bool) -> int:
        """An attempt starts: a retry of the request in flight, or the first of a new one. Returns its number."""
        self.attempt = self.attempt + 1 if retry else 1
        return self.attempt

    def fail(self, *, permanent: bool = False) -> RecoveryAction:
        """The attempt in flight failed: what to do next."""
        action = decide(self.config, attempt=self.attempt, failed_requests=self.failed_requests,
                        transferred=self.transferred, can_transfer=self.can_transfer, permanent=permanent)
        if action is not RecoveryAction.RETRY:
            self.failed_requests += 1
        if action is RecoveryAction.TRANSFER:
            self.transferred = True
        return action

    def transfer_refused(self) -> None:
        """The transfer tool did not hand the call over: offer a callback instead, and never try again."""
        self.transferred = False
        self.can_transfer = False


def tool_loop(
    turn_entries: Sequence[TranscriptEntry], name: str, arguments: Mapping[str, Any], config: LLMConfig
) -> str | None:
    """Why a tool call is one too many in its turn, or None when it may go ahead.

    Args:
        turn_entries: The transcript entries of the turn so far.
        name: The tool the model calls now.
        arguments: Its arguments.
        config: The caps (:attr:`LLMConfig.max_tool_calls_per_turn`, ``max_repeated_refusals``).
    """
    entries = [e for e in turn_entries if e.kind in (EntryKind.TOOL_CALL, EntryKind.TOOL_RESULT)]
    calls = {e.tool_call_id: e for e in entries if e.kind is EntryKind.TOOL_CALL}
    if len(calls) >= config.max_tool_calls_per_turn:
        return f"{len(calls)} tool calls in this turn already (the cap is {config.max_tool_calls_per_turn})"
    same = json.dumps(dict(arguments), sort_keys=True, default=str)
    refused = sum(
        1 for e in entries
        if e.kind is EntryKind.TOOL_RESULT and e.outcome in (ToolOutcome.REJECTED, ToolOutcome.FAILED)
        and (call := calls.get(e.tool_call_id)) is not None and call.tool_name == name
        and json.dumps(dict(call.arguments or {}), sort_keys=True, default=str) == same
    )
    if refused >= config.max_repeated_refusals:
        return f"{name} with the same arguments was refused {refused} times in this turn"
    return None
