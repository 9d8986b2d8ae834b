"""One factory builds every call: settings in, the same call out, whatever the entry point."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from voice_agent.audio.stack import caller_voice
from voice_agent.call.factory import build_call
from voice_agent.policies.rolling import RollingPolicy
from voice_agent.settings import Settings, SettingsError, load_settings, with_overrides
from voice_agent.summarizers.extractive import ExtractiveSummarizer
from voice_agent.telephony.emulator import EmulatorConfig, TwilioCallerEmulator

ROOT = Path(__file__).resolve().parents[1]


def test_the_offline_default_call_runs_the_extractive_summarizer_never_the_fault_model() -> None:
    parts = build_call(load_settings(), "c1")
    assert isinstance(parts.session.summarizer, ExtractiveSummarizer)
    assert parts.session.describe()["policy"] == "lanes"


def test_env_settings_reach_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_POLICY__NAME", "rolling")
    monkeypatch.setenv("VOICE_AGENT_POLICY__KEEP", "3")
    monkeypatch.setenv("VOICE_AGENT_POLICY__EVERY", "4")
    monkeypatch.setenv("VOICE_AGENT_CALL__LEDGER_CAPACITY", "7")
    monkeypatch.setenv("VOICE_AGENT_OUTPUT_GUARD__MAX_CREDIT", "12.5")
    settings = load_settings()
    session = build_call(settings, "c2").session
    assert isinstance(session.policy, RollingPolicy)
    assert session.settings is settings  # handed through unchanged: one settings model, no copy
    assert (session.state.policy.keep, session.state.policy.every, session.state.ledger.capacity) == (3, 4, 7)
    assert session.output_guard.config is settings.output_guard and settings.output_guard.max_credit == 12.5


def test_fault_is_not_a_summarizer_a_setting_can_choose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_SUMMARIZER__KIND", "fault")
    with pytest.raises(SettingsError, match=r"summarizer\.kind"):
        load_settings()


def test_overrides_keep_unset_flags_and_reject_bad_values() -> None:
    base = Settings()
    assert with_overrides(base, policy={"keep": None}).policy.keep == base.policy.keep
    with pytest.raises(SettingsError, match=r"policy\.keep"):
        with_overrides(base, policy={"keep": 0})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(300)
async def test_a_served_call_runs_the_policy_the_environment_names(tmp_path: Path) -> None:
    """The real `voice-agent serve` process, configured only through VOICE_AGENT_* variables."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TWILIO_AUTH_TOKEN": "", "TWILIO_ACCOUNT_SID": "",
           "VOICE_AGENT_POLICY__NAME": "rolling", "VOICE_AGENT_POLICY__KEEP": "3",
           "VOICE_AGENT_CALL__LEDGER_CAPACITY": "9", "VOICE_AGENT_OUTPUT_GUARD__MAX_CREDIT": "11.0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "voice_agent.cli", "serve", "--port", str(port), "--stack", "fake", "--no-knowledge",
         "--transcripts", str(tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 90
        ready = False
        while time.monotonic() < deadline and proc.poll() is None and not ready:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                    ready = True
            except OSError:
                await asyncio.sleep(0.3)
        assert ready, proc.stdout.read() if proc.stdout and proc.poll() is not None else "serve did not start"
        emulator = TwilioCallerEmulator(caller_voice("tone"), None, EmulatorConfig(speed=4.0, reply_timeout_secs=5))
        await emulator.dial(f"http://127.0.0.1:{port}/voice", ["hello there"])
        records: list[Path] = []
        while time.monotonic() < deadline and not records:
            records = list(tmp_path.glob("*.json"))
            await asyncio.sleep(0.2)
        assert records, "the served call wrote no record"
        config = json.loads(records[0].read_text())["config"]
        assert config["policy"] == "rolling" and config["keep"] == 3 and config["ledger_capacity"] == 9
        assert config["summarizer"] == "ExtractiveSummarizer" and config["output_guard"]["max_credit"] == 11.0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
