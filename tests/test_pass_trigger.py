"""The pass triggers: reference (what recent turns still refer to), pipecat's threshold, the cadence."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import pytest

from voice_agent.core.call_state import CallState
from voice_agent.core.pass_trigger import (
    PIPECAT_MAX_UNSUMMARIZED_MESSAGES,
    PIPECAT_MIN_MESSAGES_AFTER_SUMMARY,
    PassTrigger,
    ShownSizes,
)
from voice_agent.core.passes import PassScheduler
from voice_agent.core.policy import ContextPolicy, PolicyError, Trigger
from voice_agent.core.summary import EpisodeSummary, SummaryRequest
from voice_agent.settings import Settings, SettingsError, with_overrides

FILLER = [
    ("Quick question about the mobile app: how does that work?", "That's set up online in a few minutes."),
    ("Does roaming abroad come with every plan?", "It's included on most plans at no extra cost."),
    ("Is the loyalty scheme changing next year?", "Nothing changes there next year."),
    ("What does the streaming add-on cost per month?", "You can switch that on or off whenever you like."),
    ("And voicemail, is that something I manage online?", "That's set up online in a few minutes."),
    ("Is the welcome pack posted out?", "It's included on most plans at no extra cost."),
    ("Does the eSIM need a new card?", "Nothing changes there next year."),
    ("How do parental controls get switched on?", "You can switch that on or off whenever you like."),
]

UNRELATED = [(f"What about the {w}?", f"The {w} is fine.")
             for w in ("kettle", "bicycle", "garden", "piano", "lantern", "meadow", "harbour", "violin")]


def reference_state(**policy: int) -> CallState:
    return CallState(reference_date=dt.date(2026, 11, 30),
                     policy=ContextPolicy(trigger=Trigger.REFERENCE, **policy))


def play(
    state: CallState, lines: list[tuple[str, str]], trigger: PassTrigger
) -> list[tuple[int, tuple[int, ...]]]:
    """Plays caller/agent pairs, scheduling at each turn start; returns (turn, turns folded) per pass."""
    passes = []
    for caller, agent in lines:
        state.start_turn(caller)
        scheduled = trigger.schedule(state)
        if scheduled is not None:
            passes.append((scheduled.turn, tuple(t for t in range(1, state.turn) if scheduled.folds(t))))
        state.record_agent(agent)
    return passes


def test_a_turn_still_referred_to_stays_raw_past_k_and_the_rest_is_folded_early() -> None:
    state = reference_state(keep=4, floor=2, batch=2)
    trigger = PassTrigger()
    lines = [("My router is the ZX-4410 model and its lights keep blinking.", "Let's look at that.")]
    lines += FILLER[:6]
    lines += [("Back to the ZX-4410: the lights are still blinking.", "Understood.")]
    lines += FILLER[6:]
    passes = play(state, lines, trigger)
    folded = {t for _, ts in passes for t in ts}
    # Turn 1 is referred to by turn 8 and says a value no lane holds: never summarized, though far past K=4.
    assert 1 not in folded and 1 in state.tracker.held
    assert 1 in {e.turn for e in state.raw_entries()}
    # The side questions nothing refers to were folded, some inside K (the call had moved on).
    assert {2, 3, 4}.issubset(folded)
    first_pass_turn, first_folds = passes[0]
    assert max(first_folds) > first_pass_turn - state.policy.keep
    # The floor is never summarized.
    for turn, ts in passes:
        assert all(t < turn - state.policy.floor for t in ts)
    explained = trigger.decisions[0]
    assert any("refers to it" in why for _, why in explained.folded)


def test_a_pass_waits_for_batch_unreferenced_turns() -> None:
    state = reference_state(keep=6, floor=2, batch=3)
    passes = play(state, UNRELATED, PassTrigger())
    assert passes, "eight unrelated turns must run a pass"
    assert all(len(ts) >= 3 for _, ts in passes)
    assert passes[0][0] > 3 + state.policy.floor  # not before three turns are waiting past the floor


def test_at_most_k_turns_are_held() -> None:
    state = reference_state(keep=3, floor=1, batch=1)
    lines = [(f"Order ORD-00{n}1X{n} please.", "Noted.") for n in range(10)]
    play(state, lines, PassTrigger(lanes_shown=False))
    assert len(state.tracker.held) <= 3


def test_tracker_state_is_plain_data() -> None:
    state = reference_state(keep=4, floor=2, batch=2)
    play(state, UNRELATED, PassTrigger())
    fields = {f.name: getattr(state.tracker, f.name) for f in dataclasses.fields(state.tracker) if f.name != "policy"}
    assert set(fields) == {"summarized_through", "held"}
    assert isinstance(fields["summarized_through"], int)
    assert isinstance(fields["held"], tuple) and all(isinstance(t, int) for t in fields["held"])


def test_an_agent_commitment_keeps_its_turn_until_a_tool_carries_it_out() -> None:
    state = reference_state(keep=3, floor=1, batch=1)
    trigger = PassTrigger()
    play(state, [("I'd like the charge looked at later.", "I'll look it up when we get to the charge.")], trigger)
    play(state, FILLER[:5], trigger)
    assert 1 in state.tracker.held
    state.start_turn("Go ahead now.")
    state.transcript.append_tool_call(state.turn, "lookup_account", "c1", {})
    state.transcript.append_tool_result(state.turn, "lookup_account", "c1", {"status": "ok"}, _completed())
    state.record_agent("Done.")
    play(state, FILLER[5:], trigger)
    assert 1 not in state.tracker.held


def _completed():
    from voice_agent.core.transcript import ToolOutcome

    return ToolOutcome.COMPLETED


def test_threshold_trigger_follows_pipecats_defaults() -> None:
    state = CallState(policy=ContextPolicy(trigger=Trigger.THRESHOLD))
    trigger = PassTrigger()
    fired = None
    for n in range(1, 30):
        state.start_turn(f"question {n}")
        scheduled = trigger.schedule(state)
        if scheduled is not None:
            fired = (n, scheduled)
            break
        state.record_agent(f"answer {n}")
    assert fired is not None
    turn, scheduled = fired
    # 2 messages per turn: the 20th unsummarized message is the caller's on turn 10.
    assert 2 * turn - 1 >= PIPECAT_MAX_UNSUMMARIZED_MESSAGES > 2 * (turn - 1) - 1
    kept = state.transcript.in_turns(scheduled.last + 1, turn)
    assert len(kept) >= PIPECAT_MIN_MESSAGES_AFTER_SUMMARY
    assert scheduled.first == 1


def test_pass_scheduler_folds_only_the_turns_a_reference_pass_names() -> None:
    seen: list[set[int]] = []

    class Recording:
        async def summarize(self, request: SummaryRequest) -> EpisodeSummary:
            seen.append({e.turn for e in request.turns})
            return EpisodeSummary()

    state = reference_state(keep=4, floor=2, batch=2)
    pass_scheduler = PassScheduler(Recording())
    lines = [("My router is the ZX-4410 model.", "Right."), *UNRELATED[:6], ("The ZX-4410 again.", "Yes.")]
    for caller, agent in lines:
        state.start_turn(caller)
        asyncio.run(pass_scheduler.on_turn_start(state))
        state.record_agent(agent)
    assert seen and all(1 not in turns for turns in seen)
    assert set().union(*seen) >= {2, 3, 4}


def test_bad_trigger_names_are_refused() -> None:
    with pytest.raises(PolicyError, match="trigger"):
        ContextPolicy(trigger="sometimes")  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match="floor"):
        ContextPolicy(trigger=Trigger.REFERENCE, floor=0)
    with pytest.raises(SettingsError):
        with_overrides(Settings(), policy={"trigger": "sometimes"})


def _long_unrelated(turns: int) -> list[tuple[str, str]]:
    words = ("kettle", "bicycle", "garden", "piano", "lantern", "meadow", "harbour", "violin", "teapot", "saddle")
    # No digits: a turn that states a number stays held, and this call is about passes, not holds.
    return [(f"What about the {words[n % 10]}, is it working as it should be today?",
             f"The {words[n % 10]} is fine and working as it should.") for n in range(turns)]


def test_a_cache_price_makes_passes_fewer_and_larger_the_cheaper_the_cache() -> None:
    counts = {}
    for price in (None, 0.5, 0.1):
        state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(
            trigger=Trigger.REFERENCE, keep=4, floor=2, batch=1, cache_price=price))
        passes = play(state, _long_unrelated(80), PassTrigger())
        counts[price] = len(passes)
        assert passes, price
    assert counts[None] > counts[0.5] > counts[0.1]


def test_a_cache_priced_pass_folds_more_turns_and_keeps_the_floor() -> None:
    sizes = {}
    for price in (None, 0.1):
        state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(
            trigger=Trigger.REFERENCE, keep=4, floor=2, batch=1, cache_price=price))
        passes = play(state, _long_unrelated(60), PassTrigger())
        sizes[price] = sum(len(ts) for _, ts in passes) / len(passes)
        assert all(t < turn - 2 for turn, ts in passes for t in ts)
    assert sizes[0.1] >= 3 * sizes[None]


def test_a_priced_pass_is_reckoned_on_what_the_requests_show() -> None:
    """A summary that holds more than its lane shows makes a pass look dearer than it is; the knowledge pinned on
    the turns a pass takes out makes carrying them dearer. Told what the requests show, passes come sooner."""
    big = EpisodeSummary(established=[f"turn {n}: caller said: a long line about the kettle and the garden"
                                      for n in range(60)])

    def passes(shown: ShownSizes | None) -> int:
        state = CallState(reference_date=dt.date(2026, 11, 30), policy=ContextPolicy(
            trigger=Trigger.REFERENCE, keep=4, floor=2, batch=1, cache_price=0.25))
        state.summary = big
        trigger = PassTrigger()
        if shown is not None:
            trigger.shown = lambda s: dataclasses.replace(shown, knowledge={t: 80 for t in range(1, s.turn)}
                                                          if shown.knowledge else {})
        return len(play(state, _long_unrelated(80), trigger))

    whole = passes(None)
    as_shown = passes(ShownSizes(summary=100))
    with_knowledge = passes(ShownSizes(summary=100, knowledge={0: 1}))
    assert whole < as_shown < with_knowledge


def test_cache_price_must_be_a_share() -> None:
    with pytest.raises(PolicyError):
        ContextPolicy(cache_price=1.0)
    with pytest.raises(SettingsError):
        with_overrides(Settings(), policy={"cache_price": 0.0})
    with pytest.raises(SettingsError, match="reference"):  # the cadence has nothing to price
        with_overrides(Settings(), policy={"cache_price": 0.25})
    with pytest.raises(PolicyError):
        ContextPolicy(cache_price=0.25)
    assert with_overrides(Settings(), policy={"trigger": "reference", "cache_price": 0.25}).policy.cache_price == 0.25
