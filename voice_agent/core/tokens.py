"""Offline token estimate, the same rule pipecat uses (characters / 4)."""

from __future__ import annotations

MESSAGE_OVERHEAD_TOKENS = 4
"""Per-message framing cost (role, separators) added by :func:`estimate_message_tokens`."""


def estimate_tokens(text: str) -> int:
    """Estimates the token count of ``text`` as ceil(len / 4).

    No tokenizer that downloads a vocabulary is involved, so this works offline.
    """
    return (len(text) + 3) // 4


def estimate_message_tokens(content: str) -> int:
    """Estimates one chat message: its content plus a fixed framing overhead."""
    return estimate_tokens(content) + MESSAGE_OVERHEAD_TOKENS


def estimate_message_tokens_of_length(chars: int) -> int:
    """:func:`estimate_message_tokens` of a content ``chars`` characters long, without the content."""
    return (chars + 3) // 4 + MESSAGE_OVERHEAD_TOKENS
