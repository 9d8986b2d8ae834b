"""Reads the caller's words ahead: each interim transcript is read as its turn will read it, before the final.

A thin adapter over :meth:`voice_agent.call.session.CallSession.read_ahead_caller`, placed just before the user
aggregator. In audio mode the Whisper partial that covers the segment stands for the final, with its text
(``processors.whisper_interims``; its interim, when it ends before the VAD stop), so the turn that final
opens takes the dates and identifiers read here instead of reading them while the caller waits. The read is
synchronous and short (the same work the turn would do, a fraction of a millisecond, measured by
``scripts/bench_context.py``), so nothing is reordered. A failed read costs only itself: the final is then
read as usual. Only audio calls read ahead (once a ``VADUserStartedSpeakingFrame`` has passed): in text mode
interims come word by word and no final is ever the interim's text, so reading each would be work never
taken. Every frame is forwarded unchanged.
"""

from __future__ import annotations

from typing import Any, Protocol

from loguru import logger
from pipecat.frames.frames import Frame, InterimTranscriptionFrame, VADUserStartedSpeakingFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


class CallerReader(Protocol):
    """What the processor calls: :class:`voice_agent.call.session.CallSession`."""

    call_id: str

    def read_ahead_caller(self, text: str) -> None:
        """Reads the caller's words of an interim transcript."""


class CallerReadAhead(FrameProcessor):
    """Hands every downstream interim transcript of an audio call to the session to read ahead.

    Args:
        session: The call.
        **kwargs: Passed to ``FrameProcessor``.
    """

    def __init__(self, session: CallerReader, **kwargs: Any) -> None:
        # Direct mode: every input audio frame passes here too; the work per frame is one type check.
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(**kwargs)
        self._session = session
        self._audio = False  # a VAD frame passed: the call is heard, its interims can become finals

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Reads interim transcripts ahead; forwards every frame."""
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            self._audio = True
        elif self._audio and direction is FrameDirection.DOWNSTREAM and isinstance(frame, InterimTranscriptionFrame):
            try:
                self._session.read_ahead_caller(frame.text)
            except Exception:  # reading ahead is an optimisation: the final is read as usual
                logger.exception("call {}: reading the caller's interim ahead failed", self._session.call_id)
        await self.push_frame(frame, direction)
