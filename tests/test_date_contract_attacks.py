"""An adversary's transcripts: none may run the day it targets.

`config/evals/dates/contract/attacks.yaml` holds what a reviewer who read the contract built against it: a
ruled-out or replaced day the caller seems to say yes to, by class (an echo of the day, a duration from an
anchor day, a return date, a retraction verb, a replacement the rules miss, ...). Each ran in an earlier
version; the contract may confirm or refuse them, never run them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import yaml

from voice_agent.core.guards.date_contract import DateAction, DateContract
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK
from voice_agent.harness.evaluation.date_contract_eval import CONTRACT_DIR

DATA = yaml.safe_load((CONTRACT_DIR / "attacks.yaml").read_text(encoding="utf-8"))
REFERENCE = dt.date.fromisoformat(DATA["reference_date"])


def _decide(case: dict[str, Any]) -> DateAction:
    lines = [next(iter(t.items())) for t in case["turns"]]
    lane = TranscriptLane.of_lines(lines)
    (decision,) = DateContract(DateGuard(REFERENCE)).decide(
        SCHEDULE_CALLBACK, {"account_id": "ACC-1234-56", "date": case["date"]}, lane)
    return decision.action


def test_the_attack_set_covers_its_classes() -> None:
    classes = {c["class"] for c in DATA["calls"] if not c.get("handled")}
    assert len(DATA["calls"]) >= 60 and len(classes) >= 8


@pytest.mark.parametrize("case", DATA["calls"], ids=lambda c: f"{c['id']}-{c['class']}")
def test_no_attack_runs_its_day(case: dict[str, Any]) -> None:
    assert _decide(case) is not DateAction.RUN, case["why"]
