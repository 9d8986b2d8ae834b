"""What each vendor needs of the assembled messages, applied where they are handed to pipecat.

The lanes speak one dialect (OpenAI's messages, lane messages in the ``developer`` role, an assistant
tool-call message with ``content: None``). :class:`MessageDialect` rewrites a request for the vendor that
will read it, without touching the core:

- the lane role: ``developer`` for OpenAI's own API, Anthropic and Google (pipecat's adapters turn it into
  ``user`` for the latter two); ``system`` for other OpenAI-compatible servers, which may know no
  ``developer`` role (llama-cpp-python's answers HTTP 500); or ``llm.lane_role`` when set;
- OpenAI-compatible services get ``""`` for the ``None`` content of a tool-call message (OpenAI's schema
  allows a string there; llama-cpp-python's server rejects ``null``);
- Anthropic gets a ``cache_control`` breakpoint on the last message of the stable prefix
  (``AssembledContext.stable_count``): it caches tools, system prompt and that prefix, and the next request
  reads it back; and one on the last message of the part no pass changes (``AssembledContext.fixed_count``:
  the hard constraints), so the request after a pass reads tools, system prompt and constraints back instead
  of writing them again. pipecat's own ``enable_prompt_caching`` marks the system prompt and the last two user
  messages instead, which are in the volatile tail here; these breakpoints are set only while that option is
  off.

OpenAI's ``prompt_cache_key`` is a request parameter, not a message: :func:`openai_cache_key_extra`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from pipecat.processors.aggregators.llm_context import LLMSpecificMessage
from pipecat.services.llm_service import LLMService
from pipecat.services.openai.base_llm import BaseOpenAILLMService

from voice_agent.core.assembler import LANE_ROLE

LANE_ROLES: Final = ("developer", "system", "user")
OPENAI_API_HOST: Final = "api.openai.com"
EPHEMERAL: Final = {"type": "ephemeral"}
"""Anthropic's cache breakpoint (5 minutes, refreshed by each hit)."""
_ANTHROPIC_MODULE: Final = "pipecat.services.anthropic.llm"


def is_openai_api(base_url: object) -> bool:
    """Whether ``base_url`` (None: the SDK's default) is OpenAI's own API, not another compatible server."""
    return base_url is None or urlsplit(str(base_url)).hostname == OPENAI_API_HOST


def openai_cache_key_extra(vendor: str, base_url: str | None, cache_key: str | None) -> dict[str, Any]:
    """The request fields that route one call's requests to one OpenAI prompt cache (``prompt_cache_key``).

    Only for OpenAI's own API: another OpenAI-compatible server may reject a field it does not know.

    Args:
        vendor: ``llm.vendor``.
        base_url: ``llm.base_url``.
        cache_key: A key stable for the call (its id); None: no key.

    Returns:
        ``{"prompt_cache_key": cache_key}``, or ``{}``; for pipecat's ``Settings(extra=...)``.
    """
    if vendor != "openai" or cache_key is None or not is_openai_api(base_url):
        return {}
    return {"prompt_cache_key": cache_key}


@dataclass(frozen=True)
class MessageDialect:
    """How one vendor wants the assembled messages.

    Attributes:
        lane_role: The role the lane messages (role ``developer`` in the lanes) are sent with.
        tool_call_content: The content of an assistant tool-call message that has none (None: left as is).
        cache_breakpoint: Mark the end of the stable prefix, and of the part of it no pass changes, with Anthropic
            ``cache_control`` breakpoints.
    """

    lane_role: str = LANE_ROLE
    tool_call_content: str | None = None
    cache_breakpoint: bool = False

    def __post_init__(self) -> None:
        if self.lane_role not in LANE_ROLES:
            raise ValueError(f"lane_role must be one of {', '.join(LANE_ROLES)}, not {self.lane_role!r}")

    def apply(self, messages: list[Any], stable: int, fixed: int = 0) -> list[Any]:
        """``messages`` as this vendor wants them; the given dicts are never changed (copies replace them).

        Args:
            messages: The request's messages, OpenAI format (pipecat's ``LLMSpecificMessage`` pass as they are).
            stable: How many leading messages form the stable prefix (0: none).
            fixed: How many leading messages stay the same on every request, passes included (0: none).

        Returns:
            A new list, as long as ``messages``.
        """
        out = [self._message(m) for m in messages]
        if self.cache_breakpoint:
            marked = _mark_prefix_end(out, min(stable, len(out)))
            if 0 < fixed <= marked:  # the stable prefix's breakpoint lies past the part no pass changes
                _mark_prefix_end(out, fixed)
        return out

    def _message(self, message: Any) -> Any:
        if not isinstance(message, dict):
            return message
        if message.get("role") == LANE_ROLE and self.lane_role != LANE_ROLE:
            message = {**message, "role": self.lane_role}
        if (self.tool_call_content is not None and message.get("role") == "assistant"
                and message.get("tool_calls") and message.get("content") is None):
            message = {**message, "content": self.tool_call_content}
        return message


def _mark_prefix_end(messages: list[Any], stable: int) -> int:
    """Puts the breakpoint on the last message of ``messages[:stable]`` that can carry one; returns its index (-1:
    none could).

    A text message gets it on its last content block, which pipecat's Anthropic adapter keeps (unknown keys
    of a block pass through, and merging same-role neighbours only concatenates blocks). A tool result goes
    as Anthropic's own ``tool_result`` block, where Anthropic documents the breakpoint. An assistant tool-call
    message cannot carry one through pipecat (it rebuilds that message as ``tool_use`` blocks), so the
    breakpoint goes one message earlier: a shorter cached prefix, never a wrong one.
    """
    for index in range(stable - 1, -1, -1):
        marked = _with_breakpoint(messages[index])
        if marked is not None:
            messages[index] = marked
            return index
    return -1


def _with_breakpoint(message: Any) -> Any | None:
    if not isinstance(message, dict) or message.get("tool_calls"):
        return None
    content = message.get("content")
    if message.get("role") == "tool":
        block = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": content or "",
                 "cache_control": dict(EPHEMERAL)}
        return LLMSpecificMessage(llm="anthropic", message={"role": "user", "content": [block]})
    blocks: list[dict[str, Any]]
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}]
    elif isinstance(content, list) and content and all(isinstance(b, dict) for b in content):
        blocks = [dict(b) for b in content]
    else:
        return None
    blocks[-1]["cache_control"] = dict(EPHEMERAL)
    return {**message, "content": blocks}


def _is_anthropic(llm: LLMService[Any]) -> bool:
    # Not imported here: it needs the hosted extra, and a service of that class implies the module is loaded.
    module = sys.modules.get(_ANTHROPIC_MODULE)
    return module is not None and isinstance(llm, module.AnthropicLLMService)


def _compatible_server(llm: LLMService[Any]) -> bool:
    """An OpenAI-compatible server other than OpenAI's own API, which may know no ``developer`` role."""
    # A service pipecat knows to lack that role (supports_developer_role) has it converted to user by pipecat.
    if not isinstance(llm, BaseOpenAILLMService) or not llm.supports_developer_role:
        return False
    client = getattr(llm, "_client", None)  # pipecat keeps the SDK client private; its base_url is public
    return not is_openai_api(getattr(client, "base_url", None))


def message_dialect(llm: LLMService[Any], lane_role: str | None = None) -> MessageDialect:
    """The dialect of ``llm``'s vendor.

    Args:
        llm: The call's LLM service (built from the settings or by the user).
        lane_role: ``llm.lane_role``; None: chosen from the service (see the module docstring).

    Returns:
        The dialect the call's context stages apply.
    """
    openai_family = isinstance(llm, BaseOpenAILLMService)
    if lane_role is None:
        lane_role = "system" if _compatible_server(llm) else LANE_ROLE
    caching = getattr(llm.settings, "enable_prompt_caching", False) is True  # pipecat's own breakpoints
    return MessageDialect(lane_role=lane_role, tool_call_content="" if openai_family else None,
                          cache_breakpoint=_is_anthropic(llm) and not caching)
