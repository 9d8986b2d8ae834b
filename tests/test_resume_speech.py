"""Nothing the caller said is lost: kill -9 while the agent answers, with real speech both ways.

The caller's lines are spoken by Piper and recognised by Whisper tiny.en (the fake stack's recogniser replays
lines by position, which hides what a worker that dies mid-answer loses). Worker A is killed while the caller
hears the agent's reply to the account number; the caller heard part of it and goes on. The caller's line was
saved when it opened its turn, so worker B knows the account and answers the line A never finished: the call
ends with the dispute and the credit on the right account, and the account is never asked for again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import time
from pathlib import Path

import pytest

from voice_agent.audio.stack import caller_voice
from voice_agent.harness.fleet_worker import WorkerProcess
from voice_agent.harness.scenarios import load_scenario
from voice_agent.store import open_store
from voice_agent.telephony.balancer import ReadyProxy
from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator

SCENARIO = load_scenario("bridge_smoke")
LINES = [t.text for t in SCENARIO.turns[:-2] if t.speaker == "caller" and not
         ("billing line" in t.text or "hours" in t.text)]
"""The caller's lines from the problem to the credit. The greeting, the opening-hours question and the goodbye
prove nothing here and each cost a turn of real speech."""
ACCOUNT_LINE = next(i for i, line in enumerate(LINES) if "ACC-4729-18" in line)


@pytest.mark.timeout(900)
async def test_kill_9_while_the_agent_answers_loses_nothing_the_caller_said(tmp_path: Path) -> None:
    records, logs = tmp_path / "records", tmp_path / "logs"
    logs.mkdir()
    reference = SCENARIO.reference_date or dt.date(2026, 11, 30)
    env = {**os.environ, "TWILIO_AUTH_TOKEN": "", "TWILIO_ACCOUNT_SID": "",
           "VOICE_AGENT_SUMMARIZER__KIND": "extractive", "VOICE_AGENT_CALL__REFERENCE_DATE": reference.isoformat(),
           "VOICE_AGENT_STORE__BACKEND": "sqlite", "VOICE_AGENT_STORE__PATH": str(tmp_path / "calls.sqlite3")}
    a, b = (WorkerProcess(env, records, logs / f"worker-{n}.log", "bridge_smoke", "default") for n in "ab")
    store = open_store("sqlite", path=tmp_path / "calls.sqlite3")
    assert store is not None
    try:
        deadline = time.monotonic() + 180
        while not (a.ready() and b.ready()):
            assert a.proc.poll() is None and b.proc.poll() is None and time.monotonic() < deadline, a.log() + b.log()
            await asyncio.sleep(0.2)
        # Worker A first while it lives; then B.
        async with ReadyProxy([("127.0.0.1", a.port), ("127.0.0.1", b.port)]) as proxy:
            # No ears: what the caller heard is judged from the workers' records, not re-transcribed here. Long
            # waits for each reply and for its end: on a loaded machine a reply can start late or pause between
            # chunks, and a caller who speaks on interrupts it.
            emulator = TwilioCallerEmulator(caller_voice("piper"), None,
                                            EmulatorConfig(speed=3.0, silence_secs=1.5, reply_timeout_secs=90))
            dialing = asyncio.create_task(emulator.dial(f"{proxy.url}/voice", LINES, max_legs=3))
            while True:  # the caller is hearing the reply to the account number
                turns = emulator._result.turns if emulator._result else []
                if len(turns) > ACCOUNT_LINE and turns[ACCOUNT_LINE].latency_ms is not None:
                    break
                assert not dialing.done() and time.monotonic() < deadline + 120, a.log()[-3000:]
                await asyncio.sleep(0.01)
            a.proc.send_signal(signal.SIGKILL)
            result = await asyncio.wait_for(dialing, 300)
    finally:
        for worker in (a, b):
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        for worker in (a, b):
            worker.proc.wait(timeout=30)
    stored = store.find(emulator.call_sid)
    store.close()
    assert result.status == "completed" and result.legs == 2, result.render() + b.log()[-3000:]
    assert all(t.latency_ms is not None for t in result.turns), result.render()
    assert ACCOUNT_LINE not in result.repeated, "the caller heard part of the reply and went on"
    assert stored is not None and stored.status == "ended" and stored.leg == 2
    final = json.loads((records / f"{stored.call_id}.json").read_text())
    transcript: list[str] = final["transcript"]
    text = "\n".join(transcript)
    assert any("ACC-4729-18" in t for t in transcript if t.startswith("CALLER:")), text
    disputes = [t for t in transcript if t.startswith("TOOL_RESULT open_dispute [completed]")]
    credits = [t for t in transcript if t.startswith("TOOL_RESULT issue_credit [completed]")]
    assert len(disputes) == 1 and len(credits) == 1 and "ACC-4729-18" in credits[0], text
    after_resume = transcript[next(i for i, t in enumerate(transcript) if "cut off" in t):]
    asks = [t for t in after_resume if t.startswith("AGENT:") and "account number" in t.lower()]
    assert not asks, f"the account was asked for again after the resume:\n{text}"
