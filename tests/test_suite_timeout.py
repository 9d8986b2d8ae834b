"""A test that hangs fails within its timeout instead of holding CI until its limit.

The suite's default (pyproject's ``timeout``) applies to every test; here a test whose event loop never
finishes tearing down (a task that ignores cancellation, the way a busy machine once hung the suite for
17 minutes) is run under a 3-second limit and must fail, fast, naming the timeout.
"""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HANGS = '''
import asyncio


async def test_a_task_that_will_not_end():
    async def stubborn():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # ignores cancellation: teardown waits for it forever

    asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(3600)
'''


def test_the_suite_has_a_default_timeout() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 0 < int(options["timeout"]) <= 120 and options["timeout_method"] == "thread"


def test_a_hanging_test_fails_in_seconds(tmp_path: Path) -> None:
    (tmp_path / "test_hangs.py").write_text(HANGS)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "timeout=3",
         "-o", "timeout_method=thread", "-o", "asyncio_mode=auto", str(tmp_path / "test_hangs.py")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode != 0, done.stdout
    assert "Timeout" in done.stdout + done.stderr
    assert time.monotonic() - started < 45
