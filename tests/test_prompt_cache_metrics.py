"""The prompt-cache figures of scripts/bench_cache.py, each shown to move when the bad thing happens."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from voice_agent.harness.evaluation.prompt_cache import CHARS_PER_TOKEN, Request, cost_of, request_of, shared

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"description": "x" * 5000}}}]


def turn(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"caller line {n} " + "words " * 40},
            {"role": "assistant", "content": f"agent line {n} " + "reply " * 40}]


def appending_call(turns: int, head: str = "FACTS") -> list[Request]:
    """Each request appends a turn; the tail (one message) changes every time; the prefix never does."""
    history: list[dict[str, str]] = [{"role": "developer", "content": head}]
    out = []
    for n in range(turns):
        history += turn(n)
        stable = len(history)
        out.append(request_of(TOOLS, "SYS", [*history, {"role": "developer", "content": f"tail {n}"}], stable))
    return out


def moving_call(turns: int) -> list[Request]:
    """The same turns, but a message near the start changes on every request (the previous layout's facts)."""
    history: list[dict[str, str]] = []
    out = []
    for n in range(turns):
        history += turn(n)
        out.append(request_of(TOOLS, "SYS", [{"role": "developer", "content": f"FACTS as of {n}"}, *history], None))
    return out


@given(st.text("ab", max_size=30), st.text("ab", max_size=30))
def test_shared_is_the_common_prefix(a: str, b: str) -> None:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert shared(a, b) == n


def test_a_request_that_only_appends_shares_almost_all_and_breaks_nothing() -> None:
    good = cost_of(appending_call(30))
    bad = cost_of(moving_call(30))
    assert good.share > 0.9 and good.breaks == 0
    # Every request re-sends nearly everything (the first few are within the 512-token slack of a break).
    assert bad.share < 0.5 and bad.breaks >= 25
    assert bad.uncached_openai > 5 * good.uncached_openai
    for table in good.cost:
        assert bad.cost[table] > good.cost[table], table


def test_openai_caches_nothing_below_1024_tokens_and_in_128_token_steps() -> None:
    small = [Request("x" * 1000 * CHARS_PER_TOKEN, []), Request("x" * 1000 * CHARS_PER_TOKEN + "y" * 400, [])]
    assert cost_of(small).uncached_openai == 1000 + 1100  # a 1,000-token prefix is below OpenAI's minimum
    big = [Request("x" * 1200 * CHARS_PER_TOKEN, []), Request("x" * 1200 * CHARS_PER_TOKEN + "y" * 400, [])]
    # 1,200 shared tokens: 1,152 cached (9 steps of 128), 48 + 100 new ones uncached.
    assert cost_of(big).uncached_openai == 1200 + 148


def test_anthropic_reads_only_what_a_breakpoint_wrote_before() -> None:
    text = "x" * 2000 * CHARS_PER_TOKEN
    marked = [Request(text + str(n), [len(text)]) for n in range(5)]
    unmarked = [Request(text + str(n), []) for n in range(5)]
    # Marked: written once (1.25x), read four times (0.1x); unmarked: every request at the full price.
    assert abs(cost_of(marked).cost["sonnet-4"] - (2000 * 3.75 + 4 * 2000 * 0.30) / 1e6) < 1e-5
    assert abs(cost_of(unmarked).cost["sonnet-4"] - 5 * 2000 * 3.00 / 1e6) < 1e-5
    # A breakpoint that moves to where no earlier request wrote pays the write again.
    moving = [Request("z" * n + text, [len(text) + n]) for n in range(5)]
    assert cost_of(moving).cost["sonnet-4"] > cost_of(marked).cost["sonnet-4"] * 2


def test_ours_marks_the_end_of_the_stable_prefix_pipecats_the_system_prompt_and_the_last_two_user_messages() -> None:
    messages = [*turn(1), *turn(2), {"role": "developer", "content": "tail"}]
    ours = request_of(TOOLS, "SYS", messages, stable=4)
    pipecats = request_of(TOOLS, "SYS", messages, stable=None)
    assert ours.text == pipecats.text
    assert ours.breakpoints == [ours.text.index('{"content": "tail"')]
    system_end = ours.text.index("SYS\n") + len("SYS\n")
    assert len(pipecats.breakpoints) == 3 and pipecats.breakpoints[0] == system_end
    assert pipecats.breakpoints[2] < ours.breakpoints[0]
    # With a part no pass changes (``fixed`` messages), ours marks its end too.
    both = request_of(TOOLS, "SYS", messages, stable=4, fixed=1)
    assert both.breakpoints == [ours.text.index('{"content": "agent line 1'), ours.breakpoints[0]]


def test_a_breakpoint_before_what_a_pass_rewrites_is_read_back_after_the_pass() -> None:
    """After a pass the request starts the same up to the end of the fixed part: with a breakpoint there, Anthropic
    reads that part back instead of writing it again; OpenAI's rule does not depend on breakpoints."""
    fixed = [{"role": "developer", "content": "RULES " * 300}]

    def call(mark_fixed: bool) -> list[Request]:
        out = []
        for n in range(6):
            facts = [{"role": "developer", "content": f"FACTS as of pass {n // 3}"}]  # a pass every third request
            messages = [*fixed, *facts, *turn(n), {"role": "developer", "content": "tail"}]
            out.append(request_of(TOOLS, "SYS", messages, stable=4, fixed=1 if mark_fixed else 0))
        return out

    marked, unmarked = cost_of(call(True)), cost_of(call(False))
    assert marked.cost["sonnet-4"] < unmarked.cost["sonnet-4"]
    assert marked.cost["gpt-4.1"] == unmarked.cost["gpt-4.1"]
