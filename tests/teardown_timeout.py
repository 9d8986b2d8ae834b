"""A timer for the teardown that follows a failed test (a pytest plugin: conftest.py loads it).

pytest-timeout stops a test's timer as soon as the test fails (its ``pytest_exception_interact`` hook, so that
a ``--pdb`` session is not killed), and the teardown after the failure then runs with no limit at all. A
real-speech test that failed on a busy machine left its event loop waiting in teardown for a task that did
not end (``_cancel_all_tasks``), and the suite sat there until CI's own limit. Here every teardown gets a timer
of its own: the test's timeout, at most the suite's default (pyproject's ``timeout``), so a hang in teardown
fails in seconds with every thread's stack, like a hang anywhere else. A timeout ends the process before the
summary of failures, so why the test failed is printed first, in one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

# pytest-timeout (pinned below 3 in pyproject) resolves an item's timeout, method and debugger detection from
# its marker, the command line and the ini file; the same resolution is used here rather than copied.
_timeout: Any = importlib.import_module("pytest_timeout")
FAILED_CALL = pytest.StashKey[str]()


def teardown_seconds(item: pytest.Item) -> float:
    """The limit of ``item``'s teardown: its timeout, at most the suite's default; 0 when it has none."""
    settings = _timeout._get_item_settings(item)
    marked = float(settings.timeout or 0)
    default = float(item.config.getini("timeout") or 0)
    return min(t for t in (marked, default) if t > 0) if marked > 0 or default > 0 else 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call" and report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        item.stash[FAILED_CALL] = str(crash.message).splitlines()[0] if crash is not None else "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    seconds = teardown_seconds(item)
    if seconds <= 0 or item.config.getoption("usepdb"):
        yield
        return
    hooks = item.config.pluginmanager.hook
    failure = item.stash.get(FAILED_CALL, None)
    if failure is not None:
        item.config.get_terminal_writer().line(f"\n{item.nodeid} failed: {failure[:300]}")
    # The test's own timer, if it still runs (the test passed), would fire later, in another test: stopped first.
    hooks.pytest_timeout_cancel_timer(item=item)
    hooks.pytest_timeout_set_timer(item=item, settings=_timeout._get_item_settings(item)._replace(timeout=seconds))
    try:
        yield
    finally:
        hooks.pytest_timeout_cancel_timer(item=item)
