"""What stands between a stranger and the voice webhook: a capped body read, signatures, a rate limit.

- :func:`read_capped_body` streams the body and stops at the limit (413 before anything is parsed
  or verified); a declared ``Content-Length`` over the limit is refused before a byte is read.
- :class:`WebhookVerifier` checks the chosen provider's signature: Twilio ``X-Twilio-Signature``
  (``TWILIO_AUTH_TOKEN``), Telnyx Ed25519 (``TELNYX_PUBLIC_KEY``), Plivo V3 (``PLIVO_AUTH_TOKEN``).
- :class:`WebhookRateLimiter` throttles unsigned webhooks (development mode, no credential): one
  token bucket per client address and one for everybody.
- :class:`RefusalLog` counts refusals and logs them at most every few seconds (a flood of forged
  requests does not become a flood of log lines).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from loguru import logger
from starlette.requests import ClientDisconnect, Request

from voice_agent.telephony.providers import HangupCredentials, Provider
from voice_agent.telephony.signatures import (
    DEFAULT_TOLERANCE_SECS,
    PLIVO_MAIN_ACCOUNT_SIGNATURE_HEADER,
    PLIVO_NONCE_HEADER,
    PLIVO_SIGNATURE_HEADER,
    TELNYX_SIGNATURE_HEADER,
    TELNYX_TIMESTAMP_HEADER,
    check_plivo_signature,
    check_telnyx_signature,
    load_telnyx_public_key,
)
from voice_agent.telephony.twilio import SIGNATURE_HEADER as TWILIO_SIGNATURE_HEADER
from voice_agent.telephony.twilio import _url_variants
from voice_agent.telephony.twilio import validate_signature as validate_twilio_signature

CREDENTIAL_VARIABLES: Mapping[Provider, str] = {
    Provider.TWILIO: "TWILIO_AUTH_TOKEN",
    Provider.TELNYX: "TELNYX_PUBLIC_KEY",
    Provider.PLIVO: "PLIVO_AUTH_TOKEN",
}
"""The environment variable that holds each provider's webhook-signing credential."""


# --- body ------------------------------------------------------------------------------------------------------------


class WebhookBodyError(Exception):
    """The body could not be read within the limits; ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_capped_body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, read chunk by chunk and never buffered past ``limit`` bytes.

    Raises:
        WebhookBodyError: 413 when the body (declared or read so far) exceeds ``limit``; 408 when it
            does not arrive within ``timeout`` seconds; 400 for a bad ``Content-Length`` or a client
            that went away.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise WebhookBodyError(400, "bad content-length")
        if int(declared) > limit:
            raise WebhookBodyError(413, "request too large")
    received = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                if len(received) + len(chunk) > limit:
                    raise WebhookBodyError(413, "request too large")
                received += chunk
    except TimeoutError:
        raise WebhookBodyError(408, "request body too slow") from None
    except ClientDisconnect:
        raise WebhookBodyError(400, "client went away") from None
    return bytes(received)


# --- signatures ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookVerifier:
    """Checks one provider's webhook signatures.

    Attributes:
        provider: Whose signatures.
        secret: The Twilio or Plivo auth token (Telnyx: unused, see ``telnyx_key``).
        telnyx_key: The Telnyx public key.
        tolerance: Telnyx timestamp tolerance, seconds.
    """

    provider: Provider
    secret: str = ""
    telnyx_key: Ed25519PublicKey | None = None
    tolerance: float = DEFAULT_TOLERANCE_SECS

    def problem(self, url: str, headers: Mapping[str, str], body: bytes,
                params: Sequence[tuple[str, str]]) -> str | None:
        """Why the request is not genuine (``missing signature``, ``invalid signature``, ...), or None.

        Args:
            url: The full public URL of the request (query included).
            headers: The request headers (case-insensitive mapping).
            body: The raw body.
            params: The body's form fields.
        """
        if self.provider is Provider.TWILIO:
            signature = headers.get(TWILIO_SIGNATURE_HEADER)
            if not signature:
                return "missing signature"
            return None if validate_twilio_signature(self.secret, url, params, signature) else "invalid signature"
        if self.provider is Provider.TELNYX:
            assert self.telnyx_key is not None
            return check_telnyx_signature(self.telnyx_key, body, headers.get(TELNYX_SIGNATURE_HEADER),
                                          headers.get(TELNYX_TIMESTAMP_HEADER), tolerance=self.tolerance)
        signatures = [headers.get(PLIVO_SIGNATURE_HEADER), headers.get(PLIVO_MAIN_ACCOUNT_SIGNATURE_HEADER)]
        nonce = headers.get(PLIVO_NONCE_HEADER)
        # Like Twilio's, the URL may be signed with or without the scheme's default port.
        results = [check_plivo_signature(self.secret, candidate, params, signatures, nonce)
                   for candidate in _url_variants(url)]
        return None if None in results else results[0]


def webhook_verifier(provider: Provider, credentials: HangupCredentials,
                     tolerance: float = DEFAULT_TOLERANCE_SECS) -> WebhookVerifier | None:
    """The verifier for ``provider``, or None when its credential is not configured (development mode).

    Raises:
        ValueError: ``TELNYX_PUBLIC_KEY`` is set but is not a base64 Ed25519 public key (one line).
    """
    if provider is Provider.TWILIO:
        token = credentials.twilio_auth_token
        return WebhookVerifier(provider, token) if token else None
    if provider is Provider.TELNYX:
        encoded = credentials.telnyx_public_key
        if not encoded:
            return None
        try:
            key = load_telnyx_public_key(encoded)
        except ValueError as exc:
            raise ValueError(f"TELNYX_PUBLIC_KEY {exc} (set the base64 public key from the Telnyx portal)") from None
        return WebhookVerifier(provider, telnyx_key=key, tolerance=tolerance)
    token = credentials.plivo_auth_token
    return WebhookVerifier(provider, token) if token else None


# --- rate limits -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateLimit:
    """A token bucket's shape: ``burst`` requests at once, refilled at ``rate`` per second."""

    rate: float
    burst: int


UNSIGNED_PER_CLIENT = RateLimit(rate=1.0, burst=20)
"""Development mode: what one client address may send (a 12-call load test on loopback fits the burst)."""

UNSIGNED_OVERALL = RateLimit(rate=5.0, burst=50)
"""Development mode: what all clients together may send."""


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp

    def refill(self, limit: RateLimit, now: float) -> None:
        self.tokens = min(float(limit.burst), self.tokens + max(0.0, now - self.stamp) * limit.rate)
        self.stamp = max(self.stamp, now)


class WebhookRateLimiter:
    """Token buckets for unsigned webhooks: one per client address (LRU-bounded) and one global.

    A request is let through only when both buckets have a token, and then takes one from each; a
    refused request takes nothing, so one noisy client does not drain the global bucket.

    Args:
        per_client: Each client address's bucket.
        overall: The bucket every client shares.
        max_clients: Client buckets remembered (the least recently seen are forgotten).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, per_client: RateLimit, overall: RateLimit, max_clients: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_client = per_client
        self.overall = overall
        self.max_clients = max_clients
        self.clock = clock
        self._global = _Bucket(float(overall.burst), clock())
        self._clients: OrderedDict[str, _Bucket] = OrderedDict()
        self.refused = 0

    def allow(self, client: str) -> bool:
        """Whether a webhook from ``client`` may go on now (takes a token when it may)."""
        current = self.clock()
        bucket = self._clients.get(client)
        if bucket is None:
            bucket = _Bucket(float(self.per_client.burst), current)
            self._clients[client] = bucket
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(client)
        bucket.refill(self.per_client, current)
        self._global.refill(self.overall, current)
        if bucket.tokens < 1 or self._global.tokens < 1:
            self.refused += 1
            return False
        bucket.tokens -= 1
        self._global.tokens -= 1
        return True


class RefusalLog:
    """Logs refused webhooks without letting a flood flood the log: the first at once, then a count.

    Args:
        interval: Seconds between summary lines.
    """

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self.counts: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._last = float("-inf")

    def note(self, reason: str, now: float | None = None) -> None:
        """Counts one refusal; logs when the last line is ``interval`` seconds old."""
        current = time.monotonic() if now is None else now
        self.counts[reason] = self.counts.get(reason, 0) + 1
        self._pending[reason] = self._pending.get(reason, 0) + 1
        if current - self._last < self.interval:
            return
        self._last = current
        summary = ", ".join(f"{count} {why}" for why, count in sorted(self._pending.items()))
        self._pending.clear()
        logger.warning("webhook: refused {}", summary)
