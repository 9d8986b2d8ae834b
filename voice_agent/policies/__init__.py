"""Memory policies selectable per run: ``lanes`` (ours); ``rolling``, ``window`` and ``pipecat`` (baselines)."""

from __future__ import annotations

from enum import StrEnum


class PolicyName(StrEnum):
    """The policies ``--policy`` accepts."""

    LANES = "lanes"
    ROLLING = "rolling"
    WINDOW = "window"
    PIPECAT = "pipecat"
    """pipecat's own ``LLMContextSummarizer`` over the pipeline's context (no lanes in the context)."""


ASSEMBLED = (PolicyName.LANES, PolicyName.ROLLING, PolicyName.WINDOW)
"""The policies whose context the context stage builds from the lanes; ``all`` on the command line means these
(``pipecat`` summarizes with a model, so it is asked for by name)."""
