"""Shared fixtures: the fake OpenAI-compatible server and a clean environment for every test."""

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from voice_agent.harness.redis_server import MISSING, REDIS_SERVER, redis_server

pytest_plugins = ["tests.fakes.openai_server", "tests.teardown_timeout"]

# An unset summarizer.kind means `local` where the local-summarizer extra is installed (scripts/test installs
# it); the suite's calls must not depend on that. Set at import too: some test modules build Settings() when
# they are collected, before any fixture runs.
DETERMINISTIC_SUMMARIZER = ("VOICE_AGENT_SUMMARIZER__KIND", "extractive")
os.environ[DETERMINISTIC_SUMMARIZER[0]] = DETERMINISTIC_SUMMARIZER[1]
# With a hosted LLM the caller-span extractor is on by default: one more request per caller turn, which tests of
# the conversation LLM (scripted replies in order, request counts) must not see. Its own tests delete it.
NO_CALLER_SPANS = ("VOICE_AGENT_CALLER_SPANS__EXTRACTOR", "off")
os.environ[NO_CALLER_SPANS[0]] = NO_CALLER_SPANS[1]


@pytest.fixture(autouse=True)
def collector_as_found() -> Iterator[None]:
    """A bridge served in the test process settles its heap (voice_agent.telephony.heap); later tests get the
    collector back as it was: nothing frozen, the thresholds put back."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.fixture(autouse=True)
def deterministic_summarizer(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls built from settings run the extractive summarizer, whether or not the local model is installed.

    Tests of the local summarizer delete the variable.
    """
    monkeypatch.setenv(*DETERMINISTIC_SUMMARIZER)


@pytest.fixture(autouse=True)
def no_caller_spans(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls on a hosted LLM run without the caller-span extractor; its tests delete the variable."""
    monkeypatch.setenv(*NO_CALLER_SPANS)


@pytest.fixture(scope="session")
def state_home(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One private state directory for the whole run."""
    return str(tmp_path_factory.mktemp("state-home"))


@pytest.fixture(autouse=True)
def private_state(clean_env: None, monkeypatch: pytest.MonkeyPatch, state_home: str) -> None:
    """Served calls write their call store under a temporary state home, never the developer's ~/.local/state."""
    monkeypatch.setenv("XDG_STATE_HOME", state_home)


@pytest.fixture
def need_redis() -> None:
    """Skips the test, loudly, when redis-server is not installed (scripts/test installs it)."""
    if REDIS_SERVER is None:
        pytest.skip(f"{MISSING}: the Redis tests did not run")


@pytest.fixture
def redis_url(need_redis: None, tmp_path: Path) -> Iterator[str]:
    """A real redis-server of this test's own, on a free loopback port: its URL."""
    with redis_server(tmp_path) as url:
        yield url
