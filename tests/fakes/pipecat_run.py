"""pipecat's ``run_test`` with a start-up limit for a busy machine.

pipecat's own limit on the pipeline's start is 1 s, and a processor that loads a model in ``start`` (the
pocketsphinx decoder, Whisper) took longer with two CPU burners beside the suite: ``run_test`` raised
``TimeoutError`` and left the started pipeline running, whose task then held the event loop's teardown.
The limit here is a hang guard, not a measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipecat.frames.frames import Frame
from pipecat.tests.utils import run_test as pipecat_run_test

START_TIMEOUT_SECS = 60.0


async def run_test(*args: Any, start_timeout: float = START_TIMEOUT_SECS,
                   **kwargs: Any) -> tuple[Sequence[Frame], Sequence[Frame]]:
    """:func:`pipecat.tests.utils.run_test`, its pipeline given ``start_timeout`` seconds to start."""
    return await pipecat_run_test(*args, start_timeout=start_timeout, **kwargs)
