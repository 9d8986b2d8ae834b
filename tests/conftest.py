"""Shared fixtures: the fake OpenAI-compatible server and a clean environment for every test."""

import os

import pytest

pytest_plugins = ["tests.fakes.openai_server"]

# An unset summarizer.kind means `local` where the local-summarizer extra is installed (scripts/test installs
# it); the suite's calls must not depend on that. Set at import too: some test modules build Settings() when
# they are collected, before any fixture runs.
DETERMINISTIC_SUMMARIZER = ("VOICE_AGENT_SUMMARIZER__KIND", "extractive")
os.environ[DETERMINISTIC_SUMMARIZER[0]] = DETERMINISTIC_SUMMARIZER[1]


@pytest.fixture(autouse=True)
def deterministic_summarizer(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls built from settings run the extractive summarizer, whether or not the local model is installed.

    Tests of the local summarizer delete the variable.
    """
    monkeypatch.setenv(*DETERMINISTIC_SUMMARIZER)
