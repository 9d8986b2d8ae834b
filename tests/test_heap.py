"""The bridge's garbage collector: start-up objects frozen, young collections rarer, 0 leaves CPython's own.

The suite's ``collector_as_found`` fixture (conftest) undoes what each test here does to this process.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from voice_agent.telephony.config import ConfigError, ServerConfig
from voice_agent.telephony.heap import DEFAULT_YOUNG_THRESHOLD, settle_heap

ROOT = Path(__file__).resolve().parents[1]

SERVE_AND_REPORT = """
import asyncio, gc, os, sys
from voice_agent.audio.stack import AudioStack
from voice_agent.call.factory import call_factory
from voice_agent.settings import load_settings
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.process import serve

async def main() -> None:
    before = gc.get_threshold()[0]
    ready = asyncio.Event()
    config = ServerConfig(port=0, stack=AudioStack.named("fake"), knowledge=False,
                          gc_young_threshold=int(sys.argv[1]))
    asyncio.create_task(serve(config, call_factory(load_settings()), ready=ready))
    await ready.wait()
    print(before, gc.get_threshold()[0], gc.get_freeze_count(), flush=True)
    os._exit(0)

asyncio.run(main())
"""


def test_settling_freezes_what_is_alive_and_raises_the_young_threshold() -> None:
    _young, middle, old = gc.get_threshold()
    alive_before: list[list[int]] = [[] for _ in range(10)]  # lists are tracked by the collector; bare objects are not
    state = settle_heap(DEFAULT_YOUNG_THRESHOLD)
    assert state.thresholds == (DEFAULT_YOUNG_THRESHOLD, middle, old) == gc.get_threshold()
    # not an exact count: a frozen object freed since (a finished thread's frame) leaves the permanent generation
    assert state.frozen > len(alive_before) and gc.get_freeze_count() > len(alive_before)
    generations = {id(o) for o in gc.get_objects()}  # the three generations, not the permanent one
    assert not [o for o in alive_before if id(o) in generations]


def test_zero_leaves_cpythons_collector_alone() -> None:
    before = gc.get_threshold()
    state = settle_heap(0)
    assert state.frozen == 0 == gc.get_freeze_count()
    assert state.thresholds == before == gc.get_threshold()


def test_a_negative_threshold_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        settle_heap(-1)
    with pytest.raises(ConfigError, match="--gc-young-threshold must be 0"):
        ServerConfig(gc_young_threshold=-5).validate()
    from typer.testing import CliRunner

    from .test_telephony_cli import make_app

    result = CliRunner().invoke(make_app(), ["serve", "--port", "0", "--stack", "fake", "--gc-young-threshold", "-1"])
    assert result.exit_code == 2 and "--gc-young-threshold must be 0" in result.output, result.output


@pytest.mark.parametrize("threshold", [DEFAULT_YOUNG_THRESHOLD, 0])
def test_the_served_bridge_settles_its_heap_before_it_accepts(threshold: int) -> None:
    # A process of its own: serve() freezes the heap of the process it runs in.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", SERVE_AND_REPORT, str(threshold)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    before, young, frozen = (int(v) for v in out.stdout.split())
    if threshold:
        assert young == threshold and frozen > 10_000  # the imports, pipecat and the stack, at least
    else:
        assert young == before and frozen == 0
