"""An absence "until then" ends on the day named before it (a wrong action of the offline agent on paraphrased
calls, fixed by class): "not before the 14th, I'm away until then" rules the 14th out, so the agent proposes the 15th
and the date contract runs it, while the 14th does not run. Wordings written here, none copied from a paraphrase set.
"""

from __future__ import annotations

import datetime as dt

import pytest

from voice_agent.core.dates.extract import extract_constraints
from voice_agent.core.dates.model import ConstraintKind
from voice_agent.core.guards.date_contract import DateAction, DateContract
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing.brain import choose_callback_date
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

REFERENCE = dt.date(2026, 11, 30)  # a Monday; the 14th of December is a Monday too
UNTIL_THEN = [
    ("Please do not call before the 14th, I'm abroad until then.", dt.date(2026, 12, 14)),
    ("Nothing before the 9th please. We're on holiday till then.", dt.date(2026, 12, 9)),
    ("don't phone before the 14th im working away til that day", dt.date(2026, 12, 14)),
]


@pytest.mark.parametrize(("text", "day"), UNTIL_THEN)
def test_an_absence_until_then_ends_on_the_day_named_before_it(text: str, day: dt.date) -> None:
    found = extract_constraints(text, REFERENCE)
    assert any(c.kind is ConstraintKind.UNTIL and c.end == day and c.blocked for c in found), found
    assert not any(c.allows(day) for c in found if c.kind is ConstraintKind.UNTIL)
    assert choose_callback_date("Any day next week or after is fine.", [text], REFERENCE) not in (None, day)


def test_until_then_without_an_absence_adds_nothing() -> None:
    text = "Don't call before the 14th; I'll keep the hire car until then."
    assert not [c for c in extract_constraints(text, REFERENCE) if c.kind is ConstraintKind.UNTIL]


def test_the_contract_books_the_day_after_and_refuses_the_day_itself() -> None:
    lines = [("caller", "Please do not call before the 14th, I'm abroad until then."),
             ("caller", "Could you book me a callback? Any day works."),
             ("agent", "I can book a callback for Tuesday the 15th of December. Does that work for you?"),
             ("caller", "Lovely, thanks.")]
    transcript = TranscriptLane.of_lines(lines)
    contract = DateContract(DateGuard(REFERENCE))
    arguments = {"account_id": "ACC-4729-18"}
    (after,) = contract.decide(SCHEDULE_CALLBACK, {**arguments, "date": "2026-12-15"}, transcript)
    (on,) = contract.decide(SCHEDULE_CALLBACK, {**arguments, "date": "2026-12-14"}, transcript)
    assert after.action is DateAction.RUN and on.action is not DateAction.RUN


def test_until_then_after_a_day_gone_by_adds_nothing() -> None:
    text = "The bill came on the 3rd of November and I was away until then."
    assert not [c for c in extract_constraints(text, REFERENCE) if c.kind is ConstraintKind.UNTIL and c.blocked
                and c.end is not None and c.end >= REFERENCE]
