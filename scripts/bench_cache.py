"""What a call's input costs when the LLM vendor caches prompt prefixes: every policy side by side in one run.

Run: ``.venv/bin/python scripts/bench_cache.py`` (offline, 2-6 min on 2 cores by load; ``--quick``: the 120-turn
call only; ``--local``: also the measured row on the packaged local model, which takes as long as the model needs
to evaluate the prompts: 35 min for 10 requests per layout on a machine at load 10, when it evaluated 4-8 tokens a
second).

Every call is built by the simulation runner's call factory from the same settings (the reference agent, the
extractive summarizer) and only the policy differs:
- ``lanes``: ours, the cache-aware layout, passes on the cadence (K=6, S=5: the settings' default);
- ``lanes $P``: the same with the ``reference`` trigger priced for the cache (``policy.cache_price`` P, batch 1):
  a pass runs once carrying the turns it folds has cost what the break costs; P is each table's own price for a
  cached token (0.25 gpt-4.1, 0.5 gpt-4o, 0.1 Sonnet), and the summary compares each table with its own P;
- ``lanes old``: the layout before the cache-aware one (KNOWN FACTS second, the knowledge before the recent
  turns), rebuilt from the ``lanes`` call's own state at each of its requests;
- ``rolling``, ``window``: our baselines;
- ``pipecat``: pipecat's own ``LLMContextSummarizer`` at its defaults; it summarizes with the extractive
  summarizer's limits (12 newest lines of what it folds, 30 words each), so all summaries are alike in size;
- ``full``: plain pipecat, the whole history.

Each request is captured as the model would get it (tools, the system instruction, the messages, in that order)
from the LLM's own input frame. Tokens are characters / 4. Per call:
- ``share``: characters each request shares, as a prefix, with the request before it, over all characters;
- ``input``: all input tokens of the call; ``uncached``: those OpenAI bills at the full price (its rule: a shared
  prefix of 1,024 tokens or more is cached, in 128-token steps);
- ``breaks``: requests that reuse less than the request before them minus its last 512 tokens (a summary pass,
  a moved message: everything after is sent again);
- cost per call in US dollars, input only (the replies are the same under every policy), under each price table
  of :data:`PRICES`. Anthropic is billed per its breakpoints: ``lanes`` puts one at the end of its stable prefix
  and one at the end of the part no pass changes (system prompt, hard constraints), the others get pipecat's own
  option (the system prompt and the last two user messages); a prefix is cached from 1,024 tokens,
  written at 1.25x, read at 0.1x;
- ``facts``: tracked facts whose exact value was in what the model received on the turn that needed it.

For the long call with knowledge it then prints the tokens per request by part (tools, system prompt, each lane by
its header, pipecat's summary message, the turns by role), one column per policy: where a request's size goes.

``--local`` counts, with the packaged model's tokenizer, the tokens each ``lanes`` and ``lanes old`` request of the
long call with knowledge re-evaluates (those past the prefix it shares with the previous request: llama.cpp keeps
that prefix's KV cache), then replays the first ``--local-requests`` of them through the model in process and
reports the prompt evaluation time per request, p50 and p95, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loguru import logger  # noqa: E402
from pipecat.adapters.llm.services.open_ai_adapter import OpenAILLMAdapter  # noqa: E402
from pipecat.frames.frames import Frame, LLMContextFrame  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.services.llm_service import LLMService  # noqa: E402
from pipecat.services.settings import LLMSettings  # noqa: E402

from processors.speculative_retrieval import SpeculativeRetrieval  # noqa: E402
from voice_agent.call.session import CallSession  # noqa: E402
from voice_agent.core.assembler import (  # noqa: E402
    constraints_message,
    entries_to_messages,
    known_facts_block,
    retrieved_message,
)
from voice_agent.core.caller_history import message_text  # noqa: E402
from voice_agent.domains.billing import billing_domain  # noqa: E402
from voice_agent.harness.evaluation.long_calls import long_call  # noqa: E402
from voice_agent.harness.evaluation.prompt_cache import (  # noqa: E402
    CACHE_PRICE,
    CHARS_PER_TOKEN,
    PRICES,
    PRICES_DATED,
    CallCost,
    Request,
    cost_of,
    request_of,
)
from voice_agent.harness.scenarios import Scenario, load_scenario  # noqa: E402
from voice_agent.harness.simulation.report import outcome_of  # noqa: E402
from voice_agent.harness.simulation.runner import SimulationPlan, caller_lines, scenario_facts  # noqa: E402
from voice_agent.harness.simulation.text_call import CallFailed, TurnTimeout, run_text_call  # noqa: E402
from voice_agent.policies import PolicyName  # noqa: E402
from voice_agent.policies.lanes import LanesPolicy  # noqa: E402
from voice_agent.recording.record import CallRecorder  # noqa: E402
from voice_agent.retrieval.index import shared_index  # noqa: E402
from voice_agent.retrieval.speculative import BUDGETED_SPECULATION  # noqa: E402
from voice_agent.settings import Settings, load_settings, with_overrides  # noqa: E402
from voice_agent.summarizers.extractive import ExtractiveSummarizer  # noqa: E402


class ExtractiveForPipecat(LLMService):  # type: ignore[type-arg]
    """Answers pipecat's summary requests with the extractive summarizer's limits: the newest lines it folds."""

    def __init__(self, max_lines: int, max_words: int) -> None:
        settings = LLMSettings(model="extractive", system_instruction=None, temperature=None, max_tokens=None,
                               top_p=None, top_k=None, frequency_penalty=None, presence_penalty=None, seed=None,
                               filter_incomplete_user_turns=None, user_turn_completion_config=None)
        super().__init__(settings=settings)
        self.max_lines, self.max_words = max_lines, max_words

    async def run_inference(self, context: LLMContext, max_tokens: int | None = None,
                            system_instruction: str | None = None, response_schema: dict[str, Any] | None = None
                            ) -> str | None:
        text = "\n".join(message_text(m.get("content")) for m in context.get_messages() if isinstance(m, dict))
        lines = [line.strip() for line in text.splitlines() if line.strip()][-self.max_lines:]
        return "\n".join(" ".join(line.split()[: self.max_words]) for line in lines)


class BenchSummarizer(ExtractiveSummarizer):
    """The extractive summarizer, also serving pipecat's summarizer at the same limits."""

    def pipecat_llm(self) -> LLMService:  # type: ignore[type-arg]
        return ExtractiveForPipecat(self.config.max_lines, self.config.max_words)


@dataclass
class Capture:
    """Every request of one call (and, for ``lanes``, the same requests in the previous layout), and the tokens
    each part of a request took (:func:`part_of`), summed over the call."""

    requests: list[Request] = field(default_factory=list)
    previous_layout: list[Request] = field(default_factory=list)
    parts: Counter[str] = field(default_factory=Counter)


PART_HEADERS = (("KNOWN FACTS, new", "facts (tail)"), ("KNOWN FACTS", "facts"), ("NOTED BY THE AGENT", "facts"),
                ("SUMMARY of earlier turns", "summary"), ("Conversation summary", "summary"),
                ("KNOWLEDGE (", "knowledge"), ("HARD CONSTRAINTS (", "constraints"),
                ("HARD CONSTRAINTS:", "constraints (tail)"))
"""How a message's text begins -> the part it is (the lanes' headers; pipecat's summary message template)."""
ROLE_PARTS = {"user": "caller", "assistant": "agent", "tool": "tool results"}


def part_of(message: Mapping[str, object]) -> str:
    """Which part of a request ``message`` is: a lane by its header, else the turns by role."""
    text = str(message.get("content") or "")
    return next((part for head, part in PART_HEADERS if text.startswith(head)),
                ROLE_PARTS.get(str(message.get("role")), "other"))


def previous_layout(session: CallSession, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lanes request as the layout before the cache-aware one built it (no system message: pipecat's)."""
    policy = session.policy
    assert isinstance(policy, LanesPolicy)
    state, config = session.state, policy.assembler.config
    facts = known_facts_block(state, policy.caller_constraint_lines(state))
    summary = [m for m in messages if str(m.get("content") or "").startswith("SUMMARY")]
    knowledge = retrieved_message(list(session.retrieved)[: config.max_retrieved])
    constraints = constraints_message(config.hard_constraints)
    return ([{"role": "developer", "content": facts}] if facts else []) + summary + (
        [knowledge] if knowledge else []) + entries_to_messages(state.raw_entries()) + (
        [constraints] if constraints else [])


def attach_capture(llm: LLMService, capture: Capture, session: Callable[[], CallSession | None]) -> None:  # type: ignore[type-arg]
    """Captures every context the LLM starts on, as it stands then."""
    adapter = OpenAILLMAdapter()

    def on_frame(_llm: Any, frame: Frame) -> None:
        if not isinstance(frame, LLMContextFrame):
            return
        messages = copy.deepcopy([m for m in frame.context.get_messages() if isinstance(m, dict)])
        tools = adapter.from_standard_tools(frame.context.tools)
        system = str(getattr(llm._settings, "system_instruction", "") or "")
        call = session()
        lanes = call is not None and isinstance(call.policy, LanesPolicy) and call.last_context is not None
        stable, fixed = None, 0
        if lanes:
            assert call is not None and call.last_context is not None
            # The system message is pipecat's system instruction, not a message: one fewer stable message.
            shift = 1 if call.system_prompt else 0
            stable = call.last_context.stable_count - shift
            fixed = max(call.last_context.fixed_count - shift, 0)
            capture.previous_layout.append(request_of(tools, system, previous_layout(call, messages), None))
        capture.requests.append(request_of(tools, system, messages, stable, fixed))
        capture.parts["tools"] += len(json.dumps(tools, sort_keys=True))
        capture.parts["system prompt"] += len(system)
        for message in messages:
            capture.parts[part_of(message)] += len(json.dumps(message, sort_keys=True))

    llm.add_event_handler("on_before_process_frame", on_frame)


POLICIES: dict[str, dict[str, Any]] = {
    "lanes": {"policy": {"name": "lanes"}},
    **{f"lanes ${price:g}": {"policy": {"name": "lanes", "trigger": "reference", "batch": 1, "cache_price": price}}
       for price in sorted(set(CACHE_PRICE.values()))},
    "rolling": {"policy": {"name": "rolling"}},
    "window": {"policy": {"name": "window"}},
    "pipecat": {"policy": {"name": "pipecat"}},
    "full": {"policy": {"name": "pipecat"}, "pipecat_summarizer": {"summarize": False}},
}


async def play(script: Scenario, label: str, base: Settings, knowledge: bool) -> tuple[Capture, str]:
    """Plays one call under the policy ``label``; returns its requests and its facts present at need."""
    overrides = POLICIES[label]
    settings = with_overrides(base, **overrides)
    plan = SimulationPlan(script, [], billing_domain, [PolicyName(overrides["policy"]["name"])], settings,
                          retention=None, knowledge=knowledge,
                          summarizer_factory=lambda _script, _run: BenchSummarizer())
    capture = Capture()
    holder: dict[str, CallSession] = {}

    def llm_factory(domain: Any) -> LLMService:  # type: ignore[type-arg]
        from voice_agent.services.factory import make_llm

        llm = make_llm(settings, domain)
        attach_capture(llm, capture, lambda: holder.get("session"))
        return llm

    plan.llm_factory = llm_factory
    parts = plan.call(script, plan.policies[0], 0)
    holder["session"] = parts.session
    facts = scenario_facts(script)
    recorder = CallRecorder(parts.session, [f.watched() for f in facts])
    before = [SpeculativeRetrieval(parts.session.call_id, shared_index(), BUDGETED_SPECULATION)] if knowledge else []
    failure = None
    try:
        await run_text_call(parts.session, parts.llm, caller_lines(script), recorder=recorder, before_user=before,
                            turn_timeout=60.0)
    except (CallFailed, TurnTimeout) as exc:
        failure = str(exc)
    outcome = outcome_of(recorder, facts, failure)
    present = sum(outcome.present_at_need.values())
    return capture, f"{present}/{len(outcome.present_at_need)}" + (" FAILED" if outcome.failure else "")


def scenarios(quick: bool, turns: int) -> list[Scenario]:
    """The three scripted calls and one long call (the billing call stretched to ``turns`` exchanges)."""
    long = long_call(load_scenario("billing_dispute"), seed=1, exchanges=turns)
    if quick:
        return [long]
    return [load_scenario(n) for n in ("billing_dispute", "refund_orders", "callback_constraints")] + [long]


def print_table(rows: list[tuple[str, str, str, CallCost]]) -> None:
    """One line per call: scenario, knowledge, policy and its figures."""
    names = list(PRICES)
    head = (f"{'call':<30} {'know':<4} {'policy':<11} {'reqs':>4} {'share':>6} {'input':>8} {'uncached':>8} "
            f"{'breaks':>6} " + " ".join(f"{'$ ' + n:>10}" for n in names) + f" {'facts':>7}")
    print(head)
    print("-" * len(head))
    for scenario, know, label, c in rows:
        print(f"{scenario:<30} {know:<4} {label:<11} {c.requests:>4} {c.share:>6.1%} {c.input_tokens:>8,} "
              f"{c.uncached_openai:>8,} {c.breaks:>6} " + " ".join(f"{c.cost[n]:>10.4f}" for n in names)
              + f" {c.facts:>7}")


def print_parts(parts: dict[str, Capture]) -> None:
    """Tokens per request by part (characters / 4, each message as its JSON), one column per policy."""
    names = sorted({name for c in parts.values() for name in c.parts}, key=lambda n: -max(
        c.parts[n] / len(c.requests) for c in parts.values()))
    print(f"  {'part':<20}" + "".join(f"{label:>12}" for label in parts))
    for name in [*names, "all"]:
        cells = [(sum(c.parts.values()) if name == "all" else c.parts[name]) / len(c.requests) / CHARS_PER_TOKEN
                 for c in parts.values()]
        print(f"  {name:<20}" + "".join(f"{cell:>12,.0f}" for cell in cells))


def reevaluated(requests: Sequence[Sequence[int]]) -> list[int]:
    """Per request, its tokens past the longest prefix it shares with the request before (all of the first)."""
    out, previous = [], None
    for tokens in requests:
        common = 0
        if previous is not None:
            for a, b in zip(previous, tokens, strict=False):
                if a != b:
                    break
                common += 1
        out.append(len(tokens) - common)
        previous = tokens
    return out


def local_row(requests: dict[str, list[Request]], limit: int) -> None:
    """Prompt evaluation per request on the packaged model, one model instance per layout, requests interleaved
    (so a busy machine slows both alike); llama.cpp reuses the KV cache of the prefix shared with the last one."""
    from llama_cpp import Llama

    from voice_agent.summarizers.local_model import ensure_model

    path = str(ensure_model())
    # What llama.cpp re-evaluates, counted over the whole call with the model's own tokenizer (no inference):
    # the tokens of each request past the longest token prefix it shares with the request before.
    vocab = Llama(model_path=path, vocab_only=True, verbose=False)
    print(f"\nlocal model ({Path(path).name}), tokens each request re-evaluates, all requests of the call:")
    for label, reqs in requests.items():
        fresh = reevaluated([vocab.tokenize(r.text.encode(), add_bos=False) for r in reqs])
        cuts = statistics.quantiles(fresh, n=20)
        print(f"  {label:<9} p50 {statistics.median(fresh):6.0f}   p95 {cuts[18]:6.0f}   total {sum(fresh):8,}")
    if limit < 2:
        return
    models = {label: Llama(model_path=path, n_ctx=8192, n_threads=2, n_threads_batch=2, verbose=False)
              for label in requests}
    times: dict[str, list[float]] = {label: [] for label in requests}
    count = min(limit, *(len(r) for r in requests.values()))
    for i in range(count):
        for label, reqs in requests.items():
            llama = models[label]
            tokens = llama.tokenize(reqs[i].text.encode(), add_bos=False)[-7000:]
            start = time.perf_counter()
            llama.create_completion(tokens, max_tokens=1, temperature=0.0)  # prefix reuse is llama.cpp's own
            times[label].append(time.perf_counter() - start)
        print(f"  local model: request {i + 1}/{count}", file=sys.stderr)
    print(f"\nlocal model ({Path(path).name}), prompt evaluation per request, the first {count} requests:")
    for label, spent in times.items():
        cuts = statistics.quantiles(spent, n=20)
        print(f"  {label:<9} p50 {statistics.median(spent):6.2f} s   p95 {cuts[18]:6.2f} s   total {sum(spent):7.1f} s")
    base = statistics.median(times["lanes old"])
    print(f"  lanes / lanes old, median: {statistics.median(times['lanes']) / base:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the 120-turn call only")
    parser.add_argument("--turns", type=int, default=120, help="exchanges in the long call")
    parser.add_argument("--local", action="store_true", help="also replay one call on the packaged local model")
    parser.add_argument("--local-requests", type=int, default=40,
                        help="requests replayed per layout, timed (below 2: only the tokens re-evaluated are counted)")
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    base = with_overrides(load_settings(), summarizer={"kind": "extractive"}, llm={"vendor": "reference"})
    rows: list[tuple[str, str, str, CallCost]] = []
    lanes_requests: dict[str, list[Request]] = {}
    long_parts: dict[str, Capture] = {}
    started = time.perf_counter()
    for script in scenarios(args.quick, args.turns):
        for knowledge in (False, True):
            for label in POLICIES:
                capture, facts = asyncio.run(play(script, label, base, knowledge))
                know = "yes" if knowledge else "no"
                cost = cost_of(capture.requests)
                cost.facts = facts
                rows.append((script.id, know, label, cost))
                if knowledge and script.id.endswith("~long1"):
                    long_parts[label] = capture
                if label == "lanes":
                    old = cost_of(capture.previous_layout)
                    old.facts = facts
                    rows.append((script.id, know, "lanes old", old))
                    if knowledge and script.id.endswith(f"~long{1}"):
                        lanes_requests = {"lanes": capture.requests, "lanes old": capture.previous_layout}
                print(f"  {script.id} knowledge={know} {label}: {cost.requests} requests "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print(f"\nprices: {PRICES_DATED}; tokens are characters / {CHARS_PER_TOKEN}")
    print_table(rows)
    long_rows = {label: c for s, k, label, c in rows if s.endswith("~long1") and k == "yes"}
    if "lanes" in long_rows and "pipecat" in long_rows:
        print(f"\n{args.turns}-turn call with knowledge, cost against pipecat's summarizer (1.00 = the same; "
              "lanes $: each table with its own cache price):")
        for label in ("lanes", "lanes $", "lanes old", "rolling", "full"):
            rows_of = {n: long_rows[f"lanes ${CACHE_PRICE[n]:g}"] if label == "lanes $" else long_rows[label]
                       for n in PRICES}
            ratios = "  ".join(f"{n} {rows_of[n].cost[n] / long_rows['pipecat'].cost[n]:.2f}" for n in PRICES)
            shares = "/".join(f"{rows_of[n].share:.1%}" for n in PRICES) if label == "lanes $" else (
                f"{long_rows[label].share:.1%}")
            facts = long_rows[label if label != "lanes $" else "lanes $0.25"].facts
            print(f"  {label:<9} {ratios}   share {shares}   facts {facts}")
    if long_parts:
        print(f"\n{args.turns}-turn call with knowledge, tokens per request by part:")
        print_parts(long_parts)
    if args.local and lanes_requests:
        local_row(lanes_requests, args.local_requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
