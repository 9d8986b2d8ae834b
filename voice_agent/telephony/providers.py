"""Twilio, Telnyx and Plivo: webhook answers, the stream's ``start`` message, and pipecat's serializers.

All three stream 8 kHz µ-law as JSON text messages with a base64 ``media.payload``. They differ in
the handshake (``connected`` + ``start`` for Twilio and Telnyx, ``start`` alone for Plivo), in where
per-call values travel, and in the REST credentials that let pipecat hang up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape, quoteattr

from loguru import logger

from voice_agent.telephony.twilio import BUSY_MESSAGE, busy_twiml, hangup_twiml, stream_twiml


class Provider(StrEnum):
    """Telephony providers with a media-stream WebSocket."""

    TWILIO = "twilio"
    TELNYX = "telnyx"
    PLIVO = "plivo"


KNOWN_EVENTS: Mapping[Provider, frozenset[str]] = {
    Provider.TWILIO: frozenset({"connected", "start", "media", "dtmf", "mark", "stop"}),
    Provider.TELNYX: frozenset({"connected", "start", "media", "dtmf", "mark", "stop", "error"}),
    Provider.PLIVO: frozenset({"start", "media", "dtmf", "playedStream", "clearedAudio", "stop"}),
}
"""Inbound event types each provider sends; anything else is dropped as unknown."""


@dataclass(frozen=True)
class StreamStart:
    """What the ``start`` message says about the call.

    Attributes:
        provider: Who sent it.
        stream_id: The media stream's id (``streamSid``, ``stream_id``, ``streamId``).
        call_id: The provider's call id (``callSid``, ``call_control_id``, ``callId``).
        parameters: Custom parameters (Twilio ``customParameters``, Plivo ``extra_headers``).
        encoding: Inbound audio encoding as the provider names it.
        raw: The message itself.
    """

    provider: Provider
    stream_id: str
    call_id: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    encoding: str = "PCMU"
    raw: Mapping[str, Any] = field(default_factory=dict)


class HandshakeError(ValueError):
    """The stream did not open the way the provider's protocol says."""


def parse_start(message: Mapping[str, Any], provider: Provider) -> StreamStart:
    """Reads a ``start`` message of ``provider``.

    Raises:
        HandshakeError: A required field is missing or of the wrong type.
    """
    start = message.get("start")
    if not isinstance(start, Mapping):
        raise HandshakeError("start message without a 'start' object")

    def text(source: Mapping[str, Any], key: str) -> str:
        value = source.get(key)
        if not isinstance(value, str) or not value or len(value) > 128:
            raise HandshakeError(f"start message without a valid {key!r}")
        return value

    if provider is Provider.TWILIO:
        custom = start.get("customParameters") or {}
        if not isinstance(custom, Mapping):
            raise HandshakeError("customParameters must be an object")
        fmt = start.get("mediaFormat") or {}
        encoding = str(fmt.get("encoding", "audio/x-mulaw")) if isinstance(fmt, Mapping) else "audio/x-mulaw"
        if encoding != "audio/x-mulaw":
            raise HandshakeError(f"unsupported media encoding {encoding!r} (Twilio streams audio/x-mulaw)")
        return StreamStart(provider, text(start, "streamSid"), text(start, "callSid"),
                           {str(k): str(v) for k, v in custom.items()}, "PCMU", message)
    if provider is Provider.TELNYX:
        fmt = start.get("media_format") or {}
        encoding = str(fmt.get("encoding", "PCMU")) if isinstance(fmt, Mapping) else "PCMU"
        if encoding not in ("PCMU", "PCMA"):
            raise HandshakeError(f"unsupported media encoding {encoding!r} (PCMU or PCMA)")
        custom = start.get("custom_parameters") or {}
        params = {str(k): str(v) for k, v in custom.items()} if isinstance(custom, Mapping) else {}
        return StreamStart(provider, text(message, "stream_id"), text(start, "call_control_id"), params, encoding,
                           message)
    headers = message.get("extra_headers") or start.get("extra_headers") or ""
    params = dict(parse_qsl(headers.replace(";", "&"))) if isinstance(headers, str) else {}
    return StreamStart(provider, text(start, "streamId"), text(start, "callId"), params, "PCMU", message)


def stream_instruction(
    provider: Provider, stream_url: str, parameters: Mapping[str, str], action_url: str | None = None
) -> tuple[str, str]:
    """The webhook answer that connects the call to ``stream_url``: (body, media type).

    Twilio gets ``<Parameter>`` elements; Telnyx and Plivo get the values in the URL's query string.

    ``action_url`` brings the provider back to the webhook when the stream ends without a hang-up (a
    worker that stopped, a drain handing the call over), with the same call id: the resume path.
    Twilio: ``<Connect action>`` (requested when the verb ends, with the call's standard parameters).
    Telnyx: ``<Connect>`` runs the stream synchronously and then the following verbs, so a
    ``<Redirect>`` after it. Plivo: ``<Stream keepCallAlive="true">`` holds the XML until the stream
    ends, then the next element runs: a ``<Redirect>`` after it.
    """
    if provider is Provider.TWILIO:
        return stream_twiml(stream_url, parameters, action_url), "application/xml"
    query = "&".join(f"{k}={v}" for k, v in parameters.items())
    url = f"{stream_url}?{query}" if query else stream_url
    redirect = f'<Redirect method="POST">{escape(action_url)}</Redirect>' if action_url else ""
    if provider is Provider.TELNYX:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f'<Stream url={quoteattr(url)} bidirectionalMode="rtp"></Stream></Connect>{redirect}</Response>'
        )
        return body, "application/xml"
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><Response>'
        '<Stream bidirectional="true" keepCallAlive="true" contentType="audio/x-mulaw;rate=8000">'
        f"{escape(url)}</Stream>{redirect}</Response>"
    )
    return body, "application/xml"


def retry_instruction(provider: Provider, url: str, pause_secs: int = 1) -> tuple[str, str]:
    """The answer that sends the provider to ``url`` again after a pause (a draining worker passing a resume on)."""
    wait = f'<Wait length="{pause_secs}"/>' if provider is Provider.PLIVO else f'<Pause length="{pause_secs}"/>'
    redirect = f'<Redirect method="POST">{escape(url)}</Redirect>'
    return f'<?xml version="1.0" encoding="UTF-8"?><Response>{wait}{redirect}</Response>', "application/xml"


def hangup_instruction(provider: Provider) -> tuple[str, str]:
    """The answer that ends a call the store says is over (the provider asked again after its stream)."""
    if provider is Provider.PLIVO:
        return '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>', "application/xml"
    return hangup_twiml(), "application/xml"


def busy_instruction(provider: Provider, message: str = BUSY_MESSAGE) -> tuple[str, str]:
    """The webhook answer that turns a caller away politely: (body, media type)."""
    if provider is Provider.PLIVO:
        body = f'<?xml version="1.0" encoding="UTF-8"?><Response><Speak>{escape(message)}</Speak><Hangup/></Response>'
        return body, "application/xml"
    return busy_twiml(message), "application/xml"


@dataclass(frozen=True)
class HangupCredentials:
    """REST credentials that let pipecat's serializer hang up and the bridge transfer a call; all optional.

    Attributes:
        twilio_account_sid: ``TWILIO_ACCOUNT_SID``.
        twilio_auth_token: ``TWILIO_AUTH_TOKEN`` (also validates webhook signatures).
        twilio_base_url: Another Twilio-compatible REST root (tests, self-hosted).
        telnyx_api_key: ``TELNYX_API_KEY``.
        telnyx_base_url: Another Telnyx REST root (``TELNYX_API_BASE_URL``; tests).
        telnyx_public_key: ``TELNYX_PUBLIC_KEY``, base64: verifies Telnyx's Ed25519 webhook signatures.
        plivo_auth_id: ``PLIVO_AUTH_ID``.
        plivo_auth_token: ``PLIVO_AUTH_TOKEN`` (also validates Plivo's V3 webhook signatures).
        plivo_base_url: Another Plivo REST root (``PLIVO_API_BASE_URL``; tests).
    """

    twilio_account_sid: str | None = None
    twilio_auth_token: str | None = None
    twilio_base_url: str | None = None
    telnyx_api_key: str | None = None
    telnyx_public_key: str | None = None
    plivo_auth_id: str | None = None
    plivo_auth_token: str | None = None
    telnyx_base_url: str | None = None
    plivo_base_url: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HangupCredentials:
        """Reads the providers' usual environment variables."""
        env = os.environ if environ is None else environ
        return cls(
            twilio_account_sid=env.get("TWILIO_ACCOUNT_SID") or None,
            twilio_auth_token=env.get("TWILIO_AUTH_TOKEN") or None,
            twilio_base_url=env.get("TWILIO_API_BASE_URL") or None,
            telnyx_api_key=env.get("TELNYX_API_KEY") or None,
            telnyx_public_key=env.get("TELNYX_PUBLIC_KEY") or None,
            plivo_auth_id=env.get("PLIVO_AUTH_ID") or None,
            plivo_auth_token=env.get("PLIVO_AUTH_TOKEN") or None,
            telnyx_base_url=env.get("TELNYX_API_BASE_URL") or None,
            plivo_base_url=env.get("PLIVO_API_BASE_URL") or None,
        )

    def can_hang_up(self, provider: Provider) -> bool:
        """Whether ``provider``'s REST hang-up is configured."""
        if provider is Provider.TWILIO:
            return bool(self.twilio_account_sid and self.twilio_auth_token)
        if provider is Provider.TELNYX:
            return bool(self.telnyx_api_key)
        return bool(self.plivo_auth_id and self.plivo_auth_token)


_hangup_notice_logged: set[Provider] = set()


def make_serializer(start: StreamStart, credentials: HangupCredentials) -> Any:
    """pipecat's serializer for the call; auto hang-up only when the provider's credentials are set.

    Without credentials the call is left to the caller or the provider to end (logged once per provider).
    Inbound audio is up-sampled by :class:`~voice_agent.telephony.resampling.LowLatencyResampler`
    (pipecat's default holds back up to 100 ms of the caller's audio, which every reply waits for).
    """
    from voice_agent.telephony.resampling import use_low_latency_input

    serializer = _provider_serializer(start, credentials)
    use_low_latency_input(serializer)
    return serializer


def _provider_serializer(start: StreamStart, credentials: HangupCredentials) -> Any:
    hang_up = credentials.can_hang_up(start.provider)
    if not hang_up and start.provider not in _hangup_notice_logged:
        _hangup_notice_logged.add(start.provider)
        logger.info("{}: no REST credentials, automatic hang-up is off (the caller or provider ends calls)",
                    start.provider.value)
    if start.provider is Provider.TWILIO:
        from pipecat.serializers.twilio import TwilioFrameSerializer

        return TwilioFrameSerializer(
            start.stream_id, start.call_id,
            account_sid=credentials.twilio_account_sid if hang_up else None,
            auth_token=credentials.twilio_auth_token if hang_up else None,
            base_url=credentials.twilio_base_url,
            params=TwilioFrameSerializer.InputParams(auto_hang_up=hang_up),
        )
    if start.provider is Provider.TELNYX:
        from pipecat.serializers.telnyx import TelnyxFrameSerializer

        return TelnyxFrameSerializer(
            start.stream_id, start.encoding, start.encoding,
            call_control_id=start.call_id if hang_up else None,
            api_key=credentials.telnyx_api_key if hang_up else None,
            params=TelnyxFrameSerializer.InputParams(
                inbound_encoding=start.encoding, outbound_encoding=start.encoding, auto_hang_up=hang_up
            ),
        )
    from pipecat.serializers.plivo import PlivoFrameSerializer

    return PlivoFrameSerializer(
        start.stream_id, start.call_id if hang_up else None,
        auth_id=credentials.plivo_auth_id if hang_up else None,
        auth_token=credentials.plivo_auth_token if hang_up else None,
        params=PlivoFrameSerializer.InputParams(auto_hang_up=hang_up),
    )
