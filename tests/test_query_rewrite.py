"""The query rewrite: split and misspelt words repaired against the knowledge base, caller vocabulary, numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import Stemmer

from voice_agent.retrieval.index import STOPWORDS, tokenize
from voice_agent.retrieval.knowledge import KNOWLEDGE_DIR
from voice_agent.retrieval.query_rewrite import (
    CALLER_TERMS_FILE,
    QueryRewriter,
    load_caller_terms,
    spoken_numbers_to_digits,
)

PASSAGES = [
    "Refunds: a refund to a debit card arrives within five working days. Paperless billing is free.",
    "Warranty: shop items carry a warranty of two years. Upgrade your plan at any time.",
    "Payment arrangements spread the overdue amount. The mesh extender pairs with the router.",
    "Cash is not accepted.",
]
STEM = Stemmer.Stemmer("english").stemWord


def rewriter(terms: dict[str, tuple[str, ...]] | None = None) -> QueryRewriter:
    return QueryRewriter(PASSAGES, STOPWORDS, STEM, terms)


def test_split_words_are_joined_only_into_knowledge_base_words() -> None:
    out = rewriter().rewrite("how long does a re fund take to my deb it card")
    assert out.text == "how long does a refund take to my debit card"
    assert out.repairs == (("re fund", "refund"), ("deb it", "debit"))
    assert rewriter().rewrite("can i up grade to paper less").text == "can i upgrade to paperless"
    # Two words the base uses on their own stay two words, and nothing is joined into a word it never uses.
    assert rewriter().rewrite("the debit card").repairs == ()
    assert rewriter().rewrite("a bout the box").repairs == ()


def test_misspellings_are_fixed_only_when_one_repair_is_clear() -> None:
    assert rewriter().rewrite("my direct debbit").text == "my direct debit"
    assert rewriter().rewrite("the warrenty").text == "the warranty"
    assert rewriter().rewrite("the mash extender").repairs == ()  # four letters: too many real words are near
    assert rewriter().rewrite("my dementia").repairs == ()  # no knowledge-base word one edit away
    assert rewriter().rewrite("i'm moving").repairs == ()


def test_caller_vocabulary_expands_only_words_the_base_does_not_use_itself() -> None:
    terms = {"guarantee": ("warranty",), "in bits": ("payment", "arrangements"), "refund": ("money",)}
    out = rewriter(terms).rewrite("is it under guarantee can i pay in bits")
    assert out.expansion == ("payment", "arrangements", "warranty")
    assert "guarantee" in out.text  # the caller's words stay: the expansion is scored beside them
    assert rewriter(terms).rewrite("a refund please").expansion == ()  # "refund" is the base's own word


def test_spoken_numbers_become_digits_on_both_sides_of_the_lexical_search() -> None:
    assert spoken_numbers_to_digits("Fibre one thousand at seventy-two pounds") == "Fibre 1000 at 72 pounds"
    assert spoken_numbers_to_digits("a hundred days, one hundred and ten megabits") == "100 days, 110 megabits"
    assert spoken_numbers_to_digits("nineteen ninety-nine") == "19 99"
    assert spoken_numbers_to_digits("one moment, a month") == "one moment, a month"
    assert tokenize(["fibre one thousand"]) == tokenize(["Fibre 1000"])


def test_the_shipped_caller_terms_load_and_a_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    terms = load_caller_terms(KNOWLEDGE_DIR / CALLER_TERMS_FILE)
    assert terms["guarantee"] == ("warranty",) and terms["quid"] == ("pounds",)
    assert all(phrase == phrase.lower() and targets for phrase, targets in terms.items())
    bad = tmp_path / "terms.yaml"
    bad.write_text("warranty: guarantee\n", encoding="utf-8")
    with pytest.raises(ValueError, match="must map to a list"):
        load_caller_terms(bad)
    bad.write_text("[not, a, mapping]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected a mapping"):
        load_caller_terms(bad)
