"""What a call's requests cost under an LLM vendor's prompt cache, judged from outside from the requests alone.

A request is its text in the order an LLM vendor reads it (tools, the system instruction, the messages) and the
character offsets of its Anthropic cache breakpoints. Tokens are characters / 4. Per call (:func:`cost_of`):

- ``share``: characters each request shares, as a prefix, with the request before it, over all characters;
- ``uncached_openai``: the input tokens OpenAI bills at the full price (a shared prefix of 1,024 tokens or more
  is cached, in 128-token steps);
- ``breaks``: requests that reuse less than the request before them minus its last 512 tokens;
- ``cost``: US dollars of input per price table of :data:`PRICES` (Anthropic: a prefix up to a breakpoint is
  cached from 1,024 tokens, written at its write price, read back by a later request that starts with it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4
OPENAI_MIN, OPENAI_STEP = 1024, 128
ANTHROPIC_MIN, ANTHROPIC_WRITE, ANTHROPIC_READ = 1024, 1.25, 0.1
BREAK_SLACK_TOKENS = 512

PRICES: dict[str, dict[str, float]] = {
    # US dollars per million input tokens, as the vendors published them (OpenAI: gpt-4.1 from April 2025,
    # gpt-4o from October 2024; Anthropic: Claude Sonnet 4 from May 2025, 5-minute cache). Not re-checked here.
    "gpt-4.1": {"input": 2.00, "cached": 0.50},
    "gpt-4o": {"input": 2.50, "cached": 1.25},
    "sonnet-4": {"input": 3.00, "write": 3.75, "read": 0.30},
}
CACHE_PRICE = {"gpt-4.1": 0.25, "gpt-4o": 0.5, "sonnet-4": 0.1}
"""``policy.cache_price`` that matches each table (a cached token's price over an uncached one's)."""
PRICES_DATED = "2025 list prices (see docs/benchmarks.md)"



@dataclass
class Request:
    """One captured request: its text as the vendor's cache sees it and where its cache breakpoints fall."""

    text: str
    breakpoints: list[int]


def request_of(
    tools: Any, system: str, messages: Sequence[dict[str, Any]], stable: int | None, fixed: int = 0
) -> Request:
    """The request as text in the order the vendor reads it; Anthropic breakpoints as character offsets.

    ``stable`` (ours): the end of the stable prefix, and the end of the first ``fixed`` messages (the part no pass
    changes) when it lies before. None: pipecat's own option (``enable_prompt_caching``), the end of the system
    prompt and the last two user messages.
    """
    head = json.dumps(tools, sort_keys=True) + "\n" + system + "\n"
    parts = [json.dumps(m, sort_keys=True) + "\n" for m in messages]
    ends, at = [], len(head)
    for part in parts:
        at += len(part)
        ends.append(at)
    if stable is not None:  # ours
        breakpoints = [ends[stable - 1]] if 0 < stable <= len(ends) else [len(head)]
        if 0 < fixed < stable <= len(ends):
            breakpoints.insert(0, ends[fixed - 1])
    else:  # pipecat's option
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"][-2:]
        breakpoints = [len(head)] + [ends[i] for i in users]
    return Request(head + "".join(parts), breakpoints)


def shared(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on equal prefixes: the requests are long
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class CallCost:
    """One call's figures."""

    requests: int = 0
    share: float = 0.0
    input_tokens: int = 0
    uncached_openai: int = 0
    breaks: int = 0
    cost: dict[str, float] = field(default_factory=dict)
    facts: str = ""


def cost_of(requests: Sequence[Request]) -> CallCost:
    """Prefix share, tokens and cost of a call's requests under every price table."""
    out = CallCost(requests=len(requests))
    shared_chars = total_chars = 0
    cached_openai = 0
    written: list[str] = []
    read = write = rest = 0.0
    previous = ""
    for request in requests:
        text = request.text
        common = shared(previous, text) if previous else 0
        shared_chars += common
        total_chars += len(text)
        tokens = len(text) / CHARS_PER_TOKEN
        common_tokens = common / CHARS_PER_TOKEN
        if previous and common < len(previous) - BREAK_SLACK_TOKENS * CHARS_PER_TOKEN:
            out.breaks += 1
        cached = (int(common_tokens) // OPENAI_STEP) * OPENAI_STEP if common_tokens >= OPENAI_MIN else 0
        cached_openai += cached
        out.uncached_openai += round(tokens - cached)
        last = max((b for b in request.breakpoints if b >= ANTHROPIC_MIN * CHARS_PER_TOKEN), default=0)
        # A cache is read only at a breakpoint: the longest prefix written before, up to this request's last one.
        hit = max((len(e) for e in written if len(e) <= last and text.startswith(e)), default=0)
        read += hit / CHARS_PER_TOKEN
        write += max(0, last - hit) / CHARS_PER_TOKEN
        rest += (len(text) - max(hit, last)) / CHARS_PER_TOKEN
        # Every prefix written stays readable (a later request may come back to it, e.g. once a turn's unused
        # knowledge is dropped), as Anthropic's cache keeps it for five minutes: a call's requests come sooner.
        written += [text[:b] for b in request.breakpoints if b >= ANTHROPIC_MIN * CHARS_PER_TOKEN]
        previous = text
    out.share = shared_chars / total_chars if total_chars else 0.0
    out.input_tokens = round(total_chars / CHARS_PER_TOKEN)
    for name, price in PRICES.items():
        if "cached" in price:
            dollars = (out.uncached_openai * price["input"] + cached_openai * price["cached"]) / 1e6
        else:
            dollars = (read * price["read"] + write * price["write"] + rest * price["input"]) / 1e6
        out.cost[name] = dollars
    return out
