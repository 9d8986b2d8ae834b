"""Per-turn OpenTelemetry spans and log redaction, with caller values marked as PII and redacted by default.

Two halves:

* Tracing: :func:`install_telemetry` turns the ``[telemetry]`` settings section into an installed
  SDK tracer provider (console or OTLP/HTTP export), and :func:`emit_span` / :func:`emit_turn_span`
  write spans through it with PII keys redacted.
* Logging: :func:`install_log_redaction` puts one loguru stderr sink in place whose filter strips
  caller values (tool arguments, LLM messages, transcripts, spoken text) from pipecat's own log
  lines, so raising the level to DEBUG does not leak what the caller said.
"""

from __future__ import annotations

import atexit
import re
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.util.types import Attributes

from voice_agent.extras import install_hint
from voice_agent.settings import SettingsError, TelemetryConfig

if TYPE_CHECKING:
    from loguru import Record

TRACER_NAME = "voice_agent"
REDACTED = "[redacted]"

PII_KEYS = frozenset({"turn.caller_text", "turn.agent_text", "ledger.values"})
"""Attribute keys whose values are caller PII: redacted in spans and logs unless explicitly allowed."""

OTLP_EXPORTER_REQUIREMENT = install_hint("telemetry")
"""How to install the OTLP exporter (the telemetry extra; constraints.txt pins it beside the SDK)."""

_include_pii = False


def set_include_pii(include: bool) -> None:
    """Allows (or forbids, the default) caller values in span attributes.

    Args:
        include: True to export caller words and identifier values as they are.
    """
    global _include_pii
    _include_pii = include


def redact(attributes: Mapping[str, Any], include_pii: bool | None = None) -> dict[str, Any]:
    """Returns ``attributes`` with every PII key's value replaced, unless PII is allowed.

    Args:
        attributes: Span attributes, keyed by attribute name.
        include_pii: Overrides the process-wide :func:`set_include_pii` choice when given.

    Returns:
        A new dict; values under :data:`PII_KEYS` are :data:`REDACTED` unless PII is allowed.
    """
    allow = _include_pii if include_pii is None else include_pii
    return {k: (v if allow or k not in PII_KEYS else REDACTED) for k, v in attributes.items()}


# --------------------------------------------------------------------------------------------
# Tracer provider installation
# --------------------------------------------------------------------------------------------

_lock = threading.RLock()
_provider: SDKTracerProvider | None = None
"""The provider of the active :class:`TelemetryHandle`; None when nothing is installed."""
_global_set = False


class _SwitchingTracer(trace.Tracer):
    """Resolves the installed provider on every span, so a tracer cached before (re)install still exports."""

    def __init__(self, name: str, version: str | None, schema_url: str | None, attributes: Attributes) -> None:
        self._args = (name, version, schema_url, attributes)
        self._cached: tuple[SDKTracerProvider, trace.Tracer] | None = None
        self._noop = trace.NoOpTracer()

    def _current(self) -> trace.Tracer:
        provider = _provider
        if provider is None:
            return self._noop
        cached = self._cached
        if cached is None or cached[0] is not provider:
            cached = (provider, provider.get_tracer(*self._args))
            self._cached = cached
        return cached[1]

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._current().start_span(*args, **kwargs)

    # Any: the API's return type (_AgnosticContextManager) is private; this hands back the real one.
    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._current().start_as_current_span(*args, **kwargs)


class _SwitchingTracerProvider(trace.TracerProvider):
    """The process-global provider: set once, it forwards to whatever install is active."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        return _SwitchingTracer(instrumenting_module_name, instrumenting_library_version, schema_url, attributes)


_SWITCHING_PROVIDER = _SwitchingTracerProvider()


@dataclass(eq=False)
class TelemetryHandle:
    """What :func:`install_telemetry` installed; :meth:`shutdown` flushes and uninstalls it.

    Attributes:
        exporter: The exporter kind that was installed (``none``, ``console`` or ``otlp``).
    """

    exporter: str
    _provider: SDKTracerProvider | None = field(default=None, repr=False)

    @property
    def active(self) -> bool:
        """True while this handle's provider is the one spans go to."""
        return self._provider is not None and self._provider is _provider

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Exports every finished span now.

        Args:
            timeout_millis: How long to wait for the exporter.

        Returns:
            True when everything was exported in time (always True for ``none``).
        """
        return True if self._provider is None else self._provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Flushes pending spans, shuts the processor and exporter down, and uninstalls (idempotent)."""
        global _provider
        with _lock:
            provider, self._provider = self._provider, None
            if provider is None:
                return
            if _provider is provider:
                _provider = None
        # Outside the lock: a batch flush may take the exporter's whole timeout.
        provider.shutdown()


_active: TelemetryHandle | None = None


def install_telemetry(
    config: TelemetryConfig,
    *,
    service_name: str = "voice-agent",
    span_exporter: SpanExporter | None = None,
) -> TelemetryHandle:
    """Installs span export as the ``[telemetry]`` settings section says.

    The OpenTelemetry global provider can be set only once per process, so the global is set
    (the first time, and only if nobody else set one) to a forwarding provider, and each call
    here swaps the SDK provider it forwards to: installing again shuts the previous one down
    (flushing it) and spans from then on go to the new exporter.

    Args:
        config: The telemetry settings: ``include_pii`` and ``exporter``.
        service_name: The ``service.name`` resource attribute of every span.
        span_exporter: Replaces the console/OTLP exporter (tests pass an ``InMemorySpanExporter``);
            spans then go through a ``SimpleSpanProcessor``. Ignored for ``none``.

    Returns:
        A handle whose ``shutdown()`` flushes and uninstalls (a no-op for ``none``).

    Raises:
        SettingsError: ``otlp`` was asked for but the OTLP/HTTP exporter package is not installed.
    """
    global _active, _provider, _global_set
    # Built first: a missing OTLP package raises before anything already installed is touched.
    processor = None if config.exporter == "none" else _make_processor(config.exporter, span_exporter)
    set_include_pii(config.include_pii)
    with _lock:
        previous, _active = _active, None
    if previous is not None:
        previous.shutdown()
    if processor is None:
        return TelemetryHandle("none")
    # shutdown_on_exit=False: one atexit hook for the active handle, not one per install.
    provider = SDKTracerProvider(resource=Resource.create({SERVICE_NAME: service_name}), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    handle = TelemetryHandle(config.exporter, provider)
    with _lock:
        _provider, _active = provider, handle
        if not _global_set:
            _global_set = True
            # Only when no one set a global yet: a second set only logs "Overriding ... not allowed".
            if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
                trace.set_tracer_provider(_SWITCHING_PROVIDER)
    return handle


def _make_processor(exporter: str, override: SpanExporter | None) -> SpanProcessor:
    if override is not None:
        return SimpleSpanProcessor(override)
    if exporter == "console":
        # stderr: commands print JSON and tables on stdout, which spans must not interleave with.
        return SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise SettingsError(
            f"settings: telemetry.exporter=otlp needs the telemetry extra: {OTLP_EXPORTER_REQUIREMENT}"
        ) from None
    # No endpoint argument: the exporter reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / _ENDPOINT itself.
    return BatchSpanProcessor(OTLPSpanExporter())


def _shutdown_active() -> None:
    handle = _active
    if handle is not None:
        handle.shutdown()


atexit.register(_shutdown_active)


def tracer_provider() -> trace.TracerProvider:
    """Returns the forwarding provider that always reaches the active install.

    Returns:
        A provider whose tracers (even ones obtained before an install) export to whatever
        :func:`install_telemetry` installed last, and do nothing when nothing is installed.
    """
    return _SWITCHING_PROVIDER


def tracer() -> trace.Tracer:
    """Returns the voice agent's tracer: the installed provider's, else the global one.

    Returns:
        A tracer named :data:`TRACER_NAME`.
    """
    provider = _provider
    return provider.get_tracer(TRACER_NAME) if provider is not None else trace.get_tracer(TRACER_NAME)


def emit_span(name: str, attributes: Mapping[str, Any]) -> None:
    """Emits one span named ``name`` carrying ``attributes``, PII keys redacted.

    Args:
        name: The span name.
        attributes: Attribute values; lists become lists of strings (OTel wants homogeneous
            sequences) and None values are left out (OTel rejects them).
    """
    with tracer().start_as_current_span(name) as span:
        for key, value in redact(attributes).items():
            if value is None:
                continue
            if isinstance(value, list | tuple):
                value = [str(v) for v in value]
            span.set_attribute(key, value)


# --------------------------------------------------------------------------------------------
# Log redaction
# --------------------------------------------------------------------------------------------

# A word that, in pipecat's log lines, introduces a caller value: "with arguments {...}",
# "Transcription: [...]", "LLM FUNCTION CALL RESULT (call_1): ...", "text: [...]" in frame reprs.
# It counts only when followed by ":"/"=" (then whatever follows is the value) or by a space and
# a bracket/quote (the value is that group), so "Pushing context frame!" is left alone.
_MARKER = re.compile(
    r"(?:arguments|args|kwargs|results?|messages?|context|content|text|transcripts?|transcription|prompt"
    r"|instructions?|input|output|request|response|summary|said|chunk|msg|body|params)\b"
    r"(?:\s*\([^()\[\]{}'\"]{0,80}\))?"
    r"(?:\s*[:=]\s*|\s+(?=[\[{'\"]))",
    re.IGNORECASE,
)
# `[get_balance:call_1]` (pipecat's "[function_name:tool_call_id]") names a tool, not a caller value.
_KEEP_GROUP = re.compile(r"\[[A-Za-z_]\w*:[\w.-]+\]|\[\]|\{\}")
# The observers end lines with " at 12.34s"; keep it when a free-text value is cut.
_TRAILER = re.compile(r"\s+at \d+(?:\.\d+)?s\s*$")
_CLOSERS = {"[": "]", "{": "}", "(": ")"}


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _opens_quote(message: str, i: int) -> bool:
    # A quote after a letter is an apostrophe ("I'm"), not the start of a repr'd string.
    return message[i] in "'\"" and (i == 0 or not (_is_word(message[i - 1]) or message[i - 1] == "\\"))


def _string_end(message: str, i: int) -> int | None:
    quote, j = message[i], i + 1
    while j < len(message):
        if message[j] == "\\":
            j += 2
            continue
        if message[j] == quote:
            return j + 1
        j += 1
    return None


def _group_end(message: str, i: int) -> int | None:
    stack, j = [_CLOSERS[message[i]]], i + 1
    while j < len(message):
        char = message[j]
        if _opens_quote(message, j):
            end = _string_end(message, j)
            if end is None:
                return None
            j = end
            continue
        if char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif char in ")]}":
            if char != stack[-1]:
                return None
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    return None


def redact_log_message(message: str) -> str:
    """Replaces the caller values in one log message with :data:`REDACTED`.

    The rule covers the shapes pipecat prints values in, not particular lines: every
    bracketed or braced payload (dict/list reprs, JSON, ``[text]`` as in ``Transcription: [...]``
    and frame reprs), every quoted string (``!r`` transcripts, dict values), and whatever follows
    a value word such as ``arguments``, ``result``, ``messages``, ``text:`` or ``instruction:``.
    ``[function_name:tool_call_id]`` tags are kept. A payload that does not close (a truncated
    JSON argument string, a stray quote) is redacted to the end of the message: when in doubt,
    redact.

    Args:
        message: A formatted log message.

    Returns:
        The message with values replaced; the text around them is kept.
    """
    out: list[str] = []
    i, n = 0, len(message)
    while i < n:
        char = message[i]
        marker = _MARKER.match(message, i) if char.isalpha() and (i == 0 or not _is_word(message[i - 1])) else None
        if marker is not None and marker.end() < n:
            out.append(message[i : marker.end()])
            j = marker.end()
            if message[j] in "[{":
                end = _group_end(message, j)
            elif _opens_quote(message, j):
                end = _string_end(message, j)
            else:
                trailer = _TRAILER.search(message, j)
                end = trailer.start() if trailer else n
            if end is None:
                out.append(REDACTED)
                break
            if end > j:
                out.append(REDACTED)
            i = end
            continue
        if char in "[{":
            end = _group_end(message, i)
            if end is None:
                out.append(REDACTED)
                break
            group = message[i:end]
            out.append(group if _KEEP_GROUP.fullmatch(group) else REDACTED)
            i = end
            continue
        if _opens_quote(message, i):
            end = _string_end(message, i)
            if end is None:
                out.append(REDACTED)
                break
            out.append(REDACTED)
            i = end
            continue
        out.append(char)
        i += 1
    return "".join(out)


_OWN_PACKAGES = ("voice_agent", "processors")
"""Our packages: their lines pass log arguments, never caller values, and are left as they are."""

_MESSAGE_KEY = "_redacted_message"
_EXCEPTION_KEY = "_redacted_exception"
# loguru's default layout, with the message taken from "extra" where the filter left it.
_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan>:<cyan>{function}</cyan>:<cyan>{line}</cyan> - <level>{extra[_redacted_message]}</level>\n"
)


def _is_own(record: Record) -> bool:
    name = record["name"] or ""
    return any(name == pkg or name.startswith(pkg + ".") for pkg in _OWN_PACKAGES)


def _redaction_filter(include_pii: bool) -> Callable[[Record], bool]:
    def keep(record: Record) -> bool:
        # Into "extra" (a fresh dict per record), not "message": other sinks see the record unchanged.
        extra = record["extra"]
        if include_pii or _is_own(record):
            extra[_MESSAGE_KEY] = record["message"]
            extra.pop(_EXCEPTION_KEY, None)
            return True
        # Everything else is redacted, pipecat above all; depth=2 lines (LLMService._log_llm_event)
        # are attributed to their caller's module, which may not be under "pipecat".
        extra[_MESSAGE_KEY] = redact_log_message(record["message"])
        exc = record["exception"]
        if exc is None or exc.type is None:
            extra[_EXCEPTION_KEY] = ""
        else:
            # The frames are source lines (diagnose is off, so no local values); the exception's
            # own message may quote a value, so it is redacted. Chained causes are left out.
            frames = "".join(traceback.format_tb(exc.traceback)) if exc.traceback else ""
            last = "".join(traceback.format_exception_only(exc.type, exc.value))
            extra[_EXCEPTION_KEY] = f"Traceback (most recent call last):\n{frames}{redact_log_message(last)}"
        return True

    return keep


def _format_record(record: Record) -> str:
    # A callable format gets no "{exception}" appended by loguru: each branch says where it goes.
    if _EXCEPTION_KEY in record["extra"]:
        return _FORMAT + "{extra[_redacted_exception]}"
    return _FORMAT + "{exception}"


def install_log_redaction(level: str = "WARNING", include_pii: bool = False) -> None:
    """Replaces loguru's sinks with one stderr sink that keeps caller values out of pipecat's lines.

    Records from our own packages (``voice_agent``, ``processors``) are written as they are;
    every other record (pipecat's) goes through :func:`redact_log_message` first, exception
    text included, unless ``include_pii``. Tracebacks never show local variable values.

    Args:
        level: The sink's minimum level (``"DEBUG"`` shows pipecat's debug lines, redacted).
        include_pii: True writes every line unredacted.
    """
    from loguru import logger

    logger.remove()
    logger.add(
        sys.stderr,
        level=level,
        format=_format_record,
        filter=_redaction_filter(include_pii),
        # diagnose=True would print local variable values (tool arguments, transcripts) in tracebacks.
        diagnose=False,
        backtrace=False,
    )
