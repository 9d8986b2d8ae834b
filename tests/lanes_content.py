"""Comparing a live call's request with one built from scratch (a restored call, a fresh policy).

The live request keeps, in its cached prefix, the KNOWN FACTS lines of the last summary pass and puts the lines
learnt since in its tail; a build from scratch has no pass behind it and shows them all in one block. Both must
hold the same turns, summary and rules, and every current fact line.
"""

from __future__ import annotations

from typing import Any


def fact_lines(messages: list[Any]) -> tuple[list[Any], list[str], list[str]]:
    """(the messages other than KNOWN FACTS, the fact lines of the first KNOWN FACTS block, those of the rest)."""
    blocks = [str(m["content"]).splitlines() for m in messages if str(m.get("content") or "").startswith("KNOWN")]
    lines = [[line for line in block if line.startswith("- ")] for block in blocks]
    others = [m for m in messages if not str(m.get("content") or "").startswith("KNOWN")]
    return others, lines[0] if lines else [], [line for block in lines[1:] for line in block]


def assert_same_content(live: list[Any], fresh: list[Any]) -> None:
    """The live request holds what a build from scratch holds: the same turns, summary and rules, every current
    fact line (in the prefix or in the tail), and in the tail only current fact lines.

    The live prefix keeps the fact lines of the last summary pass (the cache's view); a fresh build, with no
    pass behind it, has all of them in one block.
    """
    live_others, live_prefix, live_tail = fact_lines(live)
    fresh_others, fresh_facts, fresh_tail = fact_lines(fresh)
    assert live_others == fresh_others and not fresh_tail
    assert set(fresh_facts) <= set(live_prefix) | set(live_tail)
    assert set(live_tail) <= set(fresh_facts)
