"""The output guard blocks unsafe utterances and gets stricter late in a call."""

from __future__ import annotations

from voice_agent.core.guards.output_guard import OutputContext, OutputGuard
from voice_agent.settings import OutputGuardConfig

guard = OutputGuard(OutputGuardConfig(max_credit=50, late_max_credit=25, strict_after_turn=20))


def test_safe_text_passes_unchanged() -> None:
    verdict = guard.review("Your invoice INV-7K3Q9 is open.", OutputContext(turn=3))
    assert verdict.allowed and verdict.text == verdict.original


def test_full_card_number_is_replaced_with_last_four() -> None:
    verdict = guard.review("The card on file is 4111 1111 1111 1234.", OutputContext(turn=3))
    assert not verdict.allowed and "1111 1111" not in verdict.text and verdict.text.endswith("ends in 1234.")


def test_credit_above_limit_is_blocked_and_limit_tightens_late() -> None:
    text = "I've issued a credit of $40 to your account."
    assert guard.review(text, OutputContext(turn=5)).allowed
    late = guard.review(text, OutputContext(turn=25))
    assert not late.allowed and late.strict and late.blocks[0].check == "credit_limit"
    assert not guard.review("I'll refund 120 dollars today.", OutputContext(turn=2)).allowed


def test_unledgered_identifier_blocked_only_late() -> None:
    text = "I've opened that on invoice INV-9Z9Z9."
    assert guard.review(text, OutputContext(turn=5)).allowed
    assert not guard.review(text, OutputContext(turn=21)).allowed
    ok = guard.review(text, OutputContext(turn=21, ledger_values=frozenset({"INV-9Z9Z9"})))
    assert ok.allowed


def test_date_violations_block_with_safe_reply() -> None:
    def finder(text: str) -> list[str]:
        return ["2026-12-08 is a Tuesday: caller said 'not Tuesday' on turn 3"] if "8th" in text else []

    ctx = OutputContext(turn=10, date_violations=finder)
    assert guard.review("How about the 10th?", ctx).allowed
    verdict = guard.review("How about Tuesday the 8th?", ctx)
    assert not verdict.allowed and verdict.blocks[0].check == "date_constraint"
    assert "turn 3" in verdict.blocks[0].reason
