"""The one percentile every report and benchmark uses."""

from __future__ import annotations

import pytest

from voice_agent.harness.stats import percentile


def test_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.95) == 95 and percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100 and percentile(values, 0.0) == 1
    assert percentile([7.0], 0.99) == 7.0


def test_empty_and_bad_quantile() -> None:
    assert percentile([], 0.5) is None
    with pytest.raises(ValueError):
        percentile([1.0], 95)
