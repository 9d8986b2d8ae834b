"""Size of the KNOWN FACTS block, per scenario, over a whole call (lanes, extractive summarizer, reference agent).

Prints, for every scenario, the block's estimated tokens at each fact's needed turn, its median over
the call and its maximum, then the median and maximum over all scenarios. The block is sent on every
request, so it must stay small (DESIGN: well under 100 tokens for a typical call).

    .venv/bin/python scripts/known_facts_size.py [SCENARIO ...]
"""

from __future__ import annotations

import asyncio
import statistics
import sys

from loguru import logger

from voice_agent.core.assembler import KNOWN_FACTS_HEADER
from voice_agent.core.tokens import estimate_tokens
from voice_agent.domains.billing import billing_domain
from voice_agent.policies import PolicyName
from voice_agent.scenarios import list_scenarios, load_scenario
from voice_agent.settings import load_settings, with_overrides
from voice_agent.simulation.runner import SimulationPlan, caller_lines, scenario_facts
from voice_agent.simulation.text_call import run_text_call


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
            blocks = [str(m.get("content")) for m in context.messages
                      if str(m.get("content", "")).startswith(KNOWN_FACTS_HEADER)]
            out[session.turn] = estimate_tokens(blocks[0]) if blocks else 0
        return context

    session.assemble = measured  # type: ignore[method-assign]
    await run_text_call(session, parts.llm, caller_lines(scenario))
    return out


def main(names: list[str]) -> None:
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


if __name__ == "__main__":
    main(sys.argv[1:])
