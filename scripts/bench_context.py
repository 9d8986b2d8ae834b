"""Benchmarks the context stage: time of a live turn, and tokens per request against two baselines.

Run: .venv/bin/python scripts/bench_context.py [--samples 600] [--check]

Time: what a live lanes turn runs before its LLM request, the pipeline's context stage itself
(``ContextAssembly._assemble`` on pipecat's growing history: the caller messages not yet seen,
``CallSession.sync_caller_messages`` opening the turn and its summary pass when due,
``CallSession.assemble`` running ``LanesPolicy.build``: the caller-constraint lines from the date guard,
KNOWN FACTS, summary, recent turns, token counts) at turn 10, 100 and 1000 of one scripted call; p50/p99
and the turn-1000 / turn-10 ratio (targets: p99 < 1 ms at turn 1000, ratio <= 1.5), with the collector on
(the product's configuration: serve's settled heap, ``voice_agent.telephony.heap``) and, side by side, off.
On the turn: that context stage, after the caller's interim transcript with the final's words was read
ahead (``CallSession.read_ahead_caller``, as ``processors/caller_read_ahead.py`` does while the caller
speaks), so the turn takes the caller's dates and spoken identifiers instead of reading them. Off the turn,
in their own columns: that read-ahead, and ``record_agent`` (the reply's dates, read as it is heard). Side
by side: the turn when the final differs from the interim read ahead (the caller's words read on the turn).

Tokens: baselines, run side by side on the same scripted 120-turn call:
- full history: every message ever, never summarized;
- pipecat built-in: pipecat's own summarization util (trigger at 20 unsummarized messages
  or 8000 estimated tokens, keep the last 4 messages, the summary replaces the rest and is
  itself re-summarized next time);
- lanes (ours): system + KNOWN FACTS + structured summary + raw recent turns + constraints.
All three summaries are given the same size (the summary text a summarizer would return is
modelled as 2 KB) so only the policy differs.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import gc
import json
import random
import statistics
import sys
import time

from loguru import logger
from pipecat.frames.frames import LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.utils.context.llm_context_summarization import LLMContextSummarizationUtil

from processors.context_assembly import ContextAssembly
from voice_agent.call.session import CallSession
from voice_agent.core.assembler import AssemblerConfig, ContextAssembler, entries_to_messages
from voice_agent.core.call_state import CallState
from voice_agent.core.passes import PassScheduler
from voice_agent.core.policy import ContextPolicy
from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.core.tokens import estimate_message_tokens
from voice_agent.core.transcript import ToolOutcome
from voice_agent.domains.billing import billing_domain
from voice_agent.harness.stats import percentile
from voice_agent.settings import CallConfig, Settings
from voice_agent.summarizers.extractive import ExtractiveSummarizer
from voice_agent.telephony.heap import DEFAULT_YOUNG_THRESHOLD, settle_heap

SYSTEM = "You are a billing support agent on a phone call. Be brief, confirm values, never guess identifiers." * 2
SUMMARY_BYTES = 2048
CALLER = "Yes so about the charge from last month, I think it was {n}, can you check what happened there please"
AGENT = "I understand. Let me look at that for you. I can see the statement and the items from that period, one moment."
RESULT = {"status": "ok", "items": [{"invoice_id": "INV-2026-{n:04d}", "amount": "42.10", "state": "open"}] * 3}


class FixedSizeSummarizer:
    """Returns a summary of about SUMMARY_BYTES, as a real summarizer with a length budget would."""

    async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
        line = "caller discussed the disputed_invoice and the charge history in detail"
        return EpisodeSummary(established=[line] * (SUMMARY_BYTES // len(line)))


def scripted_turn(state: CallState, n: int) -> None:
    state.start_turn(CALLER.format(n=n))
    if n % 4 == 0:
        state.transcript.append_tool_call(state.turn, "get_invoice", f"call{n}", {"invoice_id": f"INV-2026-{n:04d}"})
        state.transcript.append_tool_result(state.turn, "get_invoice", f"call{n}", RESULT, ToolOutcome.COMPLETED)
    state.record_agent(AGENT)


def make_state(turns: int, ledger_entries: int = 20) -> CallState:
    state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(keep=6, every=5))
    for i in range(ledger_entries):
        state.ledger.record_from_tool(f"invoice_{i}", f"INV-2026-{i:04d}", 1, "list_invoices", "invoice_id")
    for n in range(1, turns + 1):
        scripted_turn(state, n)
        state.tracker.on_turn_start(state.turn)
    line = "the caller explained the disputed charge and what was already attempted"
    state.summary = EpisodeSummary(established=[line] * (SUMMARY_BYTES // len(line)))
    return state


LIMITS = {
    3: "I'm away until the 14th of December so nothing before then please",
    7: "and not on a Tuesday, I work Tuesdays",
    12: "I can't do the 18th either, I've got the dentist",
    20: "actually Tuesdays are fine now, my shifts changed",
    33: "oh and I'm not around after the 22nd, we go to my sister's",
}
"""Caller turns that state a limit; every other turn is billing talk without one."""


def live_caller_words(n: int, variant: int = 0) -> str:
    """Turn ``n``'s caller words; ``variant`` makes each timed sample new text (no extraction cache hit)."""
    return LIMITS.get(n, f"yes so about the charge of {n}.{variant:02d} pounds last month, can you check that one")


def live_agent_words(n: int, variant: int = 0) -> str:
    return f"Let me look at item {n} for you, reference {variant}, one moment."


def live_session() -> CallSession:
    """A served billing call (lanes policy, extractive summarizer inline, K=6, S=5)."""
    settings = Settings(call=CallConfig(reference_date=dt.date(2026, 11, 30)))
    return CallSession(billing_domain(), settings, ExtractiveSummarizer())


class LiveCall:
    """One served lanes call as its context stage sees it: the session and pipecat's own history.

    The history (``context``) grows as pipecat's aggregators grow it: the caller's words, the agent's reply,
    each tool call and its result. ``stage`` is the pipeline's context stage (``ContextAssembly``).
    """

    def __init__(self, session: CallSession, context: LLMContext) -> None:
        self.session = session
        self.context = context
        self.stage = ContextAssembly(session)

    def fork(self) -> LiveCall:
        """A deep copy of the call whose context stage has read the history as far as this one has."""
        session, context = copy.deepcopy((self.session, self.context), {id(self.session.domain): self.session.domain})
        return LiveCall(session, context)

    async def warm(self) -> None:
        """Lets a fork's new context stage read the history so far (as its original had), untimed."""
        await self.infer()

    async def infer(self) -> None:
        """One inference's context stage, exactly as the pipeline runs it (``ContextAssembly._assemble``)."""
        await self.stage._assemble(LLMContextFrame(context=self.context))

    def agent_said(self, text: str) -> float:
        """The reply heard: the turn log records it, the assistant aggregator adds it; returns the record's seconds."""
        t0 = time.perf_counter()
        self.session.record_agent(text)
        elapsed = time.perf_counter() - t0
        self.context.add_message({"role": "assistant", "content": text})
        return elapsed

    def caller_interim(self, n: int, variant: int = 0) -> float:
        """The caller still speaking: the interim transcript that will be the final, read ahead; returns its seconds.

        As ``CallerReadAhead`` does in the pipeline when the Whisper partial covering the segment arrives (it
        becomes the final with the same words, ``processors.whisper_interims``).
        """
        t0 = time.perf_counter()
        self.session.read_ahead_caller(live_caller_words(n, variant))
        return time.perf_counter() - t0

    async def caller_turn(self, n: int, variant: int = 0) -> tuple[float, float]:
        """Turn ``n``: the caller's final words reach the LLM; returns the context stage's wall and CPU seconds."""
        self.context.add_message({"role": "user", "content": live_caller_words(n, variant)})
        frame = LLMContextFrame(context=self.context)
        t0, c0 = time.perf_counter(), time.thread_time()
        await self.stage._assemble(frame)
        elapsed = time.perf_counter() - t0, time.thread_time() - c0
        if n in LIMITS:  # the model records the limit in the caller's words (untimed: the tool stage, not context)
            arguments = {"timing_constraint": LIMITS[n]}
            result = await self.session.execute_tool("update_case", f"case{n}", arguments)
            self.context.add_messages([
                {"role": "assistant", "content": None, "tool_calls": [{"id": f"case{n}", "type": "function", "function":
                                                                       {"name": "update_case",
                                                                        "arguments": json.dumps(arguments)}}]},
                {"role": "tool", "tool_call_id": f"case{n}", "content": json.dumps(result)},
            ])
            await self.infer()  # the re-run after the tool result
        return elapsed


def new_live_call() -> LiveCall:
    return LiveCall(live_session(), LLMContext())


async def bench_live_turn(checkpoints: tuple[int, ...] = (10, 100, 1000), samples: int = 200) -> bool:
    """Times turn N's context stage, ``samples`` times, on forks (deep copies) of one call played to turn N - 1.

    The call is played once, with a snapshot kept at each checkpoint; the checkpoints are then timed in turn,
    sample by sample, on one heap (as a live process holds all its calls whatever turn each is at).

    Each fork hears the previous reply (new words), hears the caller's interim transcript and then runs turn N
    on the final with the same words (new words), so each sample reads two new utterances and two new history
    messages, as a live turn does. On the turn (timed): ``ContextAssembly._assemble`` on the caller's final
    words, what the pipeline runs before the LLM request (the caller messages of pipecat's history,
    ``CallSession.sync_caller_messages`` opening the turn and its summary pass when due, ``CallSession.assemble``
    building the lanes). Off the turn (timed in their own columns, nobody waits on them): the turn log's
    ``record_agent`` (when the reply has been heard, before the caller speaks), which reads the reply's dates,
    and ``CallSession.read_ahead_caller`` at the interim (while the caller is still speaking), which reads the
    caller's dates and spoken identifiers so that the final with the same words takes them. The fork and a
    garbage collection after it are not timed; the collector then starts the turn at a random phase of its
    cycle, as in a live process. Side by side: the same samples with the collector off, and with a final that
    differs from the interim read ahead (text mode's driver, an STT whose last interim is not its final), which
    reads the caller's words on the turn.
    Returns whether both targets are met with the collector on and the interim read ahead.
    """
    print("Context stage of a live lanes turn: ContextAssembly._assemble (pipecat history -> "
          "sync_caller_messages -> assemble) (billing domain, "
          f"{len(LIMITS)} limits said early, summary every 5 turns), {samples} samples per turn, µs")
    print("ON the turn (the caller waits): wall/CPU, GC off, final != interim. OFF the turn (nobody waits): "
          "record_agent (the reply, as heard), read-ahead (the caller's interim, while they speak)")
    print("wall: what the caller waits (this machine's other load included); CPU: this thread's own time")
    print(f"{'turn':>6} {'wall p50':>9} {'wall p99':>9} {'CPU p50':>8} {'CPU p99':>8} {'tokens':>7}   "
          f"{'GC off p50 / p99':>17}   {'final!=interim p50 / p99':>24}   "
          f"{'off: record_agent p50 / p99':>27}   {'off: read-ahead p50 / p99':>25}")
    call = new_live_call()
    rng = random.Random(15)
    played = 0
    # One call played once, a snapshot (deep copy) kept at each checkpoint; every checkpoint is then timed on
    # the same heap, sample by sample in turn. Timed one after the other as the call grew, a later checkpoint
    # ran on a bigger heap (the call itself, and every object the process holds), and the collection before
    # each sample walks all of it, leaving the turn's own objects out of the cache: turn 100 took 297 µs p50
    # alone and 333 µs with a 1000-turn call alive beside it, with the same work (the same calls, profiled).
    # A live process holds all its calls whatever turn each one is at.
    snapshots: dict[int, LiveCall] = {}
    for turn in checkpoints:
        while played < turn - 1:
            played += 1
            call.caller_interim(played)
            await call.caller_turn(played)
            call.agent_said(live_agent_words(played))
        snapshots[turn] = call.fork()
    del call  # only the snapshots stay alive: the heap holds each checkpoint's call once
    modes = ("live", "gc off", "differs")  # the product's configuration; the collector off; no read-ahead hit
    wall: dict[tuple[int, str], list[float]] = {(t, mode): [] for t in checkpoints for mode in modes}
    cpu: dict[int, list[float]] = {t: [] for t in checkpoints}
    recorded: dict[int, list[float]] = {t: [] for t in checkpoints}
    ahead: dict[int, list[float]] = {t: [] for t in checkpoints}
    tokens: dict[int, int] = {}
    for k in range(samples):
        for turn in checkpoints:
            snapshot = snapshots[turn]
            for m, mode in enumerate(modes):
                variant = len(modes) * k + m
                fork = snapshot.fork()
                await fork.warm()
                recorded[turn].append(fork.agent_said(live_agent_words(turn - 1, variant)) * 1e6)
                if mode == "differs":  # the interim lacked the last words: the final is read on the turn
                    fork.session.read_ahead_caller(live_caller_words(turn, variant).rsplit(" ", 1)[0])
                else:
                    ahead[turn].append(fork.caller_interim(turn, variant) * 1e6)
                gc.collect()  # the fork's own garbage is not the turn's
                # A live process is somewhere in its collector's cycle when a turn starts: a random phase of
                # the young generation's count, so a collection lands in the turn as often as it would live.
                phase: list[list[int]] = [[] for _ in range(rng.randrange(gc.get_threshold()[0]))]
                if mode == "gc off":
                    gc.disable()
                try:
                    seconds, cpu_seconds = await fork.caller_turn(turn, variant)
                finally:
                    gc.enable()
                    del phase
                wall[turn, mode].append(seconds * 1e6)
                if mode == "live":
                    cpu[turn].append(cpu_seconds * 1e6)
                assert fork.session.last_context is not None
                tokens[turn] = fork.session.last_context.total_tokens
                hit = fork.session.date_guard.caller_ahead.hits > snapshot.session.date_guard.caller_ahead.hits
                assert hit == (mode != "differs"), f"turn {turn} {mode}: read-ahead taken: {hit}"
    rows: dict[int, tuple[float, float, float, float]] = {}
    for turn in checkpoints:
        p50, p99 = percentile(wall[turn, "live"], 0.5) or 0.0, percentile(wall[turn, "live"], 0.99) or 0.0
        c50, c99 = percentile(cpu[turn], 0.5) or 0.0, percentile(cpu[turn], 0.99) or 0.0
        o50, o99 = percentile(wall[turn, "gc off"], 0.5) or 0.0, percentile(wall[turn, "gc off"], 0.99) or 0.0
        d50, d99 = percentile(wall[turn, "differs"], 0.5) or 0.0, percentile(wall[turn, "differs"], 0.99) or 0.0
        r50, r99 = percentile(recorded[turn], 0.5) or 0.0, percentile(recorded[turn], 0.99) or 0.0
        a50, a99 = percentile(ahead[turn], 0.5) or 0.0, percentile(ahead[turn], 0.99) or 0.0
        rows[turn] = (p50, p99, c50, c99)
        print(f"{turn:>6} {p50:>9.1f} {p99:>9.1f} {c50:>8.1f} {c99:>8.1f} {tokens[turn]:>7}   "
              f"{o50:>7.1f} / {o99:<7.1f}   {d50:>11.1f} / {d99:<10.1f}   {r50:>14.1f} / {r99:<10.1f}   "
              f"{a50:>12.1f} / {a99:<10.1f}")
    first, last = rows[checkpoints[0]], rows[checkpoints[-1]]
    n0, n1 = checkpoints[0], checkpoints[-1]
    met = last[1] < 1000 and last[1] / first[1] <= 1.5
    print(f"turn {n1} / turn {n0}: wall p50 {last[0] / first[0]:.2f}x, p99 {last[1] / first[1]:.2f}x; "
          f"CPU p50 {last[2] / first[2]:.2f}x, p99 {last[3] / first[3]:.2f}x (target <= 1.5x)")
    print(f"p99 at turn {n1}: wall {last[1] / 1000:.3f} ms, CPU {last[3] / 1000:.3f} ms (target < 1 ms, GC on, "
          f"interim read ahead); wall targets {'MET' if met else 'MISSED'}")
    return met


def pipecat_tokens_per_request(turns: int) -> list[int]:
    """Tokens sent per request under pipecat's built-in summarization policy."""
    state = CallState(reference_date=dt.date(2026, 11, 30))
    context = LLMContext([{"role": "system", "content": SYSTEM}])
    summary_text = "x" * SUMMARY_BYTES
    unsummarized = 0
    sizes = []
    for n in range(1, turns + 1):
        before = len(state.transcript)
        scripted_turn(state, n)
        new = entries_to_messages(state.transcript.entries[before:])
        context.add_messages(new)
        unsummarized += len(new)
        tokens = LLMContextSummarizationUtil.estimate_context_tokens(context)
        if unsummarized >= 20 or tokens >= 8000:
            picked = LLMContextSummarizationUtil.get_messages_to_summarize(context, 4)
            if picked.messages:
                kept = context.messages[picked.last_summarized_index + 1 :]
                head = [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"Conversation summary: {summary_text}"}]
                context.set_messages(head + kept)
                unsummarized = len(kept)
        sizes.append(LLMContextSummarizationUtil.estimate_context_tokens(context) + estimate_message_tokens(""))
    return sizes


def full_history_tokens_per_request(turns: int) -> list[int]:
    state = CallState(reference_date=dt.date(2026, 11, 30))
    sizes = []
    for n in range(1, turns + 1):
        scripted_turn(state, n)
        messages = [{"role": "system", "content": SYSTEM}, *entries_to_messages(state.transcript.entries)]
        sizes.append(LLMContextSummarizationUtil.estimate_context_tokens(LLMContext(messages)))
    return sizes


def lanes_tokens_per_request(turns: int) -> list[int]:
    state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(keep=6, every=5))
    for i in range(20):
        state.ledger.record_from_tool(f"invoice_{i}", f"INV-2026-{i:04d}", 1, "list_invoices", "invoice_id")
    assembler = ContextAssembler(AssemblerConfig(system_prompt=SYSTEM, summary_max_tokens=600))
    pass_scheduler = PassScheduler(FixedSizeSummarizer())
    sizes = []
    for n in range(1, turns + 1):
        scripted_turn(state, n)
        asyncio.run(pass_scheduler.on_turn_start(state))
        messages = assembler.build(state).messages
        sizes.append(LLMContextSummarizationUtil.estimate_context_tokens(LLMContext(messages)))
    return sizes


def bench_tokens(turns: int = 120) -> None:
    policies = {
        "full history": full_history_tokens_per_request(turns),
        "pipecat built-in": pipecat_tokens_per_request(turns),
        "lanes (ours)": lanes_tokens_per_request(turns),
    }
    print(f"\nEstimated tokens per LLM request over a {turns}-turn scripted call (pipecat's estimator for all)")
    print(f"{'policy':<18} {'mean':>7} {'max':>7} {'@turn 30':>9} {'@turn 60':>9} {'@turn 120':>10} {'total':>9}")
    for name, sizes in policies.items():
        print(f"{name:<18} {statistics.mean(sizes):>7.0f} {max(sizes):>7} {sizes[29]:>9} {sizes[59]:>9} "
              f"{sizes[-1]:>10} {sum(sizes):>9}")
    ours = sum(policies["lanes (ours)"])
    print("\nRatios of total tokens (baseline / ours):")
    for name in ("full history", "pipecat built-in"):
        print(f"  {name:<18} {sum(policies[name]) / ours:.2f}x")
    tail = policies["lanes (ours)"][12:]
    print(f"lanes after turn K+S+1: min {min(tail)}, max {max(tail)} tokens (flat: bounded sawtooth of S turns)")


def main() -> int:
    """Both benchmarks; exit 1 with ``--check`` when a live-turn target is missed."""
    import argparse

    parser = argparse.ArgumentParser(description="The context stage: a live turn's time, and tokens per request.")
    parser.add_argument("--samples", type=int, default=200, help="Timed turns per checkpoint and mode (a p99 of 200 "
                        "is the third-slowest sample; more give a steadier tail, at a proportionally longer run).")
    parser.add_argument("--check", action="store_true", help="Exit 1 when the live-turn targets are missed.")
    args = parser.parse_args()
    if args.samples < 100:
        parser.error("--samples must be at least 100 (a p99 needs them)")
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    heap = settle_heap(DEFAULT_YOUNG_THRESHOLD)  # the collector as serve runs it once warmed up
    print(f"garbage collector as serve runs it: thresholds {heap.thresholds}, {heap.frozen} start-up objects frozen")
    met = asyncio.run(bench_live_turn(samples=args.samples))
    bench_tokens()
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
