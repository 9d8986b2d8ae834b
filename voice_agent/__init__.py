"""A real-time voice agent that keeps what the caller said for the whole call.

The public API (``docs/library.md``): make an existing pipecat bot long-call safe.

- :class:`LongCall`: the lanes and guards of a bot; :meth:`LongCall.attach` starts a call on the bot's LLM.
- :func:`guarded_tool` and :class:`GuardedTool`: which parameters of the bot's own tool schemas are
  identifiers, dates and caller quotes; :class:`HarvestField`: which result fields the ledger keeps.
- :class:`CallProcessors`: what ``attach`` returns: the processors to splice around the LLM, and the session.
- :class:`Settings`, :func:`load_settings`, :func:`with_overrides`: the one settings model of every call.
- :func:`without_sdk_retries`: leaves retries to the call's LLM watchdog (``attach`` applies it).
- :class:`FakeLLM`, :class:`FakeReply`, :class:`FakeToolCall`: a scripted LLM for the bot's tests.

Names are loaded on first use, so ``import voice_agent.core`` still loads no pipecat.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from voice_agent.call.long_call import GuardedTool as GuardedTool
    from voice_agent.call.long_call import LongCall as LongCall
    from voice_agent.call.long_call import guarded_tool as guarded_tool
    from voice_agent.call.pipeline import CallProcessors as CallProcessors
    from voice_agent.core.tool_spec import HarvestField as HarvestField
    from voice_agent.services.factory import without_sdk_retries as without_sdk_retries
    from voice_agent.services.fake_llm import FakeLLM as FakeLLM
    from voice_agent.services.fake_llm import FakeReply as FakeReply
    from voice_agent.services.fake_llm import FakeToolCall as FakeToolCall
    from voice_agent.settings import Settings as Settings
    from voice_agent.settings import load_settings as load_settings
    from voice_agent.settings import with_overrides as with_overrides

_EXPORTS = {
    "LongCall": "voice_agent.call.long_call",
    "GuardedTool": "voice_agent.call.long_call",
    "guarded_tool": "voice_agent.call.long_call",
    "HarvestField": "voice_agent.core.tool_spec",
    "CallProcessors": "voice_agent.call.pipeline",
    "Settings": "voice_agent.settings",
    "load_settings": "voice_agent.settings",
    "with_overrides": "voice_agent.settings",
    "without_sdk_retries": "voice_agent.services.factory",
    "FakeLLM": "voice_agent.services.fake_llm",
    "FakeReply": "voice_agent.services.fake_llm",
    "FakeToolCall": "voice_agent.services.fake_llm",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    """Loads a public name from its module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'voice_agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    """The public names too (loaded on first use), so completion and ``dir()`` find them."""
    return sorted({*globals(), *_EXPORTS})
