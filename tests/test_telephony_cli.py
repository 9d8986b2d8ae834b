"""The telephony commands as a user runs them: serve drains on SIGTERM, talk fails cleanly without audio."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import typer
from typer.testing import CliRunner

from voice_agent.telephony.cli import local_audio_problem, register_telephony_commands

ROOT = Path(__file__).resolve().parents[1]
APP = (
    "import sys, typer\n"
    "from voice_agent.telephony.cli import register_telephony_commands\n"
    "app = typer.Typer(add_completion=False)\n"
    "@app.callback()\n"
    "def root() -> None: pass\n"
    "register_telephony_commands(app)\n"
    "app()\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.callback()
    def root() -> None:
        """Test root."""

    register_telephony_commands(app)
    return app


def test_talk_without_local_audio_prints_one_line_and_exits_non_zero() -> None:
    problem = local_audio_problem()
    result = CliRunner().invoke(make_app(), ["talk"])
    if problem is None:  # a machine with PyAudio and devices: nothing to check here
        return
    # A missing extra exits 3 and names the extra, as every command does; no device exits 1.
    assert result.exit_code == (3 if "is not installed" in problem else 1)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("voice-agent talk: error: no local audio")
    assert "is not installed" not in problem or "voice-agent[local]" in lines[0]


def test_serve_rejects_bad_options_in_one_line() -> None:
    result = CliRunner().invoke(make_app(), ["serve", "--provider", "vonage"])
    assert result.exit_code == 2 and "twilio, telnyx or plivo" in result.output
    result = CliRunner().invoke(make_app(), ["serve", "--production", "--stack", "fake"],
                                env={"TWILIO_AUTH_TOKEN": ""})
    assert result.exit_code == 2 and "public-url" in result.output


def test_serve_answers_health_checks_and_exits_cleanly_on_sigterm() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TWILIO_AUTH_TOKEN": "", "TWILIO_ACCOUNT_SID": ""}
    proc = subprocess.Popen(
        [sys.executable, "-c", APP, "serve", "--port", str(port), "--stack", "fake", "--drain-timeout", "5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        body = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as reply:
                    body = json.loads(reply.read())
                    break
            except OSError:
                time.sleep(0.2)
        assert body == {"status": "ready", "calls": 0, "max_calls": 4}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
            assert json.loads(reply.read()) == {"status": "ok"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
