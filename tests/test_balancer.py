"""``voice-agent balance``: with no worker ready, a connection still reaches one that answers."""

from __future__ import annotations

import datetime as dt

from voice_agent.audio.stack import AudioStack
from voice_agent.call.factory import call_factory
from voice_agent.settings import Settings, with_overrides
from voice_agent.telephony.balancer import ReadyProxy
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.emulator import EmulatorConfig, request_twiml
from voice_agent.telephony.process import running_bridge

SETTINGS = with_overrides(Settings(), call={"reference_date": dt.date(2026, 11, 30)})


async def test_a_full_worker_behind_the_balancer_still_answers_with_the_busy_line() -> None:
    config = ServerConfig(port=0, stack=AudioStack.named("fake"), idle_timeout_secs=None, knowledge=False,
                          max_calls=2)
    async with running_bridge(config, call_factory(SETTINGS)) as (_bridge, url):
        port = int(url.rsplit(":", 1)[1])
        async with ReadyProxy([("127.0.0.1", port)]) as proxy:
            for sid in ("CA01", "CA02"):  # two bare webhooks whose streams never come: /readyz says "full"
                held = await request_twiml(f"{proxy.url}/voice", EmulatorConfig(), sid)
                assert held.stream_url is not None
            # Before, the balancer dropped this connection unanswered: the caller heard nothing at all.
            third = await request_twiml(f"{proxy.url}/voice", EmulatorConfig(), "CA03")
            assert third.stream_url is None and "busy" in third.said
