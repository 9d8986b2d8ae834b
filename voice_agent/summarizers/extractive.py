"""The offline default summarizer: deterministic, extractive, honest about what it keeps.

It runs no model and knows nothing of any scenario. Each pass sorts the turns that
left the window into the five sections (:mod:`voice_agent.summarizers.sections`),
appends them to the previous summary and keeps ``max_lines`` lines of each section: when
a section is over, the caller's questions go first (small talk the call answered), then
the oldest lines. The agent's lines are clipped to ``max_words`` words; the caller's are
kept whole, however long (a fact cut off mid-sentence is a fact lost). What it loses, it
loses for a reason a reader can predict, never at random and never on purpose.
Identifier values are turned into ledger roles by the lanes policy after every pass
(:func:`voice_agent.core.role_scrub.scrub_summary`), as for any summarizer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from voice_agent.core.summary import Commitment, EpisodeSummary, RejectedItem, SummaryRequest
from voice_agent.core.summary_budget import is_question
from voice_agent.core.transcript import TranscriptEntry
from voice_agent.settings import SummarizerConfig
from voice_agent.summarizers.sections import classify

SECTION_TITLES = ("Established", "Rejected", "Decided", "Pending", "Commitments")
_CALLER_LINE = re.compile(r"^turn \d+: caller (?:said|asked): ")


def _caller_question(line: str) -> bool:
    """Whether ``line`` holds a caller's words that only ask something."""
    match = _CALLER_LINE.match(line)
    return match is not None and is_question(line[match.end():])


class ExtractiveSummarizer:
    """Serves the structured summary of ``lanes`` and the free text of ``rolling`` alike.

    Args:
        config: The ``summarizer`` settings section; this summarizer reads its ``max_lines`` (lines kept per
            section: the caller's questions leave first, then the oldest lines) and ``max_words`` (words kept per
            agent line; the caller's lines are kept whole).
    """

    def __init__(self, config: SummarizerConfig | None = None) -> None:
        self.config = config or SummarizerConfig()

    def _clip(self, text: str) -> str:
        words = text.split()
        if len(words) <= self.config.max_words or _CALLER_LINE.match(text):
            return text
        return " ".join(words[: self.config.max_words]) + " ..."

    def _kept(self, lines: Sequence[str]) -> list[str]:
        """``max_lines`` of ``lines`` in order: the caller's questions leave first, then the oldest lines."""
        over = len(lines) - self.config.max_lines
        if over <= 0:
            return [self._clip(line) for line in lines]
        questions = [i for i, line in enumerate(lines) if _caller_question(line)]
        gone = set(questions[:over])
        rest = [i for i in range(len(lines)) if i not in gone]
        rest = rest[len(rest) - self.config.max_lines:]
        return [self._clip(lines[i]) for i in rest]  # only the lines kept are clipped

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        """Structured pass: previous summary plus the sections of the turns that left the window."""
        previous, new = request.previous, classify(request.turns)
        rejected = [*previous.rejected, *new.rejected][-self.config.max_lines :]
        commitments = [*previous.commitments, *new.commitments][-self.config.max_lines :]
        return EpisodeSummary(
            established=self._kept([*previous.established, *new.established]),
            rejected=rejected,  # the caller's rulings, kept whole
            decided=self._kept([*previous.decided, *new.decided]),
            pending=self._kept([*previous.pending, *new.pending]),
            commitments=[Commitment(text=self._clip(c.text), turn=c.turn) for c in commitments],
        )

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        """Free-text pass for ``rolling``: the same sections, as text, rewritten from the previous text."""
        old = parse_text_summary(previous)
        request = SummaryRequest(previous=old, turns=turns, ledger_roles=(), slot_names=(), pass_turn=0)
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
                        RejectedItem(item=line, reason=""))  # a ruling kept whole says why itself
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
