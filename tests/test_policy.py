"""The context policy's schedule and the calculator, against DESIGN section 1."""

from __future__ import annotations

import bisect
from typing import Any

import pytest

from voice_agent.core.policy import (
    ContextPolicy,
    PolicyError,
    PolicyTracker,
    closed_form_bound,
    rewrite_schedule,
)
from voice_agent.core.survival import Survival


def brute_force_carriers(keep: int, every: int, through: int) -> dict[int, list[int]]:
    """Simulates the turn loop literally: which passes rewrite each turn's facts.

    Independent of the policy module: the summary is a set of turns, and each pass
    rewrites everything it holds after folding in what left the window unseen.
    """
    summary: set[int] = set()
    seen: set[int] = set()
    carriers: dict[int, list[int]] = {t: [] for t in range(1, through + 1)}
    for m in range(1, through + 1):
        if m % every != 0:
            continue
        incoming = {u for u in range(1, m - keep) if u not in seen}
        if not incoming:
            continue
        seen |= incoming
        summary |= incoming
        for t in summary:
            carriers[t].append(m)
    return carriers


def test_design_worked_example() -> None:
    policy = ContextPolicy(keep=6, every=5)
    assert rewrite_schedule(policy, 4, 31) == [15, 20, 25, 30]
    assert closed_form_bound(policy, 4, 31) == 5


def test_design_alignments_at_distance_27() -> None:
    policy = ContextPolicy(keep=6, every=5)
    counts = {t: len(rewrite_schedule(policy, t, t + 27)) for t in range(1, 11)}
    assert [t for t, n in counts.items() if n == 5] == [3, 8]
    assert sum(1 for n in counts.values() if n == 4) == 8


@pytest.mark.parametrize(
    ("retention", "passes", "percent"),
    [(0.9, 1, 90.0), (0.9, 2, 81.0), (0.9, 3, 72.9), (0.9, 4, 65.6), (0.9, 5, 59.0), (0.9, 7, 47.8),
     (0.95, 4, 81.5), (0.98, 4, 92.2), (0.98, 7, 86.8)],
)
def test_design_survival_table(retention: float, passes: int, percent: float) -> None:
    assert round(Survival(retention, passes).survival * 100, 1) == percent


def test_five_facts_through_four_passes() -> None:
    s = Survival(0.9, 4, facts=5)
    assert round(s.expected_facts, 2) == 3.28
    assert round(s.all_facts * 100, 1) == 12.2


@pytest.mark.parametrize("keep", range(1, 13))
def test_calculator_equals_brute_force_for_every_pair(keep: int) -> None:
    through = 200
    for every in range(1, 13):
        policy = ContextPolicy(keep=keep, every=every)
        carriers = brute_force_carriers(keep, every, through)
        for stated in range(1, through + 1):
            expected = carriers[stated]
            for needed in range(stated, through + 1):
                got = rewrite_schedule(policy, stated, needed)
                want = expected[: bisect.bisect_right(expected, needed)]
                assert got == want, (keep, every, stated, needed)
                assert len(got) <= closed_form_bound(policy, stated, needed)


def test_tracker_token_trigger_runs_off_cadence() -> None:
    tracker = PolicyTracker(ContextPolicy(keep=2, every=100, max_context_tokens=500))
    assert tracker.on_turn_start(4, context_tokens=100) is None
    regen = tracker.on_turn_start(4, context_tokens=600)
    assert regen is not None and (regen.first, regen.last) == (1, 1)
    # Nothing new has left the window: a second trigger on the same turn does no pass.
    assert tracker.on_turn_start(4, context_tokens=900) is None


def test_raw_turns_never_fewer_than_keep() -> None:
    policy = ContextPolicy(keep=6, every=5)
    tracker = PolicyTracker(policy)
    for turn in range(1, 80):
        tracker.on_turn_start(turn)
        assert tracker.raw_from(turn) <= max(1, turn - policy.keep)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"keep": 0}, "keep"), ({"every": 0}, "every"), ({"max_context_tokens": 0}, "max_context_tokens"),
])
def test_invalid_policy_is_rejected(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        ContextPolicy(**kwargs)


def test_needed_before_stated_is_rejected() -> None:
    with pytest.raises(PolicyError):
        rewrite_schedule(ContextPolicy(), 10, 3)
