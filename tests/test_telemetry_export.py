"""Telemetry that exports: install_telemetry's console/OTLP/none exporters, and log redaction of pipecat's lines."""

from __future__ import annotations

import gzip
import json
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from loguru import logger
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pipecat.adapters.llm.services.open_ai_adapter import OpenAILLMAdapter
from pipecat.frames.frames import LLMTextFrame, TranscriptionFrame
from pipecat.observers.loggers.debug_log_observer import DebugLogObserver
from pipecat.processors.aggregators.llm_context import LLMContext

from voice_agent import telemetry
from voice_agent.settings import SettingsError, TelemetryConfig

if TYPE_CHECKING:
    from loguru import Record

VALUE = "ACC-4729-18"
"""A caller value: it must never reach a sink or exporter unless PII is allowed."""

DROP = {
    "summary.pass_turn": 4,
    "summary.facts_in": ["account_id", "callback_date"],
    "summary.facts_out": ["account_id"],
    "summary.facts_dropped": ["callback_date"],
}
ATTRS = {"turn.number": 4, "turn.caller_text": f"my account is {VALUE}", **DROP}


@pytest.fixture(autouse=True)
def _uninstall() -> Iterator[None]:
    yield
    # `none` shuts the active install down and puts include_pii back to False for the next test.
    telemetry.install_telemetry(TelemetryConfig())


def _install(exporter: InMemorySpanExporter, include_pii: bool = False) -> telemetry.TelemetryHandle:
    return telemetry.install_telemetry(TelemetryConfig(exporter="console", include_pii=include_pii),
                                       span_exporter=exporter)


# ---------------------------------------------------------------------------------------------
# Spans
# ---------------------------------------------------------------------------------------------


def test_emit_span_exports_drop_log_keys_and_redacts_caller_text() -> None:
    exporter = InMemorySpanExporter()
    _install(exporter)
    telemetry.emit_span("voice_agent.turn", ATTRS)
    (span,) = exporter.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert span.name == "voice_agent.turn"
    assert attrs["summary.pass_turn"] == 4
    assert list(attrs["summary.facts_in"]) == ["account_id", "callback_date"]  # type: ignore[arg-type]
    assert list(attrs["summary.facts_out"]) == ["account_id"]  # type: ignore[arg-type]
    assert list(attrs["summary.facts_dropped"]) == ["callback_date"]  # type: ignore[arg-type]
    assert attrs["turn.caller_text"] == telemetry.REDACTED
    assert VALUE not in str(attrs)
    assert span.resource.attributes["service.name"] == "voice-agent"


def test_include_pii_exports_the_real_caller_text() -> None:
    exporter = InMemorySpanExporter()
    _install(exporter, include_pii=True)
    telemetry.emit_span("voice_agent.turn", ATTRS)
    (span,) = exporter.get_finished_spans()
    assert (span.attributes or {})["turn.caller_text"] == f"my account is {VALUE}"


def test_emit_turn_span_goes_through_emit_span(monkeypatch: pytest.MonkeyPatch) -> None:
    # The call's span (call_telemetry) is built from a session; the wiring is what is under test here.
    from voice_agent.call import telemetry as call_telemetry

    monkeypatch.setattr(call_telemetry, "turn_attributes", lambda session, turn: dict(ATTRS))
    exporter = InMemorySpanExporter()
    _install(exporter)
    call_telemetry.emit_turn_span(cast(Any, None), 1)
    (span,) = exporter.get_finished_spans()
    assert span.name == "voice_agent.turn" and (span.attributes or {})["turn.caller_text"] == telemetry.REDACTED


def test_reinstalling_swaps_the_exporter_and_cached_tracers_follow(caplog: pytest.LogCaptureFixture) -> None:
    cached = telemetry.tracer_provider().get_tracer("pipecat")  # as a library would, before any install
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    handle = _install(first)
    telemetry.emit_span("one", {})
    with cached.start_as_current_span("pipecat.llm"):
        pass
    again = telemetry.install_telemetry(TelemetryConfig(exporter="console"), service_name="bridge",
                                        span_exporter=second)
    telemetry.emit_span("two", {})
    with cached.start_as_current_span("pipecat.tts"):
        pass
    assert [s.name for s in first.get_finished_spans()] == ["one", "pipecat.llm"]
    assert [s.name for s in second.get_finished_spans()] == ["two", "pipecat.tts"]
    assert second.get_finished_spans()[0].resource.attributes["service.name"] == "bridge"
    assert not handle.active and again.active
    # The OTel global is set at most once: re-installing never trips its "Overriding" warning.
    assert "Overriding of current TracerProvider" not in caplog.text
    again.shutdown()
    again.shutdown()  # idempotent
    telemetry.emit_span("three", {})
    assert [s.name for s in second.get_finished_spans()] == ["two", "pipecat.tts"]


def test_without_an_install_spans_go_to_the_global_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests (test_telemetry.py) set their own global provider; the global can be set only once per
    # process, so it is stood in for here through trace.get_tracer.
    own = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(own))
    monkeypatch.setattr(trace, "get_tracer", lambda name, *args, **kwargs: provider.get_tracer(name))
    telemetry.emit_span("before", {})
    installed = InMemorySpanExporter()
    _install(installed).shutdown()
    telemetry.emit_span("after", {})
    assert [s.name for s in own.get_finished_spans()] == ["before", "after"]
    assert installed.get_finished_spans() == ()


def test_console_exporter_writes_span_json_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    handle = telemetry.install_telemetry(TelemetryConfig(exporter="console"))
    telemetry.emit_span("voice_agent.turn", ATTRS)
    handle.shutdown()
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout stays clean for JSON and tables
    span = json.loads(captured.err)
    assert span["name"] == "voice_agent.turn"
    assert span["attributes"]["summary.facts_dropped"] == ["callback_date"]
    assert span["attributes"]["turn.caller_text"] == telemetry.REDACTED
    assert span["resource"]["attributes"]["service.name"] == "voice-agent"
    assert VALUE not in captured.err


def test_none_exports_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    earlier = InMemorySpanExporter()
    _install(earlier)
    handle = telemetry.install_telemetry(TelemetryConfig(exporter="none"), span_exporter=InMemorySpanExporter())
    telemetry.emit_span("voice_agent.turn", ATTRS)
    handle.shutdown()
    handle.shutdown()
    assert earlier.get_finished_spans() == ()  # the earlier install was shut down, not left exporting
    assert not handle.active and handle.exporter == "none"
    assert capsys.readouterr().err == ""


def test_otlp_without_the_exporter_package_is_a_one_line_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    kept = _install(exporter)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(SettingsError) as raised:
        telemetry.install_telemetry(TelemetryConfig(exporter="otlp", include_pii=True))
    message = str(raised.value)
    assert "\n" not in message and "needs the telemetry extra: pip install 'voice-agent[telemetry]'" in message
    # A failed install leaves the working one in place, PII setting included.
    assert kept.active
    telemetry.emit_span("still", ATTRS)
    assert (exporter.get_finished_spans()[0].attributes or {})["turn.caller_text"] == telemetry.REDACTED


class _Collector(BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP collector: records every POST and answers 200."""

    server: _CollectorServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the test output quiet


class _CollectorServer(ThreadingHTTPServer):
    received: list[tuple[str, str, bytes]]


@pytest.fixture
def collector() -> Iterator[_CollectorServer]:
    server = _CollectorServer(("127.0.0.1", 0), _Collector)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_otlp_exporter_posts_protobuf_spans_to_the_configured_endpoint(
    collector: _CollectorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = collector.server_address[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}/v1/traces")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_COMPRESSION", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", raising=False)
    for proxy in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    handle = telemetry.install_telemetry(TelemetryConfig(exporter="otlp"))
    telemetry.emit_span("voice_agent.turn", ATTRS)
    handle.shutdown()  # BatchSpanProcessor: shutdown is what flushes
    assert collector.received, "the collector got no export"
    path, content_type, body = collector.received[0]
    assert path == "/v1/traces" and content_type == "application/x-protobuf"
    assert b"voice_agent.turn" in body and b"summary.facts_dropped" in body
    assert VALUE.encode() not in body
    request = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    (span,) = resource_spans.scope_spans[0].spans
    keys = {a.key for a in span.attributes}
    assert service == "voice-agent" and span.name == "voice_agent.turn"
    assert set(DROP) <= keys


# ---------------------------------------------------------------------------------------------
# Log redaction: pipecat's own lines, with their format strings copied from the installed source
# ---------------------------------------------------------------------------------------------

_SERVICE = "OpenAILLMService#0"


def _calling_function(value: str) -> str:
    self = _SERVICE
    runner_item = SimpleNamespace(function_name="lookup_account", tool_call_id="call_7",
                                  arguments={"account_id": value, "amount": 25.0})
    return f"{self} Calling function [{runner_item.function_name}:{runner_item.tool_call_id}] with arguments {runner_item.arguments}"  # noqa: E501


def _messages(value: str) -> list[dict[str, Any]]:
    context = LLMContext(messages=[
        {"role": "system", "content": f"Known facts: account_id={value}"},
        {"role": "user", "content": f"it's {value}, I'm sure"},
    ])
    return OpenAILLMAdapter().get_messages_for_logging(context)


def _llm_event(value: str) -> str:
    self, event, messages = _SERVICE, "Generating LLM response", _messages(value)
    return f"{self}: {event} {messages}"


def _system_instruction(value: str) -> str:
    self = _SERVICE
    _settings = SimpleNamespace(system_instruction=f"You help the caller. Facts: account {value}.")
    return f"{self}: Using system instruction: {_settings.system_instruction}"


def _bad_arguments(value: str) -> str:
    self, arguments = _SERVICE, f'{{"account_id": "{value}", "amou'  # a truncated stream
    return f"{self}: Failed to parse function call arguments: {arguments}"


def _transcription(value: str) -> str:
    text = f"my account number is {value}, I'm sure :)"
    return f"Transcription: [{text}]"


def _generating_tts(value: str) -> str:
    self, text = "PiperTTSService#0", f"Your account {value} is settled."
    return f"{self}: Generating TTS [{text}]"


def _finished_tts(value: str) -> str:
    self, text = "PiperTTSService#0", f"Your account {value} is settled."
    return f"{self}: Finished TTS [{text}]"


def _observer_generating(value: str) -> str:
    src, arrow, time_sec, frame = _SERVICE, "→", 1.25, LLMTextFrame(text=f" {value}")
    return f"🧠 {src} {arrow} LLM GENERATING: {frame.text!r} at {time_sec:.2f}s"


def _observer_function_call(value: str) -> str:
    src, arrow, time_sec = _SERVICE, "←", 1.25
    frame = SimpleNamespace(tool_call_id="call_7", function_name="lookup_account", arguments={"account_id": value})
    return f"🧠 {src} {arrow} LLM FUNCTION CALL ({frame.tool_call_id}): {frame.function_name!r}({frame.arguments}) at {time_sec:.2f}s"  # noqa: E501


def _observer_context(value: str) -> str:
    arrow, dst, time_sec, messages = "→", _SERVICE, 1.25, _messages(value)
    return f"🧠 {arrow} {dst} LLM CONTEXT FRAME: {messages} at {time_sec:.2f}s"


def _observer_result(value: str) -> str:
    arrow, src, time_sec = "←", _SERVICE, 1.25
    frame = SimpleNamespace(tool_call_id="call_7", result=f"balance of {value} is 42.50")  # a bare string result
    return f"🧠 {arrow} {src} LLM FUNCTION CALL RESULT ({frame.tool_call_id}): {frame.result} at {time_sec:.2f}s"


def _observer_transcription(value: str) -> str:
    src, arrow, time_sec = "WhisperSTTService#0", "→", 1.25
    frame = TranscriptionFrame(text=f"it is {value}", user_id="caller", timestamp="2026-11-30T10:00:00Z")
    return f"💬 {src} {arrow} TRANSCRIPTION: {frame.text!r} from {frame.user_id!r} at {time_sec:.2f}s"


def _debug_observer(value: str) -> str:
    # Built as DebugLogObserver.on_push_frame builds it (field: _format_value(value), ...).
    src, arrow, dst, time_sec, class_name = _SERVICE, "→", "LLMAssistantAggregator#0", 1.25, "FunctionCallResultFrame"
    observer = DebugLogObserver()
    fields = {"function_name": "lookup_account", "tool_call_id": "call_7", "arguments": {"account_id": value},
              "result": f"{value} balance 42.50"}
    details = ", ".join(f"{name}: {observer._format_value(v)}" for name, v in fields.items())
    message = f"{class_name} {details} at {time_sec:.2f}s"
    return f"{src} {arrow} {dst}: {message}"


def _pushing_frame(value: str) -> str:
    self, _next = "WhisperSTTService#0", "LLMUserAggregator#0"
    frame = TranscriptionFrame(text=f"my account is {value}", user_id="caller", timestamp="t")
    return f"Pushing {frame} downstream from {self} to {_next}"


def _speculating(value: str) -> str:
    self, speculation = "EagerUserTurnStopStrategy#0", SimpleNamespace(text=f"it's {value}")
    return f"{self}: speculating on eager end of turn: [{speculation.text}]"


def _eager_missed(value: str) -> str:
    self, speculation, _text = "EagerUserTurnStopStrategy#0", SimpleNamespace(text=f"it's {value}"), f"{value} yes"
    return (
        f"{self}: eager end of turn missed, discarding the speculative response "
        f"(eager: [{speculation.text}], committed: [{_text}])"
    )


def _mcp_arguments(value: str) -> str:
    params = SimpleNamespace(arguments={"account_id": value, "note": "caller's request"})
    return f"Tool arguments: {json.dumps(params.arguments, indent=2)}"


def _delegating(value: str) -> str:
    backend_name, request = "billing", f"look up {value}"
    return f"Delegating to '{backend_name}': {request!r}"


def _responses_mismatch(value: str) -> str:
    self, prefix = "OpenAIResponsesLLMService#0", [{"role": "user", "content": [{"type": "input_text", "text": value}]}]
    _previous_input_hash, prefix_hash = "ab12", "cd34"
    return (
        f"{self}: Reason: input prefix hash mismatch "
        f"(previous input: {json.dumps(prefix, indent=2, default=str)}, "
        f"expected hash: {_previous_input_hash}, "
        f"actual hash: {prefix_hash})"
    )


@dataclass(frozen=True)
class PipecatLine:
    """One pipecat log line: where it is, its format as written there, and a renderer using that format."""

    where: str
    snippet: str
    level: str
    render: Callable[[str], str]

    @property
    def module(self) -> str:
        return "pipecat." + self.where.split(":")[0].removesuffix(".py").replace("/", ".")


_SYSTEM_INSTRUCTION = 'f"{self}: Using system instruction: {self._settings.system_instruction}"'

LINES = [
    PipecatLine("services/llm_service.py:1879", 'f"{self} Calling function [{runner_item.function_name}:'
                "{runner_item.tool_call_id}] with arguments {runner_item.arguments}\"", "DEBUG", _calling_function),
    PipecatLine("services/llm_service.py:514", 'return f"{self}: {event} {messages}"', "DEBUG", _llm_event),
    PipecatLine("services/openai/base_llm.py:284", _SYSTEM_INSTRUCTION, "DEBUG", _system_instruction),
    PipecatLine("services/anthropic/llm.py:371", _SYSTEM_INSTRUCTION, "DEBUG", _system_instruction),
    PipecatLine("services/openai/base_llm.py:674",
                'f"{self}: Failed to parse function call arguments: {arguments}"', "WARNING", _bad_arguments),
    PipecatLine("services/whisper/base_stt.py:298", 'f"Transcription: [{text}]"', "DEBUG", _transcription),
    PipecatLine("services/whisper/stt.py:461", 'f"Transcription: [{text}]"', "DEBUG", _transcription),
    PipecatLine("services/tts_service.py:1690", 'f"{self}: Generating TTS [{text}]"', "DEBUG", _generating_tts),
    PipecatLine("services/piper/tts.py:191", 'f"{self}: Finished TTS [{text}]"', "DEBUG", _finished_tts),
    PipecatLine("observers/loggers/llm_log_observer.py:64",
                'f"🧠 {src} {arrow} LLM GENERATING: {frame.text!r} at {time_sec:.2f}s"', "DEBUG", _observer_generating),
    PipecatLine("observers/loggers/llm_log_observer.py:71",
                'f"🧠 {src} {arrow} LLM FUNCTION CALL ({frame.tool_call_id}): '
                '{frame.function_name!r}({frame.arguments}) at {time_sec:.2f}s"', "DEBUG", _observer_function_call),
    PipecatLine("observers/loggers/llm_log_observer.py:76",
                'f"🧠 {arrow} {dst} LLM CONTEXT FRAME: {messages} at {time_sec:.2f}s"', "DEBUG", _observer_context),
    PipecatLine("observers/loggers/llm_log_observer.py:80", 'f"🧠 {arrow} {src} LLM FUNCTION CALL RESULT '
                '({frame.tool_call_id}): {frame.result} at {time_sec:.2f}s"', "DEBUG", _observer_result),
    PipecatLine("observers/loggers/transcription_log_observer.py:56",
                'f"💬 {src} {arrow} TRANSCRIPTION: {frame.text!r} from {frame.user_id!r} at {time_sec:.2f}s"', "DEBUG",
                _observer_transcription),
    PipecatLine("observers/loggers/debug_log_observer.py:216", 'f"{src} {arrow} {dst}: {message}"', "DEBUG",
                _debug_observer),
    PipecatLine("processors/frame_processor.py:1192", 'f"Pushing {frame} downstream from {self} to {self._next}"',
                "TRACE", _pushing_frame),
    PipecatLine("turns/user_stop/eager_user_turn_stop_strategy.py:164",
                'f"{self}: speculating on eager end of turn: [{speculation.text}]"', "DEBUG", _speculating),
    PipecatLine("turns/user_stop/eager_user_turn_stop_strategy.py:134",
                'f"(eager: [{speculation.text}], committed: [{self._text}])"', "DEBUG", _eager_missed),
    PipecatLine("services/mcp_service.py:549", 'f"Tool arguments: {json.dumps(params.arguments, indent=2)}"', "TRACE",
                _mcp_arguments),
    PipecatLine("pipeline/llm_with_backend.py:600", "f\"Delegating to '{self._context.backend_name}': {request!r}\"",
                "DEBUG", _delegating),
    PipecatLine("services/openai/responses/llm.py:822",
                'f"(previous input: {json.dumps(prefix, indent=2, default=str)}, "', "TRACE", _responses_mismatch),
]
_IDS = [line.where for line in LINES]


def _pipecat_source(where: str) -> tuple[list[str], int]:
    spec = find_spec("pipecat")
    assert spec is not None and spec.submodule_search_locations
    path, line = where.split(":")
    return Path(spec.submodule_search_locations[0], path).read_text().splitlines(), int(line)


@pytest.mark.parametrize("line", LINES, ids=_IDS)
def test_the_copied_format_is_the_installed_pipecat_line(line: PipecatLine) -> None:
    # A pipecat upgrade that rewords or moves a line shows up here, not as a silent leak.
    source, number = _pipecat_source(line.where)
    assert line.snippet in source[number - 1], f"{line.where} now reads: {source[number - 1].strip()}"


@pytest.mark.parametrize("line", LINES, ids=_IDS)
def test_redact_log_message_removes_the_caller_value(line: PipecatLine) -> None:
    original = line.render(VALUE)
    redacted = telemetry.redact_log_message(original)
    assert VALUE in original and VALUE not in redacted
    assert telemetry.REDACTED in redacted
    assert telemetry.redact_log_message(redacted) == redacted  # idempotent


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (_calling_function(VALUE),
         "OpenAILLMService#0 Calling function [lookup_account:call_7] with arguments [redacted]"),
        (_observer_result(VALUE), "🧠 ← OpenAILLMService#0 LLM FUNCTION CALL RESULT (call_7): [redacted] at 1.25s"),
        (_pushing_frame(VALUE), "Pushing TranscriptionFrame#"),
        ("OpenAILLMService#0: Pushing context frame!", "OpenAILLMService#0: Pushing context frame!"),
        ("Context has 12 messages, ~300 tokens (limit: 1000), 3 messages since last summary",
         "Context has 12 messages, ~300 tokens (limit: 1000), 3 messages since last summary"),
        ("LLMUserAggregator#0: Received summary result (request_id=r1)",
         "LLMUserAggregator#0: Received summary result (request_id=r1)"),
        ("Bot can't hear you, context_id=abc", "Bot can't hear you, context_id=abc"),
    ],
)
def test_redaction_keeps_the_text_around_values(message: str, expected: str) -> None:
    assert telemetry.redact_log_message(message).startswith(expected)


@pytest.fixture
def loguru_restored() -> Iterator[None]:
    yield
    logger.remove()
    logger.add(sys.stderr)  # loguru's default sink, for the tests after these


def _named(module: str) -> Callable[[Record], None]:
    # The record's name is what install_log_redaction looks at; this makes it pipecat's (or ours).
    def patch(record: Record) -> None:
        record["name"] = module

    return patch


def _log_as(module: str, level: str, message: str) -> None:
    logger.patch(_named(module)).log(level, message)


@pytest.mark.usefixtures("loguru_restored")
def test_debug_sink_does_not_leak_pipecat_values(capsys: pytest.CaptureFixture[str]) -> None:
    telemetry.install_log_redaction("TRACE")
    for line in LINES:
        _log_as(line.module, line.level, line.render(VALUE))
    err = capsys.readouterr().err
    assert VALUE not in err
    assert err.count(telemetry.REDACTED) >= len(LINES)
    assert "pipecat.services.llm_service:" in err and "Calling function [lookup_account:call_7] with arguments" in err
    assert "Transcription: [redacted]" in err and "Generating TTS [redacted]" in err


@pytest.mark.usefixtures("loguru_restored")
def test_include_pii_writes_pipecat_values(capsys: pytest.CaptureFixture[str]) -> None:
    telemetry.install_log_redaction("TRACE", include_pii=True)
    for line in LINES:
        _log_as(line.module, line.level, line.render(VALUE))
    err = capsys.readouterr().err
    assert err.count(VALUE) >= len(LINES)
    assert _calling_function(VALUE) in err


@pytest.mark.usefixtures("loguru_restored")
def test_a_real_pipecat_llm_service_line_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    from pipecat.services.openai.llm import OpenAILLMService

    service = OpenAILLMService(api_key="sk-test")  # no request is made
    context = LLMContext(messages=[{"role": "user", "content": f"my account is {VALUE}"}])
    telemetry.install_log_redaction("DEBUG")
    # LLMService._log_llm_event (llm_service.py:516) logs with depth=2, so the record is attributed
    # to this test module rather than to pipecat: it must be redacted anyway.
    service._log_llm_response(context)
    err = capsys.readouterr().err
    assert "Generating LLM response [redacted]" in err and VALUE not in err


@pytest.mark.usefixtures("loguru_restored")
def test_own_lines_are_left_alone_and_the_level_holds(capsys: pytest.CaptureFixture[str]) -> None:
    telemetry.install_log_redaction()  # WARNING
    own = "call c1: guard rejected lookup_account (text: [kept] 'kept')"
    _log_as("voice_agent.call.session", "WARNING", own)
    _log_as("pipecat.services.llm_service", "DEBUG", _calling_function(VALUE))
    _log_as("pipecat.services.openai.base_llm", "WARNING", _bad_arguments(VALUE))
    err = capsys.readouterr().err
    assert own in err
    assert "Calling function" not in err  # DEBUG is below the sink's level
    assert "Failed to parse function call arguments: [redacted]" in err and VALUE not in err


@pytest.mark.usefixtures("loguru_restored")
def test_exception_text_from_pipecat_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    telemetry.install_log_redaction("DEBUG")
    try:
        raise ValueError(f"no account '{VALUE}'")
    except ValueError:
        logger.patch(_named("pipecat.services.llm_service")).exception(
            f"{_SERVICE} Error executing function call: no account '{VALUE}'"
        )
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ValueError: no account [redacted]" in err
    assert VALUE not in err
