"""The bridge's settings: :class:`ServerConfig`, the checks its combination must pass, and :class:`ConfigError`.

A bad combination is refused before anything starts, in one line saying what to set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from voice_agent.audio.stack import AudioStack
from voice_agent.settings import TransferConfig
from voice_agent.store.base import CallStore
from voice_agent.telephony.fleet import Fleet
from voice_agent.telephony.heap import DEFAULT_YOUNG_THRESHOLD, check_young_threshold
from voice_agent.telephony.providers import HangupCredentials, Provider
from voice_agent.telephony.signatures import DEFAULT_TOLERANCE_SECS
from voice_agent.telephony.webhooks import (
    CREDENTIAL_VARIABLES,
    UNSIGNED_OVERALL,
    UNSIGNED_PER_CLIENT,
    RateLimit,
    webhook_verifier,
)

MAX_WEBHOOK_BYTES = 65536
"""Largest webhook body read."""

MIN_CALLS_TOKEN = 16
"""Shortest ``VOICE_AGENT_CALLS_TOKEN`` accepted."""

GOODBYE_LINE = "I'm sorry, this line has to close now. Please call back in a few minutes. Goodbye."
"""What a call still running at the end of the drain limit hears before it is ended."""


class ConfigError(ValueError):
    """The server configuration cannot work (one-line message)."""


@dataclass
class ServerConfig:
    """How the bridge runs.

    Attributes:
        host: Interface to bind.
        port: Port to bind (0: any free port).
        provider: Which provider's webhooks and streams this server speaks.
        public_url: The public base URL (``https://agent.example.com``) for stream URLs and signatures;
            taken from each request when unset.
        production: Refuse unsigned webhooks (needs the provider's webhook credential: ``TWILIO_AUTH_TOKEN``,
            ``TELNYX_PUBLIC_KEY`` or ``PLIVO_AUTH_TOKEN``) and require ``public_url``.
        credentials: Provider credentials (webhook signatures, optional hang-up).
        max_calls: Concurrent calls (reserved by a webhook or streaming); more are turned away. A reservation's
            slot can be taken over (see :class:`~voice_agent.telephony.registry.CallRegistry`), a streaming
            call's cannot.
        token_ttl_secs: How long a webhook reservation (and its stream token) waits for the stream.
        reservation_grace_secs: How long a reservation is safe from being taken over by a newer webhook.
        leg_lease_secs: With a store: how long a leg holds its call without renewing (renewed every third of
            it). A call whose worker died resumes on a next leg once this lapses; until then the provider's
            webhook for it is sent round again.
        stream_silence_secs: With a store: a stream that sends nothing for this long is taken for a half-open
            connection and its leg given up (providers send media every 20 ms, silence included; generous,
            so a stalled event loop on a busy machine is not mistaken for a lost stream).
        webhook_max_bytes: Larger webhook bodies are refused (413) without being read further.
        webhook_read_timeout_secs: A webhook body that takes longer to arrive is refused (408).
        signature_tolerance_secs: Telnyx: largest distance between the signed timestamp and now.
        unsigned_per_client: Development mode (no credential): each client address's webhook rate limit.
        unsigned_overall: Development mode: the webhook rate limit of all clients together.
        handshake_timeout_secs: Deadline for the stream's ``start`` message.
        max_message_bytes: Larger inbound messages are dropped.
        ws_max_size: Larger WebSocket frames make the server close the connection (1008, a violation).
        max_violations: Dropped messages after which a call is closed (1008).
        send_timeout_secs: A send that blocks longer closes the call (slow client).
        max_call_secs: Calls are ended after this long.
        idle_timeout_secs: A call with no speech either way for this long is cancelled.
        drain_timeout_secs: On SIGTERM, how long active calls may take to finish; calls still running
            then hear ``goodbye_line`` and are ended (recorded as drained).
        goodbye_line: What a call cut by the drain limit hears.
        goodbye_timeout_secs: Longest wait for the goodbye to play before the call is cancelled.
        transcript_dir: Where each call's record is written: ``<call_id>.jsonl`` while it runs (append-only),
            ``<call_id>.json`` at its end (kept in memory only when None).
        transcript_retention_days: Records older than this are deleted at start-up and daily (None: kept).
        calls_token: Bearer token for ``GET /calls``; None turns the listing off (404).
        stack: The audio services.
        socket_send_buffer: SO_SNDBUF for call sockets (smaller: slow clients are detected sooner).
        store: The call store (``store`` settings): each call's state is saved after every turn, a stream that
            ends without a hang-up brings the provider back to ``/voice`` (``<Connect action>``) and the call
            resumes, on this worker or another one on the same store; SIGTERM hands active calls over that
            way instead of waiting for them. None: calls live in memory only.
        fleet: Several workers on one Redis: stream tokens any worker accepts, a fleet-wide call cap and a
            shared call registry (:mod:`voice_agent.telephony.fleet`). None: this worker alone.
        hand_over: On SIGTERM, save each active call and close its stream so the provider brings it back to
            another worker of the same store, instead of letting it finish here. Only right when another
            worker will answer (a fleet, or several workers behind ``voice-agent balance``); None: on in a
            fleet, off otherwise, since a lone worker's hand-over would send the call back to itself.
        transfer: The ``transfer`` settings: where ``transfer_to_human`` moves a call (``target``), where its
            handoff card goes (``card_url``), how long the provider may take. Without a target (or the
            provider's REST credentials) nothing is moved and the agent offers a callback.
        gc_young_threshold: Net allocations between the garbage collector's young collections once warmed up,
            with what start-up left alive frozen out of every collection (:mod:`voice_agent.telephony.heap`):
            full collections pause every call of the process. 0: CPython's collector as it is.
        group_size: In a worker of ``serve --workers N`` on the local fleet: N. The worker then takes new
            connections on the shared socket only while it is the least loaded of the workers accepting, or
            while a worker is missing, until it carries its share (:mod:`voice_agent.telephony.accept_gate`).
            0: it always accepts.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    provider: Provider = Provider.TWILIO
    public_url: str | None = None
    production: bool = False
    credentials: HangupCredentials = field(default_factory=HangupCredentials)
    max_calls: int = 4
    token_ttl_secs: float = 10.0
    leg_lease_secs: float = 6.0
    stream_silence_secs: float = 30.0
    group_size: int = 0
    reservation_grace_secs: float = 3.0
    webhook_max_bytes: int = MAX_WEBHOOK_BYTES
    webhook_read_timeout_secs: float = 10.0
    signature_tolerance_secs: float = DEFAULT_TOLERANCE_SECS
    unsigned_per_client: RateLimit = UNSIGNED_PER_CLIENT
    unsigned_overall: RateLimit = UNSIGNED_OVERALL
    handshake_timeout_secs: float = 5.0
    max_message_bytes: int = 16384
    ws_max_size: int = 65536
    max_violations: int = 50
    send_timeout_secs: float = 5.0
    max_call_secs: int = 3600
    idle_timeout_secs: float | None = 120.0
    drain_timeout_secs: float = 300.0
    goodbye_line: str = GOODBYE_LINE
    goodbye_timeout_secs: float = 15.0
    transcript_dir: Path | None = None
    transcript_retention_days: float | None = 30.0
    calls_token: str | None = None
    stack: AudioStack = field(default_factory=AudioStack)
    socket_send_buffer: int | None = None
    knowledge: bool = True
    store: CallStore | None = None
    fleet: Fleet | None = None
    hand_over: bool | None = None
    gc_young_threshold: int = DEFAULT_YOUNG_THRESHOLD
    transfer: TransferConfig = field(default_factory=TransferConfig)

    @property
    def hands_over(self) -> bool:
        """Whether a drain hands calls over through the store: asked for, or by default in a fleet."""
        if self.store is None:
            return False
        return self.fleet is not None if self.hand_over is None else self.hand_over

    def validate(self) -> None:
        """Checks the combination of settings.

        Raises:
            ConfigError: One line saying what to set.
        """
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be between 0 and 65535, got {self.port}")
        if self.max_calls < 1:
            raise ConfigError("--max-calls must be at least 1")
        if self.drain_timeout_secs < 0:
            raise ConfigError(f"--drain-timeout must be 0 or more seconds, got {self.drain_timeout_secs:g}")
        if self.transcript_retention_days is not None and self.transcript_retention_days <= 0:
            raise ConfigError("--transcript-retention-days must be a positive number of days (0 keeps records forever)")
        if self.calls_token is not None and len(self.calls_token) < MIN_CALLS_TOKEN:
            raise ConfigError(f"VOICE_AGENT_CALLS_TOKEN must be at least {MIN_CALLS_TOKEN} characters "
                              "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        if self.webhook_max_bytes < 1024:
            raise ConfigError("webhook_max_bytes must be at least 1024")
        try:
            check_young_threshold(self.gc_young_threshold)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            verifier = webhook_verifier(self.provider, self.credentials, self.signature_tolerance_secs)
        except ValueError as exc:  # a malformed TELNYX_PUBLIC_KEY
            raise ConfigError(str(exc)) from None
        if self.production:
            if not self.public_url:
                raise ConfigError("production mode needs --public-url (the https URL the provider calls)")
            if verifier is None:
                raise ConfigError(f"production mode needs {CREDENTIAL_VARIABLES[self.provider]} to verify "
                                  f"{self.provider.value} webhook signatures")
