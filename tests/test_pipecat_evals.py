"""The bot under pipecat's own eval harness: ``voice_agent.harness.eval_bot`` driven by ``pipecat.evals``.

Two bots are started as subprocesses on free loopback ports (``python -m voice_agent.harness.eval_bot``,
the offline reference agent, K=2, S=2): one with our ``lanes`` policy, one with the
``window`` baseline. The scenario ``config/evals/billing_dispute_memory.yaml`` runs through
the harness (``scripts/run_pipecat_eval.py``, i.e. ``EvalScenarioFile`` + ``EvalScriptSession``):
it passes against ``lanes``; it fails on the late credit turn against ``window``, which has
forgotten the account number, so the check measures memory; and a deliberately wrong
argument expectation fails, so the argument check can fail at all. No judge, no LLM, no network.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from pipecat.evals.results import EvalScriptResult

REPO_ROOT = Path(__file__).resolve().parents[1]
SCENARIO = REPO_ROOT / "config" / "evals" / "billing_dispute_memory.yaml"
RUNNER_SCRIPT = REPO_ROOT / "scripts" / "run_pipecat_eval.py"
STARTUP_TIMEOUT_S = 30.0
CREDIT_TURN = 11
"""Index of the late ``issue_credit`` turn in the scenario."""


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_pipecat_eval", RUNNER_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner = _load_runner()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _bot_env() -> dict[str, str]:
    """The test's environment without the developer's settings, pinned to the offline agent."""
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("VOICE_AGENT_") and not k.endswith("_API_KEY")}
    env["VOICE_AGENT_LLM__VENDOR"] = "reference"
    env["VOICE_AGENT_SUMMARIZER__KIND"] = "extractive"
    return env


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def _bots(tmp: Path, policies: list[str]) -> Iterator[dict[str, str]]:
    """Starts one eval bot per policy, all at once; yields policy -> WebSocket URL; stops them."""
    procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}
    try:
        for policy in policies:
            port = _free_port()
            log = tmp / f"eval_bot_{policy}.log"
            cmd = [sys.executable, "-m", "voice_agent.harness.eval_bot", "--host", "127.0.0.1", "--port", str(port),
                   "--policy", policy, "--keep", "2", "--every", "2", "--reference-date", "2026-11-30"]
            with log.open("wb") as out:
                proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=_bot_env(), stdout=out, stderr=subprocess.STDOUT)
            procs[policy] = (proc, port, log)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for policy, (proc, port, log) in procs.items():
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"{policy} eval bot exited with {proc.returncode}:\n{_tail(log)}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"{policy} eval bot not listening after {STARTUP_TIMEOUT_S:.0f} s:\n{_tail(log)}")
                    time.sleep(0.1)
        yield {policy: f"ws://127.0.0.1:{port}/ws" for policy, (_, port, _) in procs.items()}
    finally:
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc, _, _ in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


@pytest.fixture(scope="module")
def bot_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A ``lanes`` and a ``window`` eval bot, K=2, S=2, shared by the module's tests."""
    with _bots(tmp_path_factory.mktemp("eval_bots"), ["lanes", "window"]) as urls:
        yield urls


async def _run(path: Path, url: str) -> EvalScriptResult:
    results: list[EvalScriptResult] = await runner.run_scenarios([path], url, timeout_ms=5000)
    assert len(results) == 1
    return results[0]


def _report(result: EvalScriptResult) -> str:
    text: str = runner.describe(result)
    return text + "\n" + "\n".join(result.debug_log[-40:])


def test_scenario_is_pipecat_script_format() -> None:
    from pipecat.evals.scenario import EvalScenarioFile
    from pipecat.evals.script import EvalScriptScenario

    (scenario,) = EvalScenarioFile.load(SCENARIO)
    assert isinstance(scenario, EvalScriptScenario)
    assert not scenario.user_audio and not scenario.bot_audio  # text modality
    assert all(exp.eval is None for turn in scenario.turns for exp in turn.expect)  # no judge needed
    credit = scenario.turns[CREDIT_TURN]
    assert credit.user is not None and "issue the credit" in credit.user
    assert any(turn.send_after is not None for turn in scenario.turns)  # a barge-in


async def test_billing_dispute_memory_passes(bot_urls: dict[str, str]) -> None:
    result = await _run(SCENARIO, bot_urls["lanes"])
    assert result.passed, _report(result)
    assert [t.status for t in result.turns] == ["passed"] * len(result.turns)
    credit = result.turns[CREDIT_TURN]
    assert [e.event_name for e in credit.expectations] == ["function_call", "llm_response"]


@pytest.mark.timeout(300)
async def test_window_baseline_fails_the_credit_turn(bot_urls: dict[str, str]) -> None:
    """With K=2 the account number has left the raw window: only memory can fill issue_credit."""
    result = await _run(SCENARIO, bot_urls["window"])
    assert not result.passed, _report(result)
    assert {f.turn_index for f in result.failures} == {CREDIT_TURN}, _report(result)
    assert result.failures[0].event_name == "function_call"
    assert result.failures[0].kind == "missing_function_call"


async def test_wrong_argument_expectation_fails(bot_urls: dict[str, str], tmp_path: Path) -> None:
    data: dict[str, Any] = yaml.safe_load(SCENARIO.read_text())
    scenario = data["scenarios"][0]
    scenario["name"] = "wrong_account"
    scenario["turns"] = scenario["turns"][:3]  # up to the account lookup
    lookup = scenario["turns"][2]["expect"][0]
    assert lookup["calls"][0]["name"] == "lookup_account"
    lookup["calls"][0]["args"]["account_id"] = "ACC-0000-00"
    lookup["within_ms"] = 1000  # a mismatch is reported when the budget runs out
    scenario["turns"][2]["expect"] = [lookup]
    wrong = tmp_path / "wrong_account.yaml"
    wrong.write_text(yaml.safe_dump(data, sort_keys=False))

    result = await _run(wrong, bot_urls["lanes"])
    assert not result.passed
    failures = [(f.turn_index, f.event_name, f.kind) for f in result.failures]
    assert failures == [(2, "function_call", "function_args_mismatch")], _report(result)
    assert "ACC-4729-18" in result.failures[0].reason  # the harness saw the real call and compared its args
    assert [t.status for t in result.turns] == ["passed", "passed", "failed"]
