"""Twilio's REST call update, faked on loopback for the emulated caller (tests, demos; no network).

The bridge moves a Twilio call by updating it (``POST /2010-04-01/Accounts/{sid}/Calls/{CallSid}.json``
with ``Twiml``); pointed at this server (``TWILIO_API_BASE_URL``), the update reaches the
:class:`~voice_agent.telephony.emulator.TwilioCallerEmulator` dialling that ``CallSid``, which then does
what Twilio does with it. Requests are checked as Twilio checks them: HTTP Basic auth with the account
sid and auth token, the account in the path, a known call; the answer is a call resource (200) or
Twilio's error JSON (401, 404). A hang-up (``Status=completed``) is answered and recorded, nothing more.
``fail_with`` makes every update fail, ``delay_secs`` makes it slow, for failure tests.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from voice_agent.telephony.emulator import CallRefused, TwilioCallerEmulator


@dataclass
class CallUpdate:
    """One update request as received.

    Attributes:
        call_sid: The call it named.
        form: Its form fields (``Twiml`` among them).
        status: The HTTP status answered.
    """

    call_sid: str
    form: Mapping[str, str]
    status: int


@dataclass
class TwilioRestEmulator:
    """A local stand-in for Twilio's Calls resource (update only).

    Args:
        account_sid: The account the bridge must name (``TWILIO_ACCOUNT_SID``).
        auth_token: Its token (``TWILIO_AUTH_TOKEN``).
        fail_with: Answer every update with this HTTP status (None: behave).
        delay_secs: Wait this long before answering (a slow API, for timeout tests).

    Use as ``async with TwilioRestEmulator(...) as rest:``; ``rest.base_url`` is the REST root, and a caller
    is made reachable with :meth:`register`.
    """

    account_sid: str = "AC" + "0" * 32
    auth_token: str = "emulated-auth-token"
    fail_with: int | None = None
    delay_secs: float = 0.0
    updates: list[CallUpdate] = field(default_factory=list)
    _calls: dict[str, TwilioCallerEmulator] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    base_url: str = ""

    def register(self, caller: TwilioCallerEmulator) -> TwilioCallerEmulator:
        """Makes ``caller``'s call updatable here (by its ``CallSid``); returns it."""
        self._calls[caller.call_sid] = caller
        return caller

    async def __aenter__(self) -> TwilioRestEmulator:
        app = web.Application()
        app.router.add_post("/2010-04-01/Accounts/{account}/Calls/{call}.json", self._update)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # aiohttp exposes no getter
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _update(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        call_sid = request.match_info["call"]
        if self.delay_secs:
            await asyncio.sleep(self.delay_secs)
        status, body = self._answer(request, call_sid, form)
        self.updates.append(CallUpdate(call_sid, form, status))
        return web.json_response(body, status=status)

    def _answer(self, request: web.Request, call_sid: str, form: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        expected = "Basic " + base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        if request.headers.get("Authorization") != expected or request.match_info["account"] != self.account_sid:
            return 401, {"code": 20003, "message": "Authenticate", "status": 401}
        if self.fail_with is not None:
            return self.fail_with, {"code": 20500, "message": "Internal Server Error", "status": self.fail_with}
        caller = self._calls.get(call_sid)
        if caller is None:
            return 404, {"code": 20404, "message": f"The requested resource {request.path} was not found",
                         "status": 404}
        twiml = form.get("Twiml")
        if form.get("Status") == "completed" and twiml is None:  # a hang-up (pipecat's, at the end of a stream)
            return 200, {"sid": call_sid, "account_sid": self.account_sid, "status": "completed"}
        if twiml is None:
            return 400, {"code": 21220, "message": "Twiml or Url is required", "status": 400}
        try:
            caller.update(twiml)
        except CallRefused as exc:
            return 400, {"code": 12100, "message": f"Document parse failure: {exc}", "status": 400}
        return 200, {"sid": call_sid, "account_sid": self.account_sid, "status": "in-progress",
                     "api_version": "2010-04-01"}
