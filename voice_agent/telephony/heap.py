"""How a bridge process's garbage collector runs while calls are live.

Every call of a process shares one event loop, and CPython's collector runs on it. A full (oldest-
generation) collection walks every tracked object of the process: the modules, pipecat, the audio
models' Python objects and every live call. Timed with ``gc.callbacks`` in each worker of a load-test run
(an experiment, not something ``scripts/loadtest.py`` reports), 75 calls on three workers paused each
worker for 50-190 ms four or five times a run, and every call of that worker waited out each pause; those
pauses were most of the p95. Two changes make them rare and short:

- the objects alive once the process has started (imports, models, the factory) are frozen
  (:func:`gc.freeze`): no later collection walks them again;
- the youngest generation collects after ``young_threshold`` net allocations instead of CPython 3.11's
  700, so young and middle collections run about ten times less often; and since the collection just
  before the freeze leaves start-up's objects counted as long-lived, a full collection waits until a
  quarter as many again have been promoted. In the same experiment afterwards, no full collection ran
during a load-test level.

What it costs: cyclic garbage that runs through a frozen object (a start-up object that later drops out
of a cycle, or a new object caught in a cycle with one) is never collected. That is bounded by what
start-up made, not by the calls; new cycles among the calls' own objects are still collected, only
later. The load test's memory per call did not change.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

DEFAULT_YOUNG_THRESHOLD = 7000
"""Net allocations between young collections (CPython 3.11's default is 700)."""


@dataclass(frozen=True)
class HeapState:
    """What :func:`settle_heap` left.

    Attributes:
        frozen: Objects moved to the permanent generation (none when the threshold was 0).
        thresholds: The collector's thresholds now (:func:`gc.get_threshold`).
    """

    frozen: int
    thresholds: tuple[int, int, int]


def check_young_threshold(young_threshold: int) -> None:
    """Refuses a negative threshold, in the words ``serve`` says it (``--gc-young-threshold``).

    Raises:
        ValueError: A negative threshold.
    """
    if young_threshold < 0:
        raise ValueError(f"--gc-young-threshold must be 0 or more (0 keeps CPython's collector), got {young_threshold}")


def settle_heap(young_threshold: int = DEFAULT_YOUNG_THRESHOLD) -> HeapState:
    """Freezes what start-up left alive and sets the young generation's threshold.

    Call it once the process is warmed up, before it accepts calls.

    Args:
        young_threshold: Net allocations between young collections; 0 leaves the collector exactly as
            CPython set it (nothing frozen), for a side-by-side.

    Returns:
        What was frozen and the thresholds now.

    Raises:
        ValueError: A negative threshold.
    """
    check_young_threshold(young_threshold)
    if young_threshold == 0:
        return HeapState(0, gc.get_threshold())
    gc.collect()  # what start-up left as garbage goes now, not into the permanent generation
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
    return HeapState(gc.get_freeze_count(), gc.get_threshold())
