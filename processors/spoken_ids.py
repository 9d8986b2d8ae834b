"""Spoken identifiers back into their written form, before the user aggregator sees a transcript.

The rules live in the core (:mod:`voice_agent.core.spoken_ids`); this processor applies them to
final and interim transcription frames.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from loguru import logger
from pipecat.frames.frames import Frame, InterimTranscriptionFrame, TranscriptionFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from voice_agent.core.spoken_ids import IdShape, id_shapes, normalize_spoken_ids, recognizer_prompt

__all__ = ["SpokenIdNormalizer", "recognizer_prompt"]


class SpokenIdNormalizer(FrameProcessor):
    """Rewrites spelled-out identifiers in transcription frames into their canonical written form.

    Place it after the STT service and before the user aggregator. Every other frame passes unchanged.

    Args:
        shapes: The identifier shapes, supplied by the domain.
    """

    def __init__(self, shapes: Iterable[str | IdShape], **kwargs: Any) -> None:
        # Direct mode: frames are handled in the pushing processor's task, not queued for a task of this
        # one's own (two queue hops and task switches per frame saved; nothing here waits on anything).
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(**kwargs)
        self._shapes = id_shapes(shapes)
        self.rewrites = 0
        """Number of final transcripts that were rewritten."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Normalises transcription text in place; forwards every frame."""
        await super().process_frame(frame, direction)
        if isinstance(frame, (TranscriptionFrame, InterimTranscriptionFrame)) and self._shapes:
            rewritten = normalize_spoken_ids(frame.text, self._shapes)
            if rewritten != frame.text:
                if isinstance(frame, TranscriptionFrame):
                    self.rewrites += 1
                    logger.debug("{}: spoken identifier normalised in a final transcript", self)
                frame.text = rewritten
        await self.push_frame(frame, direction)
