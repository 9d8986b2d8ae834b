"""The spoken-identifier normaliser: spelled-out ids become canonical, ordinary speech is untouched."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import InterimTranscriptionFrame, TranscriptionFrame

from processors.spoken_ids import SpokenIdNormalizer
from tests.fakes.pipecat_run import run_test
from voice_agent.core.spoken_ids import (
    IdShape,
    example_of,
    find_identifiers,
    id_shapes,
    normalize_spoken_ids,
    recognizer_prompt,
)

BILLING = id_shapes(["ACC-####-##", "INV-####-####", "ORD-XXXXXX"])


@pytest.mark.parametrize(
    ("heard", "expected"),
    [
        ("my account number is a c c four seven two nine one eight", "my account number is ACC-4729-18"),
        ("My count number is a CC 4 729 1 8", "My count number is ACC-4729-18"),
        ("it is ACC 472918 thanks", "it is ACC-4729-18 thanks"),
        ("A-C-C-4-729-18.", "ACC-4729-18."),
        ("a c c forty seven twenty nine eighteen", "ACC-4729-18"),
        ("ay see see four seven two nine one eight", "ACC-4729-18"),
        ("a c c dash four seven two nine dash one eight", "ACC-4729-18"),
        ("a c c double four seven two nine one eight", "ACC-4472-91 eight"),
        ("invoice i n v two oh two six one oh one eight", "invoice INV-2026-1018"),
        ("order o r d seven k four m two p", "order ORD-7K4M2P"),
        ("ACC-4729-18 is already canonical", "ACC-4729-18 is already canonical"),
    ],
)
def test_spelled_identifiers_become_canonical(heard: str, expected: str) -> None:
    assert normalize_spoken_ids(heard, BILLING) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I want four of them for two days",
        "It's the October one that's wrong",
        "a c c four seven two",  # too short for any shape
        "b c c four seven two nine one eight",  # wrong literal prefix
        "ay see see for seventy nine eighteen",  # five digits: 4, 79, 18
        "",
    ],
)
def test_ordinary_speech_is_untouched(text: str) -> None:
    assert normalize_spoken_ids(text, BILLING) == text


def test_shapes_are_generic_and_validated() -> None:
    shape = IdShape("XFR/@@##")
    assert shape.prefix == "XFR"
    assert normalize_spoken_ids("x f r k q one two", [shape]) == "XFR/KQ12"
    with pytest.raises(ValueError):
        IdShape("ACC")
    with pytest.raises(ValueError):
        IdShape("AC%-##")


def test_recognizer_prompt_never_contains_a_real_looking_caller_id() -> None:
    examples = [example_of(s) for s in BILLING]
    assert examples == ["ACC-3158-06", "INV-3158-0629", "ORD-7K4M2P"]
    prompt = recognizer_prompt(BILLING, "A billing call.")
    assert prompt is not None and prompt.startswith("A billing call. Reference numbers are written like ACC-3158-06")
    assert recognizer_prompt([], None) is None


async def test_processor_rewrites_final_and_interim_transcripts() -> None:
    normalizer = SpokenIdNormalizer(["ACC-####-##"])
    frames = [
        InterimTranscriptionFrame("a c c four seven", "caller", "t"),
        TranscriptionFrame("account a c c four seven two nine one eight please", "caller", "t"),
    ]
    down, _ = await run_test(
        normalizer, frames_to_send=frames, expected_down_frames=[InterimTranscriptionFrame, TranscriptionFrame]
    )
    interim, final = down
    assert isinstance(interim, InterimTranscriptionFrame) and interim.text == "a c c four seven"
    assert isinstance(final, TranscriptionFrame) and final.text == "account ACC-4729-18 please"
    assert normalizer.rewrites == 1


@pytest.mark.parametrize(
    ("said", "found"),
    [
        ("Here it is: ACC-4729-18.", ["ACC-4729-18"]),
        ("it's acc 4729 18", ["ACC-4729-18"]),
        ("a c c four seven two nine one eight", ["ACC-4729-18"]),
        ("orders ord-7k4m2p and ORD 9TQ2XB", ["ORD-7K4M2P", "ORD-9TQ2XB"]),
        ("ORD7K4M2P and ACC472918", ["ORD-7K4M2P", "ACC-4729-18"]),
        ("flat 47, 2918 Main Street", []),
        ("my ordinary orders are fine", []),
        ("the invoice for 2026 was 1018 pounds", []),
    ],
)
def test_find_identifiers_in_what_the_caller_said(said: str, found: list[str]) -> None:
    assert [value for value, _ in find_identifiers(said, BILLING)] == found
