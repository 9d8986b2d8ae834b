"""The date contract's model reader on a real model: the conversation LLM through pipecat, or the local model.

Both only supply the completion (:data:`~voice_agent.core.dates.reading.JsonCompleter`); what is asked,
how the quotes are checked and how the dates resolve is the core's
(:class:`~voice_agent.core.dates.reading.ModelDateReader`).
"""

from __future__ import annotations

from typing import Any

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService

from voice_agent.core.dates.reading import JsonCompleter, ModelDateReader
from voice_agent.settings import DatesConfig, Settings, SettingsError
from voice_agent.summarizers.local import LocalSummarizer


def llm_completer(llm: LLMService[Any], max_tokens: int) -> JsonCompleter:
    """A completion by ``llm.run_inference`` (out of band: the conversation's context is untouched)."""

    async def complete(instructions: str, user_text: str, schema: dict[str, Any]) -> str:
        context = LLMContext([{"role": "user", "content": user_text}])
        reply: str | None = await llm.run_inference(
            context, max_tokens=max_tokens, system_instruction=instructions, response_schema=schema
        )
        if not reply:
            raise RuntimeError("the LLM returned no text")
        return reply

    return complete


def local_completer(model: LocalSummarizer, max_tokens: int, kind: str = "dates") -> JsonCompleter:
    """A completion by the local llama.cpp model, constrained to the schema by its JSON grammar (counted in the
    model's passes as ``kind``)."""

    async def complete(instructions: str, user_text: str, schema: dict[str, Any]) -> str:
        messages = [{"role": "system", "content": instructions}, {"role": "user", "content": user_text}]
        return await model.generate_json(kind, messages, schema, max_tokens)

    return complete


def make_date_reader(
    settings: Settings, llm: LLMService[Any] | None = None, local: LocalSummarizer | None = None,
) -> ModelDateReader | None:
    """The model reader ``settings.dates.reader`` names, or None for ``rules``.

    Args:
        settings: Validated settings.
        llm: For ``llm``: the conversation LLM (a hosted vendor; the offline reference agent cannot read).
        local: For ``local``: a local model to share (default: one built from the ``summarizer`` section).

    Raises:
        SettingsError: ``llm`` without a hosted LLM, or ``local`` without its extra.
    """
    config: DatesConfig = settings.dates
    if config.reader == "rules":
        return None
    if config.reader == "llm":
        from voice_agent.services.reference_llm import ReferenceLLMService

        if llm is None or isinstance(llm, ReferenceLLMService):
            raise SettingsError("settings: dates.reader=llm needs a hosted llm.vendor (openai, anthropic, "
                                "google); offline, use dates.reader=local or rules")
        return ModelDateReader(llm_completer(llm, config.reader_max_tokens), config.reader_timeout_secs, "llm")
    if local is None:
        from voice_agent.services.factory import make_local_summarizer
        from voice_agent.settings import with_overrides

        # Its own queue limit no shorter than the reading's: the reader's timeout is the one that decides.
        timeout = max(settings.summarizer.local_timeout_secs, config.reader_timeout_secs)
        local = make_local_summarizer(with_overrides(settings, summarizer={"local_timeout_secs": timeout}))
    return ModelDateReader(local_completer(local, config.reader_max_tokens), config.reader_timeout_secs, "local")
