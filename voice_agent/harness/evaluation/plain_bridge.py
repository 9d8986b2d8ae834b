"""A plain pipecat telephony bridge: the baseline the load test compares the served call with.

The same FastAPI app shape, WebSocket transport (pipecat's ``FastAPIWebsocketTransport``), Twilio
serializer (pipecat's, with the same low-latency inbound resampler), audio stack (VAD, STT, TTS),
pipeline rates and LLM service (the reference brain) as :mod:`voice_agent.telephony.server`, and
none of this project's processors or bookkeeping: no lanes, context assembly, guards, LLM
watchdog, spoken-identifier normaliser, speculative retrieval, turn log, recorder, journal,
inbound message validation or call registry. The pipeline is pipecat's textbook one:
transport in -> VAD -> STT -> user aggregator -> LLM -> TTS -> transport out -> assistant aggregator.

The reference brain calls tools; here they run straight on the domain's backend (no guards), so
both bridges do the same per-turn work in the brain. Development only: no signatures, no tokens,
no call cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from types import FrameType
from typing import Any, cast

import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from loguru import logger
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.services.llm_service import FunctionCallParams
from pipecat.workers.runner import WorkerRunner
from starlette.websockets import WebSocketDisconnect

from voice_agent.audio.stack import AudioStack
from voice_agent.call.pipeline import AUDIO_TURN_STOP_TIMEOUT
from voice_agent.core.call_state import CallState
from voice_agent.domains.base import Domain, ToolError
from voice_agent.domains.billing import billing_domain
from voice_agent.services.reference_llm import ReferenceLLMService
from voice_agent.telephony.call_runner import PIPELINE_IN_RATE, PIPELINE_OUT_RATE
from voice_agent.telephony.heap import DEFAULT_YOUNG_THRESHOLD, settle_heap
from voice_agent.telephony.process import bind_socket
from voice_agent.telephony.providers import HangupCredentials, Provider, make_serializer, parse_start
from voice_agent.telephony.twilio import stream_twiml

_HANDSHAKE_MESSAGES = 4
"""Messages read while waiting for Twilio's ``start`` (``connected`` comes first)."""


class PlainBridge:
    """The FastAPI app of the plain bridge.

    Args:
        stack: The audio services (the load test's ``fake`` stack).
    """

    def __init__(self, stack: AudioStack) -> None:
        self.stack = stack
        self.calls_started = 0
        self.app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
        self.app.add_api_route("/readyz", self._readyz, methods=["GET"])
        self.app.add_api_route("/voice", self._voice, methods=["POST"])
        self.app.add_api_websocket_route("/ws", self._ws)

    async def _readyz(self) -> JSONResponse:
        return JSONResponse({"status": "ready"})

    async def _voice(self, request: Request) -> Response:
        url = str(request.base_url).replace("http", "ws", 1).rstrip("/") + "/ws"
        return Response(stream_twiml(url, {}), media_type="application/xml")

    async def _ws(self, websocket: WebSocket) -> None:
        await websocket.accept()
        start = None
        try:
            for _ in range(_HANDSHAKE_MESSAGES):
                message = await websocket.receive()
                if message.get("type") == "websocket.disconnect":
                    raise WebSocketDisconnect(int(message.get("code") or 1000))
                text = message.get("text")
                if text is None:  # receive_text() would raise a bare KeyError on a binary frame
                    raise ValueError("a binary message where the handshake's JSON text was expected")
                data = json.loads(text)
                if isinstance(data, dict) and data.get("event") == "start":
                    start = parse_start(data, Provider.TWILIO)
                    break
        except (WebSocketDisconnect, ValueError) as exc:
            logger.warning("plain bridge: no start message ({})", exc)
        if start is None:
            with contextlib.suppress(Exception):
                await websocket.close(code=1008, reason="no start message")
            return
        self.calls_started += 1
        await run_plain_call(websocket, make_serializer(start, HangupCredentials()), self.stack)


def plain_tools(llm: ReferenceLLMService, domain: Domain, state: CallState) -> None:
    """Registers each domain tool's handler on ``llm`` as it is (no guards, no harvesting)."""

    async def handler(params: FunctionCallParams) -> None:
        run = domain.handlers.get(params.function_name)
        try:
            result = await run(dict(params.arguments), state) if run is not None else {"status": "error"}
        except ToolError as exc:
            result = {"status": "error", "error": str(exc)}
        await params.result_callback(result)

    for tool in domain.tools:
        llm.register_function(tool.name, handler)


async def run_plain_call(websocket: Any, serializer: Any, stack: AudioStack) -> None:
    """Runs one call's textbook pipecat pipeline on ``websocket`` until it ends."""
    audio = await asyncio.to_thread(stack.build)
    worker = build_plain_worker(websocket, serializer, audio)
    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    await runner.run()


def build_plain_worker(websocket: Any, serializer: Any, audio: Any) -> PipelineWorker:
    """The textbook pipeline of one call (transport, VAD/STT, aggregators, LLM, TTS) in its worker.

    Args:
        websocket: The call's accepted WebSocket.
        serializer: The provider's frame serializer.
        audio: The built audio stack (``AudioStack.build()``).
    """
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport

    domain = billing_domain()
    state = CallState(call_id="plain", slot_model=domain.slot_model)
    transport = FastAPIWebsocketTransport(
        cast(Any, websocket),
        FastAPIWebsocketParams(audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False,
                               serializer=serializer),
    )
    llm = ReferenceLLMService(domain.brain())
    plain_tools(llm, domain, state)
    llm.append_system_instruction(domain.prompt_for(state.reference_date))
    schemas = []
    for tool in domain.tools:
        params = tool.json_schema(with_kinds=False)
        schemas.append(FunctionSchema(tool.name, tool.description, params["properties"], params["required"]))
    context = LLMContext(tools=ToolsSchema(standard_tools=schemas))
    user_agg, assistant_agg = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(user_turn_strategies=audio.turn_strategies,
                                                     user_turn_stop_timeout=AUDIO_TURN_STOP_TIMEOUT),
    )

    async def on_disconnected(_transport: Any, _ws: Any) -> None:
        await worker.cancel()

    transport.add_event_handler("on_client_disconnected", on_disconnected)
    pipeline = Pipeline([transport.input(), *audio.before_user, user_agg, llm, audio.tts, transport.output(),
                         assistant_agg])
    worker = PipelineWorker(
        pipeline, params=PipelineParams(audio_in_sample_rate=PIPELINE_IN_RATE, audio_out_sample_rate=PIPELINE_OUT_RATE),
        enable_rtvi=False, idle_timeout_secs=None, enable_turn_tracking=False, check_dangling_tasks=False,
    )
    return worker


def warm_up(stack: AudioStack) -> None:
    """The same first-use work as the served bridge's warm-up: models, and the brain's lazy imports and the
    date parser's language data (seconds of CPU), so neither bridge's first calls pay for them."""
    stack.warm_up()
    domain = billing_domain()
    brain = domain.brain()
    for text in ("Hello, is this the right line?", "It's about the October one; call me after the 14th."):
        brain.respond([{"role": "system", "content": "Today is 2026-11-30."}, {"role": "user", "content": text}],
                      [t.name for t in domain.tools])


class _QuietExitServer(uvicorn.Server):
    """uvicorn that exits on SIGTERM/SIGINT without raising the signal again afterwards.

    uvicorn re-raises a captured signal once it has shut down, which would kill the process before a
    profiler wrapped around the server could write its output.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Exits the serve loop."""
        self.should_exit = True


async def serve_plain(stack: AudioStack, host: str, port: int, *, sock: socket.socket | None = None,
                      ready: asyncio.Event | None = None, gc_young_threshold: int = DEFAULT_YOUNG_THRESHOLD) -> None:
    """Serves the plain bridge until SIGTERM/SIGINT (uvicorn's own handling).

    Args:
        stack: The audio stack (the same as ours in a side-by-side run).
        host: Interface to bind (when ``sock`` is None).
        port: Port to bind (when ``sock`` is None).
        sock: A listening socket to accept on once warmed up (a worker's, inherited from its supervisor).
        ready: Set once warmed up.
        gc_young_threshold: The garbage collector as ours runs it (:func:`voice_agent.telephony.heap.settle_heap`),
            so a side-by-side compares the pipelines, not two heaps.
    """
    if sock is None:
        sock = bind_socket(host, port)
    bridge = PlainBridge(stack)
    await asyncio.to_thread(warm_up, stack)
    config = uvicorn.Config(bridge.app, lifespan="off", log_level="warning", access_log=False,
                            timeout_graceful_shutdown=5)
    server = _QuietExitServer(config)
    settle_heap(gc_young_threshold)
    if ready is not None:
        ready.set()
    await server.serve(sockets=[sock])
