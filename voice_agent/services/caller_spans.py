"""The caller-span extractor on a real model: the conversation LLM through pipecat, or the local model.

The same plumbing as the date contract's model reader (:mod:`voice_agent.services.date_reader`): one extra
completion with a JSON schema, by ``run_inference`` on the call's LLM service or by the local model's JSON
grammar. What is asked and how the quotes are checked is the core's
(:class:`~voice_agent.core.caller_spans.CallerSpanExtractor`).
"""

from __future__ import annotations

from typing import Any

from pipecat.services.llm_service import LLMService

from voice_agent.core.caller_spans import CallerSpanExtractor, caller_slots
from voice_agent.core.tool_spec import ToolSpec
from voice_agent.services.date_reader import llm_completer, local_completer
from voice_agent.settings import Settings, SettingsError
from voice_agent.summarizers.local import LocalSummarizer


def extractor_choice(settings: Settings) -> str:
    """``llm``, ``local`` or ``off``: the setting, or, unset, ``llm`` with a hosted LLM and ``off`` offline."""
    chosen = settings.caller_spans.extractor
    if chosen is not None:
        return chosen
    return "off" if settings.llm.vendor == "reference" else "llm"


def make_caller_span_extractor(
    settings: Settings, tools: tuple[ToolSpec, ...], llm: LLMService[Any] | None = None,
    local: LocalSummarizer | None = None,
) -> CallerSpanExtractor | None:
    """The extractor ``settings.caller_spans`` names, or None (``off``, or a domain with no caller-quote slot).

    Args:
        settings: Validated settings.
        tools: The domain's tools: their ``caller_quote`` parameters say which slots the caller's words fill.
        llm: For ``llm``: the conversation LLM (a hosted vendor; the offline reference agent cannot read).
        local: For ``local``: a local model to share (default: one built from the ``summarizer`` section).

    Raises:
        SettingsError: ``llm`` chosen explicitly without a hosted LLM, or ``local`` without its extra.
    """
    from voice_agent.services.reference_llm import ReferenceLLMService

    config = settings.caller_spans
    choice = extractor_choice(settings)
    slots = caller_slots(tools)
    if choice == "off" or not slots:
        return None
    if choice == "llm":
        if llm is None or isinstance(llm, ReferenceLLMService):
            if config.extractor is None:
                return None  # unset, and no model to read with (a replay of recorded calls): off
            raise SettingsError("settings: caller_spans.extractor=llm needs a hosted llm.vendor (openai, anthropic, "
                                "google); offline, use caller_spans.extractor=local or off")
        return CallerSpanExtractor(llm_completer(llm, config.max_tokens), slots, config.timeout_secs, "llm")
    if local is None:
        from voice_agent.services.factory import make_local_summarizer
        from voice_agent.settings import with_overrides

        # Its own queue limit no shorter than the reading's: the extractor's timeout is the one that decides.
        timeout = max(settings.summarizer.local_timeout_secs, config.timeout_secs)
        local = make_local_summarizer(with_overrides(settings, summarizer={"local_timeout_secs": timeout}))
    return CallerSpanExtractor(local_completer(local, config.max_tokens, "caller_spans"), slots,
                               config.timeout_secs, "local")
