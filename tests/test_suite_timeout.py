"""A test that hangs fails within its timeout instead of holding CI until its limit.

The suite's default (pyproject's ``timeout``) applies to every test; here a test whose event loop never
finishes tearing down (a task that ignores cancellation, the way a busy machine once hung the suite for
17 minutes) is run under a 3-second limit and must fail, fast, naming the timeout: once hanging in the test
itself, once failing first and hanging in the teardown after it (pytest-timeout alone stops its timer at a
failure; ``tests/teardown_timeout.py`` gives the teardown one).
"""

from __future__ import annotations

import os
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

FAILS_THEN_HANGS = '''
import asyncio


async def test_a_failure_that_leaves_a_task_behind():
    async def stubborn():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(0)
    assert False, "the test fails; its event loop's teardown then waits for the task forever"
'''


def _run_under_a_3_second_limit(tmp_path: Path, source: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Runs ``source`` as a test file with the suite's timeout plugins and a 3-second timeout."""
    (tmp_path / "test_hangs.py").write_text(source)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-p", "tests.teardown_timeout", "-o", "timeout=3", "-o", "timeout_method=thread", "-o", "asyncio_mode=auto",
         str(tmp_path / "test_hangs.py")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done, time.monotonic() - started


def test_the_suite_has_a_default_timeout() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 0 < int(options["timeout"]) <= 120 and options["timeout_method"] == "thread"


def test_a_hanging_test_fails_in_seconds(tmp_path: Path) -> None:
    done, elapsed = _run_under_a_3_second_limit(tmp_path, HANGS)
    assert done.returncode != 0, done.stdout
    assert "Timeout" in done.stdout + done.stderr
    assert elapsed < 45


def test_a_teardown_hanging_after_a_failure_fails_in_seconds(tmp_path: Path) -> None:
    # Without the teardown's own timer this run never ends, and subprocess.run's 60 s limit fails the test.
    done, elapsed = _run_under_a_3_second_limit(tmp_path, FAILS_THEN_HANGS)
    assert done.returncode != 0, done.stdout
    assert "Timeout" in done.stdout + done.stderr and "_cancel_all_tasks" in done.stdout + done.stderr
    assert elapsed < 45
