"""A worker process for the resume tests and the store benchmark: ``voice-agent serve``'s wiring, fake audio.

The settings (the ``store`` section among them) come from the environment; the call store, the fleet
(with the redis store) and the calls come from the same functions ``serve`` uses. The scripted
recogniser hears the scenario's caller lines and the tone TTS speaks fast (0.01 s a word).

Usage: ``python -m voice_agent.harness.fleet_worker PORT TRANSCRIPT_DIR [SCENARIO [STACK]]`` (STACK
``default``: Whisper, Silero and Piper, real speech, instead of the fake stack).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import IO

from voice_agent.datafiles import checkout_root
from voice_agent.harness.redis_server import free_port


class WorkerProcess:
    """One worker started with ``python -m voice_agent.harness.fleet_worker`` on a free port.

    It runs in the checkout this package is imported from (an installed wheel: the current directory), so a
    worker serves the same code as the process that started it.

    Args:
        env: The environment (the ``store`` settings among it).
        records: The transcript directory.
        log_path: Where its output goes (None: discarded).
        scenario: The scenario whose caller lines the fake recogniser hears.
        stack: The audio stack: ``fake`` or a named real one (``default``).
    """

    def __init__(self, env: dict[str, str], records: Path, log_path: Path | None = None,
                 scenario: str = "billing_dispute", stack: str = "fake") -> None:
        self.port = free_port()
        self.log_path = log_path
        self._log: IO[str] | None = log_path.open("w") if log_path is not None else None
        out = self._log if self._log is not None else subprocess.DEVNULL
        command = [sys.executable, "-m", "voice_agent.harness.fleet_worker", str(self.port), str(records), scenario,
                   stack]
        self.proc = subprocess.Popen(command, cwd=checkout_root(), env=env, stdout=out, stderr=subprocess.STDOUT)

    def ready(self) -> bool:
        """Whether its ``/readyz`` answers 200."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def wait_ready(self, timeout: float = 120) -> None:
        """Waits until it is ready; raises RuntimeError when it exits or the time runs out."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker on port {self.port} did not start")
            time.sleep(0.2)

    def log(self) -> str:
        """What it wrote so far ("" without a log file)."""
        if self._log is None or self.log_path is None:
            return ""
        self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        """Kills it if it still runs and waits for it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()


def main() -> None:
    """Serves until SIGTERM has drained it."""
    from loguru import logger

    from voice_agent.audio.stack import AudioStack
    from voice_agent.call.factory import call_factory, call_store
    from voice_agent.harness.scenarios import load_scenario
    from voice_agent.settings import load_settings
    from voice_agent.telephony.config import ServerConfig
    from voice_agent.telephony.fleet import fleet_for
    from voice_agent.telephony.process import serve

    logger.remove()
    logger.add(sys.stderr, level="INFO", format="{time:HH:mm:ss.SSS} {level} {message}")
    port, records = int(sys.argv[1]), Path(sys.argv[2])
    scenario = load_scenario(sys.argv[3] if len(sys.argv) > 3 else "billing_dispute")
    lines = [t.text for t in scenario.turns if t.speaker == "caller"]
    named = sys.argv[4] if len(sys.argv) > 4 else "fake"
    stack = (replace(AudioStack.named("fake").with_script(lines), tone_secs_per_word=0.01) if named == "fake"
             else AudioStack.named(named))
    settings = load_settings()
    config = ServerConfig(port=port, stack=stack, idle_timeout_secs=None, drain_timeout_secs=20, knowledge=False,
                          transcript_dir=records, store=call_store(settings),
                          fleet=fleet_for(settings.store.backend, settings.store.url, f"worker-{port}"),
                          hand_over=True)  # several workers behind the balancer share the store
    asyncio.run(serve(config, call_factory(settings)))


if __name__ == "__main__":
    main()
