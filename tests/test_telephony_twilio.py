"""Twilio signatures, TwiML and the providers' start messages (no network, no server)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from xml.etree import ElementTree

import pytest

from voice_agent.telephony.emulator import speakable
from voice_agent.telephony.providers import (
    HandshakeError,
    HangupCredentials,
    Provider,
    busy_instruction,
    make_serializer,
    parse_start,
    stream_instruction,
)
from voice_agent.telephony.twilio import busy_twiml, compute_signature, stream_twiml, validate_signature

TOKEN = "12345"
URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
PARAMS = [("CallSid", "CA1234567890ABCDE"), ("Caller", "+12349013030"), ("Digits", "1234"),
          ("From", "+12349013030"), ("To", "+18005551212")]


def test_signature_is_hmac_sha1_of_url_and_sorted_params() -> None:
    payload = URL + "".join(k + v for k, v in sorted(PARAMS))
    expected = base64.b64encode(hmac.new(TOKEN.encode(), payload.encode(), hashlib.sha1).digest()).decode()
    assert compute_signature(TOKEN, URL, reversed(PARAMS)) == expected
    assert validate_signature(TOKEN, URL, PARAMS, expected)


def test_signature_rejects_tampering_and_absence() -> None:
    good = compute_signature(TOKEN, URL, PARAMS)
    assert not validate_signature(TOKEN, URL, [*PARAMS[:-1], ("To", "+18005550000")], good)
    assert not validate_signature(TOKEN, URL.replace("foo=1", "foo=2"), PARAMS, good)
    assert not validate_signature("other-token", URL, PARAMS, good)
    assert not validate_signature(TOKEN, URL, PARAMS, None)
    assert not validate_signature(TOKEN, URL, PARAMS, "")


def test_signature_accepts_the_default_port_either_way() -> None:
    signed_with_port = compute_signature(TOKEN, "https://mycompany.com:443/voice", PARAMS)
    assert validate_signature(TOKEN, "https://mycompany.com/voice", PARAMS, signed_with_port)
    signed_without = compute_signature(TOKEN, "https://mycompany.com/voice", PARAMS)
    assert validate_signature(TOKEN, "https://mycompany.com:443/voice", PARAMS, signed_without)


def test_stream_twiml_carries_the_token_as_a_parameter() -> None:
    root = ElementTree.fromstring(stream_twiml("wss://h/ws", {"token": "a&b\"c", "call_id": "call-1"}))
    stream = root.find("./Connect/Stream")
    assert stream is not None and stream.get("url") == "wss://h/ws"
    parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
    assert parameters == {"token": 'a&b"c', "call_id": "call-1"}
    busy = ElementTree.fromstring(busy_twiml())
    assert busy.find("Say") is not None and busy.find("Hangup") is not None


@pytest.mark.parametrize("provider", list(Provider))
def test_every_provider_gets_a_stream_and_a_busy_answer(provider: Provider) -> None:
    body, media = stream_instruction(provider, "wss://h/ws", {"token": "t0k"})
    assert media == "application/xml" and "t0k" in body and "wss://h/ws" in body
    ElementTree.fromstring(body)
    busy, _ = busy_instruction(provider)
    root = ElementTree.fromstring(busy)
    assert root.find("Hangup") is not None and (root.find("Say") is not None or root.find("Speak") is not None)


def test_start_messages_of_each_provider() -> None:
    twilio = parse_start({"event": "start", "start": {"streamSid": "MZ1", "callSid": "CA1",
                                                      "customParameters": {"token": "t"},
                                                      "mediaFormat": {"encoding": "audio/x-mulaw"}}}, Provider.TWILIO)
    assert (twilio.stream_id, twilio.call_id, twilio.parameters["token"]) == ("MZ1", "CA1", "t")
    telnyx = parse_start({"event": "start", "stream_id": "s", "start": {"call_control_id": "c",
                                                                       "media_format": {"encoding": "PCMA"}}},
                         Provider.TELNYX)
    assert (telnyx.stream_id, telnyx.encoding) == ("s", "PCMA")
    plivo = parse_start({"event": "start", "start": {"streamId": "p", "callId": "q"}, "extra_headers": "token=x"},
                        Provider.PLIVO)
    assert plivo.parameters == {"token": "x"}
    with pytest.raises(HandshakeError):
        parse_start({"event": "start", "start": {"streamSid": "MZ1"}}, Provider.TWILIO)
    with pytest.raises(HandshakeError):
        parse_start({"event": "start", "start": {"streamSid": "M", "callSid": "C",
                                                 "mediaFormat": {"encoding": "audio/l16"}}}, Provider.TWILIO)


def test_serializer_hangs_up_only_with_credentials() -> None:
    start = parse_start({"event": "start", "start": {"streamSid": "MZ1", "callSid": "CA1"}}, Provider.TWILIO)
    without = make_serializer(start, HangupCredentials())
    assert without._params.auto_hang_up is False
    creds = HangupCredentials(twilio_account_sid="AC1", twilio_auth_token="tok", twilio_base_url="http://127.0.0.1:9")
    assert creds.can_hang_up(Provider.TWILIO) and not creds.can_hang_up(Provider.PLIVO)
    assert make_serializer(start, creds)._params.auto_hang_up is True
    env = HangupCredentials.from_env({"TWILIO_ACCOUNT_SID": "AC9", "TWILIO_AUTH_TOKEN": "x", "TELNYX_API_KEY": ""})
    assert env.twilio_account_sid == "AC9" and env.telnyx_api_key is None


def test_callers_spell_identifiers() -> None:
    assert speakable("Here it is: ACC-4729-18.") == "Here it is: A C C, four, seven, two, nine, one, eight."
    assert speakable("order ORD-7K4M2P please") == "order O R D, seven, K, four, M, two, P please"
    assert speakable("no ids here") == "no ids here"
