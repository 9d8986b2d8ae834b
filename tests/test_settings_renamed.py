"""Renamed settings keys: the old name is still read, as the new key, with a warning naming the new key."""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_agent.settings import LLMConfig, Settings, SettingsError, load_settings, with_overrides

LOCAL = 'base_url = "http://127.0.0.1:8000/v1"\n'
"""An OpenAI-compatible local server: a hosted vendor that needs no key."""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text)
    return path


def test_the_old_llm_key_in_the_file_is_read_as_vendor_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\nprovider = "openai"\n' + LOCAL)  # legacy-name
    with pytest.warns(FutureWarning, match=r"set llm\.vendor instead \(VOICE_AGENT_LLM__VENDOR"):
        settings = load_settings(path)
    assert settings.llm.vendor == "openai"


def test_the_old_variable_still_outranks_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__PROVIDER", "openai")  # legacy-name
    path = write(tmp_path, '[llm]\nvendor = "reference"\n' + LOCAL)
    with pytest.warns(FutureWarning, match=r"llm\.vendor"):
        assert load_settings(path).llm.vendor == "openai"


def test_the_old_and_the_new_key_together_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\nvendor = "openai"\nprovider = "openai"\n' + LOCAL)  # legacy-name
    with pytest.raises(SettingsError, match=r"set only llm\.vendor"):
        load_settings(path)
    with pytest.raises(ValueError, match=r"set only llm\.vendor"):
        LLMConfig.model_validate({"vendor": "openai", "provider": "google"})  # legacy-name


def test_code_that_passes_the_old_key_gets_the_new_one() -> None:
    with pytest.warns(FutureWarning, match=r"llm\.vendor"):
        assert with_overrides(Settings(), llm={"provider": "reference"}).llm.vendor == "reference"  # legacy-name
    with pytest.warns(FutureWarning, match=r"llm\.vendor"):
        assert LLMConfig.model_validate({"provider": "openai"}).vendor == "openai"  # legacy-name


def test_the_new_key_alone_warns_nothing(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    assert load_settings(write(tmp_path, '[llm]\nvendor = "openai"\n' + LOCAL)).llm.vendor == "openai"
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]
