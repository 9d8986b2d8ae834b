"""Typed start-up settings: one TOML file plus ``VOICE_AGENT_*`` environment variables.

Precedence, highest first: environment variables (prefix ``VOICE_AGENT_``, nested
delimiter ``__``, e.g. ``VOICE_AGENT_LLM__VENDOR=openai``), then the TOML file
(the path in ``VOICE_AGENT_SETTINGS``, else ``config/settings.toml`` in the working directory,
else the one shipped with the package), then the
defaults below. :func:`load_settings` validates everything and turns every problem
into a :class:`SettingsError` with a one-line message that says what to set.

One settings model, handed unchanged to what uses it: the call factory gives a call's session the
:class:`Settings` themselves, and each part takes its own section (the output guard ``output_guard``, the
LLM recovery ``llm``, the summarizers ``summarizer``, the ``pipecat`` policy ``pipecat_summarizer``, the date
reader ``dates``); no part keeps a copy of a section's fields under other names. So this module stays below
the core (pydantic, nothing of pipecat, of ours only the data-file lookup; a test checks).

"Not given" is None, and only None: TOML has no null, so a key left out of the file and the environment is
None, and :func:`with_overrides` skips a None (a flag not given) the same way. Each section says what its
not-given keys mean; one place decides each (docs/configuration.md lists them).
"""

from __future__ import annotations

import datetime as dt
import difflib
import inspect
import os
import re
import tomllib
import warnings
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from voice_agent.datafiles import data_path

# A deployment's own file in its working directory wins; otherwise the shipped one (the offline defaults).
DEFAULT_SETTINGS_PATH = Path("config/settings.toml")
SETTINGS_PATH_ENV = "VOICE_AGENT_SETTINGS"
ENV_PREFIX = "VOICE_AGENT_"
ENV_NESTED_DELIMITER = "__"

Vendor = Literal["reference", "openai", "anthropic", "google"]
LaneRole = Literal["developer", "system", "user"]
"""The role the lane messages (known facts, summary, knowledge, constraints) reach the vendor with."""

API_KEY_ENV: Mapping[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google": "GOOGLE_API_KEY",
}
"""Vendor -> the environment variable its own SDK reads the key from."""


class SettingsError(Exception):
    """A settings problem, with a one-line message saying what to set."""


class _Section(BaseModel):
    # Unknown keys are errors, so a typo never silently falls back to a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


RENAMED_LLM_KEYS: Mapping[str, str] = {"provider": "vendor"}  # legacy-name: the old key, still read
"""Old key -> new key in the ``llm`` section. An old name is still read, with a warning naming the new one."""


def renamed_llm_keys(section: Any) -> Any:
    """``section`` (the ``llm`` section's keys) with each old key name read as its new one, warning once per use.

    Raises:
        ValueError: An old key and its new name are both given (which one is meant is unclear).
    """
    if not isinstance(section, Mapping) or not any(old in section for old in RENAMED_LLM_KEYS):
        return section
    renamed = dict(section)
    for old, new in RENAMED_LLM_KEYS.items():
        if old not in renamed:
            continue
        if new in renamed:
            raise ValueError(f"llm.{old} is the old name of llm.{new}: set only llm.{new}")
        warnings.warn(f"settings: llm.{old} is deprecated, set llm.{new} instead ({_env_name(['llm', new])} in the "
                      "environment)", FutureWarning, stacklevel=_outside_settings())
        renamed[new] = renamed.pop(old)
    return renamed


def _outside_settings() -> int:
    """The ``stacklevel`` of the first caller outside this module and pydantic (the warning names its line)."""
    level, frame = 1, inspect.currentframe()
    while frame is not None and frame.f_back is not None:
        frame, level = frame.f_back, level + 1
        module = str(frame.f_globals.get("__name__", ""))
        if module != __name__ and not module.startswith("pydantic"):
            break
    return level - 1


class LLMConfig(_Section):
    """The conversation LLM and our own limits on every inference (the LLM recovery and watchdog take this section).

    Attributes:
        vendor: ``reference`` (offline, deterministic), ``openai``, ``anthropic`` or ``google``.
        model: Model name; None keeps pipecat's default for the vendor.
        base_url: OpenAI-compatible endpoint (a local server); only for ``openai``.
        api_key: The key; when unset, read from the vendor's standard variable.
        first_token_timeout_secs: Our own limit on the wait for an inference's first output (text or
            a tool call); past it the inference is cancelled and retried. The vendor SDK's own
            retries are turned off (OpenAI's would wait up to 600 s, 3 tries), so these limits apply.
        total_timeout_secs: Our own limit on one inference, from its start to the end of its answer.
        retries: Further attempts with the same context after a failed one (timeout or error).
        transfer_after_failures: The failed request of a call (all its attempts failed) that hands the
            call to a human; the first one is met with an apology, the next ones with a callback offer.
        max_tool_calls_per_turn: Tool calls one turn may make before the next is stopped and the caller hears
            a line (a model calling tools in a loop cannot run up a bill).
        max_repeated_refusals: Times one identical tool call may be refused or fail in a turn before the next
            is stopped the same way.
        lane_role: The role of the lane messages: ``developer``, ``system`` or ``user``. Unset: ``developer``
            for OpenAI's own API, Anthropic and Google (pipecat turns it into ``user`` for the latter two), and
            ``system`` for any other OpenAI-compatible server (``base_url``): llama-cpp-python's server, for
            one, answers HTTP 500 to a ``developer`` message. ``system`` is for OpenAI-compatible servers only:
            pipecat would take a leading one for Anthropic's or Google's system instruction and drop it.
    """

    vendor: Vendor = "reference"
    model: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    first_token_timeout_secs: float = Field(default=4.0, gt=0.0)
    total_timeout_secs: float = Field(default=15.0, gt=0.0)
    retries: int = Field(default=1, ge=0, le=3)
    transfer_after_failures: int = Field(default=3, ge=1)
    max_tool_calls_per_turn: int = Field(default=8, ge=1)
    max_repeated_refusals: int = Field(default=2, ge=1)
    lane_role: LaneRole | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_key_names(cls, data: Any) -> Any:
        return renamed_llm_keys(data)

    @field_validator("total_timeout_secs")
    @classmethod
    def _not_below_first_token(cls, value: float, info: ValidationInfo) -> float:
        first = info.data.get("first_token_timeout_secs")
        if isinstance(first, float) and value < first:
            raise ValueError(f"must be at least first_token_timeout_secs ({first:g})")
        return value

    @model_validator(mode="after")
    def _system_lanes_only_for_openai(self) -> LLMConfig:
        if self.lane_role == "system" and self.vendor in ("anthropic", "google"):
            raise ValueError(f"lane_role=system is for OpenAI-compatible servers: llm.vendor={self.vendor} "
                             "would take a leading system lane for the system instruction (use developer or user)")
        return self


class SummarizerConfig(_Section):
    """The summary-lane summarizer (each summarizer, extractive, llm or local, takes this section).

    Attributes:
        kind: ``extractive`` (offline, deterministic, no model), ``llm`` (the conversation LLM, or
            one built from the ``llm`` section) or ``local`` (an in-process llama.cpp model, from the
            ``local-summarizer`` install extra). Unset: ``local`` when that extra is installed, else
            ``extractive`` (the call factory logs which and why). The fault-injecting summarizer of the
            simulation is not a choice here: a configured call never runs it.
        max_lines: ``extractive``: newest lines kept per summary section.
        max_words: ``extractive``: words kept per line.
        timeout_secs: Longest an ``llm`` summary pass may take before the previous summary is kept.
        max_tokens: Output token budget of one ``llm`` or ``local`` summary pass.
        local_model: ``local``: the model, a key of ``config/local_models.toml``.
        local_timeout_secs: Longest a ``local`` pass may take (queueing included) before the previous
            summary is kept.
        local_temperature: ``local`` sampling temperature (0: greedy).
        local_seed: ``local`` sampling seed (matters above temperature 0).
        local_threads: CPU threads of the ``local`` model; unset: all cores but one.
        background: Run summary passes off the turn, so a reply never waits for one; unset: on for
            ``local`` (a pass takes 15-35 s), off otherwise.
    """

    kind: Literal["extractive", "llm", "local"] | None = None
    max_lines: int = Field(default=12, ge=1)
    max_words: int = Field(default=30, ge=1)
    timeout_secs: float = Field(default=20.0, gt=0.0)
    max_tokens: int = Field(default=1024, ge=1)
    local_model: str = "qwen2.5-coder-1.5b-instruct-q4_k_m"
    local_timeout_secs: float = Field(default=120.0, gt=0.0)
    local_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    local_seed: int = 0
    local_threads: int | None = Field(default=None, ge=1)
    background: bool | None = None


class PolicyConfig(_Section):
    """The context policy.

    Attributes:
        name: ``lanes``, ``rolling``, ``window``, or ``pipecat`` (pipecat's own summarizer over the pipeline's
            context, set in ``pipecat_summarizer``; a baseline).
        keep: K, recent turns kept raw.
        every: S, summary pass cadence in turns.
        trigger: When passes run: ``cadence`` (every S turns), ``threshold`` (pipecat's built-in rule) or
            ``reference`` (when older turns are no longer referred to; ``voice-agent eval triggers``).
        floor: ``reference``: the last turns always kept raw.
        batch: ``reference``: unreferenced turns waiting before a pass runs.
        cache_price: ``reference``: a cached input token's price as a share of an uncached one (gpt-4.1 0.25,
            gpt-4o 0.5, Anthropic reads 0.1); set, a pass waits until it pays for the cache it breaks. Unset:
            ``batch`` alone decides.
    """

    name: Literal["lanes", "rolling", "window", "pipecat"] = "lanes"
    keep: int = Field(default=6, ge=1)
    every: int = Field(default=5, ge=1)
    trigger: Literal["cadence", "threshold", "reference"] = "cadence"
    floor: int = Field(default=1, ge=1)
    batch: int = Field(default=6, ge=1)
    cache_price: float | None = Field(default=None, gt=0.0, lt=1.0)

    @field_validator("cache_price")
    @classmethod
    def _reference_only(cls, value: float | None, info: ValidationInfo) -> float | None:
        trigger = info.data.get("trigger")
        if value is not None and trigger != "reference":
            raise ValueError(f"prices the reference trigger's passes; set trigger = \"reference\" (it is {trigger!r})")
        return value


class PipecatSummarizerConfig(_Section):
    """pipecat's own ``LLMContextSummarizer``, used by ``policy.name = "pipecat"`` only (pipecat's defaults; the
    ``pipecat`` policy takes this section).

    It summarizes with the ``summarizer`` section's model: ``local`` (the packaged model) or ``llm`` (the
    conversation LLM); the extractive summarizer is not a model, so it cannot serve here.

    Attributes:
        summarize: Run pipecat's auto summarization; off: the full history, never summarized.
        max_context_tokens: Summarize when pipecat's token estimate reaches this (0: off).
        max_unsummarized_messages: Summarize when this many messages arrived since the last summary (0: off).
        min_messages_after_summary: The last messages kept verbatim after a summary.
        target_context_tokens: The summary's token budget.
        timeout_secs: Longest one summary may take before pipecat keeps the context unchanged.
    """

    summarize: bool = True
    max_context_tokens: int = Field(default=8000, ge=0)
    max_unsummarized_messages: int = Field(default=20, ge=0)
    min_messages_after_summary: int = Field(default=4, ge=1)
    target_context_tokens: int = Field(default=6000, ge=1)
    timeout_secs: float = Field(default=120.0, gt=0.0)

    @model_validator(mode="after")
    def _one_threshold(self) -> PipecatSummarizerConfig:
        if self.summarize and not self.max_context_tokens and not self.max_unsummarized_messages:
            raise ValueError("set max_context_tokens or max_unsummarized_messages (or both) above 0")
        return self


class OutputGuardConfig(_Section):
    """The output guard's limits: :class:`~voice_agent.core.guards.output_guard.OutputGuard` takes this section.

    Attributes:
        max_credit: Largest credit or refund the agent may promise.
        late_max_credit: The limit once the call is long.
        strict_after_turn: From this turn on the call counts as long.
    """

    max_credit: float = Field(default=50.0, ge=0.0)
    late_max_credit: float = Field(default=25.0, ge=0.0)
    strict_after_turn: int = Field(default=20, ge=1)


class TelemetryConfig(_Section):
    """Tracing.

    Attributes:
        include_pii: Put caller words and identifier values in spans (off: redacted).
        exporter: ``none``, ``console`` or ``otlp``.
    """

    include_pii: bool = False
    exporter: Literal["none", "console", "otlp"] = "none"


class CallConfig(_Section):
    """Per-call facts.

    Attributes:
        reference_date: The call's "today" (ISO date); unset: the real today, taken when each call starts.
        ledger_capacity: Most identifiers the ledger holds.
    """

    reference_date: dt.date | None = None
    ledger_capacity: int = Field(default=64, ge=1)


class DatesConfig(_Section):
    """The date contract's second reader (the cue-word rules always read).

    Attributes:
        reader: ``rules`` (no model: the rules and the confirm rule alone), ``llm`` (the conversation LLM reads
            the caller's turns at each date-bearing action, JSON by schema) or ``local`` (the packaged local
            model, from the ``local-summarizer`` extra).
        reader_timeout_secs: Longest the model may take; past it the rules decide and any statement that could
            bind the day is read back to the caller.
        reader_max_tokens: Output token budget of one reading.
        holding_line: What the caller hears while the model reads ("" for nothing).
    """

    reader: Literal["rules", "llm", "local"] = "rules"
    reader_timeout_secs: float = Field(default=8.0, gt=0.0)
    reader_max_tokens: int = Field(default=768, ge=64)
    holding_line: str = "One moment while I check the dates you gave me."


class CallerSpansConfig(_Section):
    """The caller-span extractor: a model proposes slot values as exact quotes of the caller, the quote guard
    checks them (:mod:`voice_agent.core.caller_spans`).

    Attributes:
        extractor: ``llm`` (the conversation LLM, JSON by schema, one small request per caller turn, off the
            turn), ``local`` (the packaged local model, from the ``local-summarizer`` extra) or ``off``. Unset:
            ``llm`` when ``llm.vendor`` is a hosted model, ``off`` with the offline reference agent (which
            cannot read; the offline call stays deterministic).
        timeout_secs: Longest one reading may take; past it the reading changes nothing (a counted log line).
        max_tokens: Output token budget of one reading.
    """

    extractor: Literal["llm", "local", "off"] | None = None
    timeout_secs: float = Field(default=10.0, gt=0.0)
    max_tokens: int = Field(default=512, ge=64)


class StoreConfig(_Section):
    """The call store: where a served call's state is written after every turn, so another worker can resume it.

    Attributes:
        backend: ``sqlite`` (one embedded file, one worker or several on one machine), ``redis`` (a fleet of
            workers: shared state, stream tokens, call cap and registry) or ``none`` (calls end with their worker).
        path: ``sqlite``: the database file; unset: ``$XDG_STATE_HOME/voice-agent/call-state.sqlite3``.
        url: ``redis``: ``redis://host:port/db``.
        retention_secs: A call's state is deleted this long after its last write.
        lease_secs: How long a leg holds its call without renewing (renewed every third of it): a call whose
            worker died may resume elsewhere this long after, at the latest.
        stream_silence_secs: A stream that sends nothing for this long is taken for a half-open connection and
            given up (resumable); providers send media every 20 ms.
    """

    backend: Literal["sqlite", "redis", "none"] = "sqlite"
    path: Path | None = None
    url: str | None = None
    retention_secs: float = Field(default=86400.0, gt=0.0)
    lease_secs: float = Field(default=6.0, ge=1.0, le=300.0)
    stream_silence_secs: float = Field(default=30.0, ge=2.0, le=3600.0)

    @field_validator("url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis:// (or rediss://, unix://) URL")
        return value

    @model_validator(mode="after")
    def _redis_needs_url(self) -> StoreConfig:
        if self.backend == "redis" and not self.url:
            raise ValueError("backend 'redis' needs store.url (e.g. redis://127.0.0.1:6379/0)")
        return self


_TARGET = re.compile(r"^(?:\+[1-9]\d{6,14}|sips?:[^\s<>\"?&]{1,120}@[^\s<>\"?&]{1,120})$")
"""E.164, or a SIP address without headers (``?X-...``: the bridge sends its own) and of a sane length."""


class TransferConfig(_Section):
    """The transfer of a served call to a person (``transfer_to_human`` in ``voice-agent serve``).

    Attributes:
        target: Where the provider moves the call: a phone number in E.164 form (``+15550100100``) or a SIP
            address (``sip:billing@pbx.example.com``). Unset: nothing is moved; the agent offers a callback,
            and the server says so at start-up.
        card_url: Where the handoff card is posted (JSON) before the call is moved, for the person's screen;
            unset: the card stays in the call record only.
        timeout_secs: Longest each request to the provider (and to ``card_url``) may take; past it the
            transfer has failed and the caller is offered a callback.
    """

    target: str | None = None
    card_url: str | None = None
    timeout_secs: float = Field(default=5.0, gt=0.0, le=30.0)

    @field_validator("target")
    @classmethod
    def _target_shape(cls, value: str | None) -> str | None:
        if value is not None and not _TARGET.match(value.strip()):
            raise ValueError("must be an E.164 phone number (+15550100100) or a SIP address (sip:desk@example.com)")
        return value.strip() if value is not None else None

    @field_validator("card_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s):// URL")
        return value


# load_settings picks the file per call; settings_customise_sources is a classmethod with no
# other way in, so the path travels in a context variable.
_toml_path: ContextVar[Path | None] = ContextVar("voice_agent_settings_toml", default=None)


class _RenamedKeys(PydanticBaseSettingsSource):
    """A settings source whose ``llm`` keys are read under their new names (:data:`RENAMED_LLM_KEYS`)."""

    def __init__(self, inner: PydanticBaseSettingsSource) -> None:
        super().__init__(inner.settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        data = self.inner()
        if not isinstance(data.get("llm"), Mapping):
            return data
        try:
            return {**data, "llm": renamed_llm_keys(data["llm"])}
        except ValueError as exc:
            raise SettingsError(f"settings: {exc}") from None


class Settings(BaseSettings):
    """All start-up settings. Build them with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        frozen=True,
    )

    llm: LLMConfig = Field(default_factory=LLMConfig)
    summarizer: SummarizerConfig = Field(default_factory=SummarizerConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    pipecat_summarizer: PipecatSummarizerConfig = Field(default_factory=PipecatSummarizerConfig)
    output_guard: OutputGuardConfig = Field(default_factory=OutputGuardConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    call: CallConfig = Field(default_factory=CallConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    dates: DatesConfig = Field(default_factory=DatesConfig)
    caller_spans: CallerSpansConfig = Field(default_factory=CallerSpansConfig)
    transfer: TransferConfig = Field(default_factory=TransferConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment over the TOML file; no dotenv or secrets directory."""
        path = _toml_path.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        # Old key names are read per source, before the sources merge, so the environment's old name still
        # outranks the file's new one.
        return tuple(_RenamedKeys(source) for source in sources)


def _settings_path(path: str | Path | None) -> tuple[Path, bool]:
    """The TOML path to read and whether it was asked for explicitly (so must exist)."""
    if path is not None:
        return Path(path), True
    from_env = os.environ.get(SETTINGS_PATH_ENV)
    if from_env:
        return Path(from_env), True
    if DEFAULT_SETTINGS_PATH.is_file():
        return DEFAULT_SETTINGS_PATH, False
    return data_path("settings.toml"), False


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"settings: {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise SettingsError(f"settings: cannot read {path}: {exc.strerror}") from None


def _fields_at(loc: Sequence[str]) -> list[str]:
    """Field names of the model at ``loc`` (the settings root when empty)."""
    model: type[BaseModel] = Settings
    for part in loc:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _in_toml(data: Mapping[str, Any], loc: Sequence[str]) -> bool:
    node: Any = data
    for part in loc:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _env_name(loc: Sequence[str]) -> str:
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(part.upper() for part in loc)


def _describe(exc: ValidationError, toml: Mapping[str, Any], path: Path) -> str:
    """One line for the first validation error, naming where the bad value came from."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = [str(part) for part in first["loc"]]
    dotted = ".".join(loc)
    # The environment outranks the file, so a variable that is set is where the value came from.
    from_env = _env_name(loc).upper() in {name.upper() for name in os.environ}
    where = f"in the environment ({_env_name(loc)})" if from_env or not _in_toml(toml, loc) else f"in {path}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "extra_forbidden":
        known = _fields_at(loc[:-1])
        close = difflib.get_close_matches(loc[-1], known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
        return f"settings: unknown key '{dotted}' {where} ({hint}){more}"
    message = str(first["msg"]).replace("\n", " ")
    value = first.get("input")
    shown = "" if isinstance(value, Mapping) else f"={value!r}"
    return f"settings: {dotted}{shown} {where} is invalid: {message} (set {dotted} in {path} or {_env_name(loc)}){more}"


LOCAL_SERVER_KEY = "no-key-needed"
"""The key sent to ``llm.base_url`` when none is set: local OpenAI-compatible servers ignore it."""


def _with_api_key(settings: Settings) -> Settings:
    """Fills ``llm.api_key`` from the vendor's standard variable, or fails naming it."""
    llm = settings.llm
    if llm.vendor == "reference":
        return settings
    if llm.base_url and llm.vendor != "openai":
        raise SettingsError(
            f"settings: llm.base_url is only for OpenAI-compatible servers, not llm.vendor={llm.vendor} "
            "(unset llm.base_url or set llm.vendor=openai)"
        )
    if llm.api_key is not None and llm.api_key.get_secret_value():
        return settings
    env = API_KEY_ENV[llm.vendor]
    key = os.environ.get(env, "")
    if not key and llm.base_url:
        key = LOCAL_SERVER_KEY  # a local OpenAI-compatible server takes any key; the SDK insists on one
    if not key:
        local = ", or llm.base_url for a local server" if llm.vendor == "openai" else ""
        raise SettingsError(f"settings: llm.vendor={llm.vendor} needs {env} (set it in the environment{local})")
    return settings.model_copy(update={"llm": llm.model_copy(update={"api_key": SecretStr(key)})})


_VENDOR_KEYS = {"vendor", "model", "base_url", "api_key", "lane_role"}
"""The keys of the ``llm`` section that name the vendor and its dialect; the others are our limits."""


def with_vendor(settings: Settings, vendor: str) -> Settings:
    """``settings`` with the conversation LLM switched to ``vendor`` (its key read as at start-up).

    Keeps model, base URL and key when ``vendor`` is already the configured one; keeps every limit of
    the section (timeouts, retries, transfer threshold, tool caps) whatever the vendor. The lane role
    follows the new vendor's service (it is the vendor's dialect).

    Raises:
        SettingsError: The vendor is unknown or its key is missing (one line, naming what to set).
    """
    if vendor == settings.llm.vendor:
        return settings
    kept = settings.llm.model_dump(exclude=_VENDOR_KEYS)
    try:
        llm = LLMConfig.model_validate({"vendor": vendor, **kept})
    except ValidationError:
        raise SettingsError(
            f"settings: unknown llm vendor {vendor!r} (use reference, openai, anthropic or google)"
        ) from None
    return _with_api_key(settings.model_copy(update={"llm": llm}))


def with_overrides(settings: Settings, **sections: Mapping[str, Any]) -> Settings:
    """``settings`` with some keys of some sections replaced (command-line flags over the file).

    Example: ``with_overrides(s, policy={"name": "rolling", "keep": 4})``. None values are ignored,
    so unset flags keep the configured value.

    Raises:
        SettingsError: A section or key is unknown, or a value is invalid (one line).
    """
    data = settings.model_dump()
    for section, values in sections.items():
        if section not in data:
            raise SettingsError(f"settings: unknown section {section!r}")
        if section == "llm":
            try:
                values = renamed_llm_keys(values)
            except ValueError as exc:
                raise SettingsError(f"settings: {exc}") from None
        data[section].update({k: v for k, v in values.items() if v is not None})
    if settings.llm.api_key is not None:
        data["llm"]["api_key"] = settings.llm.api_key
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"settings: {where} is invalid: {first['msg']}") from None


OTHER_ENV_NAMES = frozenset({
    SETTINGS_PATH_ENV,
    "VOICE_AGENT_PRODUCTION",  # serve --production
    "VOICE_AGENT_CALLS_TOKEN",  # serve: bearer token of GET /calls
    "VOICE_AGENT_LOG_LEVEL",  # the CLI's log level
    "VOICE_AGENT_CACHE_DIR",  # retrieval's embedding cache
    "VOICE_AGENT_SKIP_LOCAL_MODEL",  # tests: =1 skips the real local-model pass where the extra is not installed
})
"""``VOICE_AGENT_*`` variables that are read directly, not settings."""


def _unknown_env_name(environ: Mapping[str, str]) -> str | None:
    """A one-line error for the first ``VOICE_AGENT_*`` variable that names nothing, else None.

    Settings ignore a variable whose section is misspelt (``VOICE_AGENT_POLCY__KEEP``), so it would
    silently change nothing; keys inside a known section are checked by the models themselves.
    """
    sections = sorted(name.upper() for name in Settings.model_fields)
    others = sorted(name[len(ENV_PREFIX):] for name in OTHER_ENV_NAMES)
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in OTHER_ENV_NAMES:
            continue
        rest = upper[len(ENV_PREFIX):]
        section, nested, key = rest.partition(ENV_NESTED_DELIMITER)
        if section in sections and (not nested or key):
            continue
        guess: str | None = None
        if nested and key:
            close = difflib.get_close_matches(section, sections, n=1)
            guess = f"{ENV_PREFIX}{close[0]}{ENV_NESTED_DELIMITER}{key}" if close else None
        elif not nested:
            glued = [s for s in sections if rest.startswith(s + "_")
                     and rest[len(s) + 1:].lower() in _fields_at([s.lower()])]
            if glued:  # VOICE_AGENT_POLICY_KEEP: one underscore where two are needed
                guess = f"{ENV_PREFIX}{glued[0]}{ENV_NESTED_DELIMITER}{rest[len(glued[0]) + 1:]}"
            else:
                close = difflib.get_close_matches(rest, sections + others, n=1)
                guess = f"{ENV_PREFIX}{close[0]}" if close else None
        hint = f"did you mean {guess}?" if guess else (
            f"settings are {ENV_PREFIX}<SECTION>{ENV_NESTED_DELIMITER}<KEY> with SECTION one of "
            f"{', '.join(sections)}; other variables: {', '.join(sorted(OTHER_ENV_NAMES))}"
        )
        return f"settings: unknown environment variable {name} ({hint})"
    return None


def load_settings(path: str | Path | None = None) -> Settings:
    """Loads and validates the settings.

    Args:
        path: The TOML file; None uses ``$VOICE_AGENT_SETTINGS``, ``config/settings.toml`` in the working
            directory or the shipped settings
            (a missing default file means built-in defaults; a missing named file is an error).

    Returns:
        The validated settings, with ``llm.api_key`` resolved for hosted vendors.

    Raises:
        SettingsError: With a one-line message saying what to set.
    """
    unknown = _unknown_env_name(os.environ)
    if unknown is not None:
        raise SettingsError(unknown)
    toml_path, required = _settings_path(path)
    if not toml_path.is_file():
        if required:
            raise SettingsError(
                f"settings: file {toml_path} not found (create it or point {SETTINGS_PATH_ENV} at a TOML file)"
            )
        toml: dict[str, Any] = {}
        source: Path | None = None
    else:
        toml = _read_toml(toml_path)
        source = toml_path
    token = _toml_path.set(source)
    try:
        settings = Settings()
    except ValidationError as exc:
        raise SettingsError(_describe(exc, toml, toml_path)) from None
    finally:
        _toml_path.reset(token)
    if settings.summarizer.kind == "llm" and settings.llm.vendor == "reference":
        # The reference brain cannot write summaries; fail now rather than at the first pass.
        raise SettingsError(
            "settings: summarizer.kind=llm needs a hosted llm.vendor "
            "(set llm.vendor=openai|anthropic|google, or summarizer.kind=extractive)"
        )
    return _with_api_key(settings)
