"""The voice agent as a bot that pipecat's eval harness (``pipecat.evals``) can drive.

The harness connects to ``ws://HOST:PORT/ws`` as an RTVI client and sends ``eval-connect``
first; :func:`bot` hands the accepted WebSocket to ``pipecat.runner.utils.create_transport``,
which recognises that message and builds pipecat's ``EvalFastAPIWebsocketTransport``. Every
connection gets its own :class:`~voice_agent.call.session.CallSession` and pipeline (the same
:func:`~voice_agent.call.pipeline.build_call_pipeline` as a live call), with the offline,
deterministic reference agent unless the settings name a hosted LLM. ``PipelineWorker``
prepends the RTVI processor and adds its observer; the harness reads the agent's text
(``llm_response``) and its tool calls (``function_call``) from them. The observer reports
the text the output guard released, not the LLM's raw words as well (see
:class:`GuardedTextRTVIObserver`). The reference agent streams a word every
``--stream-delay`` seconds (default 0.02), so a ``send_after`` barge-in cuts a reply.

Only the text modality is served: user turns arrive as RTVI ``send-text`` messages, which
become ``LLMMessagesAppendFrame``\\ s that our context assembly opens a turn from. There is
no STT or TTS, so scenarios that assert ``tts_response``, ``user_transcription`` or audio
``response`` cannot pass against this bot.

The server is a bare FastAPI app with the single ``/ws`` route, run by uvicorn. pipecat's
dev runner (``pipecat.runner.run.main()``) serves the same route but needs the
``pipecat-ai[runner]`` extra (``pipecat-ai-prebuilt``, and ``python-multipart`` for its upload
routes), which this project does not install; :func:`bot` still has the dev runner's
signature, so a ``bot.py`` holding ``from voice_agent.harness.eval_bot import bot`` runs under
``pipecat.runner.run.main()`` where those are installed.

Run it by hand, from the repository root (``config/settings.toml`` is read from there)::

    .venv/bin/python -m voice_agent.harness.eval_bot --port 7860 --keep 2 --every 2 --reference-date 2026-11-30
    .venv/bin/python scripts/run_pipecat_eval.py config/evals/billing_dispute_memory.yaml \\
        --bot-url ws://127.0.0.1:7860/ws

``scripts/run_pipecat_eval.py`` runs the scenario file through pipecat's harness
programmatically (``EvalScenarioFile.load`` + ``EvalScriptSession``). pipecat's own CLI,
``python -m pipecat.evals run FILE --bot-url ws://127.0.0.1:7860/ws``, would do the same but
needs the ``pipecat-ai[cli]`` extra, whose ``rich<14`` pin conflicts with this project's
``rich==15.0.0``. A small ``--keep`` makes the late turns prove memory: by then the account
number has left the raw window and reaches the LLM only through the fact lanes (with
``--policy window`` the same scenario fails on the credit turn).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.evals.transport import EvalTransportParams
from pipecat.frames.frames import LLMTextFrame
from pipecat.observers.base_observer import FramePushed
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.processors.frameworks.rtvi import RTVIObserver, RTVIObserverParams, RTVIProcessor
from pipecat.runner.types import RunnerArguments, WebSocketRunnerArguments
from pipecat.runner.utils import create_transport
from pipecat.services.llm_service import LLMService
from pipecat.workers.runner import WorkerRunner

from voice_agent.call.factory import CallParts, build_call
from voice_agent.call.pipeline import build_call_pipeline, text_turns
from voice_agent.domains.base import Domain
from voice_agent.policies import PolicyName
from voice_agent.services.factory import make_llm
from voice_agent.services.reference_llm import ReferenceLLMService
from voice_agent.settings import Settings, SettingsError, load_settings, with_overrides
from voice_agent.telemetry import install_log_redaction, install_telemetry

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
WS_ROUTE = "/ws"
DEFAULT_STREAM_DELAY = 0.02
"""Seconds between the reference agent's streamed words: a reply streams for a few hundred
milliseconds, like a hosted LLM's, so a ``send_after`` barge-in lands while it is still streaming."""


class GuardedTextRTVIObserver(RTVIObserver):
    r"""An RTVI observer that reports the agent's text as the output guard released it.

    The output guard re-emits the LLM's streamed words as reviewed sentences (new
    ``LLMTextFrame``\ s, possibly replaced). The stock observer reports both, so a client
    would see every sentence twice and the unreviewed words too; this one skips the LLM's
    own text frames. Everything else the LLM pushes (response start/end, function calls)
    is reported as usual.

    Args:
        rtvi: The RTVI processor that sends the messages.
        raw_text_source: The processor(s) whose text frames precede the guard: the LLM service, and the
            LLM watchdog's outlet (its recovery lines go through the guard like the LLM's words).
        params: Which messages to send.
    """

    def __init__(
        self, rtvi: RTVIProcessor, *, raw_text_source: FrameProcessor | Sequence[FrameProcessor],
        params: RTVIObserverParams | None = None,
    ) -> None:
        super().__init__(rtvi, params=params)
        self._raw_text_sources = (
            (raw_text_source,) if isinstance(raw_text_source, FrameProcessor) else tuple(raw_text_source)
        )

    async def on_push_frame(self, data: FramePushed) -> None:
        """Drops the LLM's pre-guard text; hands every other push to the stock observer.

        Args:
            data: The push.
        """
        if isinstance(data.frame, LLMTextFrame) and any(data.source is s for s in self._raw_text_sources):
            return
        await super().on_push_frame(data)


class GuardedTextRTVIProcessor(RTVIProcessor):
    """The RTVI processor ``PipelineWorker`` prepends, building a :class:`GuardedTextRTVIObserver`.

    Args:
        raw_text_source: The processor(s) whose text frames precede the output guard.
    """

    def __init__(self, raw_text_source: FrameProcessor | Sequence[FrameProcessor]) -> None:
        super().__init__()
        self._raw_text_source = raw_text_source

    def create_rtvi_observer(self, *, params: RTVIObserverParams | None = None, **kwargs: Any) -> RTVIObserver:
        """The observer the worker adds next to this processor.

        Args:
            params: Which messages to send.
            **kwargs: Ignored; the stock observer takes none the worker passes.

        Returns:
            A :class:`GuardedTextRTVIObserver`.
        """
        return GuardedTextRTVIObserver(self, raw_text_source=self._raw_text_source, params=params)


@dataclass(frozen=True)
class EvalBotOptions:
    """How every call the bot serves is set up.

    Attributes:
        settings: Validated settings, command-line overrides applied: every call is built from them
            by :func:`voice_agent.call.factory.build_call`.
        stream_delay: Reference agent only: seconds between streamed words, so a
            ``send_after`` barge-in can cut a reply mid-sentence.
    """

    settings: Settings
    stream_delay: float = DEFAULT_STREAM_DELAY

    @classmethod
    def from_settings(cls, settings: Settings) -> EvalBotOptions:
        """Options that follow the settings alone."""
        return cls(settings=settings)


_options: EvalBotOptions | None = None
"""The options :func:`bot` uses; set by :func:`main`, else built from the settings on first use."""


def _default_options() -> EvalBotOptions:
    global _options
    if _options is None:
        _options = EvalBotOptions.from_settings(load_settings())
    return _options


def _make_call(options: EvalBotOptions, call_id: str) -> CallParts:
    def llm_for(domain: Domain) -> LLMService[Any]:
        if options.settings.llm.vendor == "reference":
            return ReferenceLLMService(domain.brain(), stream_delay=options.stream_delay)
        return make_llm(options.settings, domain, cache_key=call_id)

    return build_call(options.settings, call_id, llm_factory=llm_for)


async def run_bot(runner_args: RunnerArguments, options: EvalBotOptions) -> None:
    """Serves one harness connection: a fresh call, run until the harness leaves or cancels.

    Args:
        runner_args: The connection, as pipecat's runner describes it (a
            ``WebSocketRunnerArguments`` whose WebSocket is accepted and unread).
        options: How the call is set up.
    """
    transport = await create_transport(runner_args, {"eval": lambda: EvalTransportParams()})
    call_id = f"eval-{runner_args.session_id or uuid.uuid4().hex[:8]}"
    parts = _make_call(options, call_id)
    session, llm = parts.session, parts.llm
    call = build_call_pipeline(session, llm, before_user=[transport.input()], tts=[transport.output()],
                               user_params=text_turns())
    # The worker prepends the RTVI processor and adds its observer: the harness is an RTVI client.
    worker = PipelineWorker(
        call.pipeline,
        params=PipelineParams(),
        rtvi_processor=GuardedTextRTVIProcessor(raw_text_source=(llm, call.watchdog.outlet)),
        idle_timeout_secs=runner_args.pipeline_idle_timeout_secs,
        name=call_id,
    )

    async def _on_turn(_log: Any, turn: int) -> None:
        # Names and counts only: caller words are PII.
        ran = [e.tool_name for e in session.state.transcript.in_turns(turn, turn) if e.tool_name and e.result is None]
        logger.info("{}: turn {} done; tools called: {}", call_id, turn, ran)

    call.turn_log.add_event_handler("on_turn_completed", _on_turn)

    async def _on_disconnected(_transport: Any, _websocket: Any) -> None:
        logger.info("{}: harness disconnected", call_id)
        await worker.cancel()

    transport.add_event_handler("on_client_disconnected", _on_disconnected)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    logger.info("{}: call started (policy={}, K={}, S={})", call_id, session.settings.policy.name,
                session.settings.policy.keep, session.settings.policy.every)
    try:
        await runner.run()
    finally:
        session.close()
        logger.info("{}: call ended after {} turn(s)", call_id, session.turn)


async def bot(runner_args: RunnerArguments) -> None:
    """The entry point pipecat's dev runner calls, one call per connection.

    Args:
        runner_args: The connection, from ``pipecat.runner.run`` or :func:`create_app`.
    """
    await run_bot(runner_args, _default_options())


def create_app(options: EvalBotOptions) -> FastAPI:
    """The bot's web app: the single ``/ws`` route the eval harness connects to.

    Args:
        options: How each call is set up.

    Returns:
        A FastAPI app for uvicorn.
    """
    app = FastAPI(title="voice-agent eval bot")

    @app.websocket(WS_ROUTE)
    async def _eval_ws(websocket: WebSocket) -> None:
        await websocket.accept()
        args = WebSocketRunnerArguments(websocket=websocket, session_id=uuid.uuid4().hex[:8])
        args.pipeline_idle_timeout_secs = None  # text turns produce none of the idle-resetting frames
        try:
            await run_bot(args, options)
        except Exception:
            # Logged once here; the connection closes as the handler returns.
            logger.exception("eval call failed")

    return app


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m voice_agent.harness.eval_bot",
        description=f"Serve the voice agent to pipecat's eval harness on ws://HOST:PORT{WS_ROUTE} (text modality).",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--settings", default=None, help="settings TOML (default config/settings.toml)")
    parser.add_argument("--policy", choices=[p.value for p in PolicyName], default=None, help="context policy")
    parser.add_argument("--keep", type=int, default=None, help="K: recent turns kept raw")
    parser.add_argument("--every", type=int, default=None, help="S: summary pass cadence")
    parser.add_argument("--reference-date", type=dt.date.fromisoformat, default=None,
                        help="the call's 'today', YYYY-MM-DD (default: settings, else today)")
    parser.add_argument("--stream-delay", type=float, default=DEFAULT_STREAM_DELAY,
                        help=f"reference agent: seconds between streamed words (default {DEFAULT_STREAM_DELAY}; "
                             "lets a send_after barge-in cut a reply)")
    parser.add_argument("--log-level", default="INFO", help="loguru level (default INFO)")
    return parser.parse_args(argv)


def options_from_args(args: argparse.Namespace) -> EvalBotOptions:
    """The settings, with the command line's overrides applied.

    Args:
        args: Parsed command line.

    Returns:
        The bot's options.

    Raises:
        SettingsError: When the settings are invalid or an override is out of range.
    """
    for name in ("keep", "every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SettingsError(f"--{name} must be at least 1, got {value}")
    if args.stream_delay < 0:
        raise SettingsError(f"--stream-delay must not be negative, got {args.stream_delay}")
    settings = with_overrides(
        load_settings(args.settings),
        policy={"name": args.policy, "keep": args.keep, "every": args.every},
        call={"reference_date": args.reference_date},
    )
    options = EvalBotOptions(settings=settings, stream_delay=args.stream_delay)
    # Fail at start-up, in one line, rather than on every connection: a hosted LLM without its
    # key or SDK, or an llm summarizer without a hosted LLM (no network is touched here).
    _make_call(options, "settings-check")
    return options


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m voice_agent.harness.eval_bot``: serves ``/ws`` until interrupted.

    Args:
        argv: Command line without the program name; None reads ``sys.argv``.
    """
    global _options
    args = _parse_args(argv)
    # The same redacting sink as the CLI: the bot logs at INFO, and pipecat's lines carry caller words.
    install_log_redaction(args.log_level.upper())
    try:
        _options = options_from_args(args)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    settings = _options.settings
    install_telemetry(settings.telemetry)
    logger.info("eval bot on ws://{}:{}{} (policy={}, K={}, S={}, today={}, llm={}, summarizer={})", args.host,
                args.port, WS_ROUTE, settings.policy.name, settings.policy.keep, settings.policy.every,
                settings.call.reference_date or "today, per call", settings.llm.vendor, settings.summarizer.kind)
    config = uvicorn.Config(create_app(_options), host=args.host, port=args.port, log_level="warning",
                            ws="websockets-sansio", lifespan="off")
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
