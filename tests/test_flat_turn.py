"""The context stage of a live lanes turn is incremental: equal to a build from scratch, and only new entries read.

The caller-constraint lines used to re-read every utterance of the call on every inference. The date guard now
keeps what it read (a derived cache, rebuilt whenever it does not match the lane), so these tests check the two
things that can go wrong: a context that differs from a from-scratch build (a stale or wrong cache), and a turn
that still reads the whole lane (the cost grows with the call).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import random
import re
from typing import Any

import pytest
from pipecat.frames.frames import LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext

from processors.context_assembly import ContextAssembly
from tests.lanes_content import assert_same_content
from voice_agent.call.session import CallSession
from voice_agent.core.caller_history import CallerHistoryReader, caller_texts
from voice_agent.core.casefree import CaseFree
from voice_agent.core.guards.date_guard import DateGuard
from voice_agent.core.transcript import TranscriptEntry, TranscriptLane
from voice_agent.domains.billing import billing_domain
from voice_agent.policies.lanes import LanesPolicy
from voice_agent.settings import CallConfig, Settings
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
    session = CallSession(billing_domain(), Settings(call=CallConfig(reference_date=TODAY)), ExtractiveSummarizer())
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
                assert_same_content(live.messages, fresh.messages)
                assert {k: v for k, v in live.lane_tokens.items() if k != "known_facts"} == {
                    k: v for k, v in fresh.lane_tokens.items() if k != "known_facts"}, n
        assert len(session.summary_passes) >= 40  # summary passes ran all along
        facts = "\n".join(str(m["content"]) for m in session.assemble().messages
                          if str(m.get("content")).startswith("KNOWN FACTS"))
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
        assert_same_content(fork.assemble().messages, from_scratch(fork).messages)
        assert len(session.state.transcript) < len(fork.state.transcript)
        assert_same_content(session.assemble().messages, from_scratch(session).messages)

    asyncio.run(run())


# -- the pipeline's context stage: the caller messages of pipecat's history, read incrementally -----------------------


def test_the_caller_history_reader_equals_a_full_scan_through_appends_rewrites_and_replacements() -> None:
    messages: list[Any] = [{"role": "system", "content": "s"}]
    reader = CallerHistoryReader()

    def check() -> None:
        assert reader.read(messages) == caller_texts(messages)

    for n in range(1, 40):
        messages.append({"role": "user", "content": f"caller {n}"})
        check()
        messages.append({"role": "assistant", "content": f"agent {n}"})
        if n % 7 == 0:  # multi-part content, and a tool exchange
            messages.append({"role": "user", "content": [{"type": "text", "text": f"part {n}"}, {"type": "image"}]})
            messages += [{"role": "assistant", "tool_calls": [{}]}, {"role": "tool", "content": "{}"}]
        check()
    # pipecat's set_messages rewrites the list in place: shorter (a summary folded the old messages) ...
    messages[:] = [messages[0], {"role": "user", "content": "summary of earlier turns"}, *messages[-4:]]
    check()
    messages.append({"role": "user", "content": "after the summary"})
    check()
    # ... or as long as before but with other messages in it, the last one read no longer in its place.
    length = len(messages)
    messages[:] = [{"role": "user", "content": f"rewritten {i}"} for i in range(length + 2)]
    check()
    # A message taken out before the last one read, then two more appended: the list is longer, but shifted.
    del messages[3]
    messages += [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    check()
    # Another history object altogether (a new LLMContext).
    other = [{"role": "user", "content": "another call"}]
    assert reader.read(other) == ["another call"]
    messages.append({"role": "user", "content": "back"})
    check()


def test_the_pipeline_context_stage_equals_a_build_from_scratch_over_a_long_call() -> None:
    """``ContextAssembly._assemble`` on pipecat's growing history: turns open once each, lanes as from scratch."""

    async def run() -> None:
        session = new_session()
        stage = ContextAssembly(session)
        history = LLMContext()
        for n in range(1, 121):
            history.add_message({"role": "user", "content": caller_words(n)})
            frame = await stage._assemble(LLMContextFrame(context=history))
            assert session.turn == n
            if n in (3, 41):
                arguments = {"timing_constraint": caller_words(n)}
                await session.execute_tool("update_case", f"case{n}", arguments)
                history.add_messages([
                    {"role": "assistant", "tool_calls": [{"id": f"case{n}", "type": "function",
                                                          "function": {"name": "update_case", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": f"case{n}", "content": "{}"},
                ])
                frame = await stage._assemble(LLMContextFrame(context=history))  # the re-run: no new turn
                assert session.turn == n
            if n in (3, 8, 41, 42, 97, 120):
                assert_same_content(frame.context.get_messages(), from_scratch(session).messages[1:])
            session.record_agent(agent_words(n))
            history.add_message({"role": "assistant", "content": agent_words(n)})
        # pipecat rewrites its history (fewer caller messages than turns): no turn opens until a new one comes.
        history.set_messages(history.get_messages()[-6:])
        await stage._assemble(LLMContextFrame(context=history))
        assert session.turn == 120

    asyncio.run(run())


def test_the_agent_reply_is_read_when_recorded_and_the_context_is_unchanged() -> None:
    async def run() -> None:
        session = new_session()
        for n in range(1, 30):
            await play_turn(session, n)
        read = session.date_guard._lane_read
        # The reply just recorded is already read: the caller's next words find only themselves to read.
        assert read.length == len(session.state.transcript)
        assert_same_content(session.assemble().messages, from_scratch(session).messages)

    asyncio.run(run())


# -- the summary pass and the caller's identifiers: the faster paths give the same answers -------------------------


def test_case_free_patterns_match_as_the_case_blind_ones_on_ascii_and_unicode() -> None:
    from voice_agent.core.dates import extract, spoken
    from voice_agent.summarizers import sections

    patterns = [sections._NEGATION, sections._REQUEST, sections._DONE, sections._PROMISE, extract._HINT,
                spoken._ID_AFTER_CUE]
    texts = [
        "I'LL CALL YOU BACK", "Could You check", "NOT on Tuesday", "It Has Been Done", "nothing here", "Nobody knows",
        "I Won't", "İ'll be there on the 14TH", "DON'T", "Please, Café?", "ſo I will", "notable", "We Have It", "KNOT",
        "i would prefer Monday", "", "Account Number is 4729 18", "ACCOUNT İS 4729", "card ending 1214 and ORDER 77",
        "THURSDAY week", "the 3rd of DECEMBER", "ﬁrst of all", "Invoice no. 12 34", "SEPT", "Kelvin K day",
    ]
    for pattern in patterns:
        blind = re.compile(pattern.pattern, re.I)
        for text in texts:
            assert pattern.found(text) == bool(blind.search(text)), (pattern.pattern[:30], text)
            assert pattern.spans(text) == [m.span() for m in blind.finditer(text)], (pattern.pattern[:30], text)
    for text in texts:
        assert spoken._ID_AFTER_CUE.spans(text, 1) == [
            m.span(1) for m in re.compile(spoken._ID_AFTER_CUE.pattern, re.I).finditer(text)
        ], text
    with pytest.raises(ValueError):
        CaseFree(r"\bNot\b")


def test_spoken_identifiers_found_with_shared_readings_equal_the_word_by_word_search() -> None:
    from voice_agent.core import spoken_ids as ids

    shapes = ids.id_shapes(billing_domain().id_shapes)
    prefixes = frozenset(s.prefix for s in shapes if s.prefix)

    def reference(text: str) -> str:
        """The search before readings were shared: every shape tried at every word, readings worked out anew."""
        spans = [(m.start(), m.end(), m.group(0)) for m in ids._TOKEN.finditer(text)]
        tokens = [s[2] for s in spans]
        pieces, cursor, index = [], 0, 0
        while index < len(tokens):
            found = None
            for shape in shapes:
                match = ids._match_at(tokens, index, shape, prefixes)
                if match is not None and (found is None or match[1] > found[1]):
                    found = (match[0], match[1], shape)
            if found is None:
                index += 1
                continue
            pieces += [text[cursor: spans[index][0]], found[2].render(found[0])]
            cursor, index = spans[found[1] - 1][1], found[1]
        pieces.append(text[cursor:])
        return "".join(pieces)

    words = ("a", "c", "c", "acc", "inv", "i", "n", "v", "four", "seven", "two", "nine", "oh", "one", "eight",
             "double", "triple", "dash", "twenty", "six", "zero", "the", "charge", "is", "account", "ORD", "k", "7")
    rng = random.Random(15)
    texts = ["my account is a c c four seven two nine one eight", "invoice I N V twenty twenty six dash one one"]
    texts += [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 25))) for _ in range(400)]
    for text in texts:
        assert ids.normalize_spoken_ids(text, shapes) == reference(text), text


def test_the_summary_budget_drops_the_same_lines_as_rendering_after_every_drop() -> None:
    from voice_agent.core.assembler import _budgeted_summary
    from voice_agent.core.summary import Commitment, EpisodeSummary, RejectedItem
    from voice_agent.core.summary_budget import KEPT_WHOLE, LineStanding, classify_line
    from voice_agent.core.tokens import estimate_message_tokens

    def reference(summary: EpisodeSummary, max_tokens: int, standings: list[list[LineStanding]],
                  ceiling: int | None) -> tuple[str, int]:
        """The budget rendered again after each line dropped, lines dropped in the order of their keys: the
        caller's lines only past the ceiling."""
        sections = [(title, list(enumerate(lines))) for title, lines in summary.render_sections()]
        order = sorted((standings[s][i].eviction_key(), s, i) for s, (_, lines) in enumerate(sections)
                       for i, _ in lines if standings[s][i].line_class not in KEPT_WHOLE)
        last = sorted((standings[s][i].eviction_key(), s, i) for s, (_, lines) in enumerate(sections)
                      for i, _ in lines if standings[s][i].line_class in KEPT_WHOLE)
        dropped = 0

        def render() -> str:
            return "\n".join(f"{t}:\n" + "\n".join(f"- {line}" for _, line in lines) for t, lines in sections
                             if lines)

        text = render()
        for limit, candidates in ((max_tokens, order), (ceiling, last)):
            if limit is None:
                continue
            for _, s, i in candidates:
                if estimate_message_tokens(text) <= limit:
                    break
                sections[s] = (sections[s][0], [(j, line) for j, line in sections[s][1] if j != i])
                dropped += 1
                text = render()
        return text, dropped

    rng = random.Random(3)

    def line() -> str:
        words = " ".join(rng.choice(("the", "caller", "said", "INV-2026-0001", "ruled out", "Tuesday", "é", "\n",
                                     "refund", "website"))
                         for _ in range(rng.randrange(0, 30)))
        return rng.choice(("", f"turn {rng.randrange(1, 40)}: caller said: ")) + words + rng.choice(("", "?", "."))

    for _ in range(300):
        summary = EpisodeSummary(
            established=[line() for _ in range(rng.randrange(0, 14))],
            rejected=[RejectedItem(item=line(), reason=line()) for _ in range(rng.randrange(0, 5))],
            decided=[line() for _ in range(rng.randrange(0, 6))],
            pending=[line() for _ in range(rng.randrange(0, 6))],
            commitments=[Commitment(text=line(), turn=rng.randrange(1, 99)) for _ in range(rng.randrange(0, 6))],
        )
        turns = [[rng.randrange(0, 40) for _ in lines] for _, lines in summary.render_sections()]
        standings = [[LineStanding(classify_line(title, x), t, t + rng.choice((0, 0, rng.randrange(1, 20))))
                      for x, t in zip(lines, ts, strict=True)]
                     for (title, lines), ts in zip(summary.render_sections(), turns, strict=True)]
        budget = rng.choice((1, 5, 40, 120, 400, 5000))
        ceiling = rng.choice((None, budget, 2 * budget))
        assert _budgeted_summary(summary, budget, standings, ceiling) == reference(summary, budget, standings,
                                                                                   ceiling)


def test_the_caller_limits_kept_by_the_policy_follow_the_guard_when_it_reads_another_lane() -> None:
    async def run() -> None:
        session = new_session()
        for n in range(1, 36):
            await play_turn(session, n)
        policy = session.policy
        assert isinstance(policy, LanesPolicy)

        def fresh_lines(state: Any) -> list[str]:
            return LanesPolicy(session.assembler_config, ExtractiveSummarizer(), DateGuard(TODAY)) \
                .caller_constraint_lines(state)

        before = policy.caller_constraint_lines(session.state)
        assert before == fresh_lines(session.state) and len(before) >= 3
        # The same guard and policy asked about another call's lane: its limits only, not this call's.
        other = new_session()
        await play_turn(other, 1)
        await other.begin_turn("and I can't do Fridays at all")
        assert policy.caller_constraint_lines(other.state) == fresh_lines(other.state)
        assert policy.caller_constraint_lines(other.state) != before
        # Back to this call, which goes on: read again from the start, then kept up with.
        assert policy.caller_constraint_lines(session.state) == before
        await session.begin_turn("oh and not the 19th please")
        assert policy.caller_constraint_lines(session.state) == fresh_lines(session.state) != before

    asyncio.run(run())


def test_date_finders_skipped_for_want_of_a_month_weekday_or_week_change_no_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from voice_agent.core.dates import extract
    from voice_agent.harness.evaluation.date_eval import load_sentences

    texts = [item.text for item in load_sentences()]
    texts += [
        "I can't do the weekends", "not Tuesdays or thursdays", "the week of the 3rd of Dec", "a weak on Friday",
        "dec's fine, the 4th", "wednesday, the 9th", "may I ask about the 14th", "mid-january 2027 then",
        "next weekend", "a week tomorrow", "the 3rd to the 9th of march", "until fri the 12th",
    ]
    gated = [extract._extract.__wrapped__(t, TODAY) for t in texts]
    monkeypatch.setattr(extract, "_NEEDS", {})  # every finder run over every text, as before the gates
    assert [extract._extract.__wrapped__(t, TODAY) for t in texts] == gated
    assert sum(1 for g in gated if g) > 200  # the texts name dates: the comparison compares something
