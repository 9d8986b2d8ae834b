"""``pipecat``: pipecat's own context summarization, as a pipecat user gets it, for comparison.

The model sees the pipeline's own context (every message the aggregators stored), which pipecat's
``LLMContextSummarizer`` compresses when its thresholds are reached: the older messages become one
free-text summary, re-injected as a user message and re-summarized at the next pass. Nothing is kept
apart from the model: no KNOWN FACTS, no slots, no ledger in the context. The call's guards still run
(they read the lanes, which the session keeps for every policy), so what differs is only what the
model is shown.

This module holds the policy's place in the session; its settings are the ``pipecat_summarizer``
section, which the pipeline (:mod:`voice_agent.call.pipeline`) turns into pipecat's own config objects
(``LLMAutoContextSummarizationConfig``, ``LLMContextSummaryConfig``) on the assistant aggregator.
With ``summarize`` off it is plain pipecat with the full history.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from voice_agent.core.assembler import AssembledContext, Message
from voice_agent.core.call_state import CallState
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry
from voice_agent.policies.base import NoPasses
from voice_agent.settings import PipecatSummarizerConfig

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


def pipecat_threshold(value: int) -> int | None:
    """A trigger of ``pipecat_summarizer`` as pipecat takes it: 0 (off, in the settings) is pipecat's None."""
    return value or None


class PipecatBuiltinPolicy(NoPasses):
    """The pipeline's own context, summarized by pipecat: no pass of ours ever runs.

    Args:
        config: The ``pipecat_summarizer`` settings section: pipecat's thresholds.
        summary_llm: The pipecat LLM service pipecat summarizes with (its ``summary_config.llm``); None when
            ``config.summarize`` is off.
    """

    name = "pipecat"

    def __init__(self, config: PipecatSummarizerConfig, summary_llm: Any | None) -> None:
        if config.summarize and summary_llm is None:
            raise ValueError("the pipecat policy summarizes through an LLM service; none was given")
        self.config = config
        self.summary_llm = summary_llm

    def build(self, state: CallState, retrieved: Sequence[str] = ()) -> AssembledContext:
        """Never called: the context stage passes the pipeline's own context through under this policy."""
        raise RuntimeError("the pipecat policy's context is the pipeline's own; nothing is assembled")
