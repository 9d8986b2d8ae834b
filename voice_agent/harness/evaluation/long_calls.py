"""Long synthetic calls (100+ turns) that switch topics and come back, built from a scripted scenario.

A scenario's opening, up to the last exchange in which the caller states one of its facts, is kept as is;
then come blocks of side questions on other topics (the mobile app, roaming, the router...), each topic
visited two or three times with others in between; then the scenario's own ending, where the facts are
needed. Facts needed late were stated early, by construction, and every utterance index (facts, mentions,
actions) after the insertion is shifted, so the recorder measures them where they now are.

The side questions avoid every word the billing agent acts on (credit, dispute, invoice, call back...),
so they change nothing in the call but its length and its topics. Generated here, apart from the trigger
(:mod:`voice_agent.core.pass_trigger`), from a seed.
"""

from __future__ import annotations

import random

from voice_agent.harness.scenarios import Scenario

TOPICS = (
    "the mobile app", "paperless letters", "the router lights", "roaming abroad", "the loyalty scheme",
    "the data allowance", "engineer visits", "parental controls", "the family plan", "voicemail",
    "the price freeze", "the eSIM", "the landline number", "the streaming add-on", "the welcome pack",
)
"""Side topics; each is visited more than once in a long call (the call comes back to it)."""

QUESTIONS = (
    "Quick question about {topic}: how does that work?",
    "With {topic}, is there anything I need to set up myself?",
    "Does {topic} come with every plan?",
    "Is {topic} changing next year at all?",
    "What does {topic} cost per month?",
    "Going back to {topic}, how long does that take to sort out?",
    "And one more on {topic}: can I switch it off later?",
    "Is {topic} something I manage online?",
)
ANSWERS = (
    "That's set up online in a few minutes.",
    "It's included on most plans at no extra cost.",
    "Nothing changes there next year.",
    "You can switch that on or off whenever you like.",
)

MIN_EXCHANGES = 100


def _insertion_point(scenario: Scenario) -> int:
    """The utterance index just after the exchange of the last fact the caller states (a caller turn)."""
    last = max((max(f.stated_turn, *f.caller_mention_turns) for f in scenario.facts), default=0)
    # Needed facts must come after the side questions: stop before the first one needed.
    needed = [f.needed_turn for f in scenario.facts if f.needed_turn is not None]
    first_need = min(needed) if needed else len(scenario.turns)
    point = (last // 2 + 1) * 2
    return min(point, max(0, (first_need // 2) * 2))


def long_call(scenario: Scenario, seed: int, exchanges: int = 110) -> Scenario:
    """``scenario`` stretched to ``exchanges`` exchanges with side-topic blocks after its facts are stated.

    Args:
        scenario: A scripted scenario (caller and agent alternating, caller first).
        seed: Picks the topics, their order and the wording.
        exchanges: Exchanges in the long call (at least the scenario's own, and at least 100).

    Returns:
        A new scenario, id ``<id>~long<seed>``.
    """
    rng = random.Random(seed)
    point = _insertion_point(scenario)
    inserted = max(MIN_EXCHANGES, exchanges) - scenario.exchanges
    if inserted <= 0:
        return scenario
    topics = rng.sample(TOPICS, k=min(len(TOPICS), max(3, inserted // 12)))
    filler: list[dict[str, str]] = []
    while len(filler) < inserted:
        topic = rng.choice(topics)  # topics come back: each is drawn again and again
        for _ in range(rng.randint(2, 5)):
            if len(filler) == inserted:
                break
            filler.append({"caller": rng.choice(QUESTIONS).format(topic=topic), "agent": rng.choice(ANSWERS)})
    shift = 2 * len(filler)

    def moved(index: int) -> int:
        return index + shift if index >= point else index

    turns = [t.model_dump() for t in scenario.turns]
    side = [u for pair in filler for u in ({"speaker": "caller", "text": pair["caller"]},
                                           {"speaker": "agent", "text": pair["agent"]})]
    facts = []
    for fact in scenario.facts:
        data = fact.model_dump()
        data["stated_turn"] = moved(fact.stated_turn)
        data["needed_turn"] = moved(fact.needed_turn) if fact.needed_turn is not None else None
        data["caller_mention_turns"] = [moved(t) for t in fact.caller_mention_turns]
        facts.append(data)
    actions = [{**a.model_dump(), "turn": moved(a.turn)} for a in scenario.actions]
    return Scenario.model_validate({
        **scenario.model_dump(),
        "id": f"{scenario.id}~long{seed}",
        "description": f"{scenario.id} with {len(filler)} side-topic exchanges after its facts (seed {seed})",
        "turns": turns[:point] + side + turns[point:],
        "facts": facts,
        "actions": actions,
    })
