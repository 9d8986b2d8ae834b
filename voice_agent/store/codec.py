"""A call's state as plain data and back: what a resumed call needs to carry on where it was.

What is stored: the lanes (transcript, summary, drop log, ledger with its evictions, slots with
provenance), the turn counter, the policy tracker's plain-data fields, the retrieval the next
context injects, the guards' and the policy's own logs (guard events, output blocks, summary passes
without their texts) and the domain backend's effects when it offers them
(``effects()``/``restore_effects()``).
Open tool calls are the transcript's tool calls without a result; they are listed for the reader,
and a resumed call records each as cancelled (the worker that ran it is gone, its outcome unknown).

What is not stored: anything derived. The date guard's readings, a policy's caches and the
transcript lane's turn index are rebuilt from the stored data by the objects that own them, so a
policy that grows a cache (or a tracker that grows a plain-data field) needs no change here:
tracker fields are read with :func:`dataclasses.fields`, except fields marked
``metadata={"derived": True}``.

The encoding is JSON with a schema version; tuples, sets, dates and dicts with non-string keys are
tagged so they come back as they went in.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from voice_agent.call.session import CallSession, GuardEvent
from voice_agent.core.drop_log import DropEvent, SummaryPass
from voice_agent.core.ledger import LedgerEntry
from voice_agent.core.policy import PolicyTracker
from voice_agent.core.provenance import CallerSpan, ModelOutput, Provenance, ToolField
from voice_agent.core.slots import SlotValue
from voice_agent.core.summary import EpisodeSummary
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptEntry, TranscriptLane

SCHEMA_VERSION = 1
"""Bumped when the stored layout changes in a way older readers cannot follow."""

RESUMED_RESULT = {"status": "cancelled", "reason": "the worker running this call stopped before it returned"}
"""The result a resumed call records for a tool call left open by the worker that stopped."""


class StateError(ValueError):
    """A stored state that cannot be loaded (corrupt, another schema, another call): the message says why."""


# --- plain data ---------------------------------------------------------------------------------------------------


def to_plain(value: Any) -> Any:
    """``value`` as JSON-ready data; tuples, sets, dates and non-string-keyed dicts are tagged."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [to_plain(v) for v in value]}
    if isinstance(value, set | frozenset):
        items = sorted((to_plain(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
        return {"__set__": items, "frozen": isinstance(value, frozenset)}
    if isinstance(value, dt.datetime):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, dt.date):
        return {"__date__": value.isoformat()}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: to_plain(v) for k, v in value.items()}
        return {"__items__": [[to_plain(k), to_plain(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot store a {type(value).__name__} as plain data")


def from_plain(value: Any) -> Any:
    """The inverse of :func:`to_plain` (dataclasses and models come back as dicts)."""
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tuple__" in value:
        return tuple(from_plain(v) for v in value["__tuple__"])
    if "__set__" in value:
        items = [_hashable(from_plain(v)) for v in value["__set__"]]
        return frozenset(items) if value.get("frozen") else set(items)
    if "__datetime__" in value:
        return dt.datetime.fromisoformat(value["__datetime__"])
    if "__date__" in value:
        return dt.date.fromisoformat(value["__date__"])
    if "__items__" in value:
        return {_hashable(from_plain(k)): from_plain(v) for k, v in value["__items__"]}
    return {k: from_plain(v) for k, v in value.items()}


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


# --- lanes --------------------------------------------------------------------------------------------------------


def _provenance(source: Provenance | None) -> dict[str, Any] | None:
    if source is None:
        return None
    if isinstance(source, ToolField):
        return {"kind": "tool", "tool": source.tool, "field": source.field, "turn": source.turn}
    if isinstance(source, CallerSpan):
        return {"kind": "caller", "turn": source.turn, "quote": source.quote}
    return {"kind": "model", "tool": source.tool, "turn": source.turn}


def _provenance_back(data: Mapping[str, Any] | None) -> Provenance | None:
    if data is None:
        return None
    kind = data["kind"]
    if kind == "tool":
        return ToolField(data["tool"], data["field"], int(data["turn"]))
    if kind == "caller":
        return CallerSpan(int(data["turn"]), data["quote"])
    if kind == "model":
        return ModelOutput(data["tool"], int(data["turn"]))
    raise StateError(f"unknown provenance kind {kind!r}")


def _entry(entry: TranscriptEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"turn": entry.turn, "kind": entry.kind.value}
    if entry.text:
        out["text"] = entry.text
    if entry.interrupted:
        out["interrupted"] = True
    if entry.tool_name is not None:
        out["tool"] = entry.tool_name
        out["id"] = entry.tool_call_id
    if entry.arguments is not None:
        out["arguments"] = to_plain(dict(entry.arguments))
    if entry.kind is EntryKind.TOOL_RESULT:
        out["result"] = to_plain(entry.result)
        out["outcome"] = entry.outcome.value if entry.outcome is not None else None
    return out


def _transcript_back(items: list[dict[str, Any]]) -> TranscriptLane:
    lane = TranscriptLane()
    for item in items:
        kind = EntryKind(item["kind"])
        turn = int(item["turn"])
        if kind is EntryKind.CALLER:
            lane.append_caller(turn, item.get("text", ""))
        elif kind is EntryKind.AGENT:
            lane.append_agent(turn, item.get("text", ""), interrupted=bool(item.get("interrupted")))
        elif kind is EntryKind.TOOL_CALL:
            lane.append_tool_call(turn, item["tool"], item["id"], from_plain(item.get("arguments") or {}))
        else:
            outcome = ToolOutcome(item["outcome"]) if item.get("outcome") else ToolOutcome.COMPLETED
            lane.append_tool_result(turn, item["tool"], item["id"], from_plain(item.get("result")), outcome)
    return lane


def _ledger_entry(entry: LedgerEntry) -> dict[str, Any]:
    return {"role": entry.role, "value": entry.value, "verified": entry.verified, "first_seen": entry.first_seen,
            "last_used": entry.last_used, "source": entry.source, "provenance": _provenance(entry.provenance),
            "listed": entry.listed}


def _ledger_entry_back(data: Mapping[str, Any]) -> LedgerEntry:
    return LedgerEntry(data["role"], data["value"], bool(data["verified"]), int(data["first_seen"]),
                       int(data["last_used"]), data["source"], _provenance_back(data.get("provenance")),
                       bool(data.get("listed", False)))


def _tracker(tracker: PolicyTracker) -> dict[str, Any]:
    return {f.name: to_plain(getattr(tracker, f.name)) for f in dataclasses.fields(tracker)
            if f.name != "policy" and not f.metadata.get("derived")}


def _tracker_back(tracker: PolicyTracker, data: Mapping[str, Any]) -> None:
    known = {f.name for f in dataclasses.fields(tracker) if f.name != "policy" and not f.metadata.get("derived")}
    for name, value in data.items():
        if name not in known:
            raise StateError(f"the stored policy tracker has a field {name!r} this version does not know")
        setattr(tracker, name, from_plain(value))
    rebuild = getattr(tracker, "rebuild_derived", None)
    if callable(rebuild):
        rebuild()


def _drop_event(event: DropEvent) -> dict[str, Any]:
    return {"turn": event.turn, "in": sorted(event.keys_in), "out": sorted(event.keys_out),
            "scrubbed": [list(s) for s in event.scrubbed]}


def _drop_event_back(data: Mapping[str, Any]) -> DropEvent:
    return DropEvent(int(data["turn"]), frozenset(data["in"]), frozenset(data["out"]),
                     tuple((str(k), int(n)) for k, n in data.get("scrubbed", [])))


def _policy(session: CallSession) -> dict[str, Any]:
    """The policy's name and every parameter (a resumed call must run the policy it was saved under)."""
    params = {f.name: getattr(session.state.policy, f.name) for f in dataclasses.fields(session.state.policy)}
    plain: dict[str, Any] = json.loads(json.dumps({"name": session.policy.name, **to_plain(params)}))
    return plain


# --- the call -----------------------------------------------------------------------------------------------------


def snapshot(session: CallSession) -> dict[str, Any]:
    """The call's state as plain data (see the module docstring for what is in it).

    Read on the event loop between frames, so it is one consistent moment of the call.
    """
    state = _head(session, session.requests_by_turn)
    state["transcript"] = [_entry(e) for e in session.state.transcript]
    state["open_tool_calls"] = [e.tool_call_id for e in session.state.transcript.pending_tool_calls()]
    state["drop_log"] = [_drop_event(e) for e in session.state.drop_log.events]
    logs = state["logs"]
    logs["summary_passes"] = [_summary_pass(p) for p in session.summary_passes]
    logs["guard_events"] = [_guard_event(g) for g in session.guard_events]
    logs["output_blocks"] = [[t, check] for t, check in session.output_blocks]
    return state


def _head(session: CallSession, requests_by_turn: Mapping[int, int]) -> dict[str, Any]:
    """Everything but the lists that only grow (see :data:`APPENDED`)."""
    state = session.state
    backend: Any = session.domain.extra.get("backend")
    effects = backend.effects() if callable(getattr(backend, "effects", None)) else None
    return {
        "schema": SCHEMA_VERSION,
        "call_id": session.call_id,
        "domain": session.domain.name,
        "reference_date": state.reference_date.isoformat(),
        "policy": _policy(session),
        "turn": state.turn,
        "unsummarized_from": state.unsummarized_from,
        "summary": state.summary.model_dump(mode="json"),
        "ledger": {"capacity": state.ledger.capacity, "entries": [_ledger_entry(e) for e in state.ledger.entries],
                   "evicted": [_ledger_entry(e) for e in state.ledger.evicted]},
        "slots": {"model": state.slots.model.model_dump(mode="json"),
                  "filled": {name: {"value": to_plain(s.value), "turn": s.turn, "source": s.source,
                                    "provenance": _provenance(s.provenance)}
                             for name, s in state.slots.filled().items()}},
        "tracker": _tracker(state.tracker),
        "retrieval": {"retrieved": list(session.retrieved),
                      "by_turn": to_plain({t: r for t, r in session.retrieval_by_turn.items() if t >= state.turn - 1})},
        "logs": {"requests_by_turn": to_plain(dict(requests_by_turn))},
        "effects": to_plain(effects) if effects is not None else None,
    }


def _summary_pass(p: SummaryPass) -> dict[str, Any]:
    # Each pass's accounting, not its texts: the leg that ran a pass exported them (telemetry, the call record)
    # and nothing in a call reads them again; at turn 300 they were 80 % of the state.
    return {"turn": p.turn, "event": _drop_event(p.event), "landed": p.landed_turn}


def _guard_event(g: GuardEvent) -> dict[str, Any]:
    return {"turn": g.turn, "tool": g.tool, "verdicts": [dict(v) for v in g.verdicts], "rejection": g.rejection}


# --- saving what changed --------------------------------------------------------------------------------------------

def _parts(session: CallSession) -> dict[str, tuple[Sequence[Any], Any]]:
    """Each part of a call's state that only grows: its items so far, and how one is written."""
    return {
        # the lane's own list: ``entries`` copies the whole call, and a save reads only its tail
        "transcript": (session.state.transcript._entries, _entry),
        "drop_log": (session.state.drop_log.events, _drop_event),
        "summary_passes": (session.summary_passes, _summary_pass),
        "guard_events": (session.guard_events, _guard_event),
        "output_blocks": (session.output_blocks, list),
    }


APPENDED = ("transcript", "drop_log", "summary_passes", "guard_events", "output_blocks")
"""The parts of a call's state that only grow (:func:`_parts`): a save writes their new items, never the whole."""


def counts(session: CallSession) -> dict[str, int]:
    """How many items each appended part of ``session`` holds now."""
    return {name: len(items) for name, (items, _plain) in _parts(session).items()}


def encode_changes(session: CallSession, saved: Mapping[str, int]) -> tuple[bytes, list[tuple[str, bytes]]]:
    """What a save writes: the head (the state without the appended parts, bounded by the call's facts, not its
    length) and each appended part's items past ``saved`` (the counts the store already holds), in order.

    The head keeps the per-turn logs of the current and the previous turn only (telemetry reads no other), so
    no part of a save grows with the call's length but the items it appends.
    """
    turn = session.state.turn
    head = _head(session, {t: n for t, n in session.requests_by_turn.items() if t >= turn - 1})
    items = [(name, _compact(plain(item))) for name, (values, plain) in _parts(session).items()
             for item in values[saved.get(name, 0):]]
    return _compact(head), items


def decode_changes(head: bytes, items: Sequence[tuple[str, bytes]], *, call_id: str | None = None) -> dict[str, Any]:
    """A state written by :func:`encode_changes` saves, as :func:`decode` returns one whole.

    Raises:
        StateError: As :func:`decode`, or an item that does not parse or names no appended part.
    """
    state = decode(head, call_id=call_id)
    parts: dict[str, list[Any]] = {kind: [] for kind in APPENDED}
    for kind, raw in items:
        if kind not in parts:
            raise StateError(f"stored item of unknown part {kind!r}")
        try:
            parts[kind].append(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StateError(f"stored {kind} item is not valid JSON ({exc})") from None
    state["transcript"], state["drop_log"] = parts["transcript"], parts["drop_log"]
    logs = state.setdefault("logs", {})
    for kind in ("summary_passes", "guard_events", "output_blocks"):
        logs[kind] = parts[kind]
    return state


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode(session: CallSession) -> bytes:
    """The call's state, serialised (compact JSON, UTF-8)."""
    return json.dumps(snapshot(session), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode(data: bytes, *, call_id: str | None = None) -> dict[str, Any]:
    """Parses a stored state and checks its envelope.

    Args:
        data: What :func:`encode` wrote.
        call_id: When given, the call the state must belong to.

    Raises:
        StateError: Not JSON, another schema version, or another call's state.
    """
    try:
        state = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateError(f"stored state is not valid JSON ({exc})") from None
    if not isinstance(state, dict):
        raise StateError("stored state is not a JSON object")
    version = state.get("schema")
    if version != SCHEMA_VERSION:
        raise StateError(f"stored state has schema version {version!r}; this version reads {SCHEMA_VERSION}")
    if call_id is not None and state.get("call_id") != call_id:
        raise StateError(f"stored state belongs to call {state.get('call_id')!r}, not {call_id!r}")
    return state


def restore(session: CallSession, state: Mapping[str, Any]) -> list[str]:
    """Puts a decoded state into a freshly built session of the same call (nothing of it is kept).

    The session must come from the same settings and domain (same policy, K, S); the lanes are
    rebuilt and replace the session's empty ones, derived caches start empty and refill on use.

    Returns:
        The ids of tool calls the stored state had left open; they are now recorded as cancelled.

    Raises:
        StateError: The state does not fit this session (another domain, policy or slot model), or a
            part of it is malformed. The session is left untouched then.
    """
    if session.state.turn != 0 or len(session.state.transcript):
        raise StateError("a state can only be restored into a session that has not started")
    if state.get("domain") != session.domain.name:
        raise StateError(f"stored state is of domain {state.get('domain')!r}, this call is {session.domain.name!r}")
    policy = state.get("policy") or {}
    here = _policy(session)
    if dict(policy) != here:
        raise StateError(f"stored state ran policy {dict(policy)}, this worker runs {here}")
    try:
        built = _rebuild(session, state)
    except StateError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"stored state is malformed ({type(exc).__name__}: {exc})") from None
    return _apply(session, built)


def _rebuild(session: CallSession, state: Mapping[str, Any]) -> dict[str, Any]:
    """Every part rebuilt apart from the session, so a bad part leaves the session untouched."""
    from voice_agent.core.call_state import CallState
    from voice_agent.core.ledger import Ledger
    from voice_agent.core.slots import SlotLane

    old = session.state
    fresh = CallState(call_id=old.call_id, reference_date=dt.date.fromisoformat(state["reference_date"]),
                      policy=old.policy, slot_model=old.slot_model, ledger_capacity=old.ledger_capacity)
    fresh.transcript = _transcript_back(list(state["transcript"]))
    fresh.turn = int(state["turn"])
    if fresh.turn < fresh.transcript.last_turn:
        raise StateError(f"stored turn {fresh.turn} is older than the transcript's last turn "
                         f"{fresh.transcript.last_turn}")
    fresh.summary = EpisodeSummary.model_validate(state["summary"])
    for event in state["drop_log"]:
        fresh.drop_log.events.append(_drop_event_back(event))
    ledger = Ledger(capacity=int(state["ledger"]["capacity"]))
    for item in state["ledger"]["entries"]:
        entry = _ledger_entry_back(item)
        ledger._entries[(entry.role, entry.value)] = entry
    ledger.evicted.extend(_ledger_entry_back(e) for e in state["ledger"]["evicted"])
    fresh.ledger = ledger
    slots: SlotLane[Any] = SlotLane(old.slot_model)
    slots._model = old.slot_model.model_validate(state["slots"]["model"])
    for name, item in state["slots"]["filled"].items():
        if name not in old.slot_model.model_fields:
            raise StateError(f"stored slot {name!r} is not a slot of {old.slot_model.__name__}")
        slots._provenance[name] = SlotValue(from_plain(item["value"]), int(item["turn"]), item["source"],
                                            _provenance_back(item.get("provenance")))
    fresh.slots = slots
    tracker = type(old.tracker)(old.policy)  # the session's own tracker class, with whatever fields it has
    _tracker_back(tracker, state["tracker"])
    unsummarized = state.get("unsummarized_from")
    if unsummarized is not None:
        # A background summary pass was running when the worker stopped: its summary never landed.
        # Those turns are still raw; the tracker steps back so the next due pass folds them again.
        tracker.summarized_through = min(tracker.summarized_through, int(unsummarized) - 1)
    fresh.tracker = tracker
    logs = state["logs"]
    return {
        "state": fresh,
        "retrieved": [str(x) for x in state["retrieval"]["retrieved"]],
        "retrieval_by_turn": {int(k): v for k, v in from_plain(state["retrieval"]["by_turn"]).items()},
        "summary_passes": [SummaryPass(int(p["turn"]), "", "", _drop_event_back(p["event"]), p.get("landed"))
                           for p in logs["summary_passes"]],
        "guard_events": [GuardEvent(int(g["turn"]), g["tool"], tuple(dict(v) for v in g["verdicts"]),
                                    g.get("rejection")) for g in logs["guard_events"]],
        "output_blocks": [(int(t), str(c)) for t, c in logs["output_blocks"]],
        "requests_by_turn": {int(k): int(v) for k, v in from_plain(logs["requests_by_turn"]).items()},
        "effects": from_plain(state["effects"]) if state.get("effects") is not None else None,
    }


def _apply(session: CallSession, built: Mapping[str, Any]) -> list[str]:
    from voice_agent.core.passes import BackgroundPasses

    state = built["state"]
    # The backend's effects first: a stored state that fails here leaves the session untouched.
    backend: Any = session.domain.extra.get("backend")
    if built["effects"] is not None and callable(getattr(backend, "restore_effects", None)):
        if not isinstance(built["effects"], Mapping):
            raise StateError(f"effects must be a mapping, got {type(built['effects']).__name__}")
        backend.restore_effects(built["effects"])
    session.state = state
    session.retrieved = list(built["retrieved"])
    session.retrieval_by_turn = dict(built["retrieval_by_turn"])
    session.summary_passes = list(built["summary_passes"])
    session.background_passes = BackgroundPasses(state, session.summary_passes.append)
    session.guard_events = list(built["guard_events"])
    session.output_blocks = list(built["output_blocks"])
    session.requests_by_turn = dict(built["requests_by_turn"])
    left_open = state.transcript.pending_tool_calls()
    for entry in left_open:
        state.transcript.append_tool_result(max(state.turn, 1), entry.tool_name or "", entry.tool_call_id or "",
                                            dict(RESUMED_RESULT), ToolOutcome.CANCELLED)
    return [e.tool_call_id or "" for e in left_open]
