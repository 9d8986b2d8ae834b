"""Comparing a live call's request with one built from scratch (a restored call, a fresh policy).

The live request keeps, in its cached prefix, the KNOWN FACTS lines of the last summary pass and puts the lines
learnt since in its tail; a build from scratch has no pass behind it and shows them all in one block. Both must
hold the same turns, summary and rules, and every current fact line.
"""

from __future__ import annotations

import re
from typing import Any

FACT = re.compile(r"^- (?P<name>.+?)(?: \(turn \d+\))?: (?P<value>.*)$", re.S)


def fact_lines(messages: list[Any]) -> tuple[list[Any], list[str], list[str]]:
    """(the messages other than KNOWN FACTS, the fact lines of the first KNOWN FACTS block, those of the rest)."""
    blocks = [str(m["content"]).splitlines() for m in messages if str(m.get("content") or "").startswith("KNOWN")]
    lines = [[line for line in block if line.startswith("- ")] for block in blocks]
    others = [m for m in messages if not str(m.get("content") or "").startswith("KNOWN")]
    return others, lines[0] if lines else [], [line for block in lines[1:] for line in block]


def values(line: str) -> list[str]:
    """The exact values a KNOWN FACTS line states (each quoted item of a caller quote)."""
    match = FACT.match(line)
    assert match is not None, line
    value = match["value"]
    return value[1:-1].split('"; "') if len(value) > 1 and value[0] == value[-1] == '"' else [value]


def message_text(messages: list[Any]) -> str:
    """Every message's text and tool-call arguments, KNOWN FACTS blocks left out."""
    parts = []
    for m in messages:
        parts.append(str(m.get("content") or ""))
        parts += [call["function"]["arguments"] for call in m.get("tool_calls") or []]
    return "\n".join(parts)


def assert_same_content(live: list[Any], fresh: list[Any]) -> None:
    """The live request holds what a build from scratch holds: the same turns, summary and rules, every current
    fact (a line in the prefix or in the tail, or, for a fact new since the pass, its every value verbatim in
    another message), and in the tail only current fact lines.

    The live prefix keeps the fact lines of the last summary pass (the cache's view); a fresh build, with no
    pass behind it, has all of them in one block.
    """
    live_others, live_prefix, live_tail = fact_lines(live)
    fresh_others, fresh_facts, fresh_tail = fact_lines(fresh)
    assert live_others == fresh_others and not fresh_tail
    above = message_text(live_others)
    for line in set(fresh_facts) - set(live_prefix) - set(live_tail):
        assert all(v and v in above for v in values(line)), f"{line!r}: not in KNOWN FACTS nor verbatim above"
    assert set(live_tail) <= set(fresh_facts)
