"""A transport for pipeline tests: its input and output pass every frame on (no network, no audio)."""

from __future__ import annotations

from pipecat.processors.filters.identity_filter import IdentityFilter
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.transports.base_transport import BaseTransport


class LoopbackTransport(BaseTransport):
    """Stands in for a bot's transport: the test sends frames into the pipeline and reads what comes out."""

    def __init__(self) -> None:
        super().__init__(name="loopback")
        self._input = IdentityFilter(name="loopback-in")
        self._output = IdentityFilter(name="loopback-out")

    def input(self) -> FrameProcessor:
        """Passes the test's frames on."""
        return self._input

    def output(self) -> FrameProcessor:
        """Passes the bot's frames on."""
        return self._output
