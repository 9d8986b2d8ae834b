"""The one way to build a call: settings in, a call's session and services out.

Every entry point (``serve``, ``talk``, ``simulate``, ``eval``, the eval bot, the load
test) builds its calls here, so a setting means the same everywhere: policy, K, S,
summarizer, ledger capacity, output guard, reference date, the LLM service and its
timeouts and retries. The settings reach the session unchanged (``CallSession.settings``), and each part
takes its own section from there: the output guard ``output_guard``, the pipeline's LLM watchdog ``llm``,
the ``pipecat`` policy ``pipecat_summarizer``, the summarizers ``summarizer``, the date reader ``dates``.
Measurement is not part of a call: entry points that measure attach a recorder
(:mod:`voice_agent.recording`) from outside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pipecat.services.llm_service import LLMService

from voice_agent.call.session import CallSession
from voice_agent.domains.base import Domain
from voice_agent.policies import PolicyName
from voice_agent.policies.base import PolicySummarizer, ServesPipecat
from voice_agent.policies.pipecat_builtin import PipecatBuiltinPolicy
from voice_agent.services.factory import (
    make_llm,
    make_local_summarizer,
    make_summarizer,
    passes_in_background,
    summarizer_choice,
)
from voice_agent.settings import Settings, SettingsError, with_overrides
from voice_agent.store.base import CallStore

DomainFactory = Callable[[], Domain]
LLMFactory = Callable[[Domain], LLMService[Any]]
SummarizerFactory = Callable[[str, Domain], PolicySummarizer]
"""(call id, domain) -> the call's summarizer; lets a simulation put its own instrument in."""


def pipecat_summary_llm(summarizer: PolicySummarizer) -> LLMService[Any]:
    """The pipecat LLM service pipecat's own summarizer runs on, for the model behind ``summarizer``.

    Raises:
        SettingsError: ``summarizer`` is not a model (the extractive summarizer, a simulation's fault model).
    """
    from voice_agent.summarizers.llm import LLMSummarizer
    from voice_agent.summarizers.local import LocalSummarizer

    if isinstance(summarizer, LocalSummarizer):
        from voice_agent.services.local_llm import LocalModelLLM

        return LocalModelLLM(summarizer)
    if isinstance(summarizer, LLMSummarizer):
        return summarizer.llm
    if isinstance(summarizer, ServesPipecat):
        return cast(LLMService[Any], summarizer.pipecat_llm())
    raise SettingsError(
        f"settings: policy.name=pipecat summarizes with pipecat's prompt through a model, and "
        f"{type(summarizer).__name__} is not one: set summarizer.kind to local or llm "
        f"(or pipecat_summarizer.summarize=false for the full history)"
    )


@dataclass
class CallParts:
    """The per-call objects an entry point wires into a pipeline.

    Attributes:
        session: The call's lanes, policy and guards.
        llm: The LLM service (its tool handlers are registered by the pipeline builder).
        id_shapes: Identifier templates for the spoken-identifier normaliser.
        topic: What callers talk about, as a hint for the recogniser.
        extra: Kept with the call record (the domain, for its backend's effects).
    """

    session: CallSession
    llm: LLMService[Any]
    id_shapes: Sequence[str] = ()
    topic: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


CallFactory = Callable[[str], CallParts]
"""call id -> the call's parts. May block (it runs in a worker thread); must not share mutable state."""


def _billing() -> Domain:
    from voice_agent.domains.billing import billing_domain

    return billing_domain()


def build_session(
    settings: Settings, call_id: str, domain: Domain, summarizer: PolicySummarizer | None = None,
    llm: LLMService[Any] | None = None,
) -> CallSession:
    """The call's lanes, policy and guards from the settings (no services).

    :func:`build_call` uses it; so does the replay of recorded calls, which runs the recorded
    actions instead of a model.

    Args:
        settings: Validated settings.
        call_id: Names the call.
        domain: The call's domain.
        summarizer: The summarizer; default: the one ``settings.summarizer`` names (built with ``llm``).
        llm: For an ``llm`` summarizer, ``dates.reader`` or ``caller_spans.extractor``: the conversation LLM.
    """
    from voice_agent.services.caller_spans import extractor_choice, make_caller_span_extractor
    from voice_agent.services.date_reader import make_date_reader
    from voice_agent.summarizers.local import LocalSummarizer

    policy = PolicyName(settings.policy.name)
    pipecat = settings.pipecat_summarizer
    needs_summarizer = policy is not PolicyName.WINDOW and not (policy is PolicyName.PIPECAT and not pipecat.summarize)
    background = passes_in_background(settings.summarizer, None)  # none, or one put in by the caller
    if summarizer is None and needs_summarizer:
        summarizer = make_summarizer(settings, llm)
        background = summarizer_choice(settings).background
    local = summarizer if isinstance(summarizer, LocalSummarizer) else None
    if local is None and settings.dates.reader == "local" and extractor_choice(settings) == "local":
        # One local model for both readers (each would otherwise load its own), its queue limit no shorter
        # than either reading's.
        timeout = max(settings.summarizer.local_timeout_secs, settings.dates.reader_timeout_secs,
                      settings.caller_spans.timeout_secs)
        local = make_local_summarizer(with_overrides(settings, summarizer={"local_timeout_secs": timeout}))
    reader = make_date_reader(settings, llm, local)
    spans = make_caller_span_extractor(settings, domain.tools, llm, local)
    if policy is PolicyName.PIPECAT:
        summary_llm = pipecat_summary_llm(summarizer) if pipecat.summarize and summarizer else None
        return CallSession(domain, settings, summarizer, call_id=call_id, date_reader=reader,
                           policy=PipecatBuiltinPolicy(pipecat, summary_llm), caller_spans=spans,
                           summary_in_background=background)
    return CallSession(domain, settings, summarizer, call_id=call_id, date_reader=reader, caller_spans=spans,
                       summary_in_background=background)


def build_call(
    settings: Settings,
    call_id: str,
    *,
    domain_factory: DomainFactory = _billing,
    llm_factory: LLMFactory | None = None,
    summarizer_factory: SummarizerFactory | None = None,
) -> CallParts:
    """Builds one call from the settings.

    Args:
        settings: Validated settings (:func:`voice_agent.settings.load_settings`, with any flags applied
            by :func:`voice_agent.settings.with_overrides`).
        call_id: Names the call in logs, spans and records.
        domain_factory: Builds the call's domain; called once per call, so its backend is the call's own.
        llm_factory: Builds the LLM service; default: the one ``settings.llm`` names.
        summarizer_factory: Builds the summarizer; default: the one ``settings.summarizer`` names.

    Returns:
        The session and services of the call.
    """
    domain = domain_factory()
    llm = llm_factory(domain) if llm_factory is not None else make_llm(settings, domain, cache_key=call_id)
    summarizer = summarizer_factory(call_id, domain) if summarizer_factory is not None else None
    session = build_session(settings, call_id, domain, summarizer, llm)
    return CallParts(session, llm, domain.id_shapes, domain.recognizer_topic, {"domain": domain})


def call_store(settings: Settings) -> CallStore | None:
    """The call store the ``store`` settings name (None for ``none``): the served call saves each turn there.

    Raises:
        StoreError: The store cannot be opened or reached, in one line.
    """
    from voice_agent.store import open_store

    store = settings.store
    return open_store(store.backend, path=store.path, url=store.url, retention_secs=store.retention_secs)


def call_factory(
    settings: Settings,
    *,
    domain_factory: DomainFactory = _billing,
    llm_factory: LLMFactory | None = None,
    summarizer_factory: SummarizerFactory | None = None,
) -> CallFactory:
    """A :data:`CallFactory` that builds every call with :func:`build_call` and these settings."""

    def make(call_id: str) -> CallParts:
        return build_call(settings, call_id, domain_factory=domain_factory, llm_factory=llm_factory,
                          summarizer_factory=summarizer_factory)

    return make
