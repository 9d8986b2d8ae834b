"""Interim transcripts from a segmented recogniser: partial decodes of the speech segment as it grows.

Whisper transcribes a whole segment at the VAD stop, so on its own it says nothing while the caller speaks.
:class:`GrowingSegment` keeps the same audio Whisper's service keeps (a pre-roll before the VAD start, then
everything until the stop) and says when a partial decode is due, never while one runs:

* at a pause (a quarter second under the level threshold after new speech): the caller may have finished, and
  this partial then holds every word the final will, a good half second before the VAD's stop starts the final;
* every ``interval_secs`` of new audio once the segment is long, so a long turn is heard as it goes.

A partial is decoded exactly as the final is (the same model, options and trailing silence), so when no voiced
audio came after it, only the quiet before the VAD's stop, it *is* the final: :meth:`GrowingSegment.stop`
names that covering partial and :class:`FinalHandoff` hands its result to the final recogniser, which then uses
it (or waits for it, if it is still decoding) instead of decoding the segment a second time. A partial costs one
Whisper pass (about 0.5 s of CPU for tiny.en on two busy cores whatever the segment's length: the encoder always
reads 30 s), hence no partials on a timer for short turns; a covering one costs nothing extra.

Pure Python over 16-bit mono PCM bytes; ``processors/whisper_interims.py`` is the pipeline adapter and
``voice_agent/audio/whisper_stt.py`` the final recogniser that claims the handoff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from voice_agent.audio.codec import rms_dbfs

T = TypeVar("T")


@dataclass(frozen=True)
class InterimSettings:
    """When partial decodes run.

    Attributes:
        interval_secs: Least new audio between the starts of two timed partial decodes.
        timed_after_secs: Audio in the segment (pre-roll included) before partials on the timer start.
        pause_secs: Quiet after speech that starts a partial at once.
        pause_dbfs: Level under which audio counts as quiet (also: what may follow a partial that covers the
            segment).
        min_secs: Least audio in the segment (pre-roll included) for any partial.
        preroll_secs: Audio kept before the VAD start: the final recogniser's (pipecat keeps one second), or no
            partial can cover its segment.
        vad_stop_secs: The VAD's quiet before its stop. A partial is decoded as if the caller stopped at it: its
            audio, then silence up to that much quiet (Whisper's output depends on the segment's length, so a
            covering partial then says what the final would).
    """

    interval_secs: float = 1.5
    timed_after_secs: float = 3.0
    pause_secs: float = 0.25
    pause_dbfs: float = -45.0
    min_secs: float = 1.5
    preroll_secs: float = 1.0
    vad_stop_secs: float = 0.5

    def __post_init__(self) -> None:
        times = (self.timed_after_secs, self.pause_secs, self.min_secs, self.preroll_secs, self.vad_stop_secs)
        if self.interval_secs <= 0 or min(times) < 0:
            raise ValueError("interim settings: interval must be positive, the other times not negative")


@dataclass(frozen=True, eq=False)
class Partial:
    """One partial decode handed out.

    Attributes:
        utterance: The utterance it belongs to.
        number: Its place among the segment's partials (1, 2, ...), over the whole call.
        audio: The segment's PCM so far, as the final recogniser holds it.
        silence: Zero bytes to append before decoding: the rest of the quiet the VAD waits for (the decoder then
            pads it as it pads the final).
    """

    utterance: int
    number: int
    audio: bytes
    silence: int = 0

    @property
    def heard(self) -> bytes:
        """What the partial decodes: the audio, as if the caller stopped at its end."""
        return self.audio + bytes(self.silence)


class GrowingSegment:
    """The audio of the utterance being spoken and the schedule of its partial decodes.

    Args:
        settings: The schedule.
        sample_rate: Rate of the PCM fed to :meth:`add`.

    Attributes:
        utterance: Number of the current (or last) utterance; a decode's result is only used for its own.
        decodes: Partial decodes handed out so far.
    """

    def __init__(self, settings: InterimSettings, sample_rate: int) -> None:
        self.settings = settings
        self.sample_rate = sample_rate
        self._buffer = bytearray()
        self._preroll_bytes = int(settings.preroll_secs * sample_rate) * 2
        self._speaking = False
        self._in_flight = False
        self._decoded_upto = 0
        self._quiet_bytes = 0
        self._speech_since_decode = False
        self._last: Partial | None = None
        self._covering: Partial | None = None
        self.utterance = 0
        self.decodes = 0

    @property
    def speaking(self) -> bool:
        """Between a VAD start and its stop."""
        return self._speaking

    def start(self) -> None:
        """The VAD heard speech start: the segment begins with the pre-roll."""
        if self._speaking:
            return
        self._speaking = True
        self.utterance += 1
        self._decoded_upto = 0
        self._speech_since_decode = True  # the VAD heard speech: the pre-roll ends in it
        self._quiet_bytes = 0
        self._covering = None

    def stop(self) -> Partial | None:
        """The VAD heard speech stop: the final recogniser takes over (a decode still running may still finish).

        Returns:
            The partial that covers the segment, if any: this utterance's last, with nothing but quiet after the
            audio it decoded. Its result is the final's (running or done); any other partial still running is
            stale and its result is no use to anyone.
        """
        if not self._speaking:
            return None
        self._speaking = False
        self._buffer.clear()
        last = self._last
        if last is not None and last.utterance == self.utterance and not self._speech_since_decode:
            self._covering = last
        return self._covering

    def add(self, audio: bytes) -> None:
        """Appends PCM; while quiet only the pre-roll is kept."""
        self._buffer += audio
        if not self._speaking:
            if len(self._buffer) > self._preroll_bytes:
                del self._buffer[: len(self._buffer) - self._preroll_bytes]
            return
        if rms_dbfs(np.frombuffer(audio, dtype="<i2")) < self.settings.pause_dbfs:
            self._quiet_bytes += len(audio)
        else:
            self._quiet_bytes = 0
            self._speech_since_decode = True

    def due(self) -> bool:
        """Whether a partial decode should start now."""
        if not self._speaking or self._in_flight:
            return False
        size = len(self._buffer)
        rate_bytes = self.sample_rate * 2
        if size < self.settings.min_secs * rate_bytes:
            return False
        if self._speech_since_decode and self._quiet_bytes >= self.settings.pause_secs * rate_bytes:
            return True
        if size < self.settings.timed_after_secs * rate_bytes:
            return False
        return size - self._decoded_upto >= self.settings.interval_secs * rate_bytes

    def take(self) -> Partial:
        """Hands out the segment so far for a partial decode, marking one in flight."""
        self._in_flight = True
        self._decoded_upto = len(self._buffer)
        self._speech_since_decode = False
        self.decodes += 1
        still = max(0, int(self.settings.vad_stop_secs * self.sample_rate) * 2 - self._quiet_bytes)
        self._last = Partial(self.utterance, self.decodes, bytes(self._buffer), still)
        return self._last

    def finish(self, partial: Partial) -> bool:
        """A partial decode ended; whether its text is still news (worth an interim transcript).

        It is while the caller speaks, and after the VAD stop only if it covers the segment (the final then
        carries the same text at once). A partial that ends after the stop without covering the segment decoded
        older audio than the final does: a search on it would only compete with the final for the CPU. One
        ending after the next utterance began is stale.
        """
        self._in_flight = False
        if partial.utterance != self.utterance:
            return False
        return self._speaking or partial is self._covering


@dataclass(frozen=True)
class _Offer(Generic[T]):
    audio: bytes
    result: T


class FinalHandoff(Generic[T]):
    """Where a covering partial's result waits for the final recogniser (one per call).

    The partials' side offers the result (typically a future) at the VAD stop; the final recogniser claims it
    with the segment it was about to decode. The claim only succeeds when the partial's audio is a prefix of that
    segment, so a final is never given a result of other audio (a different pre-roll, a segment of another
    utterance still queued): it then decodes as it always did.

    Args:
        keep: Offers kept unclaimed (finals queued behind a slow one claim theirs later).
    """

    def __init__(self, keep: int = 4) -> None:
        self._offers: list[_Offer[T]] = []
        self._keep = keep
        self.offered = 0
        self.claimed = 0

    def offer(self, partial: Partial, result: T) -> None:
        """The segment of ``partial``'s utterance ended and ``partial`` covers it: ``result`` is its final."""
        self._offers.append(_Offer(partial.audio, result))
        del self._offers[: -self._keep]
        self.offered += 1

    def claim(self, segment: bytes) -> T | None:
        """The result offered for ``segment`` (the final's PCM, padding included), or None: decode it."""
        for i, offer in enumerate(self._offers):
            if len(offer.audio) <= len(segment) and segment.startswith(offer.audio):
                del self._offers[: i + 1]  # older offers belong to segments already decoded
                self.claimed += 1
                return offer.result
        return None
