"""The date contract in the served call: through the telephony bridge, audio both ways, a scripted model.

The model books a day inside the caller's absence, then a day the caller never named; neither runs. The
caller hears the contract's read-back, says yes, and only then does the callback run.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from tests.test_telephony_bridge import config, emulator, ended, wait_for
from voice_agent.audio.stack import AudioStack
from voice_agent.call.factory import call_factory
from voice_agent.core.guards.date_contract import DateAction, DateContract
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK
from voice_agent.services.fake_llm import FakeLLM, FakeReply, FakeToolCall
from voice_agent.settings import Settings, with_overrides
from voice_agent.telephony.process import running_bridge

TODAY = dt.date(2026, 11, 30)
ACCOUNT = "ACC-4729-18"
AWAY = "I'm working away on the rigs until the 10th of December so don't bother ringing before then"
LINES = [
    "hi it's about my bill, my account is ACC 4729 18",
    AWAY,
    "can someone call me back about it",
    "yes that's fine",
]
INSIDE, AFTER = dt.date(2026, 12, 8), dt.date(2026, 12, 11)


def callback(day: dt.date) -> FakeToolCall:
    return FakeToolCall("schedule_callback", {"account_id": ACCOUNT, "date": day.isoformat()})


async def test_the_served_call_never_runs_a_ruled_out_day_and_runs_the_confirmed_one(tmp_path: Path) -> None:
    # The read-back the contract will ask for at turn 3, computed by the contract itself on the same words.
    said = TranscriptLane()
    for turn, (line, reply) in enumerate(zip(LINES[:2], ["Thanks, I have your account.", "Understood."], strict=True),
                                         start=1):
        said.append_caller(turn, line)
        said.append_agent(turn, reply)
    said.append_caller(3, LINES[2])
    (asked,) = DateContract(DateGuard(TODAY)).decide(SCHEDULE_CALLBACK, {"date": AFTER.isoformat()}, said)
    readback = asked.readback
    assert asked.action is DateAction.CONFIRM and "rigs" in readback
    fake = FakeLLM({
        1: [FakeReply(tool_calls=(FakeToolCall("lookup_account", {"account_id": ACCOUNT}),)),
            FakeReply(text="Thanks, I have your account.")],
        2: [FakeReply(text="Understood.")],
        3: [FakeReply(tool_calls=(callback(INSIDE),)), FakeReply(tool_calls=(callback(AFTER),)),
            FakeReply(text=readback)],
        4: [FakeReply(tool_calls=(callback(AFTER),)), FakeReply(text="Booked.")],
    })
    settings = with_overrides(Settings(), policy={"keep": 2, "every": 2}, call={"reference_date": TODAY})
    stack = AudioStack.named("fake").with_script(LINES)
    calls = call_factory(settings, llm_factory=lambda _d: fake)
    async with running_bridge(config(stack=stack, transcript_dir=tmp_path), calls) as (bridge, url):
        result = await emulator().dial(f"{url}/voice", LINES)
        await wait_for(lambda: len(ended(bridge)) == 1)
    assert result.status == "completed", result.message
    record = ended(bridge)[0]
    backend = record.extra["domain"].extra["backend"]
    assert [c["date"] for c in backend.callbacks] == [AFTER.isoformat()]
    # What the model read for each refused or questioned call: a refusal citing the absence, then the read-back.
    results = [m for context in fake.received for m in context if m.get("role") == "tool"]
    bodies = [json.loads(str(m.get("content"))) for m in results]
    assert any(b.get("verdict") == "refuse" and "rigs" in b["reason"] for b in bodies)
    assert any(b.get("status") == "confirm" and b.get("say") == readback for b in bodies)
    # The caller heard the read-back word for word, and the callback ran only after their yes.
    heard: list[str] = json.loads((tmp_path / f"{record.call_id}.json").read_text())["transcript"]
    read_back = [i for i, line in enumerate(heard) if readback in line]
    ran = [i for i, line in enumerate(heard)
           if line.startswith("TOOL_RESULT schedule_callback") and "scheduled" in line]
    yes = [i for i, line in enumerate(heard) if "yes that's fine" in line]
    assert read_back and yes and ran and read_back[0] < yes[0] < ran[0], heard
