"""The guarded serializer's media path makes the same frames as pipecat's Twilio serializer, from one parse."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
from pipecat.frames.frames import InputAudioRawFrame

from voice_agent.audio.codec import pcm16_to_ulaw
from voice_agent.telephony.bridge import EndReason, GuardedSerializer
from voice_agent.telephony.providers import HangupCredentials, Provider, make_serializer, parse_start

START = {"event": "start", "streamSid": "MZ1", "start": {
    "streamSid": "MZ1", "callSid": "CA1", "accountSid": "AC1", "customParameters": {},
    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}


async def close_call(reason: str, end: EndReason) -> None:
    raise AssertionError(f"closed: {reason}")


async def test_media_frames_match_pipecats_own_frame_for_frame() -> None:
    start = parse_start(START, Provider.TWILIO)
    plain = make_serializer(start, HangupCredentials())
    guarded = GuardedSerializer(make_serializer(start, HangupCredentials()), start, close_call)
    setup = cast(Any, SimpleNamespace(audio_in_sample_rate=16000))
    await plain.setup(setup)
    await guarded.setup(setup)
    assert guarded._media_frame is not None  # the one-parse path is the one under test
    t = np.arange(8000) / 8000
    ulaw = pcm16_to_ulaw((8000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16))
    for i in range(0, len(ulaw), 160):  # 1 s in 20 ms frames: the resamplers' state must stay in step
        message = json.dumps({"event": "media", "streamSid": "MZ1", "media": {
            "track": "inbound", "payload": base64.b64encode(ulaw[i : i + 160]).decode()}})
        ours, theirs = await guarded.deserialize(message), await plain.deserialize(message)
        assert isinstance(ours, InputAudioRawFrame) and isinstance(theirs, InputAudioRawFrame)
        assert (ours.audio, ours.sample_rate, ours.num_channels) == (theirs.audio, 16000, 1)
    assert guarded.media_messages == 50 and guarded.violation_count == 0
