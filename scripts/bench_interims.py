"""What the default stack's interims cost: Whisper decodes and CPU per turn, and when the final is ready.

Run: ``.venv/bin/python scripts/bench_interims.py [--scenario bridge_smoke] [--lines 8]``.

Every caller line of the scenario is synthesised with Piper (the emulated caller's voice), framed in 20 ms and fed
to :class:`~voice_agent.audio.interims.GrowingSegment` as the served call would, with the VAD's start and stop
placed at the speech's edges (the stop half a second, the stack's ``vad_stop_secs``, after its last frame above
the VAD's level). A due partial is
decoded at once with the Whisper service's own final decode (``final_text``: the shared tiny.en model, pipecat's
options and padding) and the feed advances by the decode's wall time before the next can start, as on the live
call, where audio keeps coming while a partial runs. Three ways of getting the final, side by side:

* ``off`` (the baseline, ``--no-interims``): pipecat's decode of the whole segment at the VAD stop;
* ``on, no reuse`` (interims as first landed): the partials, then that same final decode, after any partial still
  running at the stop (the model runs one call at a time);
* ``on, reuse`` (the stack now): the partials; at the stop a partial covering the segment stands for the final (waited
  for if still running), otherwise the final is decoded as in ``on, no reuse``.

"final after stop" is the time from the VAD stop to the final's text on that timeline (decode wall times measured
here, in one process, nothing else decoding meanwhile); "reused final = fresh final" counts the turns whose reused
text equals the ``off`` decode of the full segment (the transcript's quality is unchanged when it is every one).
CPU is the process's (CTranslate2 computes in its own threads).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from voice_agent.audio.codec import Int16Array, resample, rms_dbfs  # noqa: E402
from voice_agent.audio.interims import FinalHandoff, GrowingSegment, InterimSettings, Partial  # noqa: E402
from voice_agent.audio.stack import AudioStack, caller_voice  # noqa: E402
from voice_agent.audio.whisper_stt import make_whisper_stt  # noqa: E402
from voice_agent.harness.scenarios import load_scenario  # noqa: E402
from voice_agent.retrieval.speculative import normalise  # noqa: E402

RATE = 16000
FRAME = 320  # samples: 20 ms


@dataclass
class Turn:
    """One caller line under the three ways of getting the final."""

    secs: float
    final: str  # the fresh decode of the full segment
    partials: list[tuple[str, float]]  # text, CPU s
    reused: bool
    reused_equal: bool
    reused_same_words: bool
    final_cpu: float  # the full-segment decode (off's, and on's when not reused)
    after_stop_off: float
    after_stop_no_reuse: float
    after_stop_reuse: float


def _timed(decode: Callable[[bytes], str], pcm: bytes) -> tuple[str, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    text = decode(pcm)
    return text, time.process_time() - cpu, time.perf_counter() - wall


def run_line(speech: Int16Array, settings: InterimSettings, decode: Callable[[bytes], str]) -> Turn:
    """Feeds one line; partials, the full-segment final and the three finals' readiness after the VAD stop."""
    segment = GrowingSegment(settings, RATE)
    audio = np.concatenate([np.zeros(RATE // 2, np.int16), speech, np.zeros(RATE, np.int16)])
    start = RATE // 2 + int(0.2 * RATE)  # the VAD's start delay
    # The speech's end: its last frame the VAD hears (Piper ends a line in near-silence, which the VAD counts as
    # silence and its wait for the stop starts in).
    voiced = [i for i in range(0, len(speech) - FRAME + 1, FRAME)
              if rms_dbfs(speech[i : i + FRAME]) >= settings.pause_dbfs]
    end = voiced[-1] + FRAME if voiced else len(speech)
    stop = RATE // 2 + end + int(AudioStack().vad_stop_secs * RATE)
    partials: list[tuple[str, float]] = []
    busy_until = -1  # sample index until which a running partial keeps the decoder
    pending = None
    partial_wall = 0.0
    for at in range(0, stop, FRAME):
        if at >= start and not segment.speaking:
            segment.start()
        segment.add(audio[at : at + FRAME].astype("<i2").tobytes())
        if pending is not None and at >= busy_until:
            segment.finish(pending, partial_wall)  # the next waits as long as this one took (back-pressure)
            pending = None
        if pending is None and segment.due():
            pending = segment.take()
            text, cpu, partial_wall = _timed(decode, pending.heard)
            partials.append((text, cpu))
            busy_until = at + int(partial_wall * RATE)
    covering = segment.stop()
    # pipecat's segment: a second before the VAD start, up to the stop (the service pads it itself)
    pcm = audio[max(0, start - RATE) : stop].astype("<i2").tobytes()
    if covering is not None:  # the service's claim: the partial's audio, then no more quiet than it assumed
        handoff: FinalHandoff[Partial] = FinalHandoff()
        handoff.offer(covering, covering)
        covering = handoff.claim(pcm)
    final, final_cpu, final_wall = _timed(decode, pcm)
    still_busy = max(0, busy_until - stop) / RATE  # a partial running at the stop holds the model this long
    reuse_wait = still_busy if covering is not None else still_busy + final_wall
    reused_text = partials[-1][0] if covering is not None else final
    return Turn(len(speech) / RATE, final, partials, covering is not None, reused_text == final,
                normalise(reused_text) == normalise(final), final_cpu, final_wall, still_busy + final_wall, reuse_wait)


def main() -> None:
    """Prints decodes, CPU per turn and the final's readiness for interims off, on without reuse, on with reuse."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="bridge_smoke")
    parser.add_argument("--lines", type=int, default=8, help="First N caller lines.")
    args = parser.parse_args()
    lines = [t.text for t in load_scenario(args.scenario).turns if t.speaker == "caller"][: args.lines]
    voice = caller_voice("piper")
    decode = make_whisper_stt().final_text  # the service's own final decode, outside a pipeline
    decode(bytes(16000))  # load and warm the model
    started, load = time.perf_counter(), os.getloadavg()[0]
    turns: list[Turn] = []
    settings = InterimSettings(vad_stop_secs=AudioStack().vad_stop_secs)
    for line in lines:
        samples, rate = voice(line)
        turn = run_line(resample(samples, rate, RATE), settings, decode)
        turns.append(turn)
        print(f"{turn.secs:4.1f} s, {len(turn.partials)} partial(s), final {'reused' if turn.reused else 'decoded'}"
              f"{'' if turn.reused_equal else ' (differs from the fresh decode: ' + turn.final.strip() + ')'}: "
              f"{[t for t, _ in turn.partials]}")
    n = len(turns)
    partial_decodes = sum(len(t.partials) for t in turns)
    partial_cpu = sum(c for t in turns for _, c in t.partials)
    final_cpu = sum(t.final_cpu for t in turns)
    reused = [t for t in turns if t.reused]
    fresh_cpu = sum(t.final_cpu for t in turns if not t.reused)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.0f}"

    print(f"\n{n} lines of {args.scenario}, {statistics.mean(t.secs for t in turns):.1f} s of speech on average; "
          f"wall {time.perf_counter() - started:.0f} s, load average {load:.2f} at the start")
    print("| measure | off (baseline) | on, no reuse | on, reuse |")
    print("|---|---|---|---|")
    print(f"| Whisper decodes per turn | 1 | {(partial_decodes + n) / n:.2f} | "
          f"{(partial_decodes + n - len(reused)) / n:.2f} |")
    print(f"| CPU ms per turn | {final_cpu / n * 1000:.0f} | {(partial_cpu + final_cpu) / n * 1000:.0f} | "
          f"{(partial_cpu + fresh_cpu) / n * 1000:.0f} |")
    print(f"| final after VAD stop, median ms | {ms([t.after_stop_off for t in turns])} | "
          f"{ms([t.after_stop_no_reuse for t in turns])} | {ms([t.after_stop_reuse for t in turns])} |")
    print(f"\nfinals reused from a covering partial: {len(reused)}/{n}; "
          f"reused final = fresh final: {sum(t.reused_equal for t in reused)}/{len(reused)} exactly, "
          f"{sum(t.reused_same_words for t in reused)}/{len(reused)} in words (case and punctuation aside)")
    print(f"CPU per turn vs off: no reuse {(partial_cpu + final_cpu) / final_cpu:.2f}x, "
          f"reuse {(partial_cpu + fresh_cpu) / final_cpu:.2f}x")


if __name__ == "__main__":
    main()
