"""A seeded summarizer with a known per-pass retention R, for simulation.

It behaves like a compliant but lossy model: every tracked fact that reaches a pass
survives verbatim with probability R, otherwise it is dropped, generalised,
truncated or mutated. It serves both the structured summary of the ``lanes``
policy and the free-text summary of the ``rolling`` baseline.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.transcript import EntryKind, TranscriptEntry
from voice_agent.summarizers.faults import FaultShape, carry

NARRATIVE_WORDS = 10
MAX_NARRATIVE_LINES = 12


def _gist(entry: TranscriptEntry, tracked: Mapping[str, str], identifiers: Mapping[str, str] | None = None) -> str:
    """A short narrative line; tracked values become their key, so only the fact lines carry them.

    With ``identifiers`` (value -> ledger role) the line names the role instead of the value,
    as the summarizer instructions require.
    """
    text = entry.text
    for value, role in (identifiers or {}).items():
        text = text.replace(value, f"the {role}")
    for key, value in tracked.items():
        if value:
            text = text.replace(value, f"[{key}]")
    words = text.split()
    more = "..." if len(words) > NARRATIVE_WORDS else ""
    return f"turn {entry.turn}: caller said " + " ".join(words[:NARRATIVE_WORDS]) + more


class FaultInjectingSummarizer:
    """Summarizer with per-pass retention ``retention`` over ``tracked`` facts.

    Args:
        retention: Probability R that a fact survives one pass verbatim, in [0, 1].
        tracked: Fact key -> exact value, the facts whose fate is simulated.
        seed: Seeds the RNG, so a run is reproducible.
    """

    def __init__(self, retention: float, tracked: Mapping[str, str], seed: int = 0) -> None:
        if not 0.0 <= retention <= 1.0:
            raise ValueError(f"retention must lie in [0, 1], got {retention}")
        self.retention = retention
        self.tracked = dict(tracked)
        self.rng = random.Random(seed)
        self.faults: list[tuple[str, FaultShape]] = []

    def _facts_in(self, text: str) -> list[tuple[str, str]]:
        return [(k, v) for k, v in self.tracked.items() if v and v in text]

    def _fact_lines(self, text: str) -> list[str]:
        lines = []
        for key, value in self._facts_in(text):
            kept, shape = carry(value, key, self.retention, self.rng)
            if shape is not None:
                self.faults.append((key, shape))
            if kept is not None:
                lines.append(f"{key.replace('_', ' ')}: {kept}")
        return lines

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        """Structured pass for the ``lanes`` policy (it refers to IDs by role, as instructed)."""
        previous = request.previous
        text_in = previous.render() + "\n" + "\n".join(e.render() for e in request.turns)
        fact_lines = self._fact_lines(text_in)
        carried = [line for line in previous.established if line.startswith("turn ")]
        new = [_gist(e, self.tracked, request.identifiers) for e in request.turns if e.kind is EntryKind.CALLER]
        return EpisodeSummary(
            established=fact_lines + (carried + new)[-MAX_NARRATIVE_LINES:],
            rejected=previous.rejected,
            decided=previous.decided,
            pending=previous.pending,
            commitments=previous.commitments,
        )

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        """Free-text pass for the ``rolling`` baseline: previous summary + what left the window."""
        text_in = previous + "\n" + "\n".join(e.render() for e in turns)
        fact_lines = self._fact_lines(text_in)
        # Damaged values from earlier passes stay in the narrative, as they would in a real summary.
        carried = [line for line in previous.splitlines() if line.startswith(("turn ", "noted: "))]
        for line in previous.splitlines():
            if ":" in line and not line.startswith(("turn ", "noted: ")) and not any(
                v in line for _, v in self._facts_in(line)
            ):
                carried.append("noted: " + line)
        new = [_gist(e, self.tracked) for e in turns if e.kind is EntryKind.CALLER]
        narrative = (carried + new)[-MAX_NARRATIVE_LINES:]
        return "\n".join(fact_lines + narrative)
