"""The output guard: checks what the agent is about to say, before TTS.

A check on the output does not drift as the prompt grows. Call length is a risk
signal of its own, so some checks switch on (or tighten) late in a call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from loguru import logger

from voice_agent.settings import OutputGuardConfig

DateViolationFinder = Callable[[str], list[str]]
"""Given the text to speak, returns one reason per proposed date that breaks a recorded constraint."""


@dataclass(frozen=True)
class OutputContext:
    """What the checks may consult about the call.

    Attributes:
        turn: Current turn.
        ledger_values: Identifiers the call has legitimately touched.
        date_violations: Finds proposed dates that break the caller's constraints.
    """

    turn: int
    ledger_values: frozenset[str] = frozenset()
    date_violations: DateViolationFinder | None = None


@dataclass(frozen=True)
class OutputBlock:
    """Why an utterance was blocked and what is said instead."""

    check: str
    reason: str
    replacement: str


@dataclass(frozen=True)
class OutputVerdict:
    """The guard's decision on one utterance.

    Attributes:
        original: What the agent wanted to say (caller PII possible: do not log it raw).
        text: What is actually spoken.
        blocks: Checks that fired; empty when the utterance passed.
        strict: Whether the long-call checks were active.
    """

    original: str
    text: str
    blocks: tuple[OutputBlock, ...] = ()
    strict: bool = False

    @property
    def allowed(self) -> bool:
        """True when the utterance passes unchanged."""
        return not self.blocks


class OutputCheck(Protocol):
    """One check on the text to speak."""

    @property
    def name(self) -> str:
        """The check's name, used in logs and spans."""
        ...

    def __call__(self, text: str, ctx: OutputContext, strict: bool) -> OutputBlock | None:
        """Returns a block, or None when the text passes."""
        ...


_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")
_MONEY = re.compile(r"\$\s?(\d+(?:[.,]\d{1,2})?)|(\d+(?:[.,]\d{1,2})?)\s?(?:dollars|usd|bucks)\b", re.IGNORECASE)
_CREDIT_WORDS = re.compile(r"\b(credit|refund|reimburs\w*|compensat\w*|waive\w*)\b", re.IGNORECASE)
_ID_SHAPED = re.compile(r"\b(?=[A-Z0-9-]*\d)(?=[A-Z0-9-]*[A-Z-])[A-Z0-9][A-Z0-9-]{5,}\b")


@dataclass(frozen=True)
class CardNumberCheck:
    """Never read back a full card number (13-19 digits); the last four may be said."""

    name: str = "card_number"

    def __call__(self, text: str, ctx: OutputContext, strict: bool) -> OutputBlock | None:
        match = _CARD.search(text)
        if not match:
            return None
        last4 = re.sub(r"\D", "", match.group())[-4:]
        return OutputBlock(
            self.name,
            "the utterance reads out a full card number",
            f"For your security I won't read out the full card number. It ends in {last4}.",
        )


@dataclass(frozen=True)
class CreditLimitCheck:
    """Never promise a credit or refund above the configured limit (lower late in a call)."""

    config: OutputGuardConfig
    name: str = "credit_limit"

    def __call__(self, text: str, ctx: OutputContext, strict: bool) -> OutputBlock | None:
        if not _CREDIT_WORDS.search(text):
            return None
        limit = self.config.late_max_credit if strict else self.config.max_credit
        for match in _MONEY.finditer(text):
            amount = float((match.group(1) or match.group(2)).replace(",", "."))
            if amount > limit:
                return OutputBlock(
                    self.name,
                    f"promises {amount:.2f}, above the {limit:.2f} limit",
                    "I can't promise an amount like that on this call. I can pass it to a colleague who can review it.",
                )
        return None


@dataclass(frozen=True)
class DateConstraintCheck:
    """Never propose a date that breaks a constraint the caller stated."""

    name: str = "date_constraint"

    def __call__(self, text: str, ctx: OutputContext, strict: bool) -> OutputBlock | None:
        if ctx.date_violations is None:
            return None
        reasons = ctx.date_violations(text)
        if not reasons:
            return None
        return OutputBlock(
            self.name, "; ".join(reasons), "Let me check that date against what you told me earlier. One moment."
        )


@dataclass(frozen=True)
class UnledgeredIdentifierCheck:
    """Late in a call: never read out an identifier no tool or caller gave this call."""

    name: str = "unledgered_identifier"

    def __call__(self, text: str, ctx: OutputContext, strict: bool) -> OutputBlock | None:
        if not strict:
            return None
        for token in _ID_SHAPED.findall(text):
            if token not in ctx.ledger_values and not any(token in v for v in ctx.ledger_values):
                return OutputBlock(
                    self.name,
                    "reads out an identifier that is not in the ledger",
                    "Let me confirm that number in the system before I read it out.",
                )
        return None


def default_checks(config: OutputGuardConfig) -> list[OutputCheck]:
    """The standard checks, in the order they run."""
    return [CardNumberCheck(), CreditLimitCheck(config), DateConstraintCheck(), UnledgeredIdentifierCheck()]


@dataclass
class OutputGuard:
    """Runs the output checks and replaces a blocked utterance with a safe one.

    Args:
        config: The ``output_guard`` settings section: the credit limits and the long-call threshold.
        checks: The checks to run; defaults to :func:`default_checks`.
    """

    config: OutputGuardConfig = field(default_factory=OutputGuardConfig)
    checks: Sequence[OutputCheck] | None = None

    def __post_init__(self) -> None:
        if self.checks is None:
            self.checks = default_checks(self.config)

    def review(self, text: str, ctx: OutputContext) -> OutputVerdict:
        """Checks ``text``; returns what to speak and why anything was blocked."""
        strict = ctx.turn >= self.config.strict_after_turn
        blocks = []
        for check in self.checks or ():
            block = check(text, ctx, strict)
            if block is not None:
                blocks.append(block)
        if not blocks:
            return OutputVerdict(text, text, strict=strict)
        # The reason may quote caller values; the check name and turn are safe to log.
        names = ", ".join(b.check for b in blocks)
        logger.warning("output guard blocked an utterance on turn {} ({})", ctx.turn, names)
        return OutputVerdict(text, blocks[0].replacement, tuple(blocks), strict)
