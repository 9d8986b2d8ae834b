"""The date contract on what a recogniser hears: caller lines spoken by Piper and heard by Whisper (tiny.en, the
served call's recogniser), then decided. Real speech turns "the fifth" into "the theft" and "twentieth" into
"20th."; a day the caller ruled out must still never run, and a clean one must not be refused."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from voice_agent.audio.codec import resample
from voice_agent.audio.stack import agent_ears, caller_voice
from voice_agent.core.guards.date_contract import DateAction, DateContract
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.transcript import TranscriptLane
from voice_agent.domains.billing.tools import SCHEDULE_CALLBACK

TODAY = dt.date(2026, 11, 18)
NIGHTS = ("caller", "I'm on nights till the twentieth, so days are when I sleep")
WHEN = ("agent", "When would suit for a callback?")
RULED_OUT = [
    ([NIGHTS, WHEN, ("caller", "the nineteenth I suppose")], "2026-11-19"),
    ([("caller", "Thursday and Friday this week won't work for me"), ("agent", "Shall I book Thursday 19 November?"),
      ("caller", "yes")], "2026-11-19"),
    ([("caller", "the fifth, hang on, the fifth is my daughter's recital, go with the sixth")], "2026-12-05"),
    ([("caller", "call me on the twenty fourth"), ("agent", "I can book a callback for Tuesday 24 November. OK?"),
      ("caller", "actually no, make it the twenty fifth")], "2026-11-24"),
    ([("caller", "Thursdays are my golf day"), ("agent", "Shall I book Thursday 26 November?"), ("caller", "yes")],
     "2026-11-26"),
]
CLEAN = [
    ([NIGHTS, WHEN, ("caller", "Tuesday the twenty fourth please")], "2026-11-24"),
    ([("caller", "weekends are out for me"), ("agent", "Which day would suit for the callback?"),
      ("caller", "Thursday the twenty sixth please")], "2026-11-26"),
]


async def heard(lines: list[tuple[str, str]]) -> TranscriptLane:
    speak, hear = caller_voice("piper"), agent_ears("whisper")
    assert hear is not None
    out = []
    for who, text in lines:
        if who == "caller":
            samples, rate = await asyncio.to_thread(speak, text)
            text = (await asyncio.to_thread(hear, resample(samples, rate, 16000))).strip()
        out.append((who, text))
    return TranscriptLane.of_lines(out)


def decide(lane: TranscriptLane, day: str) -> DateAction:
    (decision,) = DateContract(DateGuard(TODAY)).decide(SCHEDULE_CALLBACK, {"date": day}, lane)
    return decision.action


@pytest.mark.parametrize(("lines", "day"), RULED_OUT)
async def test_a_ruled_out_day_never_runs_on_real_speech(lines: list[tuple[str, str]], day: str) -> None:
    lane = await heard(lines)
    assert decide(lane, day) is not DateAction.RUN, [e.text for e in lane]


@pytest.mark.parametrize(("lines", "day"), CLEAN)
async def test_a_clean_day_is_never_refused_on_real_speech(lines: list[tuple[str, str]], day: str) -> None:
    lane = await heard(lines)
    assert decide(lane, day) is not DateAction.REFUSE, [e.text for e in lane]
