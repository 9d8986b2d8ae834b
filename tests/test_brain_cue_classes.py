"""The offline agent's cue rules, widened by class, checked on wordings the rules were not written from.

The HELD_OUT lists below were written before the rules were widened and were not looked at while writing
them (the rules were written from the classes: tense and aspect of an attempt, a wish said with a modal or a
preference, a dispute verb in any inflection, a bare approving word as a yes; and from the fitted and blind/dev
paraphrase sets). Each list also holds wordings of the same surface that must not fire.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_billing_brain import facts, respond, system, user
from voice_agent.core.guards.date_guard import is_affirmation

HELD_OUT_ATTEMPTS = [
    "I did ring the helpline about it last week.",
    "I've had a go at sorting it online already.",
    "We went to the shop with it on Saturday and they sent us here.",
    "I had already emailed your team twice before today.",
    "my husband phoned you lot on monday about this",
    "I was on the live chat for an hour yesterday and got nowhere.",
    "I've been onto the bank and they said it's your end.",
    "tried the website first it just errored",
]
NOT_ATTEMPTS = [
    "I'll try the app later.",
    "Can I try paying by card?",
    "What's the best way to contact you?",
    "How do I switch paperless billing on?",
]
HELD_OUT_WISHES = [
    "Honestly I'd sooner you just knocked it off the bill.",
    "I'd rather have it as credit on the account.",
    "Ideally the money goes back onto my account.",
    "I'm really just after a credit for it.",
    "Best thing would be to leave it as credit with you.",
    "can it just stay on my account as credit",
    "Put it towards next month's bill, please.",
]
NOT_WISHES = [
    "How long does a refund usually take?",
    "Do you offer paperless billing?",
    "Is there a discount if I pay for the year up front?",
]
HELD_OUT_DISPUTES = [
    "I'd like that charge disputed.",
    "That second payment needs contesting.",
    "I'm disputing the extra charge on the October invoice.",
    "i want the double charge challenged",
]
NOT_DISPUTES = [
    "How long does a dispute usually take to resolve?",
    "Was the dispute already resolved?",
]
HELD_OUT_YES = ["Good.", "Good, yes.", "Marvellous.", "That suits me.", "Suits me fine.", "Go for it.", "Very good."]
NOT_YES = ["No.", "Not that day.", "Hmm, I'm not sure.", "Good question, when else is there?", "Not good, no."]


def _note(text: str) -> dict[str, Any]:
    """The case note the agent writes for ``text`` (empty: none)."""
    reply = respond(system(), user(text))
    notes = [c.arguments for c in reply.tool_calls if c.name == "update_case"]
    return notes[0] if notes else {}


@pytest.mark.parametrize("text", HELD_OUT_ATTEMPTS)
def test_an_attempt_said_in_any_tense_is_noted_in_the_callers_words(text: str) -> None:
    note = _note(text)
    assert "already_attempted" in note, text
    assert note["already_attempted"] in text  # the quote guard's rule: the caller's own words


@pytest.mark.parametrize("text", NOT_ATTEMPTS)
def test_a_plan_or_question_is_not_an_attempt(text: str) -> None:
    assert "already_attempted" not in _note(text)


@pytest.mark.parametrize("text", HELD_OUT_WISHES)
def test_a_wish_said_with_a_preference_is_noted_in_the_callers_words(text: str) -> None:
    note = _note(text)
    assert "requested_resolution" in note, text
    assert note["requested_resolution"] in text


@pytest.mark.parametrize("text", NOT_WISHES)
def test_a_question_about_refunds_is_not_a_wish(text: str) -> None:
    assert "requested_resolution" not in _note(text)


def _disputes(text: str) -> bool:
    reply = respond(system(), facts("account: ACC-4729-18"), user(text))
    return any(c.name in ("open_dispute", "list_invoices") for c in reply.tool_calls)


@pytest.mark.parametrize("text", HELD_OUT_DISPUTES)
def test_a_dispute_verb_in_any_inflection_opens_a_dispute(text: str) -> None:
    assert _disputes(text), text


@pytest.mark.parametrize("text", NOT_DISPUTES)
def test_a_question_about_disputes_opens_none(text: str) -> None:
    assert not _disputes(text)


@pytest.mark.parametrize("text", HELD_OUT_YES)
def test_a_bare_approving_word_is_a_yes(text: str) -> None:
    assert is_affirmation(text), text


@pytest.mark.parametrize("text", NOT_YES)
def test_a_refusal_or_a_question_is_not_a_yes(text: str) -> None:
    assert not is_affirmation(text), text


# A limit said over two sentences, the second placing itself by the day the first named ("before then"): one fact.
TWO_SENTENCE_LIMITS = [
    ("I'm in hospital until the 9th. Please don't phone before then.", "Please don't phone before then"),
    ("Abroad till Friday. Nobody ring me until then, please.", "Nobody ring me until then, please"),
    ("We're at my sister's until the 21st. Nothing before that date.", "Nothing before that date"),
]
NOT_CONTINUATIONS = [
    ("I'm away until the 9th. Thanks for your help.", "Thanks"),
    ("Off till the 14th. Ring me on the 20th.", "Ring me on the 20th"),  # a day of its own: another statement
]


@pytest.mark.parametrize(("text", "second"), TWO_SENTENCE_LIMITS)
def test_a_limit_said_again_by_pointing_back_is_noted_whole(text: str, second: str) -> None:
    noted = _note(text).get("timing_constraint", "")
    assert second in noted and noted in text  # both sentences, still the caller's own words


@pytest.mark.parametrize(("text", "second"), NOT_CONTINUATIONS)
def test_a_sentence_that_does_not_point_back_is_not_joined(text: str, second: str) -> None:
    assert second not in _note(text).get("timing_constraint", "")


# A wish said without a verb: the form the money should take, or the charge with what should happen to it.
VERBLESS_WISHES = [
    "Refund as credit on the account.",
    "Twenty quid as an account credit, that's all.",
    "Late fee waived, and we're square.",
    "the double payment reversed and im happy",
]
NOT_VERBLESS_WISHES = [
    "The charge was removed last month, I checked.",
    "I had the fee waived once before.",
    "Is it paid back as credit or cash?",
    "Does the money come as a refund?",
]


@pytest.mark.parametrize("text", VERBLESS_WISHES)
def test_a_wish_said_without_a_verb_is_noted_in_the_callers_words(text: str) -> None:
    note = _note(text)
    assert "requested_resolution" in note, text
    assert note["requested_resolution"] in text


@pytest.mark.parametrize("text", NOT_VERBLESS_WISHES)
def test_what_happened_or_a_question_is_not_a_verbless_wish(text: str) -> None:
    assert "requested_resolution" not in _note(text)


# A wish put as a request to the agent ("could you ..."), or with the charge between a phrasal verb and its particle.
REQUESTED_WISHES = [
    "Would you waive that admin charge for me?",
    "Can you knock the delivery fee off?",
    "i want the overdue charge taking off my bill",
    "Will you just cancel the duplicate one, please?",
]
NOT_REQUESTED_WISHES = [
    "Could you tell me when my statement closes?",
    "Can you take a message for my husband?",
]


@pytest.mark.parametrize("text", REQUESTED_WISHES)
def test_a_wish_put_as_a_request_is_noted_in_the_callers_words(text: str) -> None:
    note = _note(text)
    assert "requested_resolution" in note, text
    assert note["requested_resolution"] in text


@pytest.mark.parametrize("text", NOT_REQUESTED_WISHES)
def test_a_request_for_something_else_is_not_a_wish(text: str) -> None:
    assert "requested_resolution" not in _note(text)
