"""The transfer of a served call: the provider request that moves the phone call to the transfer target.

One request per provider, each its documented way of moving a live call:

* Twilio: the call is updated with new TwiML (``POST /2010-04-01/Accounts/{sid}/Calls/{CallSid}.json``,
  ``Twiml=<Response><Say>..</Say><Dial>..</Dial></Response>``). Twilio leaves the media stream at once and
  plays the new TwiML: the caller hears :data:`TRANSFER_LINE`, then the target rings.
* Telnyx: the call-control ``transfer`` action (``POST /v2/calls/{call_control_id}/actions/transfer``,
  ``{"to": target}``), bearer ``TELNYX_API_KEY``.
* Plivo: the call transfer API (``POST /v1/Account/{auth_id}/Call/{call_uuid}/``, ``legs=aleg``,
  ``aleg_url``): Plivo fetches the XML at ``aleg_url`` (served by the bridge, :func:`plivo_xml`) and plays it.

The handoff card does not fit in the transfer itself: a phone number carries no headers, and SIP header
lines are capped (about 1 KB in practice) while a card is several. So the card is posted as JSON to
``transfer.card_url`` before the call is moved, and a SIP target also gets the call's id in the
:data:`CALL_HEADER` header of its INVITE, which the person's desk matches to the card.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

import aiohttp
from loguru import logger

from voice_agent.core.transfer import TransferError
from voice_agent.settings import TransferConfig
from voice_agent.telephony.providers import HangupCredentials, Provider

TRANSFER_LINE = "Please hold while I put you through to a colleague."
"""What the caller hears from the provider between the bot and the target (Twilio ``<Say>``, Plivo ``<Speak>``)."""

CALL_HEADER = "X-Voice-Agent-Call"
"""The SIP header that carries our call id to a SIP target (Plivo adds its ``X-PH-`` prefix to its own)."""

API_ROOTS: Mapping[Provider, str] = {
    Provider.TWILIO: "https://api.twilio.com",
    Provider.TELNYX: "https://api.telnyx.com",
    Provider.PLIVO: "https://api.plivo.com",
}
"""Each provider's REST root (another one, e.g. a local fake, through ``*_API_BASE_URL``)."""


def is_sip(target: str) -> bool:
    """Whether the transfer target is a SIP address (else an E.164 number)."""
    return target.startswith(("sip:", "sips:"))


def twilio_twiml(target: str, call_id: str) -> str:
    """The TwiML a Twilio call is updated with: the line, then ``<Dial>`` to the target."""
    if is_sip(target):
        joiner = "&" if "?" in target else "?"
        dialled = f"<Sip>{escape(f'{target}{joiner}{CALL_HEADER}={call_id}')}</Sip>"
    else:
        dialled = f"<Number>{escape(target)}</Number>"
    return f"<Response><Say>{escape(TRANSFER_LINE)}</Say><Dial>{dialled}</Dial></Response>"


def plivo_xml(target: str, call_id: str) -> str:
    """The XML Plivo plays on the transferred call (from ``aleg_url``): the line, then ``<Dial>`` to the target."""
    if is_sip(target):
        header = quoteattr(f"{CALL_HEADER.removeprefix('X-').replace('-', '')}={call_id}")
        dial = f"<Dial sipHeaders={header}><User>{escape(target)}</User></Dial>"
    else:
        dial = f"<Dial><Number>{escape(target)}</Number></Dial>"
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Speak>{escape(TRANSFER_LINE)}</Speak>{dial}</Response>'


def missing_credentials(provider: Provider, credentials: HangupCredentials) -> str | None:
    """The variables a transfer through ``provider`` still needs, or None when it has them."""
    if credentials.can_hang_up(provider):
        return None
    return {
        Provider.TWILIO: "TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN",
        Provider.TELNYX: "TELNYX_API_KEY",
        Provider.PLIVO: "PLIVO_AUTH_ID and PLIVO_AUTH_TOKEN",
    }[provider]


async def request_transfer(
    http: aiohttp.ClientSession, provider: Provider, credentials: HangupCredentials, provider_call_id: str,
    target: str, call_id: str, plivo_url: str | None = None,
) -> None:
    """Asks ``provider`` to move the call ``provider_call_id`` to ``target``; returns once it accepted.

    Args:
        http: The client session (its timeout bounds the request).
        provider: Whose API.
        credentials: The provider's REST credentials (and REST root).
        provider_call_id: ``CallSid``, ``call_control_id`` or ``CallUUID``.
        target: The transfer target.
        call_id: Our call id (the SIP header of a SIP target).
        plivo_url: Plivo: the ``aleg_url`` serving :func:`plivo_xml`.

    Raises:
        TransferError: The provider answered an error, or did not answer.
    """
    root = (_root(provider, credentials)).rstrip("/")
    # The provider's call id came from a webhook: one path segment, never a path of its own ("id/actions/hangup").
    provider_call_id = quote(provider_call_id, safe="")
    if not provider_call_id:
        raise TransferError(f"{provider.value}: the call has no provider call id to move")
    if provider is Provider.TWILIO:
        sid, token = credentials.twilio_account_sid or "", credentials.twilio_auth_token or ""
        url = f"{root}/2010-04-01/Accounts/{sid}/Calls/{provider_call_id}.json"
        request = http.post(url, data={"Twiml": twilio_twiml(target, call_id)}, headers=_basic(sid, token))
    elif provider is Provider.TELNYX:
        body: dict[str, Any] = {"to": target}
        if is_sip(target):
            body["custom_headers"] = [{"name": CALL_HEADER, "value": call_id}]
        url = f"{root}/v2/calls/{provider_call_id}/actions/transfer"
        request = http.post(url, json=body, headers={"Authorization": f"Bearer {credentials.telnyx_api_key}"})
    else:
        auth_id, token = credentials.plivo_auth_id or "", credentials.plivo_auth_token or ""
        url = f"{root}/v1/Account/{auth_id}/Call/{provider_call_id}/"
        form = {"legs": "aleg", "aleg_url": plivo_url or "", "aleg_method": "POST"}
        request = http.post(url, json=form, headers=_basic(auth_id, token))
    try:
        async with request as reply:
            if reply.status >= 300:
                text = (await reply.text())[:160].replace("\n", " ")
                raise TransferError(f"{provider.value} answered HTTP {reply.status}: {text}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransferError(f"{provider.value} did not answer ({type(exc).__name__}: {exc})") from None


def _basic(user: str, password: str) -> dict[str, str]:
    """HTTP Basic auth, written out (aiohttp's helper for it is deprecated)."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")}


def _root(provider: Provider, credentials: HangupCredentials) -> str:
    given = {
        Provider.TWILIO: credentials.twilio_base_url,
        Provider.TELNYX: credentials.telnyx_base_url,
        Provider.PLIVO: credentials.plivo_base_url,
    }[provider]
    return given or API_ROOTS[provider]


async def post_card(http: aiohttp.ClientSession, url: str, payload: Mapping[str, Any]) -> str | None:
    """Posts the handoff card to ``transfer.card_url``; returns why it failed, or None."""
    try:
        # No redirects: the card holds the caller's details and goes to the configured address only.
        async with http.post(url, data=json.dumps(payload, default=str), allow_redirects=False,
                             headers={"Content-Type": "application/json"}) as reply:
            if reply.status >= 300:
                return f"card_url answered HTTP {reply.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"card_url did not answer ({type(exc).__name__})"
    return None


class ProviderTransfer:
    """One served call's line to its provider (a :class:`~voice_agent.core.transfer.CallTransfer`).

    The provider request runs in a task of its own, shielded from the call's pipeline: a provider that
    ends the media stream as soon as it accepts (Twilio does) makes the bridge cancel the pipeline, and
    with it the tool call waiting here; the transfer must still be recorded.

    Args:
        provider: The call's provider.
        credentials: Its REST credentials.
        settings: The ``transfer`` settings.
        provider_call_id: The provider's id of the call.
        call_id: Our call id.
        plivo_url: Plivo: the ``aleg_url`` the bridge serves the call's transfer XML at.
        transferred: Awaited once the provider accepted (the bridge records it and ends the stream).
        failed: Called with the reason when the provider did not accept (the bridge records the error).
        moving: Called with True before the provider is asked, False if it refused: while the call is being
            moved, the end of its stream must not hang it up (the provider ends the stream as it moves it).
    """

    def __init__(
        self, provider: Provider, credentials: HangupCredentials, settings: TransferConfig, provider_call_id: str,
        call_id: str, *, plivo_url: str | None = None,
        transferred: Callable[[str], Awaitable[None]] | None = None, failed: Callable[[str], None] | None = None,
        moving: Callable[[bool], None] | None = None,
    ) -> None:
        self.provider = provider
        self.credentials = credentials
        self.settings = settings
        self.provider_call_id = provider_call_id
        self.call_id = call_id
        self.plivo_url = plivo_url
        self._transferred = transferred
        self._failed = failed
        self._moving = moving
        self._task: asyncio.Task[None] | None = None

    @property
    def target(self) -> str | None:
        """The transfer target, or None when none is set or the provider's credentials are missing."""
        if missing_credentials(self.provider, self.credentials) is not None:
            return None
        return self.settings.target

    async def transfer(self, card: Mapping[str, Any]) -> None:
        """Posts the card (when ``card_url`` is set), then moves the call to the target.

        Raises:
            TransferError: The provider did not accept the transfer; the call goes on.
        """
        if self.target is None:
            raise TransferError("no transfer target")
        self._task = asyncio.get_running_loop().create_task(self._run(dict(card)), name=f"transfer-{self.call_id}")
        await asyncio.shield(self._task)

    async def settled(self) -> None:
        """Waits for a transfer in flight to be accepted or refused (the bridge, before it records the call's end)."""
        if self._task is not None and not self._task.done():
            with contextlib.suppress(Exception):  # a refusal was reported by the tool call already
                await asyncio.wait_for(asyncio.shield(self._task), 2 * self.settings.timeout_secs + 1)

    async def _run(self, card: dict[str, Any]) -> None:
        target = self.settings.target or ""
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_secs)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            if self.settings.card_url:
                payload = {"call_id": self.call_id, "provider": self.provider.value,
                           "provider_call_id": self.provider_call_id, "target": target, "card": card}
                problem = await post_card(http, self.settings.card_url, payload)
                if problem is not None:  # the caller still goes to a person, who then has to ask again
                    logger.error("call {}: handoff card not delivered: {}", self.call_id, problem)
            if self._moving is not None:
                self._moving(True)
            try:
                await request_transfer(http, self.provider, self.credentials, self.provider_call_id, target,
                                       self.call_id, self.plivo_url)
            except TransferError as exc:
                logger.error("call {}: transfer to {} failed: {}", self.call_id, target, exc)
                if self._moving is not None:
                    self._moving(False)
                if self._failed is not None:
                    self._failed(str(exc))
                raise
        logger.info("call {}: transferred to {}", self.call_id, target)
        if self._transferred is not None:
            await self._transferred(target)

