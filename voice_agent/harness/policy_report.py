"""The policy calculator behind ``voice-agent policy``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voice_agent.core.policy import (
    ContextPolicy,
    PolicyError,
    cadence_passes,
    closed_form_bound,
    rewrite_schedule,
)
from voice_agent.core.survival import Survival


@dataclass(frozen=True)
class PolicyQuestion:
    """A fact stated on one turn and needed on a later one, under a policy."""

    keep: int
    every: int
    stated: int
    needed: int
    retention: float
    facts: int = 1
    capture: float | None = None
    """Measured capture at the first pass, when it differs from ``retention`` (None: the same)."""

    def validate(self) -> ContextPolicy:
        """Checks the question and returns its policy.

        Raises:
            PolicyError: with a one-line message naming the bad argument.
        """
        policy = ContextPolicy(keep=self.keep, every=self.every)
        if self.stated < 1:
            raise PolicyError(f"--stated must be at least 1, got {self.stated}")
        if self.needed < self.stated:
            raise PolicyError(f"--needed ({self.needed}) must not come before --stated ({self.stated})")
        if not 0.0 <= self.retention <= 1.0:
            raise PolicyError(f"--retention must lie in [0, 1], got {self.retention}")
        if self.capture is not None and not 0.0 <= self.capture <= 1.0:
            raise PolicyError(f"--capture must lie in [0, 1], got {self.capture}")
        if self.facts < 1:
            raise PolicyError(f"--facts must be at least 1, got {self.facts}")
        return policy


def policy_report(question: PolicyQuestion, *, alignments: bool = False) -> dict[str, Any]:
    """Computes the schedule, counts and survival figures for ``question``."""
    policy = question.validate()
    schedule = rewrite_schedule(policy, question.stated, question.needed)
    survival = Survival(question.retention, len(schedule), question.facts, question.capture)
    report: dict[str, Any] = {
        "keep": policy.keep,
        "every": policy.every,
        "stated": question.stated,
        "needed": question.needed,
        "retention": question.retention,
        "capture": question.capture,
        "facts": question.facts,
        "schedule": schedule,
        "rewrites": len(schedule),
        "cache_breaks": len(cadence_passes(policy, question.needed)),
        "bound": closed_form_bound(policy, question.stated, question.needed),
        "survival": survival.survival,
        "expected_facts": survival.expected_facts,
        "all_facts": survival.all_facts,
    }
    if alignments:
        distance = question.needed - question.stated
        report["alignments"] = [
            {"stated": t, "needed": t + distance, "rewrites": len(rewrite_schedule(policy, t, t + distance))}
            for t in range(1, 2 * policy.every + 1)
        ]
    return report


def render_policy_report(report: dict[str, Any]) -> str:
    """The report as the text ``voice-agent policy`` prints."""
    schedule = ", ".join(map(str, report["schedule"])) or "none"
    lines = [
        f"policy: keep K={report['keep']} turns raw, a pass every S={report['every']} turns",
        f"fact stated on turn {report['stated']}, needed on turn {report['needed']}",
        f"passes that rewrite it: {schedule}",
        f"rewrites: {report['rewrites']} (closed-form bound ceil((T2-T1-K)/S) = {report['bound']})",
        f"cache breaks by turn {report['needed']}: {report['cache_breaks']} (each pass rewrites the prompt prefix "
        "once: the request after it is read uncached)",
        (f"survival at R={report['retention']:g}: {report['survival'] * 100:.1f} %"
         if report.get("capture") is None else
         f"survival at capture {report['capture']:g} on the first pass, then R={report['retention']:g} "
         f"per later pass: {report['survival'] * 100:.1f} %"),
    ]
    if report["facts"] > 1:
        lines.append(
            f"{report['facts']} facts: {report['expected_facts']:.2f} kept on average, "
            f"all {report['facts']} kept in {report['all_facts'] * 100:.1f} % of calls (independent drops; a floor)"
        )
    if "alignments" in report:
        distance = report["needed"] - report["stated"]
        lines.append(f"alignments at distance {distance}:")
        for a in report["alignments"]:
            lines.append(f"  stated {a['stated']:>3} -> needed {a['needed']:>3}: {a['rewrites']} rewrites")
    return "\n".join(lines)
