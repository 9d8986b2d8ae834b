"""Shared fixtures: the fake OpenAI-compatible server and a clean environment for every test."""

pytest_plugins = ["tests.fakes.openai_server"]
