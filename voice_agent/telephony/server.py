"""The telephony bridge's public API, re-exported: config (``config.py``), registry (``registry.py``), app and routes
(``app.py``), per-call runner (``call_runner.py``), drain and hand-over (``drain.py``), process (``process.py``).

Import from the module that defines a name to patch it: a patch of this module's copy reaches no code.
"""

from __future__ import annotations

from voice_agent.telephony.app import VoiceBridge
from voice_agent.telephony.call_runner import FRESH_START_LINE, PIPELINE_IN_RATE, PIPELINE_OUT_RATE, CallRunner
from voice_agent.telephony.config import GOODBYE_LINE, ConfigError, ServerConfig
from voice_agent.telephony.process import DrainingServer, bind_socket, listen, running_bridge, serve, uvicorn_config
from voice_agent.telephony.registry import CallRecord, CallRegistry

__all__ = [
    "FRESH_START_LINE",
    "GOODBYE_LINE",
    "PIPELINE_IN_RATE",
    "PIPELINE_OUT_RATE",
    "CallRecord",
    "CallRegistry",
    "CallRunner",
    "ConfigError",
    "DrainingServer",
    "ServerConfig",
    "VoiceBridge",
    "bind_socket",
    "listen",
    "running_bridge",
    "serve",
    "uvicorn_config",
]
