"""Builds the LLM service and the summarizer that the settings ask for.

Vendor modules are imported lazily: each needs its pipecat extra (``openai`` is a
core dependency; ``anthropic`` and ``google`` come from the ``hosted`` extra),
and the offline default must start without any of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from loguru import logger
from pipecat.services.llm_service import LLMService

from voice_agent.extras import install_hint
from voice_agent.services.cut_streams import report_cut_streams
from voice_agent.services.reference_llm import ReferenceLLMService
from voice_agent.services.vendor_hooks import openai_cache_key_extra
from voice_agent.settings import LLMConfig, Settings, SettingsError, SummarizerConfig
from voice_agent.summarizers.extractive import ExtractiveSummarizer
from voice_agent.summarizers.llm import LLMSummarizer
from voice_agent.summarizers.local_model import EXTRA as LOCAL_EXTRA
from voice_agent.summarizers.local_model import extra_status as local_extra_status

if TYPE_CHECKING:
    from voice_agent.domains.base import Domain
    from voice_agent.summarizers.local import LocalSummarizer

VENDOR_EXTRA: Mapping[str, str] = {"openai": "openai", "anthropic": "anthropic", "google": "google"}
"""Vendor -> the pipecat extra that brings its SDK (ours: ``hosted`` brings anthropic and google)."""


def _missing_extra(vendor: str, exc: ImportError) -> SettingsError:
    # openai is a dependency of pipecat itself (only a broken install lands here); the others are our extra.
    needs = "pipecat-ai's openai SDK: pip install 'pipecat-ai[openai]'" if vendor == "openai" else (
        f"the hosted extra: {install_hint('hosted')}")
    return SettingsError(f"settings: llm.vendor={vendor} needs {needs} (import failed: {exc})")


def _api_key(config: LLMConfig) -> str:
    if config.api_key is None or not config.api_key.get_secret_value():
        # load_settings resolves the key; a hand-built Settings may skip that step.
        raise SettingsError(
            f"settings: llm.vendor={config.vendor} has no API key (build settings with load_settings)"
        )
    return config.api_key.get_secret_value()


def make_hosted_llm(config: LLMConfig, cache_key: str | None = None) -> LLMService[Any]:
    """The pipecat service of a hosted (or OpenAI-compatible local) vendor.

    Args:
        config: The ``llm`` settings section; ``vendor`` must not be ``reference``.
        cache_key: A key stable for the call (its id): OpenAI's own API gets it as ``prompt_cache_key`` on every
            request, so the call's requests meet one prompt cache; other vendors and servers never see it.

    Returns:
        A real pipecat ``OpenAILLMService``, ``AnthropicLLMService`` or ``GoogleLLMService``.

    Raises:
        SettingsError: When the vendor is ``reference``, has no key, or its SDK is not installed.
    """
    vendor = config.vendor
    if vendor not in _HOSTED:
        raise SettingsError(
            f"settings: llm.vendor={vendor} is not a hosted vendor (set openai, anthropic or google)"
        )
    module_name, class_name = _HOSTED[vendor]
    try:
        service_class: Any = getattr(importlib.import_module(module_name), class_name)
    except ImportError as exc:
        raise _missing_extra(vendor, exc) from None
    kwargs: dict[str, Any] = {"api_key": _api_key(config)}
    if vendor == "openai":
        kwargs["base_url"] = config.base_url  # also reaches OpenAI-compatible local servers
    extra = openai_cache_key_extra(vendor, config.base_url, cache_key)
    if config.model or extra:
        # pipecat merges Settings.extra into every request's parameters (BaseOpenAILLMService).
        kwargs["settings"] = service_class.Settings(**({"model": config.model} if config.model else {}), extra=extra)
    service: LLMService[Any] = service_class(**kwargs)
    without_sdk_retries(service, config)
    report_cut_streams(service)
    return service


def without_sdk_retries(service: LLMService[Any], config: LLMConfig) -> None:
    """Leaves timeouts and retries to the call's LLM watchdog (:mod:`processors.llm_watchdog`).

    Public for an LLM service the user builds: :meth:`voice_agent.LongCall.attach` applies it to the
    service it is given; call it yourself on any other service of the call (a summarizing LLM).

    The OpenAI and Anthropic SDKs retry failed requests themselves (OpenAI: 2 retries with back-off,
    600 s timeout), unseen by pipecat: a vendor answering 500 would keep the caller waiting through
    the SDK's back-off before the watchdog even hears of the error, and its retry would multiply the
    SDK's. pipecat builds the client without exposing these options, so the client it built is
    replaced by a copy with none (``with_options`` is the SDKs' public way to copy a client). The
    SDK's own timeout becomes a backstop a little past the watchdog's total timeout, for the
    out-of-band inferences (summaries) the watchdog does not see.
    """
    # pipecat keeps the SDK client private; a service without one (not OpenAI or Anthropic) is left as it is.
    client = getattr(service, "_client", None)
    with_options = getattr(client, "with_options", None)
    if callable(with_options):
        cast(Any, service)._client = with_options(max_retries=0, timeout=config.total_timeout_secs + 5.0)


_HOSTED: Mapping[str, tuple[str, str]] = {
    "openai": ("pipecat.services.openai.llm", "OpenAILLMService"),
    "anthropic": ("pipecat.services.anthropic.llm", "AnthropicLLMService"),
    "google": ("pipecat.services.google.llm", "GoogleLLMService"),
}
"""Vendor -> (module, class) of its pipecat service, imported only when chosen."""


def make_llm(settings: Settings, domain: Domain, cache_key: str | None = None) -> LLMService[Any]:
    """The conversation LLM service.

    Args:
        settings: Validated settings (from :func:`voice_agent.settings.load_settings`).
        domain: The domain; its brain drives the offline ``reference`` vendor.
        cache_key: The call's prompt-cache key (:func:`make_hosted_llm`).

    Returns:
        ``ReferenceLLMService`` for ``reference``, else the vendor's real pipecat service.

    Raises:
        SettingsError: When a hosted vendor has no key or its SDK is not installed, or ``reference`` is chosen
            for a domain without a reference brain.
    """
    if settings.llm.vendor == "reference":
        if domain.make_brain is None:
            raise SettingsError(
                f"settings: llm.vendor=reference needs a reference brain and the {domain.name} domain has none "
                "(pass your own LLM service, or set llm.vendor=openai|anthropic|google)"
            )
        return ReferenceLLMService(domain.brain())
    return make_hosted_llm(settings.llm, cache_key)


@dataclass(frozen=True)
class SummarizerChoice:
    """Which summarizer the settings select, and why (for the log and the call record).

    Attributes:
        kind: ``extractive``, ``llm`` or ``local``.
        reason: Why, in a few words.
        background: Whether its passes run off the turn.
    """

    kind: str
    reason: str
    background: bool


_logged_choices: set[SummarizerChoice] = set()


def passes_in_background(config: SummarizerConfig, kind: str | None) -> bool:
    """Resolves ``summarizer.background``: as set; unset, off the turn for a ``local`` summarizer the settings build
    (15-35 s a pass), inline for any other (``kind`` None: one put in by the caller, a simulation's instrument)."""
    return config.background if config.background is not None else kind == "local"


def summarizer_choice(settings: Settings) -> SummarizerChoice:
    """Resolves ``summarizer.kind``: unset means ``local`` when its extra is installed, else ``extractive``.

    Logs the choice once per process (every call of a server resolves it the same way).
    """
    config = settings.summarizer
    if config.kind is not None:
        kind, reason = config.kind, f"summarizer.kind={config.kind}"
    else:
        problem = local_extra_status(config.local_model)
        if problem is None:
            kind, reason = "local", f"summarizer.kind unset and the {LOCAL_EXTRA} extra is installed"
        else:
            kind, reason = "extractive", f"summarizer.kind unset and the local summarizer cannot run: {problem}"
    background = passes_in_background(config, kind)
    choice = SummarizerChoice(kind, reason, background)
    if choice not in _logged_choices:
        _logged_choices.add(choice)
        logger.info("summarizer: {} ({}; passes {})", kind, reason, "in the background" if background else "inline")
    return choice


def make_summarizer(
    settings: Settings, llm: LLMService[Any] | None = None
) -> ExtractiveSummarizer | LLMSummarizer | LocalSummarizer:
    """The summarizer for both the ``lanes`` and the ``rolling`` policies.

    Args:
        settings: Validated settings.
        llm: For ``kind = "llm"``: the service to summarize with (e.g. the conversation
            LLM); None, or the reference agent (which cannot write summaries), builds a
            dedicated one from ``settings.llm``.

    Returns:
        An ``ExtractiveSummarizer``, an ``LLMSummarizer`` or a ``LocalSummarizer`` (see
        :func:`summarizer_choice` for an unset ``kind``).

    Raises:
        SettingsError: When ``kind = "llm"`` but no LLM able to run out-of-band inference is available, or
            ``kind = "local"`` but its extra is not installed.
    """
    config = settings.summarizer
    kind = summarizer_choice(settings).kind
    if kind == "extractive":
        return ExtractiveSummarizer(config)
    if kind == "local":
        return make_local_summarizer(settings)
    if llm is None or isinstance(llm, ReferenceLLMService):
        if settings.llm.vendor == "reference":
            raise SettingsError(
                "settings: summarizer.kind=llm needs a hosted llm.vendor "
                "(set llm.vendor=openai|anthropic|google, or summarizer.kind=extractive)"
            )
        llm = make_hosted_llm(settings.llm)
    return LLMSummarizer(llm, config)


def make_local_summarizer(settings: Settings) -> LocalSummarizer:
    """The ``local`` summarizer the settings describe (the model is loaded at its first pass).

    Raises:
        SettingsError: The ``local-summarizer`` extra is not installed, or the model is not in the manifest.
    """
    from voice_agent.summarizers.local import LocalSummarizer
    from voice_agent.summarizers.local_model import LocalModelError

    try:
        return LocalSummarizer(settings.summarizer)
    except LocalModelError as exc:
        raise SettingsError(f"settings: {exc}") from None
