"""A seeded fault model over a real summarizer, with a known per-pass retention R (simulation only).

It wraps an honest summarizer (by default the extractive one, roomy enough that it
loses nothing on its own in a scripted call) and, at every pass, decides the fate of
each tracked fact that reaches the pass: with probability R the form the summary
carries is kept, otherwise it is damaged (dropped, generalised, truncated or mutated,
DESIGN section 1). A damaged form persists in later summaries until a later pass
damages it again; a caller restating the fact brings the true value back. The same
model, with the same state, serves the structured summary of ``lanes`` and the free
text of ``rolling``: what differs between policies is what the call keeps outside
the summary, never how the summary is damaged.

The fate of a fact at a pass depends only on the seed, the fact and how many passes it has
reached before (its own random stream), not on the other facts: under ``lanes`` an identifier
leaves the summary for the ledger (it stops reaching passes), and a shared stream would then deal
the prose facts other fates than under ``rolling``. With one stream per fact, the same seed damages
each fact the same way under every policy, so a policy is compared with another on the same luck.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.transcript import TranscriptEntry
from voice_agent.harness.simulation.faults import FaultShape, carry
from voice_agent.policies.base import PolicySummarizer
from voice_agent.settings import SummarizerConfig
from voice_agent.summarizers.extractive import ExtractiveSummarizer

ROOMY = SummarizerConfig(max_lines=200, max_words=80)
"""Base limits under the fault model: loss comes from the faults alone, so R is the whole story."""


def flat_tracked(forms: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Fact key -> forms, flattened so the fault model follows each form apart: ``key``, ``key#2``, ..."""
    return {(key if i == 0 else f"{key}#{i + 1}"): form for key, fs in forms.items() for i, form in enumerate(fs)}


class FaultInjectingSummarizer:
    """A summarizer whose per-pass retention over ``tracked`` facts is ``retention``.

    Args:
        retention: Probability R that a fact's carried form survives one pass unchanged, in [0, 1].
        tracked: Fact key -> exact value, the facts whose fate is simulated.
        seed: Seeds the RNG, so a run is reproducible.
        base: The summarizer whose output is damaged; the roomy extractive one by default.
        capture: Probability that the first pass a fact reaches takes it in, when measured apart from R
            (a real summarizer loses most at capture, DESIGN 4b); None: R, as at every pass.
    """

    def __init__(
        self, retention: float, tracked: Mapping[str, str], seed: int = 0, base: PolicySummarizer | None = None,
        capture: float | None = None,
    ) -> None:
        if not 0.0 <= retention <= 1.0:
            raise ValueError(f"retention must lie in [0, 1], got {retention}")
        if capture is not None and not 0.0 <= capture <= 1.0:
            raise ValueError(f"capture must lie in [0, 1], got {capture}")
        self.retention = retention
        self.capture = capture
        self.tracked = {k: v for k, v in tracked.items() if v}
        self.seed = seed
        self.passes: dict[str, int] = {}
        """Fact key -> passes it has reached so far (its stream's position)."""
        self.base: PolicySummarizer = base or ExtractiveSummarizer(ROOMY)
        self.carried: dict[str, str | None] = {}
        """Fact key -> the form the summary carries now (None: dropped)."""
        self.faults: list[tuple[str, FaultShape]] = []

    def _fates(self, previous: str, new: str) -> list[tuple[str, str | None, str | None]]:
        """One pass over the facts: (true value, form carried before, form carried after) per fact in play."""
        fates = []
        for key, value in self.tracked.items():
            before = self.carried.get(key)
            fresh = value in new
            if not fresh and (before is None or before not in previous):
                continue  # the fact does not reach this pass
            current = value if fresh else before
            assert current is not None
            first = key not in self.carried  # the first pass this fact reaches: capture
            chance = self.capture if first and self.capture is not None else self.retention
            n = self.passes.get(key, 0)
            self.passes[key] = n + 1
            kept, shape = carry(current, key, chance, self._stream(key, n))
            if shape is not None:
                self.faults.append((key, shape))
            self.carried[key] = kept
            fates.append((value, before, kept))
        return fates

    def _stream(self, key: str, n: int) -> random.Random:
        """The random stream of ``key``'s ``n``-th pass: a function of the seed, the fact and ``n`` alone."""
        return random.Random(f"{self.seed}:{key}:{n}")  # str seeds hash with SHA-512: the same in every process

    @staticmethod
    def _rewrite(fates: Sequence[tuple[str, str | None, str | None]]) -> Callable[[str], str]:
        def apply(text: str) -> str:
            for value, before, after in fates:
                for old in {value, before} - {None, after}:
                    assert old is not None
                    text = text.replace(old, after or "")
            return text

        return apply

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        """Structured pass (``lanes``): the base summary, with the tracked facts' fates applied."""
        new = "\n".join(e.render() for e in request.turns)
        fates = self._fates(request.previous.render(), new)
        summary = await self.base.summarize(request)
        return summary.map_text(self._rewrite(fates))

    async def summarize_text(self, previous: str, turns: Sequence[TranscriptEntry]) -> str:
        """Free-text pass (``rolling``): the same fates, applied to the base text summary."""
        fates = self._fates(previous, "\n".join(e.render() for e in turns))
        return self._rewrite(fates)(await self.base.summarize_text(previous, turns))
