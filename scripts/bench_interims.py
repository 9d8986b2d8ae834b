"""What the default stack's interims cost: partial Whisper decodes per turn and their CPU, beside the final's.

Run: ``.venv/bin/python scripts/bench_interims.py [--scenario bridge_smoke] [--lines 8]``.

Every caller line of the scenario is synthesised with Piper (the emulated caller's voice), framed in 20 ms and fed
to :class:`~voice_agent.audio.interims.GrowingSegment` as the served call would, with the VAD's start and stop
placed at the speech's edges. A due partial is decoded at once (the shared tiny.en model, greedy) and the feed
advances by the decode's own wall time before the next can start, as on the live call, where audio keeps coming
while a partial runs. The baseline is the final transcript: pipecat's ``WhisperSTTService`` decode of the whole
segment (beam 5, the model's defaults), timed the same way. CPU is the process's (CTranslate2 computes in its own
threads; nothing else runs in this process meanwhile).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from voice_agent.audio.codec import Int16Array, resample  # noqa: E402
from voice_agent.audio.interims import GrowingSegment, InterimSettings  # noqa: E402
from voice_agent.audio.stack import caller_voice  # noqa: E402
from voice_agent.audio.whisper_stt import shared_whisper_model, transcribe  # noqa: E402
from voice_agent.scenarios import load_scenario  # noqa: E402

RATE = 16000
FRAME = 320  # samples: 20 ms


def _final_decode(samples: Int16Array) -> str:
    """The final as pipecat's service decodes it (default options: beam 5)."""
    segments, _ = shared_whisper_model().transcribe(samples.astype(np.float32) / 32768.0, language="en")
    return " ".join(s.text.strip() for s in segments).strip()


def _timed(fn: object, samples: Int16Array) -> tuple[str, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    text = fn(samples)  # type: ignore[operator]
    return text, time.process_time() - cpu, time.perf_counter() - wall


def run_line(speech: Int16Array, settings: InterimSettings) -> tuple[list[tuple[str, float]], str, float]:
    """Partials (text, CPU s) of one line, and the final's text and CPU s."""
    segment = GrowingSegment(settings, RATE)
    audio = np.concatenate([np.zeros(RATE // 2, np.int16), speech, np.zeros(RATE // 2, np.int16)])
    start, stop = RATE // 2 + int(0.2 * RATE), RATE // 2 + len(speech) + RATE // 2  # VAD start delay, stop_secs
    partials: list[tuple[str, float]] = []
    busy_until = -1  # sample index until which a running partial keeps the decoder
    pending: tuple[int, Int16Array] | None = None
    for at in range(0, len(audio), FRAME):
        if at >= start and not segment.speaking and at < stop:
            segment.start()
        if at >= stop and segment.speaking:
            segment.stop()
        frame = audio[at : at + FRAME]
        segment.add(frame.astype("<i2").tobytes())
        if pending is not None and at >= busy_until:
            segment.finish(pending[0])
            pending = None
        if pending is None and segment.due():
            pending = segment.take()
            text, cpu, wall = _timed(transcribe, pending[1])
            partials.append((text, cpu))
            busy_until = at + int(wall * RATE)
    # pipecat's segment: a second before the VAD start, up to the stop, then half a second of silence
    final_samples = np.concatenate([audio[max(0, start - RATE) : stop], np.zeros(RATE // 2, np.int16)])
    final, final_cpu, _ = _timed(_final_decode, final_samples)
    return partials, final, final_cpu


def main() -> None:
    """Prints partials per turn and their CPU beside the final decode's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="bridge_smoke")
    parser.add_argument("--lines", type=int, default=8, help="First N caller lines.")
    args = parser.parse_args()
    lines = [t.text for t in load_scenario(args.scenario).turns if t.speaker == "caller"][: args.lines]
    voice = caller_voice("piper")
    transcribe(np.zeros(8000, dtype=np.int16))  # load and warm the model
    settings = InterimSettings()
    started = time.perf_counter()
    per_turn, partial_cpu, final_cpu, speech_secs = [], [], [], []
    for line in lines:
        samples, rate = voice(line)
        speech = resample(samples, rate, RATE)
        partials, final, cpu = run_line(speech, settings)
        per_turn.append(len(partials))
        partial_cpu.extend(c for _, c in partials)
        final_cpu.append(cpu)
        speech_secs.append(len(speech) / RATE)
        print(f"{len(speech) / RATE:4.1f} s, {len(partials)} partial(s): {[t for t, _ in partials]} -> {final!r}")
    partial_turn = sum(partial_cpu) / len(lines)
    final_turn = statistics.mean(final_cpu)
    print(f"\n{len(lines)} lines of {args.scenario}, {statistics.mean(speech_secs):.1f} s of speech on average; "
          f"wall {time.perf_counter() - started:.0f} s")
    print("| measure | partials (interims) | final (baseline) |")
    print("|---|---|---|")
    print(f"| decodes per turn | {statistics.mean(per_turn):.2f} | 1 |")
    median_partial = statistics.median(partial_cpu) * 1000 if partial_cpu else 0.0
    print(f"| CPU ms per decode, median | {median_partial:.0f} | {statistics.median(final_cpu) * 1000:.0f} |")
    print(f"| CPU ms per turn | {partial_turn * 1000:.0f} | {final_turn * 1000:.0f} |")
    print(f"\ninterims cost {partial_turn / final_turn:.2f}x the final's CPU per turn")


if __name__ == "__main__":
    main()
