"""A fast tone-voiced emulated Twilio caller, for tests that only need a call to reach the bridge."""

from __future__ import annotations

from voice_agent.audio.stack import caller_voice
from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator


def tone_caller(token: str | None = None, sid: str | None = None) -> TwilioCallerEmulator:
    """An emulated caller speaking tones at 8x, with a stream token and a call SID when given."""
    emulator = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(speed=8.0, silence_secs=0.2,
                                                                               ws_token=token))
    if sid is not None:
        emulator.call_sid = sid
    return emulator
