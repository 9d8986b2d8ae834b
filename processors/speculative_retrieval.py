"""Speculative retrieval in the pipeline: between STT and the user aggregator (DESIGN section 3).

A thin adapter over :class:`voice_agent.retrieval.speculative.SpeculativeRetriever`:

* ``InterimTranscriptionFrame``: schedules a debounced background retrieval (a task of this processor); in audio
  mode (once a ``VADUserStartedSpeakingFrame`` has passed) an interim arriving after the final of the utterance
  the VAD last started (a late partial decode) is ignored, so it is never charged to the next turn. One flag per
  utterance, set open at each VAD start and closed by a final arriving after its VAD stop (one arriving while the
  VAD hears speech is an earlier utterance's, queued): a segment Whisper finds empty (a cough) gets no final at
  all, so counting starts against finals would never return to zero;
* ``TranscriptionFrame`` (audio mode) and ``LLMMessagesAppendFrame`` with user messages (text mode): takes the
  final text, gets the chunks (cached hit or critical-path retrieval) and pushes a :class:`KnowledgeFrame`
  *ahead of* the frame, so the context stage has them before the turn's context (the user aggregator passes
  the knowledge on untouched);
* ``InterruptionFrame``: cancels unfinished speculative work;
* ``EndFrame`` / ``CancelFrame``: cancels everything and empties the cache.

Every frame is forwarded unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    DataFrame,
    EndFrame,
    Frame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMMessagesAppendFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from voice_agent.retrieval.speculative import Searcher, SpeculativeConfig, SpeculativeRetriever, TurnRetrieval


@dataclass
class KnowledgeFrame(DataFrame):
    """The knowledge retrieved for the caller's final words, on its way to the context stage ahead of them.

    Uninterruptible: a barge-in keeps the caller's words in the user aggregator, so it must keep their knowledge
    too (else the turn would be answered with the previous turn's chunks).

    Parameters:
        texts: Chunk texts the turn's context injects.
        record: What the retrieval did (:meth:`TurnRetrieval.to_dict`), for the turn's record.
    """

    texts: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    interruptible: bool = field(default=False, init=False)

    def __str__(self) -> str:
        return f"{self.name}(chunks: {len(self.texts)}, status: {self.record.get('status')})"


def _user_text(frame: LLMMessagesAppendFrame) -> str:
    """The text of the user messages of an append frame (text parts of multi-part content included)."""
    parts: list[str] = []
    for message in frame.messages:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content: Any = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return " ".join(p for p in parts if p).strip()


class SpeculativeRetrieval(FrameProcessor):
    """Retrieves knowledge chunks on interim transcripts and pushes them, as a :class:`KnowledgeFrame`, ahead of
    each final.

    Args:
        call_id: Names the call in logs.
        searcher: The retriever (a loaded :class:`~voice_agent.retrieval.index.HybridIndex`).
        config: Debounce and matching thresholds.
        speculate: False turns speculation off (every final retrieved on the critical path), for comparisons.
        **kwargs: Passed to ``FrameProcessor``.
    """

    def __init__(
        self,
        call_id: str,
        searcher: Searcher,
        config: SpeculativeConfig | None = None,
        *,
        speculate: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._call_id = call_id
        self._speculate = speculate
        # Whether the utterance the VAD last started has no final yet; None until a VAD frame passes (text mode).
        self._utterance_open: bool | None = None
        self._vad_speaking = False
        self.retriever = SpeculativeRetriever(searcher, config, spawn=self._spawn)

    def _spawn(self, coroutine: Any) -> Any:
        return self.create_task(coroutine, "speculative-retrieval")

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Handles transcripts, user messages, interruptions and the end of the call; forwards every frame."""
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM:
            if isinstance(frame, InterimTranscriptionFrame):
                if self._speculate and self._utterance_open is not False:
                    self.retriever.on_interim(frame.text)
            elif isinstance(frame, TranscriptionFrame):
                if self._utterance_open is not None and not self._vad_speaking:
                    self._utterance_open = False
                await self._final(frame.text)
            elif isinstance(frame, VADUserStartedSpeakingFrame):
                self._utterance_open, self._vad_speaking = True, True
            elif isinstance(frame, VADUserStoppedSpeakingFrame):
                self._vad_speaking = False
            elif isinstance(frame, LLMMessagesAppendFrame):
                text = _user_text(frame)
                if text:
                    await self._final(text)
        if isinstance(frame, InterruptionFrame):
            self.retriever.cancel_pending()
        elif isinstance(frame, EndFrame | CancelFrame):
            await self.retriever.close()
        await self.push_frame(frame, direction)

    async def _final(self, text: str) -> None:
        try:
            record: TurnRetrieval = await self.retriever.on_final(text)
        except Exception:  # retrieval must never take the call down; the turn simply gets no knowledge
            logger.exception("call {}: retrieval failed", self._call_id)
            await self.push_frame(KnowledgeFrame(record={"status": "error"}))
            return
        await self.push_frame(KnowledgeFrame(texts=list(record.texts), record=record.to_dict()))

    async def cleanup(self) -> None:
        """Cancels any speculative work left when the processor is torn down."""
        await self.retriever.close()
        await super().cleanup()  # type: ignore[no-untyped-call]
