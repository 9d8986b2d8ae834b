"""The KNOWN FACTS size measurement reads exactly the block, and nothing when there is none."""

from __future__ import annotations

from voice_agent.core.assembler import KNOWN_FACTS_HEADER, AssembledContext
from voice_agent.core.tokens import estimate_tokens
from voice_agent.harness.evaluation.replay import known_facts_tokens


def test_the_block_is_counted_alone() -> None:
    block = f"{KNOWN_FACTS_HEADER}\n- account: ACC-4729-18"
    context = AssembledContext.from_lanes({
        "system": [{"role": "system", "content": "You are a billing agent. " * 40}],
        "known_facts": [{"role": "system", "content": block}],
        "recent": [{"role": "user", "content": "hello " * 50}],
    })
    assert known_facts_tokens(context) == estimate_tokens(block)


def test_no_block_counts_zero() -> None:
    context = AssembledContext.from_lanes({"recent": [{"role": "user", "content": "KNOWN FACTS are not here"}]})
    assert known_facts_tokens(context) == 0
