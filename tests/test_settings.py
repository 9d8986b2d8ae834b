"""Settings: defaults from config/settings.toml, environment overrides, one-line errors."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from voice_agent.settings import API_KEY_ENV, Settings, SettingsError, load_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED = REPO_ROOT / "config" / "settings.toml"


# The autouse clean_env fixture (tests/fakes/openai_server.py, via conftest) isolates the environment.


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text)
    return path


def error_of(path: Path | None = None) -> str:
    with pytest.raises(SettingsError) as excinfo:
        load_settings(path)
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert message.startswith("settings: ")
    return message


def test_shipped_file_holds_the_offline_defaults() -> None:
    settings = load_settings()  # config/settings.toml, relative to the working directory
    assert settings == load_settings(SHIPPED)
    assert settings.llm.vendor == "reference"
    assert settings.llm.api_key is None
    summarizer = settings.summarizer
    assert (summarizer.kind, summarizer.max_lines, summarizer.max_words) == ("extractive", 12, 30)
    assert (settings.policy.name, settings.policy.keep, settings.policy.every) == ("lanes", 6, 5)
    assert (settings.output_guard.max_credit, settings.output_guard.late_max_credit) == (50.0, 25.0)
    assert settings.output_guard.strict_after_turn == 20
    assert (settings.telemetry.include_pii, settings.telemetry.exporter) == (False, "none")
    assert settings.call.reference_date is None  # today, taken per call by the call factory
    assert settings.call.ledger_capacity == 64


def test_shipped_file_matches_built_in_defaults() -> None:
    # With no file at all the same offline defaults apply, so the two cannot drift apart silently.
    shipped = load_settings(SHIPPED)
    assert shipped == Settings()


def test_file_values_are_read(tmp_path: Path) -> None:
    path = write(tmp_path, '[policy]\nname = "rolling"\nkeep = 8\n[call]\nreference_date = 2026-03-01\n')
    settings = load_settings(path)
    assert (settings.policy.name, settings.policy.keep, settings.policy.every) == ("rolling", 8, 5)
    assert settings.call.reference_date == dt.date(2026, 3, 1)


def test_settings_path_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_SETTINGS", str(write(tmp_path, "[policy]\nevery = 3\n")))
    assert load_settings().policy.every == 3


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, '[llm]\nvendor = "reference"\nmodel = "from-file"\n[policy]\nkeep = 8\n')
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
    monkeypatch.setenv("VOICE_AGENT_POLICY__KEEP", "4")
    monkeypatch.setenv("VOICE_AGENT_CALL__REFERENCE_DATE", "2026-03-01")
    monkeypatch.setenv("VOICE_AGENT_TELEMETRY__INCLUDE_PII", "true")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = load_settings(path)
    assert settings.llm.vendor == "openai"
    assert settings.llm.model == "from-file"  # nested sections merge key by key
    assert settings.policy.keep == 4
    assert settings.call.reference_date == dt.date(2026, 3, 1)
    assert settings.telemetry.include_pii is True


def test_unknown_key_in_file_suggests_the_right_one(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\nmodle = "gpt-4.1"\n')
    assert error_of(path) == f"settings: unknown key 'llm.modle' in {path} (did you mean 'model'?)"


def test_unknown_section_in_file_suggests_the_right_one(tmp_path: Path) -> None:
    path = write(tmp_path, '[sumarizer]\nkind = "extractive"\n')
    assert error_of(path) == f"settings: unknown key 'sumarizer' in {path} (did you mean 'summarizer'?)"


def test_unknown_key_in_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_POLICY__KEPP", "3")
    assert error_of() == (
        "settings: unknown key 'policy.kepp' in the environment (VOICE_AGENT_POLICY__KEPP) (did you mean 'keep'?)"
    )


def test_wrong_value_names_the_key_and_where_to_set_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[summarizer]\nmax_lines = 0\n")
    message = error_of(path)
    assert message.startswith(f"settings: summarizer.max_lines=0 in {path} is invalid:")
    assert "VOICE_AGENT_SUMMARIZER__MAX_LINES" in message
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "opneai")
    message = error_of(path)
    assert "llm.vendor='opneai' in the environment (VOICE_AGENT_LLM__VENDOR)" in message
    assert "'openai'" in message
    assert "(and 1 more)" in message


@pytest.mark.parametrize("vendor", ["openai", "anthropic", "google"])
def test_hosted_vendor_without_key_names_its_variable(monkeypatch: pytest.MonkeyPatch, vendor: str) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", vendor)
    variable = API_KEY_ENV[vendor]
    local = ", or llm.base_url for a local server" if vendor == "openai" else ""
    assert error_of() == f"settings: llm.vendor={vendor} needs {variable} (set it in the environment{local})"


def test_api_key_comes_from_the_vendor_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    settings = load_settings()
    assert settings.llm.api_key is not None
    assert settings.llm.api_key.get_secret_value() == "sk-ant-test"
    assert "sk-ant-test" not in repr(settings)  # never printed by accident


def test_explicit_api_key_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-standard-variable")
    monkeypatch.setenv("VOICE_AGENT_LLM__API_KEY", "explicit")
    settings = load_settings(write(tmp_path, '[llm]\nvendor = "openai"\nbase_url = "http://127.0.0.1:8000/v1"\n'))
    assert settings.llm.api_key is not None
    assert settings.llm.api_key.get_secret_value() == "explicit"
    assert settings.llm.base_url == "http://127.0.0.1:8000/v1"


def test_a_local_server_needs_no_key_a_hosted_one_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = load_settings(write(tmp_path, '[llm]\nvendor = "openai"\nbase_url = "http://127.0.0.1:8000/v1"\n'))
    assert local.llm.api_key is not None and local.llm.api_key.get_secret_value()
    with pytest.raises(SettingsError, match="needs OPENAI_API_KEY"):
        load_settings(write(tmp_path, '[llm]\nvendor = "openai"\n'))


def test_base_url_only_for_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "google")
    monkeypatch.setenv("VOICE_AGENT_LLM__BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("GOOGLE_API_KEY", "g")
    assert "llm.base_url is only for OpenAI-compatible servers" in error_of()


def test_llm_summarizer_needs_a_hosted_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_SUMMARIZER__KIND", "llm")
    assert error_of() == (
        "settings: summarizer.kind=llm needs a hosted llm.vendor "
        "(set llm.vendor=openai|anthropic|google, or summarizer.kind=extractive)"
    )


def test_fault_summarizer_is_not_a_settings_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fault-injecting summarizer is the simulation's instrument; a configured call never runs it.
    monkeypatch.setenv("VOICE_AGENT_SUMMARIZER__KIND", "fault")
    message = error_of()
    assert message.startswith("settings: summarizer.kind='fault' in the environment (VOICE_AGENT_SUMMARIZER__KIND)")
    assert "'extractive', 'llm' or 'local'" in message


def test_removed_fault_keys_are_unknown(tmp_path: Path) -> None:
    path = write(tmp_path, "[summarizer]\nretention = 0.9\n")
    assert error_of(path).startswith(f"settings: unknown key 'summarizer.retention' in {path} (")


def test_missing_named_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert error_of(missing) == (
        f"settings: file {missing} not found (create it or point VOICE_AGENT_SETTINGS at a TOML file)"
    )


def test_missing_default_file_means_built_in_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings() == Settings()


def test_broken_toml_is_one_line(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "[llm\nprovider = \n"))
    assert "is not valid TOML" in message


def test_the_leg_lease_and_stream_silence_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from voice_agent.settings import load_settings

    monkeypatch.setenv("VOICE_AGENT_STORE__LEASE_SECS", "3")
    monkeypatch.setenv("VOICE_AGENT_STORE__STREAM_SILENCE_SECS", "12")
    store = load_settings().store
    assert (store.lease_secs, store.stream_silence_secs) == (3.0, 12.0)
    monkeypatch.setenv("VOICE_AGENT_STORE__LEASE_SECS", "0.1")
    assert "store.lease_secs=" in error_of() and "VOICE_AGENT_STORE__LEASE_SECS" in error_of()
