"""A summarizer backed by a real LLM service's out-of-band ``run_inference``.

It serves both policies: the structured :class:`~voice_agent.core.summary.EpisodeSummary`
of ``lanes`` (JSON constrained by a strict response schema) and the free text of
the ``rolling`` baseline. A summary pass runs beside a live call, so a failed
pass (bad JSON, timeout, vendor error) is logged and the previous summary is
kept: the call never breaks because of a summary.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from typing import Any

from loguru import logger
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService
from pipecat.utils.context.llm_context_summarization import DEFAULT_SUMMARIZATION_PROMPT
from pydantic import BaseModel, ValidationError

from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.transcript import TranscriptEntry
from voice_agent.settings import SummarizerConfig

TEXT_SUMMARY_INSTRUCTIONS = (
    DEFAULT_SUMMARIZATION_PROMPT
    + "\n\nYou receive the previous summary (possibly empty) and the turns that have just left the"
    " live window. Return the complete updated summary, not only the new part."
)
"""Pipecat's own summarization prompt, adapted to incremental passes (the rolling baseline)."""


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``model`` in the strict form LLM vendors enforce.

    Strict structured output (OpenAI ``strict: true`` and the strictest vendor
    pipecat supports) needs every object to list all its properties as required
    and forbid additional properties; ``$ref``s are inlined and defaults dropped
    because strict mode rejects them.

    Args:
        model: The pydantic model.

    Returns:
        A self-contained JSON schema.
    """
    schema = model.model_json_schema()
    definitions: dict[str, Any] = schema.pop("$defs", {})

    def strict(node: Any) -> Any:
        if isinstance(node, list):
            return [strict(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            return strict(copy.deepcopy(definitions[ref.rsplit("/", 1)[-1]]))
        out = {key: strict(value) for key, value in node.items() if key not in ("default", "title", "properties")}
        properties = node.get("properties")
        if isinstance(properties, dict):
            # Field names are keys here, not schema keywords: a field may be called "title".
            out["properties"] = {name: strict(value) for name, value in properties.items()}
            out["required"] = list(properties)
            out["additionalProperties"] = False
        return out

    result: dict[str, Any] = strict(schema)
    return result


EPISODE_SUMMARY_SCHEMA = strict_json_schema(EpisodeSummary)


def _transcript(turns: Sequence[TranscriptEntry]) -> str:
    return "\n".join(entry.render() for entry in turns) or "(no turns)"


class LLMSummarizer:
    """Summarizes with ``llm.run_inference``; implements ``Summarizer`` and ``TextSummarizer``.

    Args:
        llm: A pipecat LLM service that implements ``run_inference`` (OpenAI, Anthropic,
            Google...). It may be the conversation LLM: the call is out of band.
        config: The ``summarizer`` settings section; this summarizer reads its ``timeout_secs`` (longest one pass
            may take before the previous summary is kept) and ``max_tokens`` (output budget of one pass).
    """

    def __init__(self, llm: LLMService[Any], config: SummarizerConfig | None = None) -> None:
        self.llm = llm
        self.config = config or SummarizerConfig()
        self.failures = 0
        """Passes that kept the previous summary (observable in tests and reports)."""

    async def _infer(
        self, user_text: str, instructions: str, response_schema: dict[str, Any] | None
    ) -> str | None:
        context = LLMContext([{"role": "user", "content": user_text}])
        reply: str | None = await asyncio.wait_for(
            self.llm.run_inference(
                context,
                max_tokens=self.config.max_tokens,
                system_instruction=instructions,
                response_schema=response_schema,
            ),
            timeout=self.config.timeout_secs,
        )
        return reply

    def _failed(self, what: str, exc: BaseException | str) -> None:
        self.failures += 1
        reason = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        logger.warning(f"LLMSummarizer: {what} pass failed, keeping the previous summary ({reason})")

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        """Structured pass for the ``lanes`` policy.

        Args:
            request: The previous summary, the turns that left the window, and the
                ledger roles and slot names the summary must not own.

        Returns:
            The new summary, or ``request.previous`` unchanged when the pass fails.
        """
        user_text = (
            "Previous summary (JSON):\n"
            + request.previous.model_dump_json()
            + "\n\nTurns that just left the live window:\n"
            + _transcript(request.turns)
        )
        try:
            reply = await self._infer(user_text, request.instructions(), EPISODE_SUMMARY_SCHEMA)
        except TimeoutError:
            self._failed("structured", f"no reply within {self.config.timeout_secs:g} s")
            return request.previous
        except Exception as exc:  # an LLM vendor error must not end the call
            self._failed("structured", exc)
            return request.previous
        if not reply:
            self._failed("structured", "empty reply")
            return request.previous
        try:
            summary = EpisodeSummary.model_validate(json.loads(reply))
        except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
            self._failed("structured", exc)
            return request.previous
        # covers_through_turn is set by the caller (core.passes), which knows the pass's range.
        return summary

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        """Free-text pass for the ``rolling`` baseline.

        Args:
            previous: The summary so far ("" at first).
            turns: The turns that just left the window.

        Returns:
            The new summary text, or ``previous`` unchanged when the pass fails.
        """
        user_text = f"Previous summary:\n{previous or '(none yet)'}\n\nConversation history:\n{_transcript(turns)}"
        try:
            reply = await self._infer(user_text, TEXT_SUMMARY_INSTRUCTIONS, None)
        except TimeoutError:
            self._failed("text", f"no reply within {self.config.timeout_secs:g} s")
            return previous
        except Exception as exc:  # an LLM vendor error must not end the call
            self._failed("text", exc)
            return previous
        if not reply or not reply.strip():
            self._failed("text", "empty reply")
            return previous
        return reply.strip()
