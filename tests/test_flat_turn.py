"""The context stage of a live lanes turn is incremental: equal to a build from scratch, and only new entries read.

Issue 15 item 3: the caller-constraint lines used to re-read every utterance of the call on every inference.
The date guard now keeps what it read (a derived cache, rebuilt whenever it does not match the lane), so these
tests check the two things that can go wrong: a context that differs from a from-scratch build (a stale or
wrong cache), and a turn that still reads the whole lane (the cost grows with the call).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from typing import Any

from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.transcript import TranscriptEntry, TranscriptLane
from voice_agent.domains.billing import billing_domain
from voice_agent.policies.lanes import LanesPolicy
from voice_agent.session import CallSession, SessionConfig
from voice_agent.summarizers.extractive import ExtractiveSummarizer

TODAY = dt.date(2026, 11, 30)
LIMITS = {
    3: "I'm away until the 14th of December so nothing before then please",
    7: "and not on a Tuesday, I work Tuesdays",
    12: "I can't do the 18th either, I've got the dentist",
    20: "actually Tuesdays are fine now, my shifts changed",
    33: "oh and I'm not around after the 22nd, we go to my sister's",
    41: "sorry no, I meant I'm away until the 15th, not the 14th",
}


def caller_words(n: int) -> str:
    return LIMITS.get(n, f"yes so about the charge of {n} pounds last month, can you check that one please")


def agent_words(n: int) -> str:
    return "When can we call you back?" if n % 9 == 0 else f"Let me look at item {n} for you, one moment."


class CountingLane(TranscriptLane):
    """A transcript lane that counts the entries it hands out to readers."""

    handed_out = 0

    def since(self, index: int) -> list[TranscriptEntry]:
        out = super().since(index)
        self.handed_out += len(out)
        return out

    def in_turns(self, first: int, last: int) -> list[TranscriptEntry]:
        out = super().in_turns(first, last)
        self.handed_out += len(out)
        return out

    @property
    def entries(self) -> tuple[TranscriptEntry, ...]:
        out = super().entries
        self.handed_out += len(out)
        return out

    def caller_utterances(self) -> list[TranscriptEntry]:
        out = super().caller_utterances()
        self.handed_out += len(out)
        return out


def new_session(lane: TranscriptLane | None = None) -> CallSession:
    session = CallSession(billing_domain(), SessionConfig(reference_date=TODAY), ExtractiveSummarizer())
    if lane is not None:
        session.state.transcript = lane
    return session


async def play_turn(session: CallSession, n: int) -> None:
    await session.begin_turn(caller_words(n))
    if n in (3, 41):  # the model records the limit in the caller's words: the slot then carries it
        await session.execute_tool("update_case", f"case{n}", {"timing_constraint": caller_words(n)})
    session.assemble()
    session.record_agent(agent_words(n))


def from_scratch(session: CallSession) -> Any:
    """The same lanes built by a new policy with a new date guard: nothing cached."""
    policy = LanesPolicy(session.assembler_config, ExtractiveSummarizer(), DateGuard(TODAY))
    return policy.build(session.state, session.retrieved)


def test_incremental_context_equals_a_build_from_scratch_over_a_long_call() -> None:
    async def run() -> None:
        session = new_session()
        for n in range(1, 241):
            await play_turn(session, n)
            if n in (2, 3, 8, 20, 21, 40, 41, 42, 97, 150, 240):
                live = session.assemble()
                fresh = from_scratch(session)
                assert live.messages == fresh.messages, n
                assert live.lane_tokens == fresh.lane_tokens, n
        assert len(session.summary_passes) >= 40  # summary passes ran all along
        facts = session.assemble().messages[1]["content"]
        assert '"sorry no, I meant I\'m away until the 15th, not the 14th"' in facts  # the correction, in its slot
        assert '(turn 33): "oh and I\'m not around after the 22nd' in facts  # a limit from the middle of the call

    asyncio.run(run())


def test_a_turn_reads_only_what_was_appended_whatever_the_call_length() -> None:
    async def cost_of_one_turn_at(turns: int) -> int:
        lane = CountingLane()
        session = new_session(lane)
        for n in range(1, turns):
            await play_turn(session, n)
        before = lane.handed_out
        await play_turn(session, turns)
        return lane.handed_out - before

    short, long = asyncio.run(cost_of_one_turn_at(30)), asyncio.run(cost_of_one_turn_at(300))
    # The window (K + S turns) and the new entries, never the whole lane: a full re-read hands out 600+ here.
    assert long == short and long < 60, (short, long)


def test_a_replaced_or_copied_lane_is_read_again_not_served_stale() -> None:
    async def run() -> None:
        session = new_session()
        for n in range(1, 25):
            await play_turn(session, n)
        guard = session.date_guard
        before = guard.constraints(session.state.transcript)
        # A call store reloading the lane gives a new lane object: the guard must read it from the start.
        other = TranscriptLane()
        other.append_caller(1, "not on a Tuesday please")
        assert [c.text for _, c in guard.constraints(other)] == ["not on a Tuesday please"]
        assert guard.constraints(session.state.transcript) == before
        # A deep copy of the call (forking it) keeps its own cache in step with its own lane.
        fork = copy.deepcopy(session, {id(session.domain): session.domain})
        await play_turn(fork, 25)
        assert fork.assemble().messages == from_scratch(fork).messages
        assert len(session.state.transcript) < len(fork.state.transcript)
        assert session.assemble().messages == from_scratch(session).messages

    asyncio.run(run())
