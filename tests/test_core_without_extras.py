"""The core install works without any extra: every core module imports and the main job runs.

The suite's venv has every extra, so a subprocess hides them: a meta path finder placed first refuses every
module an extra brings (``voice_agent.extras.EXTRA_MODULES``), as if it were not installed. Modules that need
an extra are listed below with it; any other module that fails to import is a core module reaching for an
extra at import time, and fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from voice_agent.extras import EXIT_MISSING_EXTRA, EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[1]

NEEDS_EXTRA = {
    "voice_agent.harness.eval_bot": "telephony",
    "voice_agent.harness.evaluation.html_report": "eval",
    "voice_agent.harness.evaluation.plain_bridge": "telephony",
    "voice_agent.store.redis": "telephony",
    "voice_agent.telephony.accept_gate": "telephony",
    "voice_agent.telephony.app": "telephony",
    "voice_agent.telephony.bridge": "telephony",
    "voice_agent.telephony.call_runner": "telephony",
    "voice_agent.telephony.config": "telephony",
    "voice_agent.telephony.drain": "telephony",
    "voice_agent.telephony.fleet": "telephony",
    "voice_agent.telephony.local_fleet": "telephony",
    "voice_agent.telephony.process": "telephony",
    "voice_agent.telephony.registry": "telephony",
    "voice_agent.telephony.server": "telephony",
    "voice_agent.telephony.signatures": "telephony",
    "voice_agent.telephony.webhooks": "telephony",
}
"""Modules that import an extra at module level, and which one (they are only imported by commands needing it)."""

BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = {blocked!r}

    class HideExtras(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == m or name.startswith(m + ".") for m in BLOCKED):
                raise ModuleNotFoundError(f"No module named {{name!r}} (hidden: an extra)", name=name)
            return None

    sys.meta_path.insert(0, HideExtras())
""").format(blocked=sorted({m for modules in EXTRA_MODULES.values() for m in modules}))


def run_hidden(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICE_AGENT_")}
    env["LOGURU_LEVEL"] = "WARNING"
    return subprocess.run([sys.executable, "-c", BLOCKER + code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_core_modules_import_without_the_extras() -> None:
    result = run_hidden(textwrap.dedent("""
        import importlib, json, pkgutil
        import processors, voice_agent
        failed = {}
        for package in (voice_agent, processors):
            for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                try:
                    importlib.import_module(info.name)
                except ModuleNotFoundError as exc:
                    failed[info.name] = exc.name
        print(json.dumps(failed))
    """))
    assert result.returncode == 0, result.stderr[-3000:]
    failed: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    core_failures = {name: missing for name, missing in failed.items() if name not in NEEDS_EXTRA}
    assert core_failures == {}, "core modules importing an extra at module level (import it lazily)"
    for name, missing in failed.items():  # the list says the right extra, and names no module that imports fine
        assert any(missing == m or missing.startswith(m + ".") for m in EXTRA_MODULES[NEEDS_EXTRA[name]]), name
    assert set(NEEDS_EXTRA) <= set(failed), "these import without their extra now: drop them from NEEDS_EXTRA"


@pytest.mark.timeout(300)
def test_the_main_job_runs_without_the_extras() -> None:
    # --jobs 1: both runs here, where the extras are hidden (a worker process would start without the hiding).
    result = run_hidden(textwrap.dedent("""
        import sys
        from voice_agent.cli import main
        sys.argv = ["voice-agent", "simulate", "--runs", "2", "--scripted-only", "--policy", "lanes",
                    "--no-knowledge", "--jobs", "1"]
        main()
    """), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "account_id @ turn 31" in result.stdout


def test_a_command_needing_an_extra_names_it() -> None:
    result = run_hidden(textwrap.dedent("""
        import sys
        from voice_agent.cli import main
        sys.argv = ["voice-agent", "serve", "--port", "0"]
        main()
    """))
    assert result.returncode == EXIT_MISSING_EXTRA, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        "voice-agent: error: voice-agent serve needs the telephony extra: pip install 'voice-agent[telephony]'")
