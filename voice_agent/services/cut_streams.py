"""A streamed answer that ends without the vendor saying it is finished is an error, not an answer.

An OpenAI-style stream says an answer is complete with a ``finish_reason`` (``stop``, ``tool_calls``,
``length``, ...) on its last choice. When the connection ends cleanly before that (a proxy's idle cut, a
vendor restarting), pipecat's service takes what arrived for the whole answer: the caller hears half a
sentence and the transcript records it as said. :func:`report_cut_streams` makes such a stream raise
:class:`CutStream` at its end; the service reports it as an error and the LLM watchdog retries the turn
(:mod:`processors.llm_watchdog`), so the caller hears a whole answer or the recovery line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

CUT_STREAM = "the answer's stream ended before the vendor said it was finished (no finish reason)"


class CutStream(Exception):
    """The vendor's stream ended without a finish reason: what arrived is a fragment."""

    def __init__(self) -> None:
        super().__init__(CUT_STREAM)


class _WholeStream:
    """The vendor's stream, raising :class:`CutStream` if it ends without a finish reason."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Any]:
        finished = False
        async for chunk in self._stream:
            finished = finished or any(getattr(c, "finish_reason", None) for c in chunk.choices or ())
            yield chunk
        if not finished:
            raise CutStream()

    async def close(self) -> None:
        close = getattr(self._stream, "close", None) or getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


def report_cut_streams(service: Any) -> None:
    """Makes an OpenAI-style service report a stream cut before its finish reason as an error.

    Applies to pipecat services that stream through ``get_chat_completions`` (OpenAI and the
    OpenAI-compatible ones); any other service is left as it is. Applying it twice changes nothing.
    """
    get = getattr(service, "get_chat_completions", None)
    if get is None or getattr(get, "reports_cut_streams", False):
        return

    async def get_chat_completions(*args: Any, **kwargs: Any) -> _WholeStream:
        return _WholeStream(await get(*args, **kwargs))

    get_chat_completions.reports_cut_streams = True  # type: ignore[attr-defined]
    service.get_chat_completions = get_chat_completions
