"""The offline default summarizer: deterministic, extractive, honest about what it keeps.

It runs no model and knows nothing of any scenario. Each pass sorts the turns that
left the window into the five sections (:mod:`voice_agent.summarizers.sections`),
appends them to the previous summary and keeps the newest ``max_lines`` lines of each
section, each clipped to ``max_words`` words. What it loses, it loses for a reason a
reader can predict (old lines fall off, long lines are clipped), never at random and
never on purpose. Identifier values are turned into ledger roles by the lanes policy
after every pass (:func:`voice_agent.core.role_scrub.scrub_summary`), as for any summarizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from voice_agent.core.summary import Commitment, EpisodeSummary, RejectedItem, SummaryRequest
from voice_agent.core.transcript import TranscriptEntry
from voice_agent.summarizers.sections import classify

SECTION_TITLES = ("Established", "Rejected", "Decided", "Pending", "Commitments")


@dataclass(frozen=True)
class ExtractiveConfig:
    """Limits of the extractive summarizer.

    Attributes:
        max_lines: Newest lines kept per section.
        max_words: Words kept per line.
    """

    max_lines: int = 12
    max_words: int = 30

    def __post_init__(self) -> None:
        if self.max_lines < 1 or self.max_words < 1:
            raise ValueError("max_lines and max_words must be at least 1")


class ExtractiveSummarizer:
    """Serves the structured summary of ``lanes`` and the free text of ``rolling`` alike.

    Args:
        config: Line and word limits.
    """

    def __init__(self, config: ExtractiveConfig | None = None) -> None:
        self.config = config or ExtractiveConfig()

    def _clip(self, text: str) -> str:
        words = text.split()
        if len(words) <= self.config.max_words:
            return text
        return " ".join(words[: self.config.max_words]) + " ..."

    def _newest(self, lines: Sequence[str]) -> list[str]:
        return [self._clip(line) for line in lines[-self.config.max_lines :]]  # only the lines kept are clipped

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        """Structured pass: previous summary plus the sections of the turns that left the window."""
        previous, new = request.previous, classify(request.turns)
        rejected = [*previous.rejected, *new.rejected][-self.config.max_lines :]
        commitments = [*previous.commitments, *new.commitments][-self.config.max_lines :]
        return EpisodeSummary(
            established=self._newest([*previous.established, *new.established]),
            rejected=[RejectedItem(item=self._clip(r.item), reason=self._clip(r.reason)) for r in rejected],
            decided=self._newest([*previous.decided, *new.decided]),
            pending=self._newest([*previous.pending, *new.pending]),
            commitments=[Commitment(text=self._clip(c.text), turn=c.turn) for c in commitments],
        )

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        """Free-text pass for ``rolling``: the same sections, as text, regenerated from the previous text."""
        old = parse_text_summary(previous)
        request = SummaryRequest(previous=old, turns=turns, ledger_roles=(), slot_names=(), regeneration_turn=0)
        return (await self.summarize(request)).render()


def parse_text_summary(text: str) -> EpisodeSummary:
    """Reads back a summary rendered by :meth:`EpisodeSummary.render` (the rolling policy keeps only text).

    Lines under an unknown heading, or before any heading, count as established.
    """
    sections: dict[str, list[str]] = {title: [] for title in SECTION_TITLES}
    current = "Established"
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.endswith(":") and line[:-1] in sections:
            current = line[:-1]
            continue
        sections[current].append(line[2:] if line.startswith("- ") else line)
    rejected = []
    for line in sections["Rejected"]:
        item, sep, reason = line.rpartition(" (because ")
        rejected.append(RejectedItem(item=item, reason=reason.rstrip(")")) if sep else
                        RejectedItem(item=line, reason="the caller ruled it out"))
    commitments = []
    for line in sections["Commitments"]:
        head, sep, quoted = line.partition(': "')
        turn = head.removeprefix("turn ")
        if sep and turn.isdigit():
            commitments.append(Commitment(text=quoted.rstrip('"'), turn=int(turn)))
        else:
            commitments.append(Commitment(text=line, turn=0))
    return EpisodeSummary(
        established=sections["Established"], rejected=rejected, decided=sections["Decided"],
        pending=sections["Pending"], commitments=commitments,
    )
