"""The caller is never left in silence: our own LLM timeouts, one retry, a line instead of nothing, a transfer.

The decisions are tested as pure logic; the watchdog in whole calls, with the scripted FakeLLM and with the
real pipecat OpenAILLMService against the fake OpenAI server (one that answers 500, one that never answers).
Times are measured by the recorder, from outside the call: ``first_response_ms`` runs from the turn's first
inference to the first words the output guard released towards the caller. A test asserts only what load cannot
change: the caller waited at least the timeouts, and which timer fired (the failure's kind). That a failure is
answered *without* a timeout is shown with timeouts no test waits for (``PATIENT``): the call finishes within
the harness's turn limit only if no timer was waited for. How fast the caller hears the line is a benchmark's
question, not a unit test's.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from tests.fakes.openai_server import FakeOpenAIServer, chunk, openai_settings, sse_reply
from tests.fakes.toy_domain import TOY
from voice_agent.call.factory import build_call
from voice_agent.call.pipeline import build_call_pipeline
from voice_agent.call.session import CallSession
from voice_agent.call.telemetry import turn_attributes
from voice_agent.cli import app
from voice_agent.core.llm_recovery import (
    FailureKind,
    LLMRecovery,
    RecoveryAction,
    RecoveryLines,
    decide,
    longest_silence_secs,
)
from voice_agent.core.transcript import EntryKind, ToolOutcome
from voice_agent.domains.base import Domain
from voice_agent.domains.billing import billing_domain
from voice_agent.harness.simulation.text_call import CallerLine, run_text_call
from voice_agent.recording.record import CallRecorder
from voice_agent.services.factory import make_hosted_llm
from voice_agent.services.fake_llm import FakeLLM, FakeReply, FakeToolCall
from voice_agent.settings import (
    CallConfig,
    LLMConfig,
    Settings,
    SettingsError,
    load_settings,
    with_overrides,
    with_vendor,
)
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TODAY = dt.date(2026, 11, 30)
FAST = LLMConfig(first_token_timeout_secs=0.25, total_timeout_secs=1.0)
"""Short timeouts so the tests run quickly; the logic is the same at the 4 s / 15 s defaults."""
PATIENT = LLMConfig(first_token_timeout_secs=30.0, total_timeout_secs=60.0)
"""Timeouts above the 10 s turn limit of :func:`play`: a turn that completes never waited for one."""
LINES = RecoveryLines()
A = RecoveryAction

HANG = FakeReply(hang=True)
ERROR = FakeReply(error="vendor answered 500")


# --- the decisions (pure) ---------------------------------------------------------------------------


def test_the_nth_failed_request_of_a_call_decides_what_the_caller_hears() -> None:
    recovery = LLMRecovery(LLMConfig(retries=1, transfer_after_failures=3))
    actions = []
    for _ in range(4):
        recovery.start_attempt(retry=False)
        actions.append(recovery.fail())
        recovery.start_attempt(retry=True)
        actions.append(recovery.fail())
    assert actions == [A.RETRY, A.APOLOGIZE, A.RETRY, A.OFFER_CALLBACK, A.RETRY, A.TRANSFER, A.RETRY, A.HOLD]


def test_a_permanent_error_is_not_retried_and_an_answer_in_between_does_not_reset_the_count() -> None:
    recovery = LLMRecovery(LLMConfig())
    recovery.start_attempt(retry=False)
    assert recovery.fail(permanent=True) is A.APOLOGIZE  # a rejected key stays rejected: no retry
    recovery.start_attempt(retry=False)  # this request is answered
    recovery.start_attempt(retry=False)
    assert recovery.fail() is A.RETRY
    recovery.start_attempt(retry=True)
    assert recovery.fail() is A.OFFER_CALLBACK


def test_without_a_transfer_tool_or_after_a_refusal_the_callback_offer_stays() -> None:
    config = LLMConfig(retries=0, transfer_after_failures=1)
    assert decide(config, attempt=1, failed_requests=4, can_transfer=False) is A.OFFER_CALLBACK
    assert decide(config, attempt=1, failed_requests=0, can_transfer=False) is A.APOLOGIZE
    recovery = LLMRecovery(config)
    recovery.start_attempt(retry=False)
    assert recovery.fail() is A.TRANSFER
    recovery.transfer_refused()
    recovery.start_attempt(retry=False)
    assert recovery.fail() is A.OFFER_CALLBACK


def test_the_recovery_config_is_checked_and_bounds_the_silence() -> None:
    with pytest.raises(ValueError):
        LLMConfig(first_token_timeout_secs=5.0, total_timeout_secs=4.0)
    with pytest.raises(ValueError):
        LLMConfig(retries=-1)
    assert longest_silence_secs(LLMConfig()) == 8.0
    assert longest_silence_secs(LLMConfig(retries=0, first_token_timeout_secs=3.0)) == 3.0


# --- settings and wiring ----------------------------------------------------------------------------


def test_the_llm_timeouts_come_from_the_settings_into_every_calls_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = load_settings().llm  # config/settings.toml documents them with the defaults
    assert (shipped.first_token_timeout_secs, shipped.total_timeout_secs, shipped.retries,
            shipped.transfer_after_failures) == (4.0, 15.0, 1, 3)
    monkeypatch.setenv("VOICE_AGENT_LLM__FIRST_TOKEN_TIMEOUT_SECS", "2.5")
    monkeypatch.setenv("VOICE_AGENT_LLM__RETRIES", "0")
    settings = load_settings()
    parts = build_call(settings, "wired")
    assert parts.session.settings is settings  # the settings themselves, not a copy
    assert (settings.llm.first_token_timeout_secs, settings.llm.retries) == (2.5, 0)
    call = build_call_pipeline(parts.session, parts.llm)
    assert call.watchdog.config is settings.llm
    # The pair sits right around the LLM: contexts reach the LLM through the inlet, its answer leaves by the outlet.
    assert call.watchdog.inlet.next is call.llm and call.llm.next is call.watchdog.outlet


def test_bad_llm_timeouts_are_one_line_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__TOTAL_TIMEOUT_SECS", "2")
    with pytest.raises(SettingsError, match="total_timeout_secs") as caught:
        load_settings()  # below the 4 s first-token timeout
    assert "\n" not in str(caught.value)
    monkeypatch.setenv("VOICE_AGENT_LLM__TOTAL_TIMEOUT_SECS", "15")
    monkeypatch.setenv("VOICE_AGENT_LLM__RETRIES", "-1")
    with pytest.raises(SettingsError, match=r"llm\.retries"):
        load_settings()


def test_switching_vendor_keeps_the_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    settings = with_overrides(Settings(), llm={"first_token_timeout_secs": 2.0, "transfer_after_failures": 2,
                                               "max_tool_calls_per_turn": 3, "max_repeated_refusals": 1})
    switched = with_vendor(settings, "openai").llm
    assert (switched.vendor, switched.first_token_timeout_secs, switched.transfer_after_failures) == (
        "openai", 2.0, 2)
    assert (switched.max_tool_calls_per_turn, switched.max_repeated_refusals) == (3, 1)  # every limit, not a list


def test_the_vendor_sdk_does_not_retry_behind_the_watchdog() -> None:
    service: Any = make_hosted_llm(openai_settings("http://127.0.0.1:9/v1").llm)
    assert service._client.max_retries == 0  # the SDK's default is 2 retries with back-off
    assert service._client.timeout == 15.0 + 5.0


# --- whole calls with the scripted FakeLLM ----------------------------------------------------------


def toy_session(config: LLMConfig = FAST, domain: Domain = TOY) -> CallSession:
    return CallSession(domain, Settings(llm=config, call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())


async def play(
    session: CallSession, script: Mapping[int, Sequence[FakeReply]], lines: Sequence[str | CallerLine],
) -> tuple[CallRecorder, FakeLLM]:
    llm = FakeLLM(script)
    recorder = CallRecorder(session)
    caller = [line if isinstance(line, CallerLine) else CallerLine(i + 1, line) for i, line in enumerate(lines)]
    await run_text_call(session, llm, caller, recorder=recorder, turn_timeout=10.0)
    return recorder, llm


def agent_entries(session: CallSession) -> list[str]:
    return [e.text for e in session.state.transcript if e.kind is EntryKind.AGENT]


async def test_a_hung_llm_is_retried_once_then_the_caller_hears_an_apology_within_the_timeouts() -> None:
    session = toy_session()
    recorder, llm = await play(session, {1: [HANG, HANG]}, ["hello"])
    turn = recorder.turns[0]
    assert turn.agent == [LINES.apology]
    # Heard only after both attempts' first-token timeouts (the errors below say those timers fired, not the
    # total timeout or the harness's turn limit).
    silence = longest_silence_secs(FAST) * 1000
    assert turn.first_response_ms is not None and turn.first_response_ms >= silence
    # The retry sent the very same context, and the recorder counted both requests.
    assert turn.requests == 2 and len(llm.received) == 2 and llm.received[0] == llm.received[1]
    assert turn.errors == [
        "LLM first_token_timeout (attempt 1): no answer within 0.25 s -> retry",
        "LLM first_token_timeout (attempt 2): no answer within 0.25 s -> apologize",
    ]
    # The transcript lane holds the apology as the agent's words; the turn span carries the failures.
    assert agent_entries(session) == [LINES.apology]
    assert turn_attributes(session, 1)["llm.failures"] == ["first_token_timeout:retry", "first_token_timeout:apologize"]


async def test_the_retry_answers_when_the_vendor_recovers() -> None:
    session = toy_session()
    recorder, _ = await play(session, {1: [HANG, FakeReply(text="Here you are.")]}, ["hello"])
    turn = recorder.turns[0]
    assert turn.agent == ["Here you are."] and [f.action for f in session.llm_failures] == [A.RETRY]
    assert [f.kind for f in session.llm_failures] == [FailureKind.FIRST_TOKEN_TIMEOUT]
    first_token = FAST.first_token_timeout_secs * 1000
    assert turn.first_response_ms is not None and turn.first_response_ms >= first_token


def logged(errors: list[str]) -> list[str]:
    """The errors the recorder copied from the call's watchdog log (they say the attempt)."""
    return [e for e in errors if "(attempt" in e]


def seen(errors: list[str]) -> int:
    """How many error frames the recorder saw itself."""
    return sum(1 for e in errors if e.startswith("LLM error: "))


async def test_an_error_is_retried_at_once_and_the_second_error_is_apologised_for() -> None:
    session = toy_session(PATIENT)  # both turns finish, so no timeout was waited for
    recorder, _ = await play(session, {1: [ERROR, ERROR], 2: [ERROR, FakeReply(text="Back with you.")]},
                             ["hello", "hello?"])
    first, second = recorder.turns
    assert first.agent == [LINES.apology] and second.agent == ["Back with you."]
    assert first.first_response_ms is not None
    assert [(f.turn, f.kind, f.attempt, f.action) for f in session.llm_failures] == [
        (1, FailureKind.ERROR, 1, A.RETRY), (1, FailureKind.ERROR, 2, A.APOLOGIZE), (2, FailureKind.ERROR, 1, A.RETRY),
    ]
    # The watchdog's log (with what followed) and the recorder's own sighting of each error frame.
    assert logged(second.errors) == ["LLM error (attempt 1): vendor answered 500 -> retry"]
    assert seen(first.errors) == 2 and seen(second.errors) == 1
    assert recorder.errors == first.errors + second.errors  # the call-level list a simulation counts failures by


async def test_a_stream_that_stalls_after_its_first_words_hits_the_total_timeout() -> None:
    session = toy_session()
    stall = FakeReply(text="Let me look. ", hang_after_text=True)
    recorder, _ = await play(session, {1: [stall, FakeReply(text="Here it is.")]}, ["hello"])
    turn = recorder.turns[0]
    assert [(f.kind, f.action) for f in session.llm_failures] == [(FailureKind.TOTAL_TIMEOUT, A.RETRY)]
    # What was heard before the cancellation stays on record, marked interrupted; then the retry's answer.
    assert turn.agent == ["Let me look.", "Here it is."] and turn.interrupted


async def test_a_slow_answer_within_the_first_token_timeout_is_not_a_failure() -> None:
    session = toy_session(PATIENT)  # 0.15 s against 30 s: no scheduling delay can make it late
    recorder, _ = await play(session, {1: [FakeReply(text="Fine.", delay=0.15)]}, ["hello"])
    assert recorder.turns[0].agent == ["Fine."] and session.llm_failures == [] and recorder.errors == []


async def test_a_failed_re_run_after_a_tool_result_is_retried_with_the_tool_result() -> None:
    session = toy_session()
    lookup = FakeReply(tool_calls=(FakeToolCall("lookup_account", {"account_id": "ACC-1000-01"}),))
    recorder, llm = await play(session, {1: [lookup, HANG, FakeReply(text="Found it.")]},
                               ["my account is ACC-1000-01"])
    assert recorder.turns[0].agent == ["Found it."] and recorder.turns[0].executed == ["lookup_account"]
    assert llm.received[1] == llm.received[2] and any(m["role"] == "tool" for m in llm.received[2])
    assert [f.action for f in session.llm_failures] == [A.RETRY]


async def test_a_barge_in_during_a_hang_is_not_a_failure() -> None:
    # The barge-in (0.05 s) comes long before turn 1's 1 s timeout, however loaded the machine. Turn 2 answers at
    # once, and the caller speaks again only 1.5 s later: the call outlives the moment turn 1's timer would have
    # fired had the barge-in not stopped it (a sleep that can only run long, never short).
    session = toy_session(LLMConfig(first_token_timeout_secs=1.0, total_timeout_secs=2.0))
    lines = [CallerLine(1, "hello"), CallerLine(2, "never mind", barge_in_after=0.05),
             CallerLine(3, "thanks", barge_in_after=1.5)]
    script = {1: [HANG], 2: [FakeReply(text="Sure.")], 3: [FakeReply(text="You're welcome.")]}
    recorder, _ = await play(session, script, lines)
    assert session.llm_failures == [] and recorder.errors == []
    assert agent_entries(session) == ["Sure.", "You're welcome."]


def billing() -> Domain:
    return billing_domain()  # a fresh backend: this call's transfers are its own


async def test_repeated_failures_transfer_the_call_through_the_guarded_tool_layer() -> None:
    domain = billing()
    session = toy_session(domain=domain)
    script = {1: [FakeReply(text="Thanks, one moment.")], 2: [ERROR, ERROR], 3: [HANG, HANG], 4: [ERROR, HANG],
              5: [ERROR, ERROR]}
    lines = ["Hi, my account number is ACC-3316-49.", "Can you check my bill?", "Hello?", "Are you there?",
             "Hello??"]
    recorder, _ = await play(session, script, lines)
    assert [t.agent for t in recorder.turns] == [
        ["Thanks, one moment."], [LINES.apology], [LINES.callback], [LINES.transfer], [LINES.hold],
    ]
    assert [f.action for f in session.llm_failures if f.action is not A.RETRY] == [
        A.APOLOGIZE, A.OFFER_CALLBACK, A.TRANSFER, A.HOLD,
    ]
    # transfer_to_human ran once, behind the guards, on turn 4: the handoff card exists, with the caller's account.
    transfers = domain.extra["backend"].transfers
    assert len(transfers) == 1 and "failed 3 times" in transfers[0]["reason"]
    assert [e["value"] for e in transfers[0]["ledger"]] == ["ACC-3316-49"]
    assert [e.tool for e in session.guard_events] == ["transfer_to_human"]
    results = [e for e in session.state.transcript if e.kind is EntryKind.TOOL_RESULT]
    assert [(e.turn, e.tool_name, e.outcome) for e in results] == [(4, "transfer_to_human", ToolOutcome.COMPLETED)]
    assert all(len(logged(t.errors)) == 2 for t in recorder.turns[1:]) and recorder.turns[0].errors == []


async def test_a_domain_without_a_transfer_tool_keeps_offering_a_callback() -> None:
    session = toy_session(LLMConfig(first_token_timeout_secs=0.25, total_timeout_secs=1.0, transfer_after_failures=2))
    recorder, _ = await play(session, {1: [ERROR, ERROR], 2: [ERROR, ERROR], 3: [ERROR, ERROR]},
                             ["hello", "hello?", "anyone?"])
    assert [t.agent for t in recorder.turns] == [[LINES.apology], [LINES.callback], [LINES.callback]]
    assert session.guard_events == []


# --- whole calls with the real OpenAILLMService against the fake server --------------------------------


async def answers_500(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    return web.json_response({"error": {"message": "internal error", "type": "server_error"}}, status=500)


def never_answers(server: FakeOpenAIServer) -> Any:
    async def reply(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        await server.closing.wait()
        return web.json_response({}, status=500)

    return reply


async def hosted_call(server: FakeOpenAIServer, lines: Sequence[str], **llm: float) -> tuple[CallSession,
                                                                                             CallRecorder, Domain]:
    settings = with_overrides(openai_settings(server.base_url), llm={"first_token_timeout_secs": 0.5,
                                                                     "total_timeout_secs": 2.0, **llm},
                              call={"reference_date": TODAY})
    parts = build_call(settings, "hosted-failing")  # the real pipecat OpenAILLMService
    recorder = CallRecorder(parts.session)
    await run_text_call(parts.session, parts.llm, [CallerLine(i + 1, t) for i, t in enumerate(lines)],
                        recorder=recorder, turn_timeout=10.0)
    return parts.session, recorder, parts.extra["domain"]


async def test_openai_answering_500_is_retried_once_and_the_caller_hears_an_apology_at_once(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reply = answers_500
    # Timeouts above the 10 s turn limit: the call finishes only if no timeout was waited for.
    session, recorder, _ = await hosted_call(fake_openai, ["hello"], first_token_timeout_secs=30.0,
                                             total_timeout_secs=60.0)
    turn = recorder.turns[0]
    assert turn.agent == [LINES.apology] and agent_entries(session) == [LINES.apology]
    assert len(fake_openai.requests) == 2  # our one retry, and no SDK retries behind it
    assert turn.first_response_ms is not None
    assert [e.split(":")[0] for e in logged(turn.errors)] == ["LLM error (attempt 1)", "LLM error (attempt 2)"]
    assert all("500" in e for e in turn.errors) and seen(turn.errors) == 2


async def test_openai_rejecting_the_key_is_not_retried(fake_openai: FakeOpenAIServer) -> None:
    async def rejects(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return web.json_response({"error": {"message": "bad key", "type": "invalid_request_error"}}, status=401)

    fake_openai.reply = rejects
    session, recorder, _ = await hosted_call(fake_openai, ["hello"])
    assert recorder.turns[0].agent == [LINES.apology] and len(fake_openai.requests) == 1
    assert [(f.attempt, f.action) for f in session.llm_failures] == [(1, A.APOLOGIZE)]


async def test_openai_that_never_answers_is_cancelled_retried_and_apologised_for_in_time(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reply = never_answers(fake_openai)
    session, recorder, _ = await hosted_call(fake_openai, ["hello"])
    turn = recorder.turns[0]
    assert turn.agent == [LINES.apology]
    assert len(fake_openai.requests) == 2 and fake_openai.requests[0]["messages"] == fake_openai.requests[1]["messages"]
    silence = 2 * 0.5 * 1000
    assert turn.first_response_ms is not None and turn.first_response_ms >= silence
    assert [f.kind for f in session.llm_failures] == [FailureKind.FIRST_TOKEN_TIMEOUT] * 2


async def test_openai_failing_three_turns_transfers_and_a_recovered_model_sees_the_transfer(
    fake_openai: FakeOpenAIServer,
) -> None:
    async def fails_then_answers(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if len(fake_openai.requests) <= 6:  # both attempts of three turns
            return await answers_500(request, body)
        return await sse_reply([chunk({"role": "assistant", "content": "I'm back, sorry about that."}),
                                chunk({}, "stop")])(request, body)

    fake_openai.reply = fails_then_answers
    _, recorder, domain = await hosted_call(fake_openai, ["Hi, it's ACC-3316-49.", "Hello?", "Anyone?", "Thanks."])
    assert [t.agent for t in recorder.turns] == [[LINES.apology], [LINES.callback], [LINES.transfer],
                                                 ["I'm back, sorry about that."]]
    assert len(domain.extra["backend"].transfers) == 1
    # The model's next context holds the transfer as a tool call with its result, in order.
    messages = fake_openai.requests[-1]["messages"]
    call = next(m for m in messages if m.get("tool_calls"))
    result = messages[messages.index(call) + 1]
    assert call["tool_calls"][0]["function"]["name"] == "transfer_to_human"
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert json.loads(result["content"])["status"] == "transferred"


async def test_simulate_against_an_llm_that_never_answers_reports_failed_calls_and_exits_non_zero(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reply = never_answers(fake_openai)
    env = {"VOICE_AGENT_LLM__VENDOR": "openai", "VOICE_AGENT_LLM__BASE_URL": fake_openai.base_url,
           "VOICE_AGENT_LLM__MODEL": "fake-model", "OPENAI_API_KEY": "sk-test-not-a-real-key",
           "VOICE_AGENT_LLM__FIRST_TOKEN_TIMEOUT_SECS": "0.2", "VOICE_AGENT_LLM__TOTAL_TIMEOUT_SECS": "1"}
    result = await asyncio.to_thread(
        CliRunner().invoke, app,
        ["simulate", "bridge_smoke", "--llm", "openai", "--runs", "2", "--quiet", "--no-knowledge",
         "--scripted-only", "--keep", "2", "--every", "2", "--jobs", "1", "--policy", "lanes"], env=env,
    )
    assert result.exit_code == 1, result.output
    assert "1 simulated call(s) failed" in result.output and "first_token_timeout" in result.output
    # The call went on after each apology: every caller turn reached the model, twice.
    assert len(fake_openai.requests) == 2 * 8
