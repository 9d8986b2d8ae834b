"""Many workers, one fleet: stream tokens, the fleet-wide call cap and the call registry in Redis.

Each worker still keeps its own :class:`~voice_agent.telephony.registry.CallRegistry` (its calls, its
own ``max_calls``); the fleet adds what the workers must agree on:

- ``va:token:<token>``: a webhook's reservation (call id, provider call id, leg), expiring with the
  token. The worker the stream reaches claims it with ``GETDEL``: whichever worker answered the
  webhook, exactly one worker gets the stream.
- ``va:slots``: a sorted set of call ids scored by when their hold lapses. A webhook takes a slot
  (one Lua script: drop lapsed holds, count, add) or the caller hears the line is busy; a streaming
  call's worker renews its hold every few seconds, so the slot of a worker killed with ``kill -9``
  comes free one lease later, and a resumed call reuses its own slot.
- ``va:calls``: call id -> who runs it (worker, state, leg), for ``GET /calls`` across the fleet.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from loguru import logger
from redis.exceptions import RedisError

PREFIX = "va:"

_TAKE_SLOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
  return 1
end
if tonumber(ARGV[4]) > 0 and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
return 1
"""


class FleetUnavailable(RuntimeError):
    """Redis did not answer a fleet request."""


@dataclass(frozen=True)
class FleetReservation:
    """A webhook's reservation as the fleet holds it (what the worker the stream reaches needs).

    Attributes:
        call_id: Our call id.
        provider: The provider's name.
        provider_call_id: The provider's call id.
        leg: The call's leg (1: new; more: a resume).
        resume_key: The key the webhook put in the leg's action URL (the worker running the leg records it).
        returning_key: The previous leg's key the provider came back with ("" for a new call).
        resume_problem: Why the call's stored state could not be read ("": none); the call starts fresh.
    """

    call_id: str
    provider: str
    provider_call_id: str | None
    leg: int
    resume_key: str = ""
    returning_key: str = ""
    resume_problem: str = ""


def fleet_for(store_backend: str, url: str | None, worker: str, max_calls: int = 0) -> Fleet | None:
    """The fleet of workers sharing the ``redis`` call store at ``url``; None for any other store."""
    if store_backend != "redis" or not url:
        return None
    return Fleet(url, worker, max_calls=max_calls)


class Fleet:
    """One worker's view of the fleet in Redis.

    Args:
        url: ``redis://host:port/db`` (the call store's Redis).
        worker: This worker's name in the registry.
        max_calls: Calls the whole fleet takes at once (0: no fleet-wide cap, only each worker's own).
        lease_secs: How long a streaming call's slot is held without a renewal.
    """

    def __init__(self, url: str, worker: str, *, max_calls: int = 0, lease_secs: float = 15.0) -> None:
        self.url = url
        self.worker = worker
        self.max_calls = max_calls
        self.lease_secs = lease_secs
        self.client: Any = aioredis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self._take = self.client.register_script(_TAKE_SLOT)

    async def reserve(self, reservation: FleetReservation, token: str, ttl_secs: float) -> bool:
        """Takes a fleet slot for the call and publishes its stream token; False: the fleet is full.

        Raises:
            RedisError: Redis failed (the caller treats the call as refused).
        """
        now = time.time()
        taken = await self._take(keys=[f"{PREFIX}slots"], args=[now, now + ttl_secs, reservation.call_id,
                                                                  self.max_calls])
        if not taken:
            return False
        data = json.dumps({"call_id": reservation.call_id, "provider": reservation.provider,
                           "provider_call_id": reservation.provider_call_id, "leg": reservation.leg,
                           "resume_key": reservation.resume_key,
                           "returning_key": reservation.returning_key,
                           "resume_problem": reservation.resume_problem})
        await self.client.set(f"{PREFIX}token:{token}", data, px=max(1, int(ttl_secs * 1000)))
        await self._register(reservation.call_id, "reserved", reservation.leg)
        return True

    async def claim(self, token: str) -> FleetReservation | None:
        """The reservation a stream token names, taken so no other worker can (None: unknown or expired).

        Raises:
            FleetUnavailable: Redis did not answer; the caller may still know the token itself.
        """
        try:
            raw = await self.client.getdel(f"{PREFIX}token:{token}")
        except RedisError as exc:
            raise FleetUnavailable(f"token claim failed: {exc}") from None
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            reservation = FleetReservation(str(data["call_id"]), str(data["provider"]), data.get("provider_call_id"),
                                           int(data["leg"]),
                                           str(data.get("resume_key", "")),
                                           str(data.get("returning_key", "")),
                                           str(data.get("resume_problem", "")))
        except (ValueError, KeyError, TypeError) as exc:
            logger.error("fleet: stream token {}... holds no reservation ({}: {}); refused", token[:6],
                         type(exc).__name__, exc)
            return None
        await self.hold([reservation.call_id])
        try:
            await self._register(reservation.call_id, "active", reservation.leg)
        except RedisError as exc:  # the registry is for operators: the call goes on without its entry
            logger.error("fleet: registry update failed: {}", exc)
        return reservation

    async def hold(self, call_ids: list[str]) -> None:
        """Renews the slots of this worker's streaming calls (every few seconds while they run)."""
        if not call_ids:
            return
        until = time.time() + self.lease_secs
        try:
            await self.client.zadd(f"{PREFIX}slots", {call_id: until for call_id in call_ids})
        except RedisError as exc:
            logger.error("fleet: slot renewal failed: {}", exc)

    async def release(self, call_id: str, state: str = "ended") -> None:
        """Frees the call's slot (its stream ended on this worker)."""
        try:
            await self.client.zrem(f"{PREFIX}slots", call_id)
            await self._register(call_id, state, None)
        except RedisError as exc:
            logger.error("fleet: slot release failed: {}", exc)

    async def busy(self) -> int:
        """Calls holding a fleet slot now."""
        await self.client.zremrangebyscore(f"{PREFIX}slots", "-inf", time.time())
        return int(await self.client.zcard(f"{PREFIX}slots"))

    async def calls(self) -> dict[str, dict[str, Any]]:
        """The fleet's registry: call id -> worker, state, leg, updated."""
        raw = await self.client.hgetall(f"{PREFIX}calls")
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    async def _register(self, call_id: str, state: str, leg: int | None) -> None:
        entry: dict[str, Any] = {"worker": self.worker, "state": state, "updated": round(time.time(), 3)}
        if leg is not None:
            entry["leg"] = leg
        await self.client.hset(f"{PREFIX}calls", call_id, json.dumps(entry))

    async def close(self) -> None:
        """Closes the connection."""
        await self.client.aclose()
