"""Transcript lanes for guard tests, from (speaker, text) pairs."""

from __future__ import annotations

from voice_agent.core.transcript import TranscriptLane


def lane(*turns: tuple[str, str]) -> TranscriptLane:
    """A lane in which each caller utterance starts a turn and agent lines belong to the turn they answer."""
    return TranscriptLane.of_lines(turns)
