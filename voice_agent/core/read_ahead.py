"""Reading ahead: a small bounded store of work done on words before the turn that needs them opens.

The caller's words arrive twice: as an interim transcript while they are still speaking and, when they stop,
as the final. Work that is a pure function of the words (their dates, their spoken identifiers) can be done at
the interim, while nobody waits, and taken at the final. The key is everything the work reads, so a final
that differs in any of it (other words, another reference date, another question before it) finds nothing
and is read as if nothing had been read ahead.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

READ_AHEAD_ENTRIES = 4
"""Reads kept per call: the last few interims of the utterance in progress (older ones are never its final)."""


class ReadAhead(Generic[K, V]):
    """The last few reads done ahead, by key; taking one removes it.

    Args:
        capacity: Most reads kept; putting one more drops the oldest.

    Raises:
        ValueError: When ``capacity`` is below 1.
    """

    def __init__(self, capacity: int = READ_AHEAD_ENTRIES) -> None:
        if capacity < 1:
            raise ValueError(f"a read-ahead holds at least one read, not {capacity}")
        self.capacity = capacity
        self._reads: OrderedDict[K, V] = OrderedDict()
        self.hits = 0
        """Reads taken (the turn did not do the work)."""
        self.misses = 0
        """Takes that found nothing (the final differed from every interim read, or none was read)."""

    def __len__(self) -> int:
        return len(self._reads)

    def __contains__(self, key: object) -> bool:
        return key in self._reads

    def put(self, key: K, value: V) -> None:
        """Keeps ``value`` as the read of ``key``, the newest; the oldest goes beyond ``capacity``."""
        self._reads[key] = value
        self._reads.move_to_end(key)
        while len(self._reads) > self.capacity:
            self._reads.popitem(last=False)

    def take(self, key: K) -> V | None:
        """The read of ``key``, removed from the store, or None when it was not read ahead."""
        value = self._reads.pop(key, None)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value
