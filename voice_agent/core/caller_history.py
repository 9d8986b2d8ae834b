"""The caller's messages of the pipeline's chat history, read incrementally.

The context stage opens a turn when the pipeline's history holds caller messages it has not seen. The
history grows by one or two messages per turn, so re-scanning all of it on every inference costs time
linear in the call (about 270 µs at turn 1000). :class:`CallerHistoryReader` keeps what it read and scans
only the messages appended since, starting over whenever the history is not the one it read.

The same scan keeps the messages the lanes do not hold (:func:`is_passthrough`): the system message of the
user's own context, and what other processors add (a developer note, an async tool's late result). The lanes
rebuild the turns, not those: the context stage hands them on to the model as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def message_text(content: Any) -> str:
    """The text of a message's content: a string as is, the text parts of multi-part content joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: keep the text parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


TURN_ROLES = frozenset({"user", "assistant", "tool"})
"""The roles of the turns, which the lanes rebuild from the transcript lane."""


def is_passthrough(message: Any) -> bool:
    """Whether ``message`` of the pipeline's history goes to the model as it is (the lanes do not hold it).

    Every message but a turn's: ``system`` and ``developer`` messages, and a vendor-specific message (not a
    plain dict) that pipecat carries for its adapter.
    """
    return not isinstance(message, dict) or message.get("role") not in TURN_ROLES


def caller_texts(messages: Sequence[Any]) -> list[str]:
    """The text of every caller (``user``) message, in order: a full scan."""
    return [message_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user"]


class CallerHistoryReader:
    """Reads the caller messages of one growing history, scanning each message once.

    The read so far is kept while the history is the same list object, no shorter, and the last message
    read is still the same object in the same place; anything else (a replaced or trimmed history, a
    message removed before it) is read from the start. Equal to :func:`caller_texts` on every read.
    """

    def __init__(self) -> None:
        self._source: Sequence[Any] | None = None
        self._length = 0
        self._last: Any = None
        self._texts: list[str] = []
        self._passthrough: list[Any] = []

    def _matches(self, messages: Sequence[Any]) -> bool:
        if messages is not self._source or len(messages) < self._length:
            return False
        return self._length == 0 or messages[self._length - 1] is self._last

    def read(self, messages: Sequence[Any]) -> list[str]:
        """The text of every caller message of ``messages``, in order.

        The returned list is the reader's own: callers must not change it.
        """
        if not self._matches(messages):
            self._source, self._length, self._last, self._texts, self._passthrough = messages, 0, None, [], []
        if len(messages) > self._length:
            added = messages[self._length:]
            self._texts.extend(caller_texts(added))
            self._passthrough.extend(m for m in added if is_passthrough(m))
            self._length = len(messages)
            self._last = messages[-1]
        return self._texts

    def passthrough(self, messages: Sequence[Any]) -> list[Any]:
        """The messages of ``messages`` that go to the model as they are (:func:`is_passthrough`), in order.

        Reads ``messages`` as :meth:`read` does; the returned list is the reader's own.
        """
        self.read(messages)
        return self._passthrough
