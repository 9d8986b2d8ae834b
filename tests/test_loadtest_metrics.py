"""The load test's own measurements: reply latency, unanswered turns and the ours/plain CPU ratio."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def loadtest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loadtest_script", ROOT / "scripts" / "loadtest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def drive(call: object, ticks: list[tuple[float, float | None]]) -> None:
    """Ticks the call at each time; a second value is when the agent's voiced audio arrives (then stops),
    taken as the receiver takes it: the first voiced frame counts only while a reply is awaited."""
    for now, voiced in ticks:
        if voiced is not None:
            if call.first_voiced is None and call.phase == "wait":  # type: ignore[attr-defined]
                call.first_voiced = voiced  # type: ignore[attr-defined]
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
    drive(call, [(0.05 + lt.REPLY_TIMEOUT_SECS, None)])  # nothing came back in time
    assert call.unanswered == 1 and call.phase == "settle" and call.latencies == []
    drive(call, [(0.6 + lt.REPLY_TIMEOUT_SECS, None)])  # the line is quiet: the next line
    assert call.phase == "speak"


def test_an_unanswered_turn_counts_as_the_timeout_in_the_percentiles() -> None:
    lt = loadtest()
    figures = lt.latency_figures([350.0] * 9, 1, 300.0)  # one turn in ten never answered
    assert figures["p95_ms"] == lt.REPLY_TIMEOUT_SECS * 1000 and figures["p50_ms"] == 350.0
    assert figures["added_p95_ms"] == lt.REPLY_TIMEOUT_SECS * 1000 - 300.0
    row = lt.RunStats("ours", 10, turns=10, replies=9, unanswered=1, added_p95_ms=figures["added_p95_ms"])
    assert "| 9/10 |" in lt.render([row], "fake", 300.0)


def test_an_added_latency_below_zero_is_shown_not_clamped() -> None:
    lt = loadtest()
    figures = lt.latency_figures([100.0, 120.0], 0, 300.0)  # "replies" before the VAD could end the turn
    assert figures["added_p50_ms"] == -200.0 and figures["added_p99_ms"] == -180.0


def test_a_late_reply_after_an_unanswered_turn_is_not_taken_for_the_next_turns_reply() -> None:
    lt = loadtest()
    call = lt.LoadCall([["A"], ["B"]], start_at=0.0)
    drive(call, [(0.0, None), (0.0, None)])  # lead over, line A sent: speech ends at 0.02
    timeout = 0.03 + lt.REPLY_TIMEOUT_SECS
    drive(call, [(timeout, None)])
    assert call.unanswered == 1
    call.play_until = timeout + 0.4
    drive(call, [(timeout + 0.2, timeout + 0.2), (timeout + 0.5, None)])  # the late reply plays: the caller waits
    assert call.phase == "settle"
    drive(call, [(timeout + 0.8, None), (timeout + 0.82, None)])  # quiet, then line B (speech ends at +0.84)
    assert call.phase == "wait" and abs(call.speech_end - (timeout + 0.84)) < 1e-9
    drive(call, [(timeout + 1.2, timeout + 1.2), (timeout + 1.3, timeout + 1.3), (timeout + 1.9, None)])
    assert call.phase == "over" and [round(v) for v in call.latencies] == [360]


def test_a_line_that_never_goes_quiet_after_an_unanswered_turn_stops_the_calls_measurement() -> None:
    lt = loadtest()
    call = lt.LoadCall([["A"], ["B"]], start_at=0.0)
    drive(call, [(0.0, None), (0.0, None), (0.03 + lt.REPLY_TIMEOUT_SECS, None)])
    start = 0.03 + lt.REPLY_TIMEOUT_SECS
    drive(call, [(start + t, start + t) for t in (1.0, 5.0, lt.SETTLE_SECS + 0.1)])
    assert call.phase == "over" and "no quiet" in call.error and call.latencies == []


def row(lt: ModuleType, bridge: str, calls: int, **figures: float) -> Any:
    values: dict[str, float] = {"added_p95_ms": 40.0, "cpu_secs_per_call": 0.2, "generator_cpu_percent": 10.0}
    values.update(figures)
    return lt.RunStats(bridge, calls, turns=calls * 4, replies=calls * 4, **values)


def test_the_check_passes_a_run_that_meets_the_target_and_names_each_miss() -> None:
    lt = loadtest()
    good = [row(lt, "ours", 50), row(lt, "plain", 50, cpu_secs_per_call=0.19), row(lt, "ours", 10),
            row(lt, "plain", 10)]
    assert lt.check(good) == []
    slow = [row(lt, "ours", 50, added_p95_ms=100.0), row(lt, "plain", 50)]
    assert lt.check(slow) == ["ours 50 calls: p95 added 100 ms >= 100 ms"]
    costly = [row(lt, "ours", 50), row(lt, "plain", 50), row(lt, "ours", 10, cpu_secs_per_call=0.26),
              row(lt, "plain", 10)]
    assert lt.check(costly) == ["ours 10 calls: CPU per call 1.30x plain's > 1.2x"]
    lost = [lt.RunStats("ours", 50, turns=200, replies=190, unanswered=10, added_p95_ms=40.0, cpu_secs_per_call=0.2),
            row(lt, "plain", 50)]
    assert lt.check(lost) == ["ours 50 calls: 10 of 200 turns without a reply"]


def test_the_cpu_ratio_is_checked_at_every_level_ours_serves_within_budget_and_reported_past_it() -> None:
    lt = loadtest()
    base = [row(lt, "ours", 50), row(lt, "plain", 50)]
    costly_within = [*base, row(lt, "ours", 75, cpu_secs_per_call=0.26), row(lt, "plain", 75)]
    assert lt.check(costly_within) == ["ours 75 calls: CPU per call 1.30x plain's > 1.2x"]
    past_capacity = [*base, row(lt, "ours", 75, cpu_secs_per_call=0.26, added_p95_ms=300.0), row(lt, "plain", 75)]
    assert lt.check(past_capacity) == []
    assert "| 1.30 |" in lt.render(past_capacity, "fake", 300.0)  # still in the table
    # The target level and those below it are never excused: each miss there is a failure.
    slow_and_costly = [row(lt, "ours", 50, added_p95_ms=150.0, cpu_secs_per_call=0.26), row(lt, "plain", 50)]
    assert lt.check(slow_and_costly) == ["ours 50 calls: p95 added 150 ms >= 100 ms",
                                         "ours 50 calls: CPU per call 1.30x plain's > 1.2x"]
    noisy_below = [*base, row(lt, "ours", 10, added_p95_ms=120.0, cpu_secs_per_call=0.26), row(lt, "plain", 10)]
    assert lt.check(noisy_below) == ["ours 10 calls: p95 added 120 ms >= 100 ms",
                                     "ours 10 calls: CPU per call 1.30x plain's > 1.2x"]


def test_a_level_with_errors_or_nothing_measured_fails_the_check() -> None:
    lt = loadtest()
    # The generator failed: no turn was played, so nothing shows in the latency figures.
    nothing = lt.RunStats("ours", 50, errors=["load generator failed (exit 1)"])
    assert lt.check([nothing, row(lt, "plain", 50)]) == [
        "ours 50 calls: 1 error(s), e.g. load generator failed (exit 1)", "ours 50 calls: no turn was played"]
    # Over repeats the median of lost turns can be 0; the merged errors still say a run lost some.
    runs = [row(lt, "ours", 50) for _ in range(3)]
    runs[1].errors, runs[1].unanswered, runs[1].replies = ["3 turn(s) without a reply"], 3, 197
    for k, r in enumerate(runs):
        r.repeat = k + 1
    (median,) = lt.median_rows(runs)
    assert median.unanswered == 0 and median.replies == median.turns
    assert lt.check([median, row(lt, "plain", 50)]) == [
        "ours 50 calls: 1 error(s), e.g. 3 turn(s) without a reply"]
    below = [row(lt, "ours", 50), row(lt, "plain", 50), row(lt, "plain", 10),
             lt.RunStats("ours", 10, turns=40, replies=40, errors=["dial failed: timeout"])]
    assert lt.check(below) == ["ours 10 calls: 1 error(s), e.g. dial failed: timeout"]


def test_a_saturated_generator_makes_its_row_invalid_and_the_check_fail() -> None:
    lt = loadtest()
    saturated = row(lt, "ours", 50, generator_cpu_percent=85.0)
    assert saturated.invalid and "| 85! |" in lt.render([saturated], "fake", 300.0)
    failures = lt.check([saturated, row(lt, "plain", 50)])
    assert failures == ["ours 50 calls: invalid row (generator CPU 85 % > 70 %)",
                        "ours: no valid level at 50 calls (run one)"]
    assert lt.check([row(lt, "ours", 10), row(lt, "plain", 10)]) == ["ours: no valid level at 50 calls (run one)"]
    assert "no valid plain rows" in lt.check([row(lt, "ours", 50)])[0]


def test_repeats_give_the_median_per_level_and_the_spread() -> None:
    lt = loadtest()
    runs = []
    for repeat, (p95, ours_cpu) in enumerate([(30.0, 0.22), (90.0, 0.30), (50.0, 0.24)]):
        runs.append(row(lt, "ours", 50, added_p95_ms=p95, cpu_secs_per_call=ours_cpu))
        runs.append(row(lt, "plain", 50, cpu_secs_per_call=0.2))
        runs[-1].repeat = runs[-2].repeat = repeat
    medians = {r.bridge: r for r in lt.median_rows(runs)}
    assert medians["ours"].added_p95_ms == 50.0 and medians["ours"].repeat == 3
    assert abs(medians["ours"].cpu_secs_per_call - 0.24) < 1e-9
    table = lt.render_repeats(runs)
    assert "| ours | 50 | 3 | 50 (30-90) | 0.240 (0.220-0.300) | 1.20 (1.10-1.50) | 0 |" in table


def test_the_profile_counts_are_calls_per_media_message() -> None:
    lt = loadtest()
    site = "/x/site-packages/pipecat/processors/frame_processor.py"
    raw: dict[tuple[str, int, str], Any] = {
        ("/usr/lib/python3.11/asyncio/queues.py", 1, "put_nowait"): (700, 700, 0.1, 0.1, {}),
        (site, 2, "push_frame"): (500, 600, 0.1, 0.1, {}),
        (site, 3, "__process_frame"): (400, 400, 0.1, 0.1, {}),
        ("/usr/lib/python3.11/asyncio/events.py", 4, "_run"): (1500, 1500, 0.1, 0.1, {}),
        ("/x/site-packages/other/mod.py", 5, "push_frame"): (9999, 9999, 0.1, 0.1, {}),  # not pipecat's
    }
    counts = lt.profile_counts(raw, 100)
    assert counts == {"queue puts": 7.0, "frames pushed": 6.0, "frames processed": 4.0, "event-loop callbacks": 15.0}


def test_the_cpu_ratio_compares_ours_with_plain_at_the_same_call_count() -> None:
    lt = loadtest()
    ours = lt.RunStats("ours", 10, cpu_secs_per_call=0.3)
    plain = lt.RunStats("plain", 10, cpu_secs_per_call=0.2)
    alone = lt.RunStats("ours", 25, cpu_secs_per_call=0.3)
    table = lt.render([ours, alone, plain], "fake", 300)
    rows = {line.split("|")[3].strip() + line.split("|")[1].strip(): line for line in table.splitlines()[3:]}
    assert "| 1.50 |" in rows["10ours"] and "| 1.50 |" not in rows["25ours"]


def test_the_profile_groups_pipecats_processors_under_pipecat_not_ours() -> None:
    lt = loadtest()
    assert lt.package_of("/w/.venv/lib/python3.11/site-packages/pipecat/processors/frame_processor.py") == "pipecat"
    assert lt.package_of("/work/main/processors/output_guard.py") == "processors/output_guard.py"
    assert lt.package_of("/work/main/voice_agent/telephony/server.py") == "voice_agent/telephony"


def test_the_ratio_needs_a_plain_row_within_its_own_capacity_at_the_same_level() -> None:
    lt = loadtest()
    base = [row(lt, "ours", 50), row(lt, "plain", 50)]
    missing = [*base, row(lt, "ours", 10)]
    assert lt.check(missing) == ["ours 10 calls: no valid plain row here, the CPU ratio is unchecked"]
    # An overloaded plain row's CPU per call is inflated by its queueing: it would flatter ours.
    overloaded = [*base, row(lt, "ours", 25, cpu_secs_per_call=0.26),
                  row(lt, "plain", 25, added_p95_ms=400.0, cpu_secs_per_call=0.26)]
    assert lt.check(overloaded) == ["ours 25 calls: plain is past its capacity there, the CPU ratio is not comparable"]
    # A median with lost turns but all replies counts the lost turns.
    lost = [lt.RunStats("ours", 50, turns=200, replies=200, unanswered=4, added_p95_ms=40.0, cpu_secs_per_call=0.2),
            row(lt, "plain", 50)]
    assert lt.check(lost) == ["ours 50 calls: 4 of 200 turns without a reply"]
