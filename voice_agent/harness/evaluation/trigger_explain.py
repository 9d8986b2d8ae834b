"""``voice-agent policy --trigger reference --scenario NAME``: which turns a triggered run folded, when, and why.

The cadence is a formula (the calculator predicts it); the ``reference`` and ``threshold`` triggers depend on
what was said, so they are explained from a run: the scenario is played once through the pipeline with the
simulation's seeded fault model, and the trigger's own record of each pass is read back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from voice_agent.core.pass_trigger import PassTrigger, TriggerDecision
from voice_agent.core.policy import Trigger
from voice_agent.harness.scenarios import Scenario
from voice_agent.policies import PolicyName


def trigger_of(policy: Any) -> PassTrigger | None:
    """The pass trigger a policy object runs (``lanes`` through its pass scheduler), if it has one."""
    found = getattr(policy, "trigger", None) or getattr(getattr(policy, "pass_scheduler", None), "trigger", None)
    return found if isinstance(found, PassTrigger) else None


def explain_run(
    scenario: Scenario, *, policy: PolicyName = PolicyName.LANES, trigger: Trigger = Trigger.REFERENCE,
    keep: int = 6, every: int = 5, floor: int | None = None, batch: int | None = None,
    retention: float = 0.9, seed: int = 0,
) -> dict[str, Any]:
    """Plays ``scenario`` once under ``policy`` and ``trigger``; returns every pass with its reasons."""
    from voice_agent.domains.billing import billing_domain
    from voice_agent.harness.simulation.runner import SimulationPlan, caller_lines, scenario_facts
    from voice_agent.harness.simulation.text_call import run_text_call
    from voice_agent.recording.record import CallRecorder
    from voice_agent.settings import Settings, with_overrides

    settings = with_overrides(Settings(), policy={"keep": keep, "every": every, "trigger": trigger.value,
                                                  "floor": floor, "batch": batch})
    plan = SimulationPlan(scenario, [], billing_domain, [policy], settings, 1, retention, seed)
    parts = plan.call(scenario, policy, 0)
    recorder = CallRecorder(parts.session, [f.watched() for f in scenario_facts(scenario)])
    asyncio.run(run_text_call(parts.session, parts.llm, caller_lines(scenario), recorder=recorder))
    found = trigger_of(parts.session.policy)
    decisions: list[TriggerDecision] = found.decisions if found is not None else []
    state = parts.session.state
    return {
        "scenario": scenario.id, "policy": policy.value, "trigger": trigger.value, "keep": keep,
        "floor": state.policy.floor, "batch": state.policy.batch, "every": every, "turns": state.turn,
        "passes": [{"turn": d.turn, "folded": [list(f) for f in d.folded], "held": [list(h) for h in d.held]}
                   for d in decisions],
        "held_at_end": list(state.tracker.held),
        "tokens": [r.tokens for r in recorder.turns if r.requests],
    }


def render_explanation(report: dict[str, Any]) -> str:
    """The explanation as ``voice-agent policy`` prints it."""
    tokens = report["tokens"]
    mean = sum(tokens) / len(tokens) if tokens else 0.0
    head = (f"{report['scenario']}: {report['policy']} under the {report['trigger']} trigger "
            f"(K={report['keep']}" + (f", floor {report['floor']}, batch {report['batch']}"
                                      if report["trigger"] == "reference" else "") + ")")
    lines = [head, f"{report['turns']} turns, {len(report['passes'])} summary passes, "
             f"{mean:.0f} tokens per request on average"]
    for p in report["passes"]:
        folded = ", ".join(str(t) for t, _ in p["folded"])
        lines.append(f"turn {p['turn']}: folded turns {folded}")
        for t, why in p["folded"]:
            lines.append(f"    {t:>3}: {why}")
        for t, why in p["held"]:
            lines.append(f"    {t:>3} kept raw: {why}")
    if not report["passes"]:
        lines.append("no pass ran: every older turn was still referred to, or too few were waiting")
    if report["held_at_end"]:
        lines.append(f"held raw at the end: turns {', '.join(map(str, report['held_at_end']))}")
    return "\n".join(lines)
