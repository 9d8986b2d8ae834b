"""Twilio specifics: webhook request signatures and the TwiML the voice webhook answers with."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit
from xml.sax.saxutils import escape, quoteattr

SIGNATURE_HEADER = "X-Twilio-Signature"
"""The header Twilio signs every webhook request with."""

BUSY_MESSAGE = "Sorry, all of our agents are busy right now. Please call again in a few minutes. Goodbye."
"""What a caller hears when the server is at capacity or shutting down."""


def compute_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]] = ()) -> str:
    """Twilio's request signature: base64(HMAC-SHA1(auth token, URL + each POST key and value, sorted)).

    Args:
        auth_token: The account's auth token.
        url: The full URL Twilio requested, query string included.
        params: The POST form fields (for a GET request, none: the query is part of the URL).

    Returns:
        The value Twilio puts in ``X-Twilio-Signature``.
    """
    payload = url + "".join(key + value for key, value in sorted(params))
    digest = hmac.new(auth_token.encode("utf-8"), payload.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def _url_variants(url: str) -> list[str]:
    """The URL as given, and with the scheme's default port added or removed (Twilio signs either)."""
    parts = urlsplit(url)
    default = {"https": 443, "http": 80, "wss": 443, "ws": 80}.get(parts.scheme)
    variants = [url]
    host = parts.hostname or ""
    if parts.port is None and default is not None:
        variants.append(urlunsplit(parts._replace(netloc=f"{host}:{default}")))
    elif parts.port == default:
        variants.append(urlunsplit(parts._replace(netloc=host)))
    return variants


def validate_signature(
    auth_token: str, url: str, params: Sequence[tuple[str, str]], signature: str | None
) -> bool:
    """Whether ``signature`` is Twilio's signature of this request (constant-time comparison).

    Args:
        auth_token: The account's auth token.
        url: The full public URL of the request.
        params: The POST form fields.
        signature: The ``X-Twilio-Signature`` header, or None when absent (never valid).
    """
    if not signature:
        return False
    return any(
        hmac.compare_digest(compute_signature(auth_token, candidate, params), signature)
        for candidate in _url_variants(url)
    )


def stream_twiml(stream_url: str, parameters: Mapping[str, str], action_url: str | None = None) -> str:
    """TwiML that connects the call to a bidirectional Media Stream with custom parameters.

    Twilio does not pass a query string on to the stream, so per-call values travel as
    ``<Parameter>`` elements and arrive in the ``start`` message's ``customParameters``.

    Args:
        stream_url: The ``wss://`` stream URL.
        parameters: Custom parameters.
        action_url: ``<Connect action>``: when the stream ends without a hang-up (the worker stopped, a
            drain handed the call over), Twilio requests this URL with the call's standard parameters
            and plays the TwiML it answers: the resume path. Without it Twilio would go on to the next
            verb (none: the call ends).
    """
    params = "".join(f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in parameters.items())
    action = f" action={quoteattr(action_url)} method=\"POST\"" if action_url else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect{action}><Stream url={quoteattr(stream_url)}>{params}</Stream></Connect></Response>"
    )


def hangup_twiml() -> str:
    """TwiML that ends the call (a call the store says is over, asked for again by a ``<Connect action>``)."""
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>'


def busy_twiml(message: str = BUSY_MESSAGE) -> str:
    """TwiML that apologises and hangs up (the caller hears a message, not a dead line)."""
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Say>{escape(message)}</Say><Hangup/></Response>'
