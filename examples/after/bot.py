"""The bot of ``examples/before/bot.py`` made long-call safe: the same tools, prompt, handlers and transport.

Identifiers and dates are declared on the bot's own tool schemas; the lanes and guards are spliced around its
own LLM. Every order number the caller said or a tool returned stays verbatim for the whole call, a tool call
with an order number from nowhere is refused, and a callback on a day the caller ruled out never runs.

Run it (needs OPENAI_API_KEY, TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN, and a public URL for Twilio):
    python examples/after/bot.py -t twilio -x your-host.example.com
"""

from __future__ import annotations

import os
from typing import Any

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair, LLMUserAggregatorParams
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.runner.types import RunnerArguments
from pipecat.services.llm_service import FunctionCallParams, LLMService
from pipecat.transports.base_transport import BaseTransport

from voice_agent import LongCall, guarded_tool

SYSTEM_PROMPT = """You are the order desk of Acme Hardware, on the phone. Keep replies short.
When you book a callback, confirm it back as {"order": <order number>, "day": <YYYY-MM-DD>} read aloud."""

ORDERS: dict[str, dict[str, Any]] = {
    "ORD-7K4M2P": {"order_id": "ORD-7K4M2P", "status": "delayed", "item": "cordless drill"},
    "ORD-7K4M2B": {"order_id": "ORD-7K4M2B", "status": "delivered", "item": "garden hose"},
}
CALLBACKS: list[dict[str, str]] = []
"""Callbacks booked (the stand-in for the shop's real system)."""


async def lookup_order(params: FunctionCallParams) -> None:
    order = ORDERS.get(str(params.arguments["order_id"]))
    await params.result_callback(order or {"error": "no such order"})


async def schedule_callback(params: FunctionCallParams) -> None:
    booking = {"order_id": str(params.arguments["order_id"]), "day": str(params.arguments["day"])}
    CALLBACKS.append(booking)
    await params.result_callback({"status": "booked", **booking})


LOOKUP_ORDER = FunctionSchema(
    name="lookup_order", description="Look up an order by its order number.",
    properties={"order_id": {"type": "string", "description": "Order number, e.g. ORD-7K4M2P."}},
    required=["order_id"],
)
SCHEDULE_CALLBACK = FunctionSchema(
    name="schedule_callback", description="Book a callback about an order on a day the caller can take it.",
    properties={"order_id": {"type": "string", "description": "The order the callback is about."},
                "day": {"type": "string", "description": "The day, YYYY-MM-DD."}},
    required=["order_id", "day"],
)
TOOLS = ToolsSchema(standard_tools=[LOOKUP_ORDER, SCHEDULE_CALLBACK])
LANES = LongCall(
    tools=[guarded_tool(LOOKUP_ORDER, identifiers={"order_id": "order"}),
           guarded_tool(SCHEDULE_CALLBACK, identifiers={"order_id": "order"}, dates=["day"], mutates=True)],
    id_shapes={"ORD-XXXXXX": "order"},  # how callers say order numbers: those enter the ledger as said
)


def build_pipeline(
    transport: BaseTransport, llm: LLMService[Any], stt: FrameProcessor, tts: FrameProcessor,
    user_params: LLMUserAggregatorParams,
) -> Pipeline:
    """The bot's pipeline around ``llm`` (a real service live, a scripted fake in the tests)."""
    llm.register_function("lookup_order", lookup_order)
    llm.register_function("schedule_callback", schedule_callback)
    call = LANES.attach(llm)  # the handlers registered above now run behind the guards
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM_PROMPT}], tools=TOOLS)
    user_agg, assistant_agg = LLMContextAggregatorPair(context, user_params=user_params)
    return Pipeline([
        transport.input(), stt, user_agg, *call.before_llm, llm, *call.after_llm, tts, transport.output(),
        *call.after_output, assistant_agg,
    ])


async def bot(runner_args: RunnerArguments) -> None:
    """pipecat's runner calls this for each call Twilio streams to ``/ws``."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.runner.utils import create_transport
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.services.openai.stt import OpenAISTTService
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams
    from pipecat.workers.runner import WorkerRunner

    transport = await create_transport(runner_args, {
        "twilio": lambda: FastAPIWebsocketParams(audio_in_enabled=True, audio_out_enabled=True),
    })
    key = os.environ["OPENAI_API_KEY"]
    llm = OpenAILLMService(api_key=key)
    pipeline = build_pipeline(
        transport, llm, OpenAISTTService(api_key=key), OpenAITTSService(api_key=key),
        LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()),
    )
    worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=8000, audio_out_sample_rate=8000))
    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    await runner.add_workers(worker)
    await runner.run()


if __name__ == "__main__":
    from pipecat.runner.run import main

    main()
