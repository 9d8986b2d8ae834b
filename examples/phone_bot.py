"""A long-call safe phone bot from scratch (OpenAI speech and LLM, Twilio, two tools). Run it with keys set:
OPENAI_API_KEY, TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN: python examples/phone_bot.py -t twilio -x <public host>"""

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
from pipecat.runner.utils import create_transport
from pipecat.services.llm_service import FunctionCallParams, LLMService
from pipecat.services.openai import llm as openai_llm
from pipecat.services.openai import stt as openai_stt
from pipecat.services.openai import tts as openai_tts
from pipecat.transports.base_transport import BaseTransport
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams
from pipecat.workers.runner import WorkerRunner

from voice_agent import LongCall, guarded_tool

PROMPT = "You book repair visits for Fixit Appliances on the phone. Ask for the booking reference first."
BOOKINGS = {"FX-2041": {"booking": "FX-2041", "appliance": "dishwasher"}}
VISITS: list[dict[str, str]] = []


async def find_booking(params: FunctionCallParams) -> None:
    await params.result_callback(BOOKINGS.get(str(params.arguments["booking"]), {"error": "no such booking"}))


async def book_visit(params: FunctionCallParams) -> None:
    VISITS.append({"booking": str(params.arguments["booking"]), "day": str(params.arguments["day"])})
    await params.result_callback({"status": "booked", **VISITS[-1]})


REF = {"booking": {"type": "string", "description": "Booking reference, e.g. FX-2041."}}
FIND = FunctionSchema("find_booking", "Find a booking by its reference.", REF, ["booking"])
BOOK = FunctionSchema("book_visit", "Book an engineer's visit.", {**REF, "day": {"type": "string"}}, ["booking", "day"])
LANES = LongCall([guarded_tool(FIND, identifiers={"booking": "booking"}),
                  guarded_tool(BOOK, identifiers={"booking": "booking"}, dates=["day"], mutates=True)],
                 id_shapes={"FX-####": "booking"})


def build_pipeline(transport: BaseTransport, llm: LLMService[Any], stt: FrameProcessor, tts: FrameProcessor,
                   user_params: LLMUserAggregatorParams) -> Pipeline:
    llm.register_function("find_booking", find_booking)
    llm.register_function("book_visit", book_visit)
    call = LANES.attach(llm)
    user, assistant = LLMContextAggregatorPair(LLMContext(tools=ToolsSchema([FIND, BOOK])), user_params=user_params)
    return Pipeline([transport.input(), stt, user, *call.before_llm, llm, *call.after_llm, tts, transport.output(),
                     *call.after_output, assistant])


async def bot(runner_args: RunnerArguments) -> None:
    from pipecat.audio.vad.silero import SileroVADAnalyzer  # pipecat-ai[silero]

    transport = await create_transport(runner_args, {"twilio": lambda: FastAPIWebsocketParams(
        audio_in_enabled=True, audio_out_enabled=True)})
    key, llm = os.environ["OPENAI_API_KEY"], openai_llm.OpenAILLMService
    model = llm(api_key=key, settings=llm.Settings(system_instruction=PROMPT))
    stt, tts = openai_stt.OpenAISTTService(api_key=key), openai_tts.OpenAITTSService(api_key=key)
    pipeline = build_pipeline(transport, model, stt, tts, LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()))
    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    await runner.add_workers(PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=8000,
                                                                            audio_out_sample_rate=8000)))
    await runner.run()


if __name__ == "__main__":
    from pipecat.runner.run import main

    main()
