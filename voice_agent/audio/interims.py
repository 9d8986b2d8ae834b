"""Interim transcripts from a segmented recogniser: partial decodes of the speech segment as it grows.

Whisper transcribes a whole segment at the VAD stop, so on its own it says nothing while the caller speaks.
:class:`GrowingSegment` keeps the same audio Whisper's service keeps (a pre-roll before the VAD start, then
everything until the stop) and says when a partial decode is due, never while one runs, and on the timer never
sooner after one than that partial's own decode took (back-pressure: on a busy CPU timed partials thin out rather
than queue; a pause's partial, the one that may stand for the final, only waits for the running one):

* at a pause (a quarter second under the level threshold after new speech): the caller may have finished, and
  this partial then holds every word the final will, a good half second before the VAD's stop starts the final;
* every ``interval_secs`` of new audio once the segment is long (up to ``timed_until_secs``), so a long turn is
  heard as it goes.

A partial is decoded with the final's model, options and trailing silence, as if the caller stopped at its end.
When nothing but the expected quiet came after it (no more than the quiet the VAD still waited for),
:meth:`GrowingSegment.stop` names that covering partial and :class:`FinalHandoff` hands its result to the final
recogniser, which then uses it (or waits for it, if it is still decoding) instead of decoding the segment a
second time. The reused text is the partial's decode of the audio up to the pause (padded with silence), not a
decode of the longer segment the VAD closed: the two usually agree but can differ slightly (seen: "ours" for
"hours"). A partial costs one Whisper pass: about 0.5 s of CPU for tiny.en on two busy cores for any segment up
to 30 s (the encoder always reads a 30 s window; longer segments take several windows), hence no partials on a
timer for short turns; a covering one costs nothing extra.

Pure Python over 16-bit mono PCM bytes; ``processors/whisper_interims.py`` is the pipeline adapter and
``voice_agent/audio/whisper_stt.py`` the final recogniser that claims the handoff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from voice_agent.audio.codec import rms_dbfs

VAD_MIN_VOLUME = 0.6
"""pipecat's default ``VADParams.min_volume`` (``pipecat.audio.vad.vad_analyzer.VAD_MIN_VOLUME``)."""

T = TypeVar("T")

VAD_FRAME_BYTES = 512 * 2
"""One Silero VAD frame of 16 kHz 16-bit PCM (512 samples): the VAD's stop is only this exact."""


def pause_dbfs_for(min_volume: float) -> float:
    """The level under which audio is quiet to the partials, from the VAD's ``VADParams.min_volume``.

    pipecat's VAD counts audio as speech down to ``min_volume`` of its loudness scale (-110 to -10 LUFS, see
    ``pipecat.audio.utils.calculate_audio_volume``): 0.6 is -50 LUFS. A partial may only treat as a pause what
    the VAD also does, so the level is that, and never above -50.
    """
    return min(-50.0, -110.0 + 100.0 * min_volume)


@dataclass(frozen=True)
class InterimSettings:
    """When partial decodes run.

    Attributes:
        interval_secs: Least new audio between the starts of two timed partial decodes.
        timed_after_secs: Audio in the segment (pre-roll included) before partials on the timer start.
        timed_until_secs: Audio in the segment after which partials on the timer stop (a pause still starts
            one): past Whisper's 30 s window a decode costs a window more each 30 s.
        pause_secs: Quiet after speech that starts a partial at once.
        pause_dbfs: Level under which audio counts as quiet (also: what may follow a partial that covers the
            segment); the VAD's speech level (:func:`pause_dbfs_for`) or lower.
        min_secs: Least audio in the segment (pre-roll included) for any partial.
        preroll_secs: Audio kept before the VAD start: the final recogniser's (pipecat keeps one second), or no
            partial can cover its segment.
        vad_stop_secs: The VAD's quiet before its stop. A partial is decoded as if the caller stopped at it: its
            audio, then silence up to that much quiet (Whisper's output depends on the segment's length, so a
            covering partial then says what the final would).
    """

    interval_secs: float = 1.5
    timed_after_secs: float = 3.0
    timed_until_secs: float = 25.0
    pause_secs: float = 0.25
    pause_dbfs: float = pause_dbfs_for(VAD_MIN_VOLUME)
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
        self._idle_needed = 0  # bytes of audio to hear after a partial ends before the next: its decode time
        self._idle_heard = 0
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
        self._idle_needed = 0
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
        self._idle_heard += len(audio)
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
        if self._idle_heard < self._idle_needed:
            return False
        if not self.settings.timed_after_secs * rate_bytes <= size < self.settings.timed_until_secs * rate_bytes:
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

    def finish(self, partial: Partial, decode_secs: float = 0.0) -> bool:
        """A partial decode ended (done, failed or cancelled); whether its text is still news (an interim).

        The next timed partial waits until as much audio as this decode took has been heard after it (idle time
        for the model, which other calls share); a pause's partial does not.

        It is while the caller speaks, never after the VAD stop: a covering partial's text is then the final's,
        which the final recogniser pushes itself (an interim pushed now could reach the pipeline after it), and
        any other decoded older audio than the final does (a search on it would only compete with the final for
        the CPU). One ending after the next utterance began is stale.

        Args:
            partial: The partial handed out by :meth:`take`.
            decode_secs: How long its decode took (0: no wait before the next).
        """
        self._in_flight = False
        self._idle_heard = 0
        self._idle_needed = int(max(0.0, decode_secs) * self.sample_rate) * 2
        return partial.utterance == self.utterance and self._speaking


@dataclass(frozen=True)
class _Offer(Generic[T]):
    audio: bytes
    tail: int  # most bytes (before the padding) the segment may have after the audio
    result: T


class FinalHandoff(Generic[T]):
    """Where a covering partial's result waits for the final recogniser (one per call).

    The partials' side offers the result (typically a future) at the VAD stop; the final recogniser claims it
    with the segment it was about to decode. The claim only succeeds when the partial's audio is a prefix of that
    segment, so a final is never given a result of other audio (a different pre-roll, a segment of another
    utterance still queued), and when what follows that prefix (padding aside) is no longer than the quiet the
    partial was decoded with (the rest of the VAD's wait) plus ``slack``: more means the VAD still heard speech
    after the partial, however quiet, and the final decodes the segment as it always did.

    Args:
        keep: Offers kept unclaimed (finals queued behind a slow one claim theirs later).
        slack: Bytes the VAD's stop may come late by: four of its frames (128 ms) by default. Its stop time rounds
            up to whole 32 ms frames, it sees audio a frame late, input frames are 20 ms, and its smoothed volume
            outlasts the level this module measures: measured 69 ms late in the pipeline test, 23 and 51 ms in
            ``scripts/bench_interims.py``. Speech the partial missed is longer than that.
    """

    def __init__(self, keep: int = 4, slack: int = 4 * VAD_FRAME_BYTES) -> None:
        self._offers: list[_Offer[T]] = []
        self._keep = keep
        self._slack = slack
        self.offered = 0
        self.claimed = 0

    def offer(self, partial: Partial, result: T) -> None:
        """The segment of ``partial``'s utterance ended and ``partial`` covers it: ``result`` is its final."""
        self._offers.append(_Offer(partial.audio, partial.silence + self._slack, result))
        del self._offers[: -self._keep]
        self.offered += 1

    def claim(self, segment: bytes, padding: int = 0) -> T | None:
        """The result offered for ``segment`` (the final's PCM, ``padding`` bytes of it appended), or None."""
        for i, offer in enumerate(self._offers):
            after = len(segment) - padding - len(offer.audio)
            if 0 <= after <= offer.tail and segment.startswith(offer.audio):
                del self._offers[: i + 1]  # older offers belong to segments already decoded
                self.claimed += 1
                return offer.result
        return None
