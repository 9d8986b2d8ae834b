"""The wheel on its own: built offline, installed into a fresh venv outside the source tree, the main job runs.

Slow (about half a minute: a build, an install, a simulated call), so marked ``slow``; it is part of the suite.
Honest about the source tree: the build reads a copy of only what the wheel is made from; the venv sees the
suite's installed dependencies (pipecat and the rest, no download) through a plain path entry, which does not
run the suite venv's ``.pth`` hooks, so the editable checkout is invisible; every command runs from an empty
directory without PYTHONPATH, and the test checks that voice_agent and its data come from the new venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # builds a wheel and installs it in a venv

ROOT = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "README.md", "voice_agent", "processors", "config")


def run(args: list[str | Path], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("VOICE_AGENT_", "PIP_"))}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", LOGURU_LEVEL="WARNING")  # offline, always
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{args}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    # The suite venv's setuptools (the dev extra), no build isolation: nothing is downloaded.
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", dist, src], src, 120)
    (built,) = dist.glob("voice_agent-*.whl")
    return built


def test_the_wheel_carries_every_data_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    data = {f"voice_agent/data/{p.relative_to(ROOT / 'config').as_posix()}"
            for p in (ROOT / "config").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert data - names == set()
    assert not any(name.startswith(("config/", "tests/", "scripts/")) for name in names)
    assert "processors/context_assembly.py" in names and "voice_agent/datafiles.py" in names


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(venv, its site-packages): the wheel installed into a fresh venv outside the source tree."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    here = venv.parent
    run([sys.executable, "-m", "venv", "--without-pip", venv], here, 60)
    site = Path(run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    here, 30).stdout.strip())
    # The suite's dependencies as a plain path (after the venv's own site-packages; no .pth hooks run from it).
    (site / "suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--ignore-installed", wheel], here, 120)
    return venv, site


def test_the_installed_wheel_runs_the_main_job(installed: tuple[Path, Path], tmp_path: Path) -> None:
    venv, site = installed
    work = tmp_path / "work"
    work.mkdir()

    where = run([venv / "bin" / "python", "-c", "import voice_agent, processors; from voice_agent import datafiles; "
                 "print(voice_agent.__file__); print(processors.__file__); print(datafiles.data_root()); "
                 "print(datafiles.checkout_root())"], work, 60).stdout.split()
    assert all(Path(p).is_relative_to(site) for p in where[:3]), where
    assert where[2] == str(site / "voice_agent" / "data") and where[3] == "None"

    # The main job as a user runs it after `pip install voice-agent`: the console script, from an empty folder.
    result = run([venv / "bin" / "voice-agent", "simulate", "--runs", "2", "--policy", "lanes"], work, 180)
    assert "account_id @ turn 31 (said 4)" in result.stdout and "failed calls" in result.stdout
    assert "billing_dispute~p1" in result.stdout  # the paraphrases shipped too
    assert not list(work.iterdir())  # nothing written where it ran


def test_the_examples_run_against_the_installed_wheel(installed: tuple[Path, Path], tmp_path: Path) -> None:
    """The examples' own tests (pipecat's run_test, the scripted FakeLLM), from a copy outside the tree."""
    venv, site = installed
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "tests" / "fakes").mkdir(parents=True)
    for name in ("__init__.py", "test_examples.py", "fakes/__init__.py", "fakes/transport.py", "fakes/pipecat_run.py"):
        shutil.copy2(ROOT / "tests" / name, work / "tests" / name)
    result = run([venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
                  "tests/test_examples.py"], work, 300)
    assert " passed" in result.stdout and "failed" not in result.stdout, result.stdout[-2000:]
    found = run([venv / "bin" / "python", "-c", "import voice_agent; print(voice_agent.__file__)"], work, 60)
    assert Path(found.stdout.strip()).is_relative_to(site)
