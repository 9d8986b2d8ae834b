"""Size of the KNOWN FACTS block, per scenario, over a whole call (lanes, extractive summarizer, reference agent).

Prints, for every scenario, the block's estimated tokens at each fact's needed turn, its median over
the call and its maximum, then the median and maximum over all scenarios. The block is sent on every
request, so it must stay small (DESIGN: well under 100 tokens for a typical call). The scenarios are
built to carry five must-keep caller facts each; ``--sgd`` adds real dialogues (call records replayed
under lanes, both speakers), the typical calls: per call the median block, then the median and the
maximum over calls.

    .venv/bin/python scripts/known_facts_size.py [SCENARIO ...] [--sgd ../shared/data/sgd-calls-public.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from loguru import logger

from voice_agent.domains.billing import billing_domain
from voice_agent.harness.evaluation.replay import known_facts_tokens
from voice_agent.harness.scenarios import list_scenarios, load_scenario
from voice_agent.harness.simulation.runner import SimulationPlan, caller_lines, scenario_facts
from voice_agent.harness.simulation.text_call import run_text_call
from voice_agent.policies import PolicyName
from voice_agent.settings import load_settings, with_overrides


async def sizes(name: str) -> dict[int, int]:
    """Turn -> estimated tokens of the KNOWN FACTS block of that turn's first request."""
    scenario = load_scenario(name)
    base = load_settings()
    settings = with_overrides(base, call={"reference_date": scenario.reference_date or base.call.reference_date})
    plan = SimulationPlan(scenario, [], billing_domain, [PolicyName.LANES], settings, retention=None)
    parts = plan.call(scenario, PolicyName.LANES, 0)
    session = parts.session
    out: dict[int, int] = {}
    assemble = session.assemble

    def measured() -> object:
        context = assemble()
        if session.turn not in out:
            out[session.turn] = known_facts_tokens(context)
        return context

    session.assemble = measured  # type: ignore[method-assign]
    await run_text_call(session, parts.llm, caller_lines(scenario))
    return out


def sgd_sizes(path: str) -> list[list[int]]:
    """Per replayed call record, the KNOWN FACTS block's tokens at each exchange (lanes, both speakers)."""
    from voice_agent.harness.evaluation.replay import ReplayConfig, evaluate_file

    result = evaluate_file(path, ReplayConfig(policies=(PolicyName.LANES,), replay="all"))
    return [list(r.known_facts_tokens.get(PolicyName.LANES.value, {}).values()) for r in result.replays]


def main(names: list[str], sgd: str | None = None) -> None:
    logger.remove()
    every: list[int] = []
    for name in names or list_scenarios():
        per_turn = asyncio.run(sizes(name))
        facts = scenario_facts(load_scenario(name))
        at_need = {f.needed_turn: per_turn.get(f.needed_turn, 0) for f in facts if f.needed_turn}
        values = list(per_turn.values())
        every += values
        need = ", ".join(f"turn {t}: {n}" for t, n in sorted(at_need.items()))
        print(f"{name:<22} median {statistics.median(values):>5.0f}  max {max(values):>4}  at need: {need}")
    print(f"{'all scenarios':<22} median {statistics.median(every):>5.0f}  max {max(every):>4}  (tokens, chars/4)")
    if sgd:
        calls = [sizes for sizes in sgd_sizes(sgd) if sizes]
        if not calls:
            raise SystemExit(f"{sgd}: no call record replayed")
        requests = [n for c in calls for n in c]
        shown = [n for n in requests if n]
        when = f"median {statistics.median(shown):.0f} when present" if shown else "never present"
        print(f"{'SGD calls':<22} median {statistics.median(requests):>5.0f}  max {max(requests):>4}  "
              f"({len(calls)} calls, {len(requests)} requests; a block on {len(shown)} of them, {when})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--sgd", help="call records (JSON Lines) to replay as typical calls")
    args = parser.parse_args()
    main(args.scenarios, args.sgd)
