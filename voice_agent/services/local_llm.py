"""The local model as a pipecat LLM service, for pipecat's own summarizer (``run_inference`` only).

pipecat's ``LLMContextSummarizer`` asks a dedicated LLM service (``LLMContextSummaryConfig.llm``) for one
out-of-band inference per summary: its own prompt as the system instruction and its own transcript of the
messages to fold. :class:`LocalModelLLM` answers that with the packaged local model, through the same
:class:`~voice_agent.summarizers.local.LocalSummarizer` (worker thread, timeout, pass statistics) our own
policies use, so the two mechanisms run on the same model with the same output budget
(``summarizer.max_tokens``; pipecat asks for ``target_context_tokens``, the smaller of the two applies).
It is not a conversation LLM: pipecat calls it directly and never puts it in a pipeline.
"""

from __future__ import annotations

from typing import Any

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings

from voice_agent.core.caller_history import message_text
from voice_agent.summarizers.local import LocalSummarizer


class LocalModelLLM(LLMService):
    """Out-of-band inference on the local model (what pipecat's summarizer needs from its LLM).

    Args:
        summarizer: Runs the passes (model, thread, timeout, sampling) and counts them (``passes``, kind
            ``pipecat``).
    """

    def __init__(self, summarizer: LocalSummarizer, **kwargs: Any) -> None:
        settings = LLMSettings(
            model=summarizer.config.local_model, system_instruction=None,
            temperature=summarizer.config.local_temperature,
            max_tokens=summarizer.config.max_tokens, top_p=None, top_k=None, frequency_penalty=None,
            presence_penalty=None, seed=summarizer.config.local_seed, filter_incomplete_user_turns=None,
            user_turn_completion_config=None,
        )
        super().__init__(settings=settings, **kwargs)
        self.summarizer = summarizer
        self.in_flight = 0
        """Inferences started and not yet returned (pipecat's own flag is cleared by an interruption)."""

    async def run_inference(
        self,
        context: LLMContext,
        max_tokens: int | None = None,
        system_instruction: str | None = None,
        response_schema: dict[str, Any] | None = None,
    ) -> str | None:
        """One completion of ``context`` under ``system_instruction`` on the local model.

        Args:
            context: pipecat's request (its transcript of the messages to fold, as one user message).
            max_tokens: pipecat's budget (``target_context_tokens``); the summarizer's own cap applies too.
            system_instruction: pipecat's summarization prompt.
            response_schema: Not enforced (pipecat's summarizer does not send one).

        Returns:
            The reply; None when the pass failed, which pipecat logs, keeping the context unchanged.
        """
        messages: list[dict[str, str]] = []
        if system_instruction:
            messages.append({"role": "system", "content": system_instruction})
        for message in context.get_messages():
            if isinstance(message, dict) and message.get("role") in ("system", "user", "assistant"):
                messages.append({"role": str(message["role"]), "content": message_text(message.get("content"))})
        self.in_flight += 1
        try:
            text = await self.summarizer.generate_text("pipecat", messages, max_tokens)
        finally:
            self.in_flight -= 1
        return text or None
