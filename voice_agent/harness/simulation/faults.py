"""The four ways a summary loses a value (DESIGN section 1), applied with a seeded RNG (simulation only)."""

from __future__ import annotations

import random
import string
from enum import StrEnum


class FaultShape(StrEnum):
    """Observed failure shapes of a value inside a summary a pass wrote."""

    DROP = "drop"
    GENERALISE = "generalise"
    TRUNCATE = "truncate"
    MUTATE = "mutate"


def mutate_one_character(value: str, rng: random.Random) -> str:
    """Changes one letter or digit to another of the same class: it still passes format checks."""
    positions = [i for i, c in enumerate(value) if c.isalnum()]
    if not positions:
        return value + "?"
    i = rng.choice(positions)
    pool = string.digits if value[i].isdigit() else (
        string.ascii_uppercase if value[i].isupper() else string.ascii_lowercase)
    replacement = rng.choice([c for c in pool if c != value[i]])
    return value[:i] + replacement + value[i + 1 :]


def truncate(value: str) -> str:
    """Keeps roughly the first two thirds and marks the cut, like "ord_8F3k..."."""
    keep = max(1, (2 * len(value)) // 3)
    return value[:keep] + "..."


def damage(value: str, key: str, shape: FaultShape, rng: random.Random) -> str | None:
    """The text a summary carries instead of ``value``; None when the value is dropped."""
    if shape is FaultShape.DROP:
        return None
    if shape is FaultShape.GENERALISE:
        return "one of the details the caller gave"  # never the scoring key: the model reads this
    if shape is FaultShape.TRUNCATE:
        return truncate(value)
    return mutate_one_character(value, rng)


def carry(value: str, key: str, retention: float, rng: random.Random) -> tuple[str | None, FaultShape | None]:
    """One pass over one value: kept verbatim with probability ``retention``."""
    if rng.random() < retention:
        return value, None
    shape = rng.choice(list(FaultShape))
    return damage(value, key, shape, rng), shape
