"""The load test's own measurements: reply latency, unanswered turns and the ours/plain CPU ratio."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def loadtest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loadtest_script", ROOT / "scripts" / "loadtest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def drive(call: object, ticks: list[tuple[float, float | None]]) -> None:
    """Ticks the call at each time; a second value is when the agent's voiced audio arrives (then stops)."""
    for now, voiced in ticks:
        if voiced is not None:
            call.first_voiced = call.first_voiced or voiced  # type: ignore[attr-defined]
            call.last_voiced = voiced  # type: ignore[attr-defined]
        call.next_payload(now, "SILENCE")  # type: ignore[attr-defined]


def test_a_reply_is_timed_from_the_end_of_speech_to_the_first_voiced_frame() -> None:
    lt = loadtest()
    call = lt.LoadCall([["A", "B"]], start_at=0.0)
    call.phase_until = 0.4
    drive(call, [(0.0, None), (0.4, None), (0.42, None), (0.44, None)])  # lead ends, two speech frames
    assert call.phase == "wait" and abs(call.speech_end - 0.46) < 1e-9
    drive(call, [(0.6, None), (0.8, 0.81), (1.0, 1.2), (1.5, None), (1.8, None)])
    assert call.phase == "over" and [round(v) for v in call.latencies] == [350]


def test_a_turn_without_a_reply_is_counted_and_reported() -> None:
    lt = loadtest()
    call = lt.LoadCall([["A"], ["B"]], start_at=0.0)
    drive(call, [(0.0, None), (0.0, None), (0.02, None)])
    drive(call, [(0.05 + lt.REPLY_TIMEOUT_SECS, None)])  # nothing came back in time: the next line
    assert call.unanswered == 1 and call.phase == "speak" and call.latencies == []


def test_the_cpu_ratio_compares_ours_with_plain_at_the_same_call_count() -> None:
    lt = loadtest()
    ours = lt.RunStats("ours", 10, cpu_secs_per_call=0.3)
    plain = lt.RunStats("plain", 10, cpu_secs_per_call=0.2)
    alone = lt.RunStats("ours", 25, cpu_secs_per_call=0.3)
    table = lt.render([ours, alone, plain], "fake", 300)
    rows = {line.split("|")[3].strip() + line.split("|")[1].strip(): line for line in table.splitlines()[3:]}
    assert "| 1.50 |" in rows["10ours"] and "| 1.50 |" not in rows["25ours"]
