"""A transfer that transfers: ``transfer_to_human`` in a served call moves the phone call to the transfer target.

Twilio end to end through the emulator (its REST call update faked on loopback by ``TwilioRestEmulator``);
Telnyx and Plivo through hand-driven media streams, their REST APIs faked by a local aiohttp server. Without
a transfer target the server says so at start-up and the agent offers a callback; a provider that fails is
an error the call survives. No network, no keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit
from xml.etree import ElementTree

import aiohttp
import pytest
from aiohttp import web
from loguru import logger
from websockets.asyncio.client import connect

from tests.test_telephony_bridge import ended, wait_for
from voice_agent.audio.stack import AudioStack, caller_voice
from voice_agent.call.factory import CallFactory, call_factory
from voice_agent.core.transfer import NOT_TRANSFERRED, TRANSFERRED, TransferError
from voice_agent.settings import Settings, SettingsError, TransferConfig, with_overrides
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator
from voice_agent.telephony.process import running_bridge
from voice_agent.telephony.providers import HangupCredentials, Provider
from voice_agent.telephony.registry import RegisteredCall
from voice_agent.telephony.rest_emulator import TwilioRestEmulator
from voice_agent.telephony.signatures import compute_plivo_signature
from voice_agent.telephony.transfer import CALL_HEADER, TRANSFER_LINE, ProviderTransfer, post_card

TARGET = "+15550100100"
SIP_TARGET = "sip:billing@pbx.example.com"
LINES = ["Hello, is this the billing line?", "Can you put me through to a person, please?",
         "Are you still there?"]
CALLBACK_OFFER = "call you back"
PRETENDING = ("putting you through", "transferring you", "with you shortly")


def factory() -> CallFactory:
    return call_factory(with_overrides(Settings(), call={"reference_date": "2026-11-30"}))


def bridge_config(**overrides: Any) -> ServerConfig:
    return ServerConfig(port=0, stack=AudioStack.named("fake").with_script(LINES), idle_timeout_secs=None,
                        handshake_timeout_secs=2.0, knowledge=False, **overrides)


def caller(rest: TwilioRestEmulator | None = None) -> TwilioCallerEmulator:
    # Waits that are hang guards, not measures: on a busy machine the agent's audio pauses for more than 0.3 s
    # mid-reply (the caller then spoke its next line over a transfer) and a reply can start after 8 s.
    settings = EmulatorConfig(speed=8.0, silence_secs=1.0, reply_timeout_secs=30.0,
                              auth_token=rest.auth_token if rest is not None else None)
    emulated = TwilioCallerEmulator(caller_voice("tone"), None, settings)
    return rest.register(emulated) if rest is not None else emulated


def twilio_credentials(rest: TwilioRestEmulator) -> HangupCredentials:
    return HangupCredentials(twilio_account_sid=rest.account_sid, twilio_auth_token=rest.auth_token,
                             twilio_base_url=rest.base_url)


def agent_lines(record: RegisteredCall) -> list[str]:
    return [t["agent"] for t in record.turns]


# --- Twilio, end to end through the emulator ------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_a_twilio_call_is_moved_to_the_transfer_target_and_its_stream_ends(tmp_path: Path) -> None:
    async with TwilioRestEmulator() as rest:
        config = bridge_config(credentials=twilio_credentials(rest), transcript_dir=tmp_path,
                               transfer=TransferConfig(target=TARGET))
        async with running_bridge(config, factory()) as (bridge, url):
            result = await caller(rest).dial(f"{url}/voice", LINES)
            await wait_for(lambda: len(ended(bridge)) == 1)
    # The caller was moved: the call's TwiML became the line and a <Dial> to the target, as Twilio plays it.
    assert result.status == "transferred" and result.transfer_target == TARGET, result.render()
    assert result.message == TRANSFER_LINE
    assert len(result.turns) == 2, "the third line is never said to the bot: the call left it"
    [update] = rest.updates  # one update, and no hang-up after it (pipecat's would end the transferred call)
    assert update.status == 200 and f"<Dial><Number>{TARGET}</Number></Dial>" in update.form["Twiml"]
    record = ended(bridge)[0]
    assert (record.end, record.reason) == ("transferred", f"transferred to {TARGET}")
    assert record.transfer == {"target": TARGET, "status": TRANSFERRED}
    assert record.summary()["transfer"] == {"target": TARGET, "status": TRANSFERRED}
    backend = record.extra["domain"].extra["backend"]
    assert [(t["status"], t["target"]) for t in backend.transfers] == [(TRANSFERRED, TARGET)]
    events = [json.loads(line) for line in (tmp_path / f"{record.call_id}.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "transferred" and e.get("target") == TARGET for e in events), events
    saved = json.loads((tmp_path / f"{record.call_id}.json").read_text())
    assert saved["end"] == "transferred" and saved["transfer"]["target"] == TARGET


# --- without a transfer target --------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_without_a_target_the_server_says_so_and_the_agent_offers_a_callback() -> None:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", format="{message}")
    try:
        async with running_bridge(bridge_config(), factory()) as (bridge, url):
            said = [m for m in messages if m.startswith("transfer:")]
            result = await caller().dial(f"{url}/voice", LINES)
            await wait_for(lambda: len(ended(bridge)) == 1)
    finally:
        logger.remove(sink)
    assert len(said) == 1 and "no transfer target" in said[0] and "callback" in said[0], messages
    record = ended(bridge)[0]
    assert result.status == "completed" and all(t.latency_ms is not None for t in result.turns), result.render()
    assert record.end != "transferred" and record.transfer == {}
    offer = agent_lines(record)[1].lower()
    assert CALLBACK_OFFER in offer and not any(p in offer for p in PRETENDING), offer
    backend = record.extra["domain"].extra["backend"]
    assert [t["status"] for t in backend.transfers] == [NOT_TRANSFERRED]


async def test_the_transfer_target_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from voice_agent.settings import load_settings

    monkeypatch.setenv("VOICE_AGENT_TRANSFER__TARGET", SIP_TARGET)
    assert load_settings().transfer.target == SIP_TARGET
    monkeypatch.setenv("VOICE_AGENT_TRANSFER__TARGET", "0800 BILLING")
    with pytest.raises(SettingsError, match=r"transfer\.target"):
        load_settings()


# --- a provider that fails --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_a_failed_provider_request_is_an_error_the_call_survives_with_a_callback_offer(tmp_path: Path) -> None:
    async with TwilioRestEmulator(fail_with=500) as rest:
        config = bridge_config(credentials=twilio_credentials(rest), transcript_dir=tmp_path,
                               transfer=TransferConfig(target=TARGET))
        async with running_bridge(config, factory()) as (bridge, url):
            result = await caller(rest).dial(f"{url}/voice", LINES)
            await wait_for(lambda: len(ended(bridge)) == 1)
    record = ended(bridge)[0]
    # The call went on: every line was answered, the third too; nothing said the caller was being put through.
    assert result.status == "completed" and result.transfer_target is None, result.render()
    assert all(t.latency_ms is not None for t in result.turns), result.render()
    offer = agent_lines(record)[1].lower()
    assert CALLBACK_OFFER in offer and not any(p in offer for p in PRETENDING), offer
    assert record.end != "transferred" and record.transfer["status"] == "failed"
    assert "HTTP 500" in record.transfer["error"]
    assert any("transfer to" in e and "failed" in e for e in record.turns[1]["errors"]), record.turns
    events = [json.loads(line) for line in (tmp_path / f"{record.call_id}.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "transfer failed" for e in events)
    assert any("TOOL_RESULT transfer_to_human" in line and "error" in line for line in record.transcript)


# --- Telnyx and Plivo: their REST APIs faked on loopback -------------------------------------------------------------


@dataclass
class FakeProviderApi:
    """Telnyx's transfer action, Plivo's transfer API (which fetches its ``aleg_url`` as Plivo does) and a card URL."""

    status: int = 200
    delay_secs: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    cards: list[dict[str, Any]] = field(default_factory=list)
    played: list[str] = field(default_factory=list)
    base_url: str = ""
    fetch_after_secs: float = 0.5
    _fetches: list[asyncio.Task[None]] = field(default_factory=list)

    async def telnyx(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay_secs)
        self.requests.append({"path": request.path, "raw": request.raw_path,
                              "auth": request.headers.get("Authorization"), "body": await request.json()})
        if self.status >= 300:
            return web.json_response({"errors": [{"code": "90018", "title": "Call has already ended"}]},
                                     status=self.status)
        return web.json_response({"data": {"result": "ok"}})

    async def plivo(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"path": request.path, "auth": request.headers.get("Authorization"), "body": body})
        if self.status >= 300:
            return web.json_response({"error": "call not found"}, status=self.status)
        # As Plivo does: it accepts (202), then fetches the aleg_url, by when the bot's stream may have ended.
        self._fetches.append(asyncio.get_running_loop().create_task(self._fetch_later(body["aleg_url"])))
        return web.json_response({"message": "call transferred", "api_id": "fake"}, status=202)

    async def _fetch_later(self, url: str) -> None:
        await asyncio.sleep(self.fetch_after_secs)
        async with aiohttp.ClientSession() as http, http.post(url) as reply:
            self.played.append(await reply.text() if reply.status == 200 else f"HTTP {reply.status}")

    async def card(self, request: web.Request) -> web.Response:
        self.cards.append(await request.json())
        return web.json_response({})

    async def moved(self, request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/card")


@asynccontextmanager
async def fake_api(**kwargs: Any) -> AsyncIterator[FakeProviderApi]:
    api = FakeProviderApi(**kwargs)
    app = web.Application()
    app.router.add_post("/v2/calls/{call}/actions/transfer", api.telnyx)
    app.router.add_post("/v1/Account/{auth}/Call/{call}/", api.plivo)
    app.router.add_post("/card", api.card)
    app.router.add_post("/moved", api.moved)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    api.base_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        yield api
    finally:
        await runner.cleanup()


WEBHOOK_ID = {Provider.TELNYX: "CallControlId", Provider.PLIVO: "CallUUID"}
START: dict[Provider, Callable[[str], dict[str, Any]]] = {
    Provider.TELNYX: lambda call_id: {"event": "start", "stream_id": "st-1", "start": {
        "call_control_id": call_id, "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1}}},
    Provider.PLIVO: lambda call_id: {"event": "start", "start": {"streamId": "st-1", "callId": call_id}},
}


async def served_call_transfers(provider: Provider, credentials: HangupCredentials, secret: Any,
                                settings: TransferConfig, tmp_path: Path,
                                after_end: Callable[[], bool] | None = None) -> tuple[RegisteredCall, dict[str, Any]]:
    """Opens a served call of ``provider`` by hand, runs its ``transfer_to_human``; (record, tool result).
    ``after_end``: what to wait for once the call's stream has ended, the bridge still serving."""
    call_id = {Provider.TELNYX: "v3:telnyx-transfer-1", Provider.PLIVO: "5a1b2c3d-plivo-transfer-1"}[provider]
    config = bridge_config(provider=provider, credentials=credentials, transfer=settings, transcript_dir=tmp_path)
    async with running_bridge(config, factory()) as (bridge, url), aiohttp.ClientSession() as http:
        fields = [(WEBHOOK_ID[provider], call_id), ("From", "+15550100001"), ("To", "+15550100002")]
        headers = {"content-type": "application/x-www-form-urlencoded"}
        if secret is not None:  # Plivo: its token signs webhooks (V3) as well as authorising its REST API
            nonce = str(time.time_ns())
            headers.update({"X-Plivo-Signature-V3": compute_plivo_signature(secret, f"{url}/voice", nonce, fields),
                            "X-Plivo-Signature-V3-Nonce": nonce})
        body = urlencode(fields).encode()
        async with http.post(f"{url}/voice", data=body, headers=headers) as reply:
            assert reply.status == 200, await reply.text()
            stream = ElementTree.fromstring(await reply.text()).find(".//Stream")
        assert stream is not None
        stream_url = stream.get("url") or (stream.text or "").strip()
        async with connect(stream_url) as ws:
            if provider is Provider.TELNYX:
                await ws.send(json.dumps({"event": "connected", "version": "1.0.0"}))
            await ws.send(json.dumps(START[provider](call_id)))
            await wait_for(lambda: any(r.session is not None for r in bridge.registry.active))
            record = bridge.registry.active[0]
            backend = record.extra["domain"].extra["backend"]
            await wait_for(lambda: backend.transfer is not None)  # the bridge gave the call its line
            assert record.session is not None
            handler = record.extra["domain"].handlers["transfer_to_human"]
            try:
                result = await handler({"reason": "the caller asked for a person"}, record.session.state)
            except Exception as exc:  # a ToolError: the call goes on
                result = {"status": "error", "error": str(exc)}
            if result["status"] == TRANSFERRED:
                await asyncio.wait_for(ws.wait_closed(), 10)  # the bridge ends the stream itself
            else:
                await ws.send(json.dumps({"event": "stop", "stop": {}}))
        await wait_for(lambda: len(ended(bridge)) == 1)
        if after_end is not None:
            await wait_for(after_end)
    return ended(bridge)[0], result


@pytest.mark.timeout(60)
async def test_a_telnyx_call_is_moved_with_the_transfer_action_and_its_card_posted(tmp_path: Path) -> None:
    async with fake_api() as api:
        credentials = HangupCredentials(telnyx_api_key="KEY-telnyx", telnyx_base_url=api.base_url)
        settings = TransferConfig(target=SIP_TARGET, card_url=f"{api.base_url}/card")
        record, result = await served_call_transfers(Provider.TELNYX, credentials, None, settings, tmp_path)
    assert result["status"] == TRANSFERRED and result["target"] == SIP_TARGET
    [request] = api.requests
    assert request["path"] == "/v2/calls/v3:telnyx-transfer-1/actions/transfer"
    assert request["auth"] == "Bearer KEY-telnyx"
    assert request["body"] == {"to": SIP_TARGET, "custom_headers": [{"name": CALL_HEADER, "value": record.call_id}]}
    [card] = api.cards  # posted before the call was moved, matched by the call id the SIP header carries
    assert card["call_id"] == record.call_id and card["target"] == SIP_TARGET
    assert card["card"]["reason"] == "the caller asked for a person" and "ledger" in card["card"]
    assert (record.end, record.transfer) == ("transferred", {"target": SIP_TARGET, "status": TRANSFERRED})


@pytest.mark.timeout(60)
async def test_a_plivo_call_is_moved_with_the_transfer_api_to_the_bridges_dial_xml(tmp_path: Path) -> None:
    token = "plivo-test-token"
    async with fake_api() as api:
        credentials = HangupCredentials(plivo_auth_id="MAPLIVO", plivo_auth_token=token, plivo_base_url=api.base_url)
        record, result = await served_call_transfers(Provider.PLIVO, credentials, token,
                                                     TransferConfig(target=TARGET), tmp_path,
                                                     after_end=lambda: bool(api.played))
    assert result["status"] == TRANSFERRED
    [request] = api.requests
    assert request["path"] == "/v1/Account/MAPLIVO/Call/5a1b2c3d-plivo-transfer-1/"
    assert request["auth"].startswith("Basic ")
    body = request["body"]
    assert body["legs"] == "aleg" and body["aleg_method"] == "POST"
    assert urlsplit(body["aleg_url"]).path == "/transfer" and parse_qs(urlsplit(body["aleg_url"]).query)["key"]
    # What Plivo played on the call: the line, then a <Dial> to the target, served once by the bridge.
    [xml] = api.played
    root = ElementTree.fromstring(xml)
    assert root.findtext("Speak") == TRANSFER_LINE and root.findtext("Dial/Number") == TARGET
    assert (record.end, record.transfer["target"]) == ("transferred", TARGET)


async def test_a_provider_that_does_not_answer_in_time_fails_the_transfer() -> None:
    failures: list[str] = []
    async with fake_api(delay_secs=1.5) as api:
        credentials = HangupCredentials(telnyx_api_key="KEY", telnyx_base_url=api.base_url)
        line = ProviderTransfer(Provider.TELNYX, credentials, TransferConfig(target=TARGET, timeout_secs=0.3),
                                "v3:x", "call-1", failed=failures.append)
        # The provider answers at 1.5 s, a success had the 0.3 s limit not cut the wait: the error is the proof.
        with pytest.raises(TransferError, match="did not answer"):
            await line.transfer({"reason": "x"})
    assert len(failures) == 1


async def test_provider_transfer_reports_an_http_error_as_a_transfer_error() -> None:
    moving: list[bool] = []
    failures: list[str] = []
    async with fake_api(status=422) as api:
        credentials = HangupCredentials(telnyx_api_key="KEY", telnyx_base_url=api.base_url)
        line = ProviderTransfer(Provider.TELNYX, credentials, TransferConfig(target=TARGET), "v3:x", "call-1",
                                failed=failures.append, moving=moving.append)
        with pytest.raises(TransferError, match="HTTP 422"):
            await line.transfer({"reason": "x"})
    # The stream's end was kept from hanging up only while the provider was asked.
    assert moving == [True, False] and len(failures) == 1


def test_without_rest_credentials_there_is_no_target() -> None:
    line = ProviderTransfer(Provider.TWILIO, HangupCredentials(), TransferConfig(target=TARGET), "CA1", "call-1")
    assert line.target is None


async def test_a_provider_call_id_from_a_webhook_is_one_path_segment_never_a_path() -> None:
    async with fake_api() as api:
        credentials = HangupCredentials(telnyx_api_key="KEY", telnyx_base_url=api.base_url)
        line = ProviderTransfer(Provider.TELNYX, credentials, TransferConfig(target=TARGET),
                                "victim/actions/hangup?x=", "call-1")
        with contextlib.suppress(TransferError):  # the fake has no call of that id: what matters is the path asked
            await line.transfer({"reason": "x"})
    assert all("/actions/hangup" not in r["raw"] for r in api.requests)
    assert [r["raw"] for r in api.requests] == ["/v2/calls/victim%2Factions%2Fhangup%3Fx=/actions/transfer"]


async def test_the_card_is_never_sent_on_to_where_a_redirect_points() -> None:
    async with fake_api() as api, aiohttp.ClientSession() as http:
        problem = await post_card(http, f"{api.base_url}/moved", {"card": {"caller": "details"}})
    assert problem is not None and api.cards == []
