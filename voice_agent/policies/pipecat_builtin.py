"""``pipecat``: pipecat's own context summarization, as a pipecat user gets it, for comparison.

The model sees the pipeline's own context (every message the aggregators stored), which pipecat's
``LLMContextSummarizer`` compresses when its thresholds are reached: the older messages become one
free-text summary, re-injected as a user message and re-summarized at the next pass. Nothing is kept
apart from the model: no KNOWN FACTS, no slots, no ledger in the context. The call's guards still run
(they read the lanes, which the session keeps for every policy), so what differs is only what the
model is shown.

This module holds the policy's settings and its place in the session; the pipeline
(:mod:`voice_agent.call.pipeline`) turns them into pipecat's own config objects
(``LLMAutoContextSummarizationConfig``, ``LLMContextSummaryConfig``) on the assistant aggregator.
With ``summarize`` off it is plain pipecat with the full history.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from voice_agent.core.assembler import AssembledContext, Message
from voice_agent.core.call_state import CallState
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry
from voice_agent.policies.base import NoRegeneration

SUMMARY_TEMPLATE = "Conversation summary: {summary}"
"""How pipecat's summary message reads (its default ``summary_message_template``, set explicitly)."""
SUMMARY_PREFIX = SUMMARY_TEMPLATE.split("{summary}")[0]
"""The start of pipecat's summary message: a ``user`` message that holds no caller words."""


def is_pipecat_summary(role: object, text: str) -> bool:
    """True for pipecat's summary message (a ``user`` message that begins with :data:`SUMMARY_PREFIX`)."""
    return role == "user" and text.startswith(SUMMARY_PREFIX)


def pipecat_history(entries: Sequence[TranscriptEntry]) -> list[Message]:
    """Transcript entries as pipecat's own context holds them, for a resumed leg to start from.

    In pipecat's shapes (its assistant aggregator): an agent utterance as heard (no mark of an interruption),
    each tool call its own ``assistant`` message with the ``tool`` message of its result right after
    (``"COMPLETED"`` for an empty result, ``"CANCELLED"`` for a cancelled call, ``"IN_PROGRESS"`` for a call
    without one), JSON as pipecat dumps it.
    """
    results = {e.tool_call_id: e for e in entries if e.kind is EntryKind.TOOL_RESULT}
    messages: list[Message] = []
    for entry in entries:
        if entry.kind is EntryKind.CALLER:
            messages.append({"role": "user", "content": entry.text})
        elif entry.kind is EntryKind.AGENT:
            messages.append({"role": "assistant", "content": entry.text})
        elif entry.kind is EntryKind.TOOL_CALL:
            call = {"id": entry.tool_call_id, "type": "function",
                    "function": {"name": entry.tool_name,
                                 "arguments": json.dumps(dict(entry.arguments or {}), ensure_ascii=False)}}
            messages.append({"role": "assistant", "tool_calls": [call]})
            result = results.get(entry.tool_call_id)
            if result is None:
                content = "IN_PROGRESS"
            elif result.outcome is ToolOutcome.CANCELLED:  # a barge-in, or a call a resume found open
                content = "CANCELLED"
            else:
                content = json.dumps(result.result, ensure_ascii=False, default=str) if result.result else "COMPLETED"
            messages.append({"role": "tool", "content": content, "tool_call_id": entry.tool_call_id})
    return messages


@dataclass(frozen=True)
class PipecatSummaryLimits:
    """pipecat's summarization thresholds (its defaults), passed to its config objects unchanged.

    Attributes:
        summarize: Run pipecat's auto summarization; off: the full history, never compacted.
        max_context_tokens: Summarize when pipecat's token estimate of the context reaches this (None: off).
        max_unsummarized_messages: Summarize when this many messages arrived since the last summary
            (None: off).
        min_messages_after_summary: The last messages kept verbatim after a summary.
        target_context_tokens: The summary's token budget (pipecat passes it as ``max_tokens``).
        timeout_secs: Longest one summary may take before pipecat keeps the context unchanged.
    """

    summarize: bool = True
    max_context_tokens: int | None = 8000
    max_unsummarized_messages: int | None = 20
    min_messages_after_summary: int = 4
    target_context_tokens: int = 6000
    timeout_secs: float = 120.0

    def __post_init__(self) -> None:
        if self.summarize and self.max_context_tokens is None and self.max_unsummarized_messages is None:
            raise ValueError("pipecat_summarizer: set max_context_tokens or max_unsummarized_messages (or both)")
        if self.min_messages_after_summary < 1 or self.target_context_tokens < 1 or self.timeout_secs <= 0:
            raise ValueError("pipecat_summarizer: min_messages_after_summary, target_context_tokens and "
                             "timeout_secs must be positive")


class PipecatBuiltinPolicy(NoRegeneration):
    """The pipeline's own context, summarized by pipecat: no regeneration of ours ever runs.

    Args:
        limits: pipecat's thresholds.
        summary_llm: The pipecat LLM service pipecat summarizes with (its ``summary_config.llm``); None when
            ``limits.summarize`` is off.
    """

    name = "pipecat"

    def __init__(self, limits: PipecatSummaryLimits, summary_llm: Any | None) -> None:
        if limits.summarize and summary_llm is None:
            raise ValueError("the pipecat policy summarizes through an LLM service; none was given")
        self.limits = limits
        self.summary_llm = summary_llm

    def build(self, state: CallState, retrieved: Sequence[str] = ()) -> AssembledContext:
        """Never called: the context stage passes the pipeline's own context through under this policy."""
        raise RuntimeError("the pipecat policy's context is the pipeline's own; nothing is assembled")
