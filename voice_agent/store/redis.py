"""The Redis call store: the state of every call of a fleet of workers in one ``redis-server``.

A call is one hash ``va:call:<call_id>`` (fields ``leg``, ``turn``, ``status``, ``end``, ``pcid``,
``data``, ``updated``, ``lease``, ``rkey``) plus ``va:pcall:<provider call id>`` naming it, and
``va:fx:<call_id>`` holding its effects (one field per effect key) and ``va:items:<call_id>``, the items
saves of the changes appended (``<part>\\n<item>`` each). A save is one Lua script,
which Redis runs atomically: the leg check and the write happen together or not at all, and a
reader never sees a half-written hash. Keys expire ``retention_secs`` after their last write.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from voice_agent.store.base import CallStatus, CallStore, ItemsOutOfStep, StoredCall, StoreError, UnreadableCall

PREFIX = "va:"

# Ends the call unless a later leg owns it (ARGV[3] = -1: whatever the leg); the check and the write are one step.
_END = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local leg = tonumber(redis.call('HGET', KEYS[1], 'leg') or '0')
local lease = tonumber(redis.call('HGET', KEYS[1], 'lease') or '0')
if tonumber(ARGV[3]) >= 0 and tonumber(ARGV[3]) < leg and lease > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'status', 'ended', 'end', ARGV[1], 'updated', ARGV[2], 'lease', '0')
return 1
"""
# Opens leg ARGV[1] under a lease until ARGV[3] (ARGV[2]: now); KEYS[2]: the provider call id's key. A renewal
# (_RENEW) of a call the store no longer holds (restarted empty) is not a takeover: the next save writes it again.
_OPEN_LEG = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  local leg = tonumber(redis.call('HGET', KEYS[1], 'leg') or '0')
  local lease = tonumber(redis.call('HGET', KEYS[1], 'lease') or '0')
  local rkey = redis.call('HGET', KEYS[1], 'rkey')
  -- a call rewritten after the store lost it has no key left: the provider's (checked by the webhook) is the proof
  local returning = ARGV[9] ~= '' and (rkey == ARGV[9] or not rkey or rkey == '')
  if redis.call('HGET', KEYS[1], 'status') == 'ended' or tonumber(ARGV[1]) <= leg or
     (lease > tonumber(ARGV[2]) and not returning) then
    return 0
  end
  redis.call('HSET', KEYS[1], 'leg', ARGV[1], 'lease', ARGV[3], 'updated', ARGV[2], 'rkey', ARGV[8])
  return 1
end
if ARGV[4] ~= '' then
  local other = redis.call('GET', KEYS[2])
  if other and other ~= ARGV[6] then
    local okey = ARGV[7] .. other
    if redis.call('HGET', okey, 'status') == 'live' and
       tonumber(redis.call('HGET', okey, 'lease') or '0') > tonumber(ARGV[2]) then
      return 0
    end
  end
  redis.call('SET', KEYS[2], ARGV[6], 'EX', ARGV[5])
end
redis.call('HSET', KEYS[1], 'leg', ARGV[1], 'turn', '0', 'status', 'live', 'pcid', ARGV[4], 'data', '',
           'updated', ARGV[2], 'lease', ARGV[3], 'rkey', ARGV[8])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""
_RENEW = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
if redis.call('HGET', KEYS[1], 'status') ~= 'live' or redis.call('HGET', KEYS[1], 'leg') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease', ARGV[2])
return 1
"""
_CLOSE_LEG = """
if redis.call('HGET', KEYS[1], 'leg') == ARGV[1] then redis.call('HSET', KEYS[1], 'lease', '0') end
return 1
"""
# Writes the head (ARGV[1]) unless a later leg owns the call; KEYS[3], the call's items, keeps its first ARGV[8]
# items and gets ARGV[9..] appended (a whole state: ARGV[8] = 0 and none).
_SAVE = """
local leg = tonumber(redis.call('HGET', KEYS[1], 'leg') or '0')
local status = redis.call('HGET', KEYS[1], 'status')
if tonumber(ARGV[2]) < leg or status == 'ended' then return 0 end
if tonumber(ARGV[8]) > 0 and redis.call('LLEN', KEYS[3]) < tonumber(ARGV[8]) then return -1 end
redis.call('HSET', KEYS[1], 'data', ARGV[1], 'leg', ARGV[2], 'turn', ARGV[3], 'pcid', ARGV[4],
           'updated', ARGV[5], 'status', 'live')
redis.call('EXPIRE', KEYS[1], ARGV[6])
if ARGV[4] ~= '' then redis.call('SET', KEYS[2], ARGV[7], 'EX', ARGV[6]) end
local base = tonumber(ARGV[8])
if base == 0 then redis.call('DEL', KEYS[3]) else redis.call('LTRIM', KEYS[3], 0, base - 1) end
for i = 9, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
if #ARGV >= 9 or base > 0 then redis.call('EXPIRE', KEYS[3], ARGV[6]) end
return 1
"""


class RedisCallStore(CallStore):
    """Call states in Redis.

    Args:
        url: ``redis://host:port/db``.
        retention_secs: Seconds a call's keys live after its last write.

    Raises:
        StoreError: Redis cannot be reached.
    """

    backend = "redis"

    def __init__(self, url: str, *, retention_secs: float = 86400.0) -> None:
        self.url = url
        self._ttl = max(1, int(retention_secs))
        try:
            self.client: Any = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
            self.client.ping()
        except (redis.RedisError, ValueError) as exc:
            raise StoreError(f"redis store {url}: {exc}") from None
        self._save = self.client.register_script(_SAVE)
        self._end = self.client.register_script(_END)
        self._open_leg = self.client.register_script(_OPEN_LEG)
        self._renew = self.client.register_script(_RENEW)
        self._close_leg = self.client.register_script(_CLOSE_LEG)

    def save(self, call_id: str, data: bytes, *, turn: int, leg: int, provider_call_id: str | None) -> bool:
        """See :meth:`CallStore.save`."""
        return self._write(call_id, data, [], 0, turn=turn, leg=leg, provider_call_id=provider_call_id)

    def save_changes(self, call_id: str, head: bytes, items: list[tuple[str, bytes]], *, base: int, turn: int,
                     leg: int, provider_call_id: str | None) -> bool:
        """See :meth:`CallStore.save_changes`."""
        return self._write(call_id, head, items, base, turn=turn, leg=leg, provider_call_id=provider_call_id)

    def _write(self, call_id: str, data: bytes, items: list[tuple[str, bytes]], base: int, *, turn: int, leg: int,
               provider_call_id: str | None) -> bool:
        keys = [f"{PREFIX}call:{call_id}", f"{PREFIX}pcall:{provider_call_id or ''}", f"{PREFIX}items:{call_id}"]
        packed = [part.encode() + b"\n" + item for part, item in items]
        try:
            done = self._save(keys=keys, args=[data, leg, turn, provider_call_id or "", time.time(), self._ttl,
                                               call_id, base, *packed])
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: save failed: {exc}") from None
        if done == -1:
            raise ItemsOutOfStep(f"redis store {self.url}: call {call_id} holds fewer items than {base}")
        return bool(done)

    def load(self, call_id: str) -> StoredCall | None:
        """See :meth:`CallStore.load`."""
        try:
            pipe = self.client.pipeline(transaction=True)  # MULTI: the head and its items from one moment
            pipe.hgetall(f"{PREFIX}call:{call_id}")
            pipe.lrange(f"{PREFIX}items:{call_id}", 0, -1)
            fields, packed = pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: read failed: {exc}") from None
        if not fields or b"data" not in fields:
            return None
        items = []
        for raw in packed:
            part, _, item = bytes(raw).partition(b"\n")
            items.append((part.decode("utf-8", "replace"), item))
        return _stored(call_id, fields, tuple(items))

    def find(self, provider_call_id: str) -> StoredCall | None:
        """See :meth:`CallStore.find`."""
        try:
            call_id = self.client.get(f"{PREFIX}pcall:{provider_call_id}")
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: read failed: {exc}") from None
        return self.load(call_id.decode()) if call_id else None

    def end(self, call_id: str, how: str, *, leg: int | None = None) -> None:
        """See :meth:`CallStore.end`."""
        key = f"{PREFIX}call:{call_id}"
        try:
            self._end(keys=[key], args=[how, time.time(), -1 if leg is None else leg])
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: end failed: {exc}") from None

    def open_leg(self, call_id: str, leg: int, *, provider_call_id: str | None, lease_secs: float,
                 resume_key: str = "", returning_key: str = "") -> bool:
        """See :meth:`CallStore.open_leg`."""
        now = time.time()
        keys = [f"{PREFIX}call:{call_id}", f"{PREFIX}pcall:{provider_call_id or ''}"]
        try:
            done = self._open_leg(keys=keys, args=[leg, now, now + lease_secs, provider_call_id or "", self._ttl,
                                                   call_id, f"{PREFIX}call:", resume_key,
                                                   returning_key])
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: opening leg {leg} failed: {exc}") from None
        return bool(done)

    def renew(self, legs: list[tuple[str, int]], lease_secs: float) -> list[str]:
        """See :meth:`CallStore.renew`."""
        until = time.time() + lease_secs
        try:
            pipe = self.client.pipeline(transaction=False)
            for call_id, leg in legs:
                self._renew(keys=[f"{PREFIX}call:{call_id}"], args=[leg, until], client=pipe)
            held = pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: lease renewal failed: {exc}") from None
        return [call_id for (call_id, _leg), ok in zip(legs, held, strict=True) if not ok]

    def close_leg(self, call_id: str, leg: int) -> None:
        """See :meth:`CallStore.close_leg`."""
        try:
            self._close_leg(keys=[f"{PREFIX}call:{call_id}"], args=[leg])
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: closing leg {leg} failed: {exc}") from None

    def begin_effect(self, call_id: str, key: str, record: str) -> str | None:
        """See :meth:`CallStore.begin_effect`."""
        name = f"{PREFIX}fx:{call_id}"
        try:
            pipe = self.client.pipeline(transaction=True)  # MULTI: the set-if-absent and its read are one step
            pipe.hsetnx(name, key, record)
            pipe.hget(name, key)
            pipe.expire(name, self._ttl)
            taken, found, _ = pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: recording an effect failed: {exc}") from None
        return None if taken else (found.decode() if found is not None else None)

    def finish_effect(self, call_id: str, key: str, record: str) -> None:
        """See :meth:`CallStore.finish_effect`."""
        name = f"{PREFIX}fx:{call_id}"
        try:
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(name, key, record)
            pipe.expire(name, self._ttl)
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: recording an effect failed: {exc}") from None

    def drop_effect(self, call_id: str, key: str) -> None:
        """See :meth:`CallStore.drop_effect`."""
        try:
            self.client.hdel(f"{PREFIX}fx:{call_id}", key)
        except redis.RedisError as exc:
            raise StoreError(f"redis store {self.url}: forgetting an effect failed: {exc}") from None

    def close(self) -> None:
        """See :meth:`CallStore.close`."""
        self.client.close()


def _stored(call_id: str, fields: dict[bytes, bytes], items: tuple[tuple[str, bytes], ...] = ()) -> StoredCall:
    def text(name: str, default: str = "") -> str:
        value: Any = fields.get(name.encode())
        return value.decode() if value is not None else default

    try:
        status: CallStatus = "ended" if text("status") == "ended" else "live"
        return StoredCall(call_id, text("pcid") or None, int(text("leg", "1")), int(text("turn", "0")), status,
                          text("end"), fields[b"data"], float(text("updated", "0")), float(text("lease", "0")),
                          text("rkey"), items)
    except (TypeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise UnreadableCall(f"redis store: stored call {call_id} unreadable: {exc}") from None
