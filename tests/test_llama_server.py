"""A real llama-cpp-python server on the packaged model serves a short call through the pipeline (``llm.base_url``).

The call takes the path ``voice-agent serve`` and ``simulate`` take with ``llm.vendor = "openai"``: the
settings, ``build_call``, pipecat's real ``OpenAILLMService``, our pipeline. Before ``llm.lane_role`` every
request was an HTTP 500 (the server knows no ``developer`` role and no ``content: null`` on a tool-call
message) and the caller heard the watchdog's apology. The server log also shows llama.cpp's prefix reuse:
``Llama.generate`` keeps the KV cache of the longest prefix the next prompt shares with the last one (no
``--cache`` flag needed; that flag is a cache of whole states across prompts), so a second turn evaluates only
what is new since the first.

What the model says is its own: given the domain's tools, the 1.5B model often answers with a tool call written
as text (``{"name": "lookup_account", ...``), since llama-cpp-python's server, with the GGUF's own chat template
and ``tool_choice`` auto, returns the model's text as content rather than parsing it into ``tool_calls``. The test
asserts the transport (every request answered, no apology), not the model's judgement.

Needs the ``local-summarizer`` extra (the runtime with its server, and the model's parts); skipped without it.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from voice_agent.call.factory import build_call
from voice_agent.core.transcript import EntryKind
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.services.factory import make_hosted_llm
from voice_agent.settings import load_settings, with_overrides
from voice_agent.summarizers.local import default_threads
from voice_agent.summarizers.local_model import ensure_model, extra_status

MAX_TOKENS = 8  # a short answer is an answer; a token costs as much as ten prompt tokens, a second on a busy machine
PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
STATUS = re.compile(r'"POST /v1/chat/completions HTTP/1\.1" (\d{3})')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def llama_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A running ``python -m llama_cpp.server`` on 127.0.0.1: its base URL and its log."""
    problem = extra_status()
    if problem is not None:
        pytest.skip(f"the local model cannot run: {problem}")
    assert importlib.util.find_spec("sse_starlette") is not None, (
        "llama_cpp.server needs llama-cpp-python[server], which the local-summarizer extra brings: reinstall it")
    port, log = _free_port(), tmp_path / "llama-server.log"
    # All cores but one, as the in-process model (default_threads): with both cores of a busy 2-core machine,
    # llama.cpp's threads wait for each other: this call took 270 s there, 170 s on one thread.
    threads = str(default_threads())
    # verbose: the prefix reuse and the per-request timings go to the log. logits_all off (the server's default is
    # on, for logprobs, which no call asks for): the logits of every prompt token, 0.6 MB each, are then neither
    # computed nor copied (45 s of the 1,400-token first prompt on a busy machine).
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(ensure_model()), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", "4096", "--n_threads", threads, "--n_threads_batch", threads,
               "--logits_all", "False", "--verbose", "True"]
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"the server exited: {log.read_text(errors='replace')[-2000:]}"
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not start in 120 s"
            time.sleep(0.5)
        yield base_url, log
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_call_on_a_real_llama_server_gets_answers_and_reuses_the_prefix(
    llama_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    base_url, log = llama_server
    monkeypatch.setenv("VOICE_AGENT_LLM__VENDOR", "openai")
    monkeypatch.setenv("VOICE_AGENT_LLM__BASE_URL", base_url)
    monkeypatch.setenv("VOICE_AGENT_LLM__MODEL", "local")
    # llm.lane_role unset: a base_url server gets the lanes as system messages.
    settings = with_overrides(
        load_settings(),
        # A busy 2-core machine: the first prompt alone can take a minute; one attempt, no retry.
        llm={"first_token_timeout_secs": 400.0, "total_timeout_secs": 500.0, "retries": 0},
        call={"reference_date": dt.date(2026, 11, 30)},
    )

    def short_answers(_domain: Any) -> Any:
        llm = make_hosted_llm(settings.llm)
        # pipecat's public settings update, before the call starts: the server's own default is n_ctx.
        settings_type: Any = type(llm.settings)  # the OpenAI service's own settings class
        llm.settings.apply_update(settings_type(max_tokens=MAX_TOKENS, temperature=0.0, seed=0))
        return llm

    parts = build_call(settings, "llama", llm_factory=short_answers)
    lines = [CallerLine(1, "Hello, is paperless billing free?"), CallerLine(2, "Thanks. And can I pay by card?")]
    started = time.monotonic()
    await run_text_call(parts.session, parts.llm, lines, turn_timeout=600.0)
    elapsed = time.monotonic() - started

    server_log = log.read_text(errors="replace")
    statuses = STATUS.findall(server_log)
    assert statuses and set(statuses) == {"200"}, statuses
    assert parts.session.llm_failures == []  # no watchdog apology
    said = [e.text for e in parts.session.state.transcript.entries if e.kind is EntryKind.AGENT]
    assert len(said) == 2 and all(t.strip() for t in said), said
    # Every request after the first starts with what the one before it sent: llama.cpp evaluates only the rest.
    hits = [(int(a), int(b)) for a, b in PREFIX_HIT.findall(server_log)]
    prompt_tokens = [int(n) for n in re.findall(r"prompt eval time = +[\d.]+ ms / +(\d+) tokens", server_log)]
    print(f"\nllama server: {len(statuses)} requests in {elapsed:.0f} s; prompt tokens evaluated per request "
          f"{prompt_tokens}; prefix reused (hit, evaluated) {hits}")
    assert len(hits) >= 1 and len(prompt_tokens) == len(statuses)
    first, second = prompt_tokens[0], prompt_tokens[1]
    assert hits[0][1] == second and hits[0][0] > second, (hits, prompt_tokens)
    assert second < first / 2, prompt_tokens
