"""The telephony bridge, re-exported: config, registry, app (routes), call_runner, drain and process modules.

Patch a name in the module that defines it: a patch of this module's copy reaches no code.
"""

from __future__ import annotations

from voice_agent.telephony.app import VoiceBridge
from voice_agent.telephony.call_runner import FRESH_START_LINE, PIPELINE_IN_RATE, PIPELINE_OUT_RATE, CallRunner
from voice_agent.telephony.config import GOODBYE_LINE, ConfigError, ServerConfig
from voice_agent.telephony.process import DrainingServer, bind_socket, listen, running_bridge, serve, uvicorn_config
from voice_agent.telephony.registry import CallRegistry, RegisteredCall

__all__ = [
    "FRESH_START_LINE",
    "GOODBYE_LINE",
    "PIPELINE_IN_RATE",
    "PIPELINE_OUT_RATE",
    "CallRegistry",
    "CallRunner",
    "ConfigError",
    "DrainingServer",
    "RegisteredCall",
    "ServerConfig",
    "VoiceBridge",
    "bind_socket",
    "listen",
    "running_bridge",
    "serve",
    "uvicorn_config",
]
