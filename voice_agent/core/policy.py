"""The context policy: which turns stay raw, when a summary pass runs.

One implementation (:class:`PolicyTracker`) drives both the live trigger in a call
and the calculator (:func:`rewrite_schedule`), so what the calculator predicts is
what a call does.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from enum import StrEnum


class PolicyError(ValueError):
    """Invalid policy parameters."""


class Trigger(StrEnum):
    """What decides when a summary pass runs.

    ``cadence``: every S turns (the calculator's model). ``threshold``: pipecat's built-in rule (20 unsummarized
    messages or 8000 tokens, keep the last 4 messages). ``reference``: when enough older turns are no longer
    referred to by the recent ones (:mod:`voice_agent.core.pass_trigger`).
    """

    CADENCE = "cadence"
    THRESHOLD = "threshold"
    REFERENCE = "reference"


@dataclass(frozen=True)
class ContextPolicy:
    """Keep ``keep`` turns raw; run a summary pass every ``every`` turns.

    Turns are numbered from 1. At the start of turn m the raw window holds turns
    m-keep .. m-1. When m is a multiple of ``every`` (or, with a token threshold,
    when the assembled context reached ``max_context_tokens``), the summarizer runs
    and receives the previous summary plus every not yet summarized turn u <= m-keep-1.

    With ``trigger`` other than ``cadence`` the schedule is decided by
    :mod:`voice_agent.core.pass_trigger` instead; K then bounds how far back "the recent turns" reach
    (``reference``), and ``floor`` turns are never summarized.

    Args:
        keep: K, the number of recent turns that are never summarized (>= 1).
        every: S, the pass cadence in turns (>= 1).
        max_context_tokens: Optional token-threshold trigger (>= 1), in addition to the cadence.
        trigger: ``cadence``, ``threshold`` or ``reference``.
        floor: ``reference``: the last turns always kept raw, referred to or not (>= 1).
        batch: ``reference``: unreferenced turns waiting before a pass runs (each pass is a model call; >= 1).
        cache_price: ``reference``: the price of a cached input token as a share of an uncached one (0.25 for
            gpt-4.1, 0.5 for gpt-4o, 0.1 for Anthropic's cache reads). Set, a pass also waits until it pays for
            itself: until carrying the turns it would fold, cached, on every request since the last pass has cost
            as much as the cache the pass breaks (the request after it is sent uncached once). None: ``batch`` only.
    """

    keep: int = 6
    every: int = 5
    max_context_tokens: int | None = None
    trigger: Trigger = Trigger.CADENCE
    floor: int = 1
    batch: int = 6
    cache_price: float | None = None

    def __post_init__(self) -> None:
        if self.keep < 1:
            raise PolicyError(f"keep (K) must be at least 1, got {self.keep}")
        if self.every < 1:
            raise PolicyError(f"every (S) must be at least 1, got {self.every}")
        if self.max_context_tokens is not None and self.max_context_tokens < 1:
            raise PolicyError(f"max_context_tokens must be at least 1, got {self.max_context_tokens}")
        try:
            object.__setattr__(self, "trigger", Trigger(self.trigger))
        except ValueError:
            raise PolicyError(
                f"trigger takes {', '.join(t.value for t in Trigger)}, got {self.trigger!r}"
            ) from None
        if self.floor < 1:
            raise PolicyError(f"floor must be at least 1, got {self.floor}")
        if self.batch < 1:
            raise PolicyError(f"batch must be at least 1, got {self.batch}")
        if self.cache_price is not None and not 0.0 < self.cache_price < 1.0:
            raise PolicyError(f"cache_price must lie strictly between 0 and 1, got {self.cache_price}")
        if self.cache_price is not None and self.trigger is not Trigger.REFERENCE:
            raise PolicyError(f"cache_price prices the reference trigger's passes; trigger is {self.trigger.value}")

    def window_start(self, turn: int) -> int:
        """First turn of the raw window at the start of ``turn``.

        Under a trigger other than ``cadence`` only the last ``floor`` turns (``reference``) or the last
        turn (``threshold``, which keeps messages, not turns) are guaranteed raw.
        """
        if self.trigger is Trigger.REFERENCE:
            return max(1, turn - self.floor)
        if self.trigger is Trigger.THRESHOLD:
            return max(1, turn - 1)
        return max(1, turn - self.keep)

    def summarizable_through(self, turn: int) -> int:
        """Highest turn a pass at the start of ``turn`` may receive (m-K-1)."""
        return turn - self.keep - 1

    def triggers(self, turn: int, context_tokens: int | None = None) -> bool:
        """Whether a pass is due at the start of ``turn``."""
        if turn % self.every == 0:
            return True
        return (
            self.max_context_tokens is not None
            and context_tokens is not None
            and context_tokens >= self.max_context_tokens
        )


@dataclass(frozen=True)
class ScheduledPass:
    """One summary pass: it runs at the start of ``turn`` and receives turns ``first..last``.

    A ``reference`` pass may skip turns in that range that are still referred to: then ``turns`` lists
    exactly the turns it receives (empty: all of ``first..last``).
    """

    turn: int
    first: int
    last: int
    turns: tuple[int, ...] = ()

    def folds(self, turn: int) -> bool:
        """Whether this pass receives ``turn``."""
        if self.turns:
            return turn in self.turns
        return self.first <= turn <= self.last


@dataclass
class PolicyTracker:
    """Live state of a policy within one call: what has been summarized so far.

    Plain data (ints and a tuple of ints), so a call's state can be stored and restored.

    Attributes:
        policy: The policy.
        summarized_through: Every turn up to here was handed to a pass, except those in ``held``.
        held: Turns up to ``summarized_through`` kept raw because the recent turns still refer to them
            (``reference`` only), oldest first.
    """

    policy: ContextPolicy
    summarized_through: int = 0
    held: tuple[int, ...] = ()

    def on_turn_start(self, turn: int, context_tokens: int | None = None) -> ScheduledPass | None:
        """Returns the pass to run at the start of ``turn``, or None.

        A pass runs only when triggered and there is at least one turn that left the
        window unsummarized; with nothing new there is nothing to rewrite.
        """
        if not self.policy.triggers(turn, context_tokens):
            return None
        last = self.policy.summarizable_through(turn)
        if last <= self.summarized_through:
            return None
        scheduled = ScheduledPass(turn=turn, first=self.summarized_through + 1, last=last)
        self.summarized_through = last
        return scheduled

    def raw_from(self, turn: int) -> int:
        """First turn kept verbatim during ``turn``: everything not yet summarized.

        That is never later than the K-turn window, so the last K turns are always raw. Turns in
        :attr:`held` are raw too, though older.
        """
        return min(self.summarized_through + 1, self.policy.window_start(turn))

    def advance(self, scheduled: ScheduledPass, through: int, held: tuple[int, ...] = ()) -> None:
        """Records a pass a trigger other than the cadence scheduled.

        Args:
            scheduled: The pass (it receives its turns).
            through: Every turn up to here is now summarized or held.
            held: The turns up to ``through`` kept raw.
        """
        if through < self.summarized_through:
            raise PolicyError(f"summaries never go back: through={through} < {self.summarized_through}")
        self.summarized_through = through
        self.held = tuple(sorted(held))


@functools.lru_cache(maxsize=4096)
def cadence_passes(policy: ContextPolicy, through: int) -> tuple[ScheduledPass, ...]:
    """Every pass a cadence-driven call runs at the start of turns 1..``through``.

    Steps the same :class:`PolicyTracker` a live call uses (no token trigger here).
    """
    tracker = PolicyTracker(policy)
    passes = (tracker.on_turn_start(turn) for turn in range(1, through + 1))
    return tuple(p for p in passes if p is not None)


def rewrite_schedule(policy: ContextPolicy, stated: int, needed: int) -> list[int]:
    """Turns whose pass rewrites a fact stated on ``stated`` before it is needed.

    A pass rewrites the fact when it receives it (the fact's turn just left the window)
    or carries it (an earlier pass already folded it in): exactly the passes whose
    input reaches turn ``stated``.
    """
    if stated < 1 or needed < stated:
        raise PolicyError(f"need 1 <= stated <= needed, got stated={stated}, needed={needed}")
    lasts, turns = _pass_index(policy, needed)
    # Passes are ordered by turn and so by ``last``; the first reaching ``stated`` starts the run.
    return list(turns[bisect.bisect_left(lasts, stated) :])


@functools.lru_cache(maxsize=4096)
def _pass_index(policy: ContextPolicy, through: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    passes = cadence_passes(policy, through)
    return tuple(p.last for p in passes), tuple(p.turn for p in passes)


def closed_form_bound(policy: ContextPolicy, stated: int, needed: int) -> int:
    """The commonly quoted ceil((T-t-K)/S); an upper bound on the exact count."""
    return max(0, math.ceil((needed - stated - policy.keep) / policy.every))
