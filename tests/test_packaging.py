"""Packaging: the package list, the data files' one lookup, and clear errors for data that is not shipped."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

from voice_agent import datafiles
from voice_agent.audio import manifest as audio_manifest
from voice_agent.domains.billing import backend
from voice_agent.harness.evaluation import date_contract_eval, date_eval, real_retention, retrieval_eval
from voice_agent.retrieval import knowledge, quality
from voice_agent.summarizers import local_model

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_is_in_the_wheel_list() -> None:
    # setuptools' find cannot add the mapped data folder, so the list is explicit; a new subpackage must join it.
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = set(find_packages(where=str(ROOT), include=["voice_agent*", "processors*"]))
    assert found - listed == set(), "add these to [tool.setuptools].packages in pyproject.toml"
    data = {"voice_agent.data"} | {"voice_agent.data." + ".".join(d.relative_to(ROOT / "config").parts)
                                   for d in (ROOT / "config").rglob("*") if d.is_dir() and d.name != "__pycache__"}
    assert listed - found == data, "the data folders are listed too (config/ mapped to voice_agent.data)"
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"voice_agent.data": "config"}


def test_a_checkout_reads_its_config_folder() -> None:
    assert datafiles.checkout_root() == ROOT
    assert datafiles.data_root() == ROOT / "config"
    assert not (ROOT / "voice_agent" / datafiles.PACKAGED_DIR).exists()  # only the wheel has it


@pytest.mark.parametrize("path", [
    audio_manifest.MANIFEST_PATH, local_model.MANIFEST_PATH, backend.DEFAULT_DATA_DIR, knowledge.KNOWLEDGE_DIR,
    quality.QUESTIONS_PATH, retrieval_eval.EVALS_DIR, date_eval.DEFAULT_SENTENCES, date_contract_eval.CONTRACT_DIR,
], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_data_path_is_under_the_data_root_and_exists(path: Path) -> None:
    assert path.is_relative_to(datafiles.data_root()) and path.exists()


def test_the_default_settings_are_the_shipped_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from voice_agent.settings import _settings_path

    monkeypatch.chdir(tmp_path)  # no config/ here: the package's own copy, not built-in defaults by accident
    assert _settings_path(None) == (datafiles.data_path("settings.toml"), False)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings.toml").write_text("")
    assert _settings_path(None) == (Path("config/settings.toml"), False)  # a deployment's own file wins


def test_no_module_finds_files_by_counting_parents() -> None:
    pattern = re.compile(r"parents\[\d\]|\.parent\.parent|__file__\)\.resolve\(\)\.parent")
    offenders = [f"{path.relative_to(ROOT)}:{n}" for folder in ("voice_agent", "processors")
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == [], "use voice_agent.datafiles (data_path, shared_data_path)"


def test_shared_data_is_beside_the_checkout_and_missing_is_a_clear_error(tmp_path: Path) -> None:
    assert ROOT.parent / "shared" / "data" / "sgd-calls-public.jsonl" == real_retention.SGD_PATH
    missing = tmp_path / "sgd.jsonl"
    with pytest.raises(FileNotFoundError) as excinfo:
        datafiles.require_shared_data(missing, "the public SGD calls", "--sgd PATH")
    assert str(excinfo.value) == (
        f"the public SGD calls not found at {missing} (it is not shipped with the package; it lives in "
        "../shared/data/ beside a source checkout): pass --sgd PATH"
    )
    with pytest.raises(ValueError, match=r"not shipped with the package.*pass --sgd PATH"):
        real_retention.load_inputs(("sgd",), calls=1, seed=0, sgd_path=missing)
