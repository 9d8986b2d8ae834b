"""Exactly-once effects: a mutating tool call runs once per call, whatever leg of the call makes it.

A worker killed after ``issue_credit`` ran but before the call's state was saved leaves a resumed leg
that does not know: its model asks for the same credit again. Every mutating call therefore has an
**effect key**, derived from the call and the call's words (the tool and its arguments as they run), the
same on every leg. Before it runs, the call's **effect log** is asked to begin it:

- nothing recorded: the key is taken and the tool runs; its result is recorded (:meth:`EffectLog.finish`);
- recorded with its result: it is not run again; the recorded result is the tool's result (a replay);
- begun on a leg that died before the result: the backend is asked by the key (a domain's
  :data:`OutcomeLookup`): the result it kept is the tool's result (a replay), and a call it never received
  runs now. Without a lookup (or when it fails) the outcome cannot be known here, so it is not run again
  and the model is told so (the caller hears that it may already be done, never a second credit).

While a mutating call's tool runs, :func:`running_effect` gives its key: the idempotency key to hand the
backend, so a backend that dedupes by it applies a call made again once.

A call the backend refused (``ToolError``: it did nothing) is dropped from the log, so asking again may
work; a call that failed otherwise (a timeout, a crash, a barge-in while it ran) stays begun: it may have
gone through, so it is not run again blind. A call cancelled before it ran is dropped.
The log lives where the call's state lives (the call store) so every worker of the fleet sees it; without
a store, in memory for the call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from voice_agent.core.tool_spec import ToolSpec

EffectState = Literal["begun", "done"]

OutcomeLookup = Callable[[str, str], Awaitable[Any]]
"""Asks the backend for a mutating call by its effect key: ``(tool, key) -> result``, or None when the backend
never received it. Raises when it cannot tell (the outcome stays unknown)."""

_RUNNING: ContextVar[str | None] = ContextVar("running_effect", default=None)


def running_effect() -> str | None:
    """The effect key of the mutating call whose tool is running now (read inside its handler), else None."""
    return _RUNNING.get()


@contextmanager
def running(key: str | None) -> Iterator[None]:
    """Makes ``key`` the :func:`running_effect` of the code inside (a tool handler's run)."""
    token = _RUNNING.set(key)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def effect_key(call_id: str, tool: str, arguments: Mapping[str, Any], spec: ToolSpec | None = None) -> str:
    """The idempotency key of a mutating call: the same call, tool and arguments give the same key on every leg.

    Arguments are compared as values, not spellings, so a model that says it another way on the next leg does
    not run it again: an absent or empty argument is left out, a number (a ``number`` parameter, or a number
    given) is its value ("19.99", 19.99 and "19.990" alike), text is compared without case, spacing or
    punctuation at its ends.
    """
    types = {p.name: p.type for p in spec.params} if spec is not None else {}
    canonical = json.dumps([call_id, tool, {name: _value(value, types.get(name)) for name, value in arguments.items()
                                            if value is not None and value != ""}],
                           sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _value(value: Any, json_type: str | None) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) or json_type in ("number", "integer"):
        try:
            return format(float(value), ".10g")
        except (TypeError, ValueError):
            pass
    if isinstance(value, str):
        return " ".join(value.strip(" \t\n.,;:!?").split()).casefold()
    return value


@dataclass(frozen=True)
class Effect:
    """A mutating call as the log holds it.

    Attributes:
        key: Its effect key.
        tool: The tool's name.
        state: ``begun`` (running, or its leg died before the result) or ``done``.
        leg: The leg that began it.
        result: The tool's result, once done.
    """

    key: str
    tool: str
    state: EffectState
    leg: int
    result: Any = None

    def to_json(self) -> str:
        """The record as stored."""
        return json.dumps({"tool": self.tool, "state": self.state, "leg": self.leg, "result": self.result},
                          default=str)

    @classmethod
    def from_json(cls, key: str, raw: str | bytes) -> Effect:
        """A stored record; raises ValueError when it does not parse."""
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("state") not in ("begun", "done"):
            raise ValueError(f"effect {key}: not an effect record")
        return cls(key, str(data.get("tool", "")), data["state"], int(data.get("leg", 0)), data.get("result"))


class EffectLog(Protocol):
    """Where a call's mutating calls are recorded (the call store for a served call)."""

    async def begin(self, key: str, tool: str) -> Effect | None:
        """Takes ``key`` for this leg and returns None, or returns the record another attempt left."""
        ...

    async def finish(self, key: str, tool: str, result: Any) -> None:
        """Records the result of a call this leg began."""
        ...

    async def drop(self, key: str) -> None:
        """Forgets a call this leg began that failed (it did nothing; asking again may work)."""
        ...


class MemoryEffectLog:
    """An effect log for one call in one process (the default without a call store).

    Args:
        leg: The leg recorded with each call begun.
    """

    def __init__(self, leg: int = 1) -> None:
        self.leg = leg
        self.effects: dict[str, Effect] = {}

    async def begin(self, key: str, tool: str) -> Effect | None:
        """See :meth:`EffectLog.begin`."""
        prior = self.effects.get(key)
        if prior is None:
            self.effects[key] = Effect(key, tool, "begun", self.leg)
        return prior

    async def finish(self, key: str, tool: str, result: Any) -> None:
        """See :meth:`EffectLog.finish`."""
        self.effects[key] = Effect(key, tool, "done", self.leg, result)

    async def drop(self, key: str) -> None:
        """See :meth:`EffectLog.drop`."""
        self.effects.pop(key, None)


def unknown_outcome(tool: str, leg: int) -> dict[str, Any]:
    """The result the model reads for a call a dead leg began and never finished: not run again."""
    return {
        "status": "unknown",
        "error": (f"{tool} was already started with these details before the line dropped (leg {leg}), and whether "
                  "it went through is not known here. It is not run again. Tell the caller it may already be "
                  "done and a colleague will confirm it; do not promise it twice."),
    }
