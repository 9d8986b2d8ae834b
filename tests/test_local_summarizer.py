"""The local summarizer: one real pass of the packaged model, its manifest, and passes off the turn.

The real pass needs the ``local-summarizer`` extra, which scripts/test installs: without it the test
fails, unless ``VOICE_AGENT_SKIP_LOCAL_MODEL=1`` says to skip it (read at import: the clean-environment
fixture removes ``VOICE_AGENT_*`` variables before each test).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import importlib.util
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from voice_agent.call.factory import build_call, build_session
from voice_agent.core.call_state import CallState
from voice_agent.core.passes import PassScheduler
from voice_agent.core.policy import ContextPolicy
from voice_agent.domains.base import Domain
from voice_agent.domains.billing import billing_domain
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.policies.base import PolicySummarizer
from voice_agent.recording.record import CallRecorder
from voice_agent.services import factory
from voice_agent.settings import Settings, SettingsError, SummarizerConfig, load_settings, with_overrides
from voice_agent.summarizers import local_model
from voice_agent.summarizers.extractive import ExtractiveSummarizer
from voice_agent.summarizers.local import Completion, LocalSummarizer
from voice_agent.summarizers.local_model import LocalModelError, ensure_model, load_local_manifest

SKIP_REAL = os.environ.get("VOICE_AGENT_SKIP_LOCAL_MODEL") == "1"
HAVE_RUNTIME = importlib.util.find_spec("llama_cpp") is not None
ACCOUNT = "ACC-4729-18"


# -- one real pass ---------------------------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_one_real_pass_gives_a_structured_summary_with_no_identifier_and_a_drop_log() -> None:
    if not HAVE_RUNTIME and SKIP_REAL:
        pytest.skip("llama_cpp is not installed and VOICE_AGENT_SKIP_LOCAL_MODEL=1")
    assert HAVE_RUNTIME, (
        "the local-summarizer extra is not installed (scripts/test installs it; "
        "set VOICE_AGENT_SKIP_LOCAL_MODEL=1 to skip this test)"
    )
    state = CallState(call_id="real", reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(keep=2, every=5))
    lines = [
        (f"Hi, my account number is {ACCOUNT} and I was charged twice for CloudVault Pro in October.",
         "Sorry about that, I can see the duplicate charge."),
        ("I want it credited back to my account, not refunded to my card, because the card is cancelled.",
         "Understood, a credit to your account it is."),
        ("How long does a dispute take?", "Usually about ten working days."),
        ("Okay.", "Anything else?"),
        ("Is paperless billing free?", "Yes, it is free."),
    ]
    summarizer = LocalSummarizer(SummarizerConfig())
    pass_scheduler = PassScheduler(summarizer)
    passes = []
    started = time.monotonic()
    for turn, (caller, agent) in enumerate(lines, start=1):
        state.start_turn(caller)
        if turn == 1:
            state.ledger.record_from_caller("account", ACCOUNT, turn, quote=caller)
        summary_pass = asyncio.run(pass_scheduler.on_turn_start(state))
        if summary_pass is not None:
            passes.append(summary_pass)
        state.record_agent(agent)
    elapsed = time.monotonic() - started
    assert [p.turn for p in passes] == [5]  # K=2: turns 1-2 leave the window at turn 5
    assert summarizer.failures == 0, summarizer.passes
    assert summarizer.passes[0].outcome == "ok" and summarizer.passes[0].completion_tokens > 0
    summary = state.summary
    assert summary.covers_through_turn == 2 and not summary.is_empty()
    rendered = summary.render() + json.dumps(summary.model_dump())
    assert ACCOUNT.lower() not in rendered.lower() and "472918" not in rendered.replace("-", "")
    event = passes[0].event
    assert set(event.span_attributes()) == {
        "summary.pass_turn", "summary.facts_in", "summary.facts_out", "summary.facts_dropped",
        "summary.scrubbed",
    }
    assert event.keys_in == {"ledger:account"}  # the identifier went in with turn 1
    assert "ledger:account" not in event.keys_out  # and never comes out as a value
    assert all(key == "ledger:account" for key, _ in event.scrubbed)
    print(f"real local pass: {elapsed:.1f} s, {summarizer.passes[0]}")


# -- manifest --------------------------------------------------------------------------------------------------------


def _fake_parts(root: Path, chunks: list[bytes], name: str = "fakepart") -> None:
    """Installs tiny part packages (module + dist-info) under ``root``, which the caller puts on sys.path."""
    for n, data in enumerate(chunks, start=1):
        module = root / f"{name}{n}"
        (module / "data").mkdir(parents=True)
        (module / "__init__.py").write_text("")
        (module / "data" / f"part{n:02d}.bin").write_bytes(data)
        info = root / f"{name}{n}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}{n}\nVersion: 1.0\n")


def _manifest(tmp_path: Path, chunks: list[bytes], *, whole: str | None = None,
              parts: list[str] | None = None) -> Path:
    digests = parts or [hashlib.sha256(c).hexdigest() for c in chunks]
    text = (
        '[models."fake-1b"]\nfile = "fake.gguf"\n'
        f"size = {sum(map(len, chunks))}\n"
        f'sha256 = "{whole or hashlib.sha256(b"".join(chunks)).hexdigest()}"\n'
        'version = "1.0"\npart_package = "fakepart{n}"\npart_module = "fakepart{n}"\n'
        'part_file = "data/part{nn}.bin"\n'
        f"part_sha256 = {json.dumps(digests)}\n"
    )
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    chunks = [b"GGUF" + b"a" * 1000, b"b" * 700]
    site = tmp_path / "site"
    site.mkdir()
    _fake_parts(site, chunks)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return chunks


def test_the_shipped_manifest_pins_the_extra(tmp_path: Path) -> None:
    spec = load_local_manifest()[local_model.DEFAULT_MODEL]
    assert spec.parts == 22 and spec.size == 1117320768
    assert spec.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    root = Path(__file__).resolve().parents[1]
    pyproject = (root / "pyproject.toml").read_text()
    for requirement in spec.pip_specs():  # exact in the extra itself: the manifest hashes those versions
        assert f'"{requirement}"' in pyproject
    # The runtime is a range in the extra and pinned, like every dependency, by the constraints file.
    pins = dict(line.split("==") for line in (root / "constraints.txt").read_text().splitlines() if "==" in line)
    pinned = {name.lower().replace("_", "-"): version for name, version in pins.items()}  # pip freeze's spelling
    assert pinned[local_model.RUNTIME_PACKAGE] == local_model.RUNTIME_VERSION


def test_parts_are_assembled_once_into_the_cache_and_checked(fake_parts: list[bytes], tmp_path: Path) -> None:
    manifest = load_local_manifest(_manifest(tmp_path, fake_parts))
    path = ensure_model("fake-1b", manifest=manifest, cache=tmp_path / "cache")
    assert path == tmp_path / "cache" / "fake.gguf" and path.read_bytes() == b"".join(fake_parts)
    mtime = path.stat().st_mtime_ns
    assert ensure_model("fake-1b", manifest=manifest, cache=tmp_path / "cache") == path
    assert path.stat().st_mtime_ns == mtime  # not rebuilt
    path.write_bytes(b"GGUF damaged")  # a cache file that differs is rebuilt from the parts
    assert ensure_model("fake-1b", manifest=manifest, cache=tmp_path / "cache").read_bytes() == b"".join(fake_parts)


def test_xdg_cache_home_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert local_model.cache_dir() == tmp_path / "voice-agent" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert local_model.cache_dir() == Path.home() / ".cache" / "voice-agent" / "models"


def test_a_bad_digest_is_a_one_line_error(fake_parts: list[bytes], tmp_path: Path) -> None:
    bad_part = load_local_manifest(_manifest(tmp_path, fake_parts, parts=["0" * 64, "1" * 64]))
    with pytest.raises(LocalModelError) as excinfo:
        ensure_model("fake-1b", manifest=bad_part, cache=tmp_path / "cache")
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith("local model fake-1b: sha256 of part 1 (fakepart1) is ")
    assert message.endswith("(pip install --force-reinstall 'fakepart1==1.0')")
    bad_whole = load_local_manifest(_manifest(tmp_path, fake_parts, whole="f" * 64))
    with pytest.raises(LocalModelError, match=r"sha256 of the assembled file is .*, the manifest says ffffffffffff"):
        ensure_model("fake-1b", manifest=bad_whole, cache=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*"))  # nothing half-written is left behind


def test_a_missing_part_package_is_a_one_line_error(tmp_path: Path) -> None:
    manifest = load_local_manifest(_manifest(tmp_path, [b"x" * 10]))  # fakepart1 is not installed here
    with pytest.raises(LocalModelError) as excinfo:
        ensure_model("fake-1b", manifest=manifest, cache=tmp_path)
    assert str(excinfo.value) == (
        "local model fake-1b: package fakepart1 is not installed (install the local-summarizer extra: "
        "CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install 'voice-agent[local-summarizer]')"
    )


def _without_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "llama_cpp" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_an_explicit_local_without_the_extra_is_a_one_line_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_runtime(monkeypatch)
    monkeypatch.setenv("VOICE_AGENT_SUMMARIZER__KIND", "local")
    with pytest.raises(SettingsError) as excinfo:
        build_call(load_settings(), "no-extra")
    assert str(excinfo.value) == (
        "settings: summarizer.kind=local needs llama-cpp-python, which is not installed "
        "(CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install 'voice-agent[local-summarizer]')"
    )


def test_unset_kind_is_local_with_the_extra_else_extractive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICE_AGENT_SUMMARIZER__KIND")  # set by the suite's conftest
    settings = load_settings()
    assert settings.summarizer.kind is None  # the shipped file leaves it unset
    monkeypatch.setattr(factory, "local_extra_status", lambda _model: None)
    chosen = factory.summarizer_choice(settings)
    assert (chosen.kind, chosen.background) == ("local", True)
    assert "extra is installed" in chosen.reason
    monkeypatch.setattr(factory, "local_extra_status", lambda _model: "llama_cpp missing")
    chosen = factory.summarizer_choice(settings)
    assert (chosen.kind, chosen.background) == ("extractive", False)
    assert chosen.reason.endswith("cannot run: llama_cpp missing")
    session = build_session(settings, "fallback", billing_domain())
    assert isinstance(session.summarizer, ExtractiveSummarizer) and not session.summary_in_background
    explicit = with_overrides(settings, summarizer={"kind": "extractive", "background": True})
    assert build_session(explicit, "explicit", billing_domain()).summary_in_background


# -- off the critical path -------------------------------------------------------------------------------------------


class GatedEngine:
    """A completion engine that blocks its (worker) thread until released: a pass that takes as long as we say."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = 0

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, *, max_tokens: int,
                 temperature: float, seed: int, stop: threading.Event) -> Completion:
        self.calls += 1
        self.started.set()
        deadline = time.monotonic() + 30
        while not self.release.is_set() and not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        reply = {"established": ["turn 1: the caller disputes a duplicate charge"], "rejected": [], "decided": [],
                 "pending": [], "commitments": []}
        return Completion(json.dumps(reply), 10, 20, 0.0, "cancelled" if stop.is_set() else None)


SCRIPT = [
    "Hi, I was charged twice on my October invoice.",
    "My account is ACC-4729-18.",
    "How long does a dispute take?",
    "Do you offer paperless billing?",
    "How do I switch it on?",
    "Is it free?",
    "Can I pay by bank transfer?",
]


async def test_a_reply_is_produced_while_a_slow_pass_is_still_running() -> None:
    engine = GatedEngine()
    summarizer = LocalSummarizer(SummarizerConfig(local_timeout_secs=60), engine=engine)
    settings = with_overrides(Settings(), policy={"keep": 2, "every": 4}, summarizer={"background": True},
                              call={"reference_date": dt.date(2026, 11, 30)})

    def make(_call_id: str, _domain: Domain) -> PolicySummarizer:
        return summarizer

    parts = build_call(settings, "slow-pass", summarizer_factory=make)
    session = parts.session
    recorder = CallRecorder(session, [])
    seen: dict[int, dict[str, Any]] = {}

    async def on_turn(turn: int) -> None:
        record = recorder.turns[-1]
        seen[turn] = {"in_flight": summarizer.in_flight, "agent": list(record.agent),
                      "raw_from": session.state.raw_entries()[0].turn, "summary": session.state.summary.render()}
        if turn == len(SCRIPT):
            # Every reply so far came while the pass was blocked; now let it land.
            engine.release.set()
            await session.settle_summaries()

    lines = [CallerLine(n, text) for n, text in enumerate(SCRIPT, start=1)]
    await run_text_call(session, parts.llm, lines, recorder=recorder, on_turn=on_turn, turn_timeout=10)
    assert engine.started.is_set() and engine.calls == 1
    # K=2, S=4: the pass scheduled at turn 4 folds turn 1; it blocks, and turns 4-7 are answered meanwhile.
    for turn in range(4, len(SCRIPT) + 1):
        assert seen[turn]["agent"], f"turn {turn} got no reply"
        assert seen[turn]["in_flight"] == 1, seen[turn]
        assert seen[turn]["raw_from"] == 1  # turn 1 stays raw until its summary lands
        assert seen[turn]["summary"] == ""
    assert len(session.summary_passes) == 1
    landed = session.summary_passes[0]
    assert landed.turn == 4 and landed.landed_turn == len(SCRIPT)
    assert session.state.summary.covers_through_turn == 1
    assert session.state.unsummarized_from is None
    assert "duplicate charge" in session.state.summary.render()
    assert summarizer.failures == 0


async def test_a_pass_still_running_when_the_call_ends_is_cancelled() -> None:
    engine = GatedEngine()
    summarizer = LocalSummarizer(SummarizerConfig(local_timeout_secs=60), engine=engine)
    settings = with_overrides(Settings(), policy={"keep": 2, "every": 4}, summarizer={"background": True},
                              call={"reference_date": dt.date(2026, 11, 30)})
    parts = build_call(settings, "ended", summarizer_factory=lambda _c, _d: summarizer)
    lines = [CallerLine(n, text) for n, text in enumerate(SCRIPT[:5], start=1)]

    async def on_turn(turn: int) -> None:
        if turn == len(lines):
            # The pass must be running when the call ends: the process's one model thread may still be
            # finishing an earlier test's pass, and a pass that never started tells nothing about stopping one.
            await asyncio.to_thread(engine.started.wait, 60)

    await run_text_call(parts.session, parts.llm, lines, on_turn=on_turn, turn_timeout=70)  # closes the session
    deadline = time.monotonic() + 5
    while summarizer.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert summarizer.in_flight == 0 and not parts.session.summary_passes
    assert engine.calls == 1  # the worker thread was told to stop, and is free for the next pass
