"""What each bridged call gets: its own session, domain state and LLM service."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat.services.llm_service import LLMService

from voice_agent.domains.base import Domain
from voice_agent.policies import PolicyName
from voice_agent.session import CallSession, SessionConfig


def spoken_id_shapes(domain: Domain) -> tuple[str, ...]:
    """The identifier templates a domain's callers spell out (``domain.extra["spoken_id_shapes"]``)."""
    return tuple(str(s) for s in domain.extra.get("spoken_id_shapes", ()))


def recognizer_topic(domain: Domain) -> str | None:
    """One sentence on what the domain's callers talk about (``domain.extra["recognizer_topic"]``)."""
    supplied = domain.extra.get("recognizer_topic")
    return str(supplied) if supplied else None


@dataclass
class CallParts:
    """The per-call objects the bridge wires into a pipeline.

    Attributes:
        session: The call's core state (lanes, guards, turn records).
        llm: The LLM service (its tool handlers are registered by the pipeline builder).
        id_shapes: Identifier templates for the spoken-identifier normaliser.
        topic: What callers talk about, as a hint for the recogniser.
        extra: Anything the factory wants to keep with the call record (e.g. the backend).
    """

    session: CallSession
    llm: LLMService[Any]
    id_shapes: Sequence[str] = ()
    topic: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


CallFactory = Callable[[str], CallParts]
"""call id -> the call's parts. May block (it runs in a worker thread); must not share mutable state."""


def domain_call_factory(
    domain_factory: Callable[[], Domain],
    *,
    policy: PolicyName = PolicyName.LANES,
    keep: int = 6,
    every: int = 5,
    retention: float = 0.9,
    reference_date: dt.date | None = None,
    tracked_facts: Mapping[str, Sequence[str]] | None = None,
    llm_factory: Callable[[Domain], LLMService[Any]] | None = None,
) -> CallFactory:
    """A factory that gives every call a fresh domain (own backend), session and LLM.

    Args:
        domain_factory: Builds the domain; called once per call, so effects stay per call.
        policy: Context policy.
        keep: K, recent turns kept raw.
        every: S, summary cadence.
        retention: Retention of the fault-injecting summarizer (simulation only).
        reference_date: The call's "today" (today when None).
        tracked_facts: Facts whose presence in the context is measured (a scenario's).
        llm_factory: Builds the LLM for the domain; the deterministic reference agent when None.
    """

    def make(call_id: str) -> CallParts:
        domain = domain_factory()
        config = SessionConfig(policy=policy, keep=keep, every=every, retention=retention,
                               reference_date=reference_date or dt.date.today())
        session = CallSession(domain, config, tracked_facts, call_id=call_id)
        if llm_factory is not None:
            llm = llm_factory(domain)
        else:
            from voice_agent.services.reference_llm import ReferenceLLMService

            llm = ReferenceLLMService(domain.make_brain())
        return CallParts(session, llm, spoken_id_shapes(domain), recognizer_topic(domain), {"domain": domain})

    return make


def billing_call_factory(**kwargs: Any) -> CallFactory:
    """:func:`domain_call_factory` for the billing domain, each call with its own seeded backend."""
    from voice_agent.domains.billing import billing_domain

    return domain_call_factory(billing_domain, **kwargs)
