"""The call registry: each call's :class:`RegisteredCall`, and the slot rule of :class:`CallRegistry`.

Reservations (a webhook answered with a stream token), streaming calls and recently ended calls, and who gets a
slot when every one is taken.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from voice_agent.call.session import CallSession
from voice_agent.telephony.bridge import EndReason
from voice_agent.telephony.fleet import FleetReservation
from voice_agent.telephony.providers import Provider

_KEEP_ENDED = 200


@dataclass
class RegisteredCall:
    """One call's entry in the registry, kept after the call ends (transcript included).

    Attributes:
        call_id: Our id (``call-<n>-<random>``).
        provider: The provider.
        token: The one-time stream token.
        state: ``reserved``, ``active`` or ``ended``.
        created: When the webhook reserved it (monotonic).
        expires: When an unclaimed reservation lapses (monotonic).
        provider_call_id: The provider's call id.
        started: When the stream started (wall clock, epoch seconds).
        ended: When the call ended (wall clock).
        reason: Why the call ended, in words.
        end: How it ended: hung up, idle, time limit, server error, drained, handed over, violation, slow client
            or ended (:class:`~voice_agent.telephony.bridge.EndReason`).
        violations: Dropped inbound messages by kind.
        marks: Mark acknowledgements received.
        dtmf: Keys pressed.
        session: The live session while the call runs.
        transcript: The transcript, rendered, once the call has ended.
        turns: Per-turn summaries once the call has ended.
        extra: What the call factory kept with the call.
        leg: Which worker leg of the call this is (1, then +1 each time it resumes).
        resumed_at_turn: The stored turn a resumed leg carried on from (None: a new call).
        address: Where its unsigned webhook came from (development mode), else None.
        resume_key: The secret in this leg's action URL: the provider's request to resume the call after this
            leg must carry it (a replayed webhook of the call, or of an earlier leg, does not).
        returning_key: The previous leg's key the provider came back with ("" for a new call).
        transfer: The call's transfer, once asked for: ``target`` and ``status`` (``transferred`` or
            ``failed``, with the ``error``).
    """

    call_id: str
    provider: Provider
    token: str
    state: str = "reserved"
    created: float = field(default_factory=time.monotonic)
    expires: float = 0.0
    provider_call_id: str | None = None
    started: float | None = None
    ended: float | None = None
    reason: str = ""
    end: str = ""
    violations: dict[str, int] = field(default_factory=dict)
    marks: int = 0
    dtmf: list[str] = field(default_factory=list)
    session: CallSession | None = None
    transcript: list[str] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    leg: int = 1
    resumed_at_turn: int | None = None
    address: str | None = None
    resume_key: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    returning_key: str = ""
    transfer: dict[str, str] = field(default_factory=dict)

    def transcript_lines(self) -> list[str]:
        """The transcript so far (live while the call runs)."""
        if self.session is not None:
            return [e.render() for e in self.session.state.transcript]
        return list(self.transcript)

    def summary(self) -> dict[str, Any]:
        """Metadata only: no caller words, no identifiers."""
        return {
            "call_id": self.call_id, "provider": self.provider.value, "state": self.state,
            "started": self.started, "ended": self.ended, "reason": self.reason, "end": self.end,
            "violations": dict(self.violations), "marks": self.marks, "dtmf_count": len(self.dtmf),
            "transcript_entries": len(self.transcript_lines()), "config": self.extra.get("config"),
            "leg": self.leg, "resumed_at_turn": self.resumed_at_turn, "transfer": dict(self.transfer) or None,
        }


class CallRegistry:
    """Reservations, active calls and recently ended calls.

    The slot rule (a webhook needs no caller, a stream does, so the two do not count alike):

    - ``max_calls`` slots, each held by a streaming call or by a reservation (a webhook answered with
      a stream token). A streaming call keeps its slot until it ends.
    - A reservation is short: it lapses after ``token_ttl`` seconds (10 by default) if no stream
      claims its token.
    - One provider call, one reservation: a repeated webhook with the same provider call id
      (``CallSid``, ``CallControlId``, ``CallUUID``) gets the same record back (same call id, same
      token, same deadline), never a second slot. A call id that already streamed is not served again.
    - When every slot is taken, a new webhook takes over the oldest reservation that has waited longer
      than ``grace`` seconds (a real caller's stream connects within a second or two); that
      reservation's token stops working. Only when every slot is streaming, or every reservation is
      younger than ``grace``, is the caller told the line is busy.

    So webhooks alone (unsigned ones in development mode, replayed signed ones) can hold a slot for
    ``grace`` seconds at most against a newer caller, and never a streaming call's.

    Args:
        max_calls: Reserved plus active calls allowed at once.
        token_ttl: Seconds a reservation waits for its stream.
        grace: Seconds a reservation is safe from being taken over by a newer webhook.
    """

    def __init__(self, max_calls: int, token_ttl: float, grace: float = 3.0) -> None:
        self.max_calls = max_calls
        self.token_ttl = token_ttl
        self.grace = grace
        self._calls: OrderedDict[str, RegisteredCall] = OrderedDict()
        self._by_token: dict[str, str] = {}
        self._counter = itertools.count(1)
        self.refused = 0
        self.evicted = 0

    def _expire(self) -> None:
        now = time.monotonic()
        for record in list(self._calls.values()):
            if record.state == "reserved" and record.expires < now:
                record.state = "ended"
                record.reason = "stream never connected (token expired)"
                record.ended = time.time()
                self._by_token.pop(record.token, None)
        ended = [k for k, r in self._calls.items() if r.state == "ended"]
        excess = len(ended) - _KEEP_ENDED
        if excess > 0:
            # Reservations that never streamed go first: a flood of webhooks cannot push real calls out.
            never = [k for k in ended if self._calls[k].started is None]
            streamed = [k for k in ended if self._calls[k].started is not None]
            for key in (never + streamed)[:excess]:
                self._calls.pop(key, None)

    @property
    def busy(self) -> int:
        """Reserved plus active calls."""
        self._expire()
        return sum(1 for r in self._calls.values() if r.state in ("reserved", "active"))

    @property
    def active(self) -> list[RegisteredCall]:
        """Calls whose stream is running."""
        return [r for r in self._calls.values() if r.state == "active"]

    def reserve(
        self, provider: Provider, provider_call_id: str | None, resume: tuple[str, int] | None = None,
        address: str | None = None, returned: bool = False,
    ) -> RegisteredCall | None:
        """The call's reservation (an existing one for a repeated webhook), or None when it gets none.

        See the class docstring for the rule.

        Args:
            provider: The provider.
            provider_call_id: The provider's call id.
            resume: (call id, leg) of a stored call the provider brought back: the reservation keeps the
                call's id and is its next leg, even if this worker ran an earlier leg of it.
            address: Where an unsigned webhook came from (development mode), for the fair share; None when
                webhooks are signed.
            returned: The provider came back with the previous leg's key (its stream has ended for sure).
        """
        self._expire()
        if provider_call_id:
            for known in list(self._calls.values()):
                if known.provider is not provider or known.provider_call_id != provider_call_id:
                    continue
                if known.state == "reserved" and (resume is None or known.leg == resume[1]):
                    return known
                if known.state == "reserved":
                    # This worker's reservation for an earlier leg, whose stream another worker took: stale.
                    self.cancel(known, "superseded by the call's next leg")
                    continue
                if resume is not None and (known.state == "ended" or resumable(known) or returned):
                    # An earlier leg ran here; the new leg replaces it, also while the old one is still
                    # closing (its stream dropped, the provider came straight back), or still looks alive
                    # (half-open) when the provider came back with its key.
                    self._calls.pop(known.call_id, None)
                    continue
                if known.started is not None:  # streaming or streamed: one slot per call, once
                    self.refused += 1
                    return None
        if self.busy >= self.max_calls:
            now = time.monotonic()
            stale = next((r for r in self._calls.values()
                          if r.state == "reserved" and now - r.created >= self.grace), None)
            if stale is None and address is not None:
                stale = self._over_fair_share(address)
            if stale is None:
                self.refused += 1
                return None
            stale.state, stale.ended = "ended", time.time()
            stale.reason = ("reservation taken over by a newer call (stream never connected)" if stale.address is None
                            or now - stale.created >= self.grace else
                            "reservation given up to another address (its address held more than its share)")
            self._by_token.pop(stale.token, None)
            self.evicted += 1
        token = secrets.token_urlsafe(24)
        call_id = resume[0] if resume is not None else f"call-{next(self._counter)}-{secrets.token_hex(3)}"
        record = RegisteredCall(call_id, provider, token, expires=time.monotonic() + self.token_ttl,
                            provider_call_id=provider_call_id, leg=resume[1] if resume is not None else 1,
                            address=address)
        self._calls[call_id] = record
        self._by_token[token] = call_id
        return record

    def _over_fair_share(self, address: str) -> RegisteredCall | None:
        """The newest reservation of the address holding the most, when it holds more than ``address`` would.

        Unsigned webhooks cost nothing to send: without this, one address at its rate limit keeps every slot
        reserved with fresh (grace-protected) reservations and real callers hear the busy line.
        """
        held: dict[str, list[RegisteredCall]] = {}
        for record in self._calls.values():
            if record.state == "reserved" and record.address is not None:
                held.setdefault(record.address, []).append(record)
        if not held:
            return None
        heaviest = max(held, key=lambda a: len(held[a]))
        if len(held[heaviest]) <= len(held.get(address, [])) + 1:
            return None
        return held[heaviest][-1]

    def claim(self, token: str | None, provider_call_id: str) -> RegisteredCall | str:
        """The reservation a stream's token names, now active; or why it is refused."""
        self._expire()
        if not token:
            return "missing stream token"
        call_id = self._by_token.pop(token, None)
        record = self._calls.get(call_id) if call_id else None
        if record is None or record.state != "reserved":
            return "invalid or expired stream token"
        if record.provider_call_id and record.provider_call_id != provider_call_id:
            record.state, record.reason, record.ended = "ended", "stream token used for another call", time.time()
            return "stream token belongs to another call"
        record.state = "active"
        record.provider_call_id = provider_call_id
        record.started = time.time()
        return record

    def cancel(self, record: RegisteredCall, reason: str) -> None:
        """Drops a reservation that cannot stand (the fleet is full): its token stops working."""
        record.state, record.reason, record.ended = "ended", reason, time.time()
        self._by_token.pop(record.token, None)

    @property
    def reserved(self) -> list[RegisteredCall]:
        """Reservations whose stream has not connected here (yet)."""
        self._expire()
        return [r for r in self._calls.values() if r.state == "reserved"]

    def adopt(self, reservation: FleetReservation, token: str, provider_call_id: str) -> RegisteredCall | str:
        """A stream whose token another worker of the fleet issued: the call is now active here, or why not."""
        if reservation.provider_call_id and reservation.provider_call_id != provider_call_id:
            return "stream token belongs to another call"
        self._expire()
        self._calls.pop(reservation.call_id, None)  # an earlier leg of this call may have run here
        record = RegisteredCall(reservation.call_id, Provider(reservation.provider), token, state="active",
                            provider_call_id=provider_call_id, started=time.time(), leg=reservation.leg,
                            resume_key=reservation.resume_key or secrets.token_urlsafe(16),
                            returning_key=reservation.returning_key)
        if reservation.resume_problem:
            record.extra["resume_problem"] = reservation.resume_problem
        self._calls[record.call_id] = record
        return record

    def get(self, call_id: str) -> RegisteredCall | None:
        """A call by id (recent ended calls included)."""
        return self._calls.get(call_id)

    def all(self) -> list[RegisteredCall]:
        """Every record held, oldest first."""
        self._expire()
        return list(self._calls.values())


def end_as(record: RegisteredCall, reason: str, end: EndReason) -> None:
    """Records why the call ended; the first cause wins."""
    if not record.reason:
        record.reason = reason
    if not record.end:
        record.end = end.value


def resumable(record: RegisteredCall) -> bool:
    """Whether the stream ended without the caller hanging up, so the provider may bring the call back."""
    return record.end in (EndReason.HANDED_OVER.value, EndReason.STREAM_LOST.value) or (
        record.end == EndReason.HUNG_UP.value and record.reason == "client disconnected")
