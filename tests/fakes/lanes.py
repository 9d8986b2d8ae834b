"""Transcript lanes for guard tests, from (speaker, text) pairs."""

from __future__ import annotations

from voice_agent.core.transcript import TranscriptLane


def lane(*turns: tuple[str, str]) -> TranscriptLane:
    """A lane in which each caller utterance starts a turn and agent lines belong to the turn they answer."""
    out = TranscriptLane()
    turn = 0
    for who, text in turns:
        if who == "caller":
            turn += 1
            out.append_caller(turn, text)
        else:
            out.append_agent(max(turn, 1), text)
    return out
