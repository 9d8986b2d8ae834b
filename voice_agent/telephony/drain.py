"""Drain and hand-over: how a worker lets its live calls go when it stops taking calls (SIGTERM).

With a call store and ``hand_over``, each call is saved and its stream closed between turns, so the provider
brings it back to another worker; the calls left finish here, and a call still running at the drain limit hears
the goodbye line and ends (recorded as drained).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from loguru import logger
from pipecat.frames.frames import EndFrame, TTSSpeakFrame

from voice_agent.telephony.bridge import EndReason
from voice_agent.telephony.call_runner import LiveCall
from voice_agent.telephony.config import ServerConfig
from voice_agent.telephony.persistence import CallPersistence
from voice_agent.telephony.registry import end_as

HANDOVER_TURN_WAIT_SECS = 8.0
"""A drain lets a call finish the turn in progress for this long before handing it over."""


async def drain_calls(
    live: Mapping[str, LiveCall], config: ServerConfig, persistence: CallPersistence | None, limit: float,
) -> int:
    """Waits up to ``limit`` seconds for the live calls to end (handed over first when the config says so);
    calls still running then hear the goodbye line, then end (recorded as drained).

    Args:
        live: The worker's live calls by call id, read as they are now at each step.
        config: Server settings (``hands_over``, the goodbye line and its timeout).
        persistence: The call store's saves (None: nothing is handed over).
        limit: Seconds the calls may take to finish.

    Returns:
        The number of calls the limit cut short.
    """
    calls = list(live.values())
    if persistence is not None and config.hands_over and calls:
        handed = await hand_over(calls, persistence)
        logger.info("draining: {} call(s) handed over through the call store", handed)
        calls = list(live.values())
    logger.info("draining: {} active call(s), waiting up to {:.0f} s", len(calls), limit)
    await _wait_done(calls, limit)
    left = [c for c in live.values() if not c.done.is_set()]
    if left:
        logger.warning("drain limit ({:.0f} s) reached: saying goodbye to {} call(s)", limit, len(left))
        await asyncio.gather(*(say_goodbye(c, config) for c in left))
    logger.info("draining done; {} call(s) cut short", len(left))
    return len(left)


async def hand_over(calls: list[LiveCall], persistence: CallPersistence) -> int:
    """Saves each call and closes its stream (1012) so the provider brings it back to another worker.

    A call in the middle of a turn is given up to ``HANDOVER_TURN_WAIT_SECS`` to finish the agent's
    answer first, so the caller does not lose half a sentence.

    Returns:
        The number of calls handed over.
    """

    async def one(call: LiveCall) -> bool:
        deadline = time.monotonic() + HANDOVER_TURN_WAIT_SECS
        session = call.record.session
        while (session is not None and session.turn > call.completed_turn and not call.done.is_set()
               and time.monotonic() < deadline):
            await asyncio.sleep(0.02)
        worker = call.worker
        if call.done.is_set() or worker is None or worker.has_finished() or session is None:
            return False
        if not await persistence.save(session, leg=call.record.leg, provider_call_id=call.record.provider_call_id):
            return False  # not saved (the store failed): the call finishes here instead of being lost
        end_as(call.record, "handed over to another worker (drain)", EndReason.HANDED_OVER)
        if call.journal is not None:
            call.journal.write("event", event="handed over", turn=session.turn if session else None)
        await worker.cancel(reason="handed over")
        await _wait_done([call], 10)
        return True

    results = await asyncio.gather(*(one(c) for c in calls))
    return sum(results)


async def say_goodbye(call: LiveCall, config: ServerConfig) -> None:
    """Queues the goodbye line and the end of the call behind it; cancels the call if it does not end."""
    end_as(call.record, "server shutdown (drain timeout)", EndReason.DRAINED)
    worker = call.worker
    if worker is not None and not worker.has_finished():
        if call.journal is not None:
            call.journal.write("event", event="goodbye", text=config.goodbye_line)
        # Frames queued in order: the TTS speaks the line, the output plays it out in real time, and only
        # then does the EndFrame stop the transport and close the socket (1001).
        await worker.queue_frames([TTSSpeakFrame(config.goodbye_line), EndFrame()])
        await _wait_done([call], config.goodbye_timeout_secs)
        if not call.done.is_set() and not worker.has_finished():
            logger.warning("call {}: goodbye did not finish in {:.0f} s, cancelling", call.record.call_id,
                           config.goodbye_timeout_secs)
            await worker.cancel(reason="server shutdown")
    await _wait_done([call], 10)


async def _wait_done(calls: list[LiveCall], timeout: float) -> None:
    """Waits up to ``timeout`` seconds for ``calls`` to end."""
    waiters = [asyncio.ensure_future(c.done.wait()) for c in calls if not c.done.is_set()]
    if not waiters:
        return
    try:
        await asyncio.wait(waiters, timeout=timeout)
    finally:
        for waiter in waiters:
            waiter.cancel()
