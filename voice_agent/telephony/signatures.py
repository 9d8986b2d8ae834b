"""Telnyx and Plivo webhook signatures (pure functions; Twilio's are in :mod:`voice_agent.telephony.twilio`).

- Telnyx signs ``timestamp + "|" + raw body`` with Ed25519. The signature travels base64-encoded in
  ``telnyx-signature-ed25519``, the Unix timestamp in ``telnyx-timestamp``; the account's public key
  (Mission Control, base64 of the 32 raw key bytes) verifies it. A timestamp further than the tolerance
  (default 300 s) from now is refused, so a captured request cannot be replayed later.
- Plivo's V3 signature (``X-Plivo-Signature-V3``, with ``X-Plivo-Signature-V3-Nonce``) is
  base64(HMAC-SHA256(auth token, signed URL + "." + nonce)), built as plivo-python's
  ``validate_v3_signature`` builds it for a POST: the URL without its query, then ``?``, then the query
  parameters sorted by key (``key=value`` joined by ``&``; values of one key sorted), then ``.`` if
  there was a query, then the POST parameters sorted by key as ``keyvalue`` with no separator. Without
  POST parameters the URL is the base plus ``?`` and the sorted query, if any. The header may carry
  several comma-separated signatures (one per active auth token); any match is genuine.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qsl, urlparse, urlunparse

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TELNYX_SIGNATURE_HEADER = "telnyx-signature-ed25519"
TELNYX_TIMESTAMP_HEADER = "telnyx-timestamp"
PLIVO_SIGNATURE_HEADER = "X-Plivo-Signature-V3"
PLIVO_MAIN_ACCOUNT_SIGNATURE_HEADER = "X-Plivo-Signature-Ma-V3"
"""Signed with the main account's token when the application belongs to a subaccount."""
PLIVO_NONCE_HEADER = "X-Plivo-Signature-V3-Nonce"

DEFAULT_TOLERANCE_SECS = 300.0
"""How far a Telnyx timestamp may be from now (either way)."""

_MAX_HEADER_CHARS = 2048


# --- Telnyx ----------------------------------------------------------------------------------------------------------


def load_telnyx_public_key(encoded: str) -> Ed25519PublicKey:
    """The Ed25519 key of ``TELNYX_PUBLIC_KEY`` (base64 of the 32 raw key bytes).

    Raises:
        ValueError: Not base64, or not 32 bytes.
    """
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("is not base64") from exc
    if len(raw) != 32:
        raise ValueError(f"decodes to {len(raw)} bytes, an Ed25519 public key has 32")
    return Ed25519PublicKey.from_public_bytes(raw)


def check_telnyx_signature(
    public_key: Ed25519PublicKey, body: bytes, signature: str | None, timestamp: str | None, *,
    tolerance: float = DEFAULT_TOLERANCE_SECS, now: float | None = None,
) -> str | None:
    """Why this is not a genuine Telnyx request, or None when it is.

    Args:
        public_key: The account's webhook public key.
        body: The raw request body, exactly as received.
        signature: The ``telnyx-signature-ed25519`` header (base64).
        timestamp: The ``telnyx-timestamp`` header (Unix seconds).
        tolerance: Largest accepted distance between the timestamp and now, in seconds.
        now: The current time (epoch seconds; tests).
    """
    if not signature or not timestamp:
        return "missing signature"
    if len(signature) > _MAX_HEADER_CHARS or not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) < 16):
        return "malformed signature"
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        return "timestamp outside the tolerance window"
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return "malformed signature"
    if len(raw) != 64:
        return "malformed signature"
    try:
        public_key.verify(raw, timestamp.encode("ascii") + b"|" + body)
    except InvalidSignature:
        return "invalid signature"
    return None


# --- Plivo -----------------------------------------------------------------------------------------------------------


def _grouped(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return grouped


def plivo_signed_url(url: str, params: Sequence[tuple[str, str]] = ()) -> str:
    """The string Plivo's V3 signature covers, before ``"." + nonce`` (see the module docstring).

    Args:
        url: The full URL Plivo requested, query string included.
        params: The POST form fields (none for a GET).
    """
    parts = urlparse(url)
    base = urlunparse((parts.scheme, parts.netloc, parts.path, "", "", ""))
    query = _grouped(parse_qsl(parts.query, keep_blank_values=True))
    query_string = "&".join(f"{key}={value}" for key in sorted(query) for value in sorted(query[key]))
    if not params:
        return f"{base}?{query_string}" if query_string else base
    posted = _grouped(params)
    fields = "".join(f"{key}{value}" for key in sorted(posted) for value in sorted(posted[key]))
    return f"{base}?{query_string}{'.' if query_string else ''}{fields}"


def _plivo_digest(auth_token: str, message: bytes) -> str:
    return base64.b64encode(hmac.new(auth_token.encode("utf-8"), message, hashlib.sha256).digest()).decode("ascii")


def compute_plivo_signature(auth_token: str, url: str, nonce: str, params: Sequence[tuple[str, str]] = ()) -> str:
    """Plivo's V3 signature of a request (the value of ``X-Plivo-Signature-V3``)."""
    return _plivo_digest(auth_token, f"{plivo_signed_url(url, params)}.{nonce}".encode())


def check_plivo_signature(
    auth_token: str, url: str, params: Sequence[tuple[str, str]], signatures: Sequence[str | None], nonce: str | None,
) -> str | None:
    """Why this is not a genuine Plivo request, or None when it is (constant-time comparisons).

    Args:
        auth_token: ``PLIVO_AUTH_TOKEN``.
        url: The full public URL of the request.
        params: The POST form fields.
        signatures: The ``X-Plivo-Signature-V3`` (and ``-Ma-V3``) headers, None when absent; each may
            list several comma-separated signatures.
        nonce: The ``X-Plivo-Signature-V3-Nonce`` header.
    """
    offered = [s.strip() for header in signatures if header for s in header.split(",") if s.strip()]
    if not offered or not nonce:
        return "missing signature"
    if len(nonce) > _MAX_HEADER_CHARS or len(offered) > 8:
        return "malformed signature"
    message = f"{plivo_signed_url(url, params)}.{nonce}".encode()
    messages = [message]
    if not message.isascii():
        # plivo-python reads the UTF-8 URL back one byte per character before encoding it again
        # (non-ASCII fields end up encoded twice); Plivo's own signer may do either.
        messages.append(message.decode("latin-1").encode("utf-8"))
    expected = [_plivo_digest(auth_token, m) for m in messages]
    matched = False
    for candidate in offered:
        for digest in expected:
            matched |= hmac.compare_digest(candidate.encode("utf-8"), digest.encode("ascii"))
    return None if matched else "invalid signature"
