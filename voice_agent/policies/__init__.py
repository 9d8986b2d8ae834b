"""Memory policies selectable per run: ``lanes`` (ours), ``rolling`` and ``window`` (baselines)."""

from __future__ import annotations

from enum import StrEnum


class PolicyName(StrEnum):
    """The policies ``--policy`` accepts."""

    LANES = "lanes"
    ROLLING = "rolling"
    WINDOW = "window"
