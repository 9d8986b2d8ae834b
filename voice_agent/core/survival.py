"""Survival arithmetic for facts carried through lossy summary passes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Survival:
    """What per-pass retention ``retention`` does over ``rewrites`` passes to ``facts`` facts.

    Attributes:
        retention: Per-pass retention r, in [0, 1].
        rewrites: Number of passes n.
        facts: Number of independent facts N.
        capture: Probability the first pass (the one that receives the fact) takes it in, when it differs
            from r; None: the first pass is like any other (r^n). A real summarizer loses facts mostly
            there and then copies what it kept (DESIGN 4b), so survival is c * r^(n-1).
    """

    retention: float
    rewrites: int
    facts: int = 1
    capture: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.retention <= 1.0:
            raise ValueError(f"retention must lie in [0, 1], got {self.retention}")
        if self.capture is not None and not 0.0 <= self.capture <= 1.0:
            raise ValueError(f"capture must lie in [0, 1], got {self.capture}")
        if self.rewrites < 0 or self.facts < 1:
            raise ValueError("rewrites must be >= 0 and facts >= 1")

    @property
    def survival(self) -> float:
        """Probability one fact survives: r^n, or c * r^(n-1) with a separate capture c."""
        if self.capture is None or self.rewrites == 0:
            return float(self.retention**self.rewrites)
        return float(self.capture * self.retention ** (self.rewrites - 1))

    @property
    def expected_facts(self) -> float:
        """Expected number of the N facts kept (independent of correlation)."""
        return self.facts * self.survival

    @property
    def all_facts(self) -> float:
        """Probability all N are kept, if drops are independent (a floor otherwise)."""
        return float(self.survival**self.facts)
