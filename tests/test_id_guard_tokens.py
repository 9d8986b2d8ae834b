"""The ID guard's token index and near-miss measure: the tokenizer's rules, the index, and properties."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from voice_agent.core.guards.caller_tokens import caller_candidates
from voice_agent.core.guards.id_guard import IdGuard, IdVerdict
from voice_agent.core.guards.id_tokens import IdTokenIndex, entry_tokens
from voice_agent.core.ledger import Ledger
from voice_agent.core.near_miss import NearMiss, bounded_edit_distance, canonical, near_miss, near_miss_kind
from voice_agent.core.tool_spec import ParamKind, ToolParam, ToolSpec
from voice_agent.core.transcript import EntryKind, ToolOutcome, TranscriptLane

ALNUM = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
LOOKUP = ToolSpec("lookup", "", (ToolParam("ref", "", kind=ParamKind.IDENTIFIER),))
CHANGE = ToolSpec("change", "", (ToolParam("ref", "", kind=ParamKind.IDENTIFIER),), mutates=True)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
guard = IdGuard()


def tokens(text: str) -> list[str]:
    return [c.canonical for c in caller_candidates(text)]


# --- the caller tokenizer ------------------------------------------------------------------------------------------


def test_adjacent_pieces_join_into_one_token_with_the_leading_letters_optional() -> None:
    assert tokens("ACC 4729 18") == ["ACC472918", "472918"]
    assert tokens("my account number is a c c four seven two nine one eight") == ["ACC472918", "472918"]
    assert tokens("a c c dash four seven two nine dash one eight") == ["ACC472918", "472918"]
    assert tokens("PIN 1234") == ["PIN1234", "1234"]


def test_ordinary_words_and_punctuation_end_a_token() -> None:
    assert tokens("flat 47, 2918 Main Street") == ["FLAT47", "47", "2918"]
    assert tokens("47; 2918") == ["47", "2918"]
    assert tokens("47. 2918") == ["47", "2918"]
    assert tokens("47 and 2918") == ["47", "2918"]
    assert tokens("47\n2918") == ["47", "2918"]
    assert tokens("(47) 2918") == ["47", "2918"]
    assert tokens("ORD 7K4M... ORD 7K4M2P") == ["ORD7K4M", "7K4M", "ORD7K4M2P", "7K4M2P"]


def test_a_short_word_prefixes_the_digits_after_it_never_the_ones_before() -> None:
    assert tokens("the invoice is inv 55 21 90") == ["INV552190", "552190"]
    assert tokens("2918 Main") == ["2918"]
    assert tokens("2918 main 33") == ["2918", "MAIN33", "33"]


def test_word_like_letters_join_only_when_they_spell() -> None:
    assert tokens("inv 55 21 90 I think") == ["INV552190", "552190"]  # "I" is a word here
    assert tokens("I want a refund") == []
    assert tokens("O R D 7 K 4 M 2 A.") == ["ORD7K4M2A", "7K4M2A"]  # "A" spells after "2"
    assert tokens("a 4729") == ["A4729", "4729"]


def test_written_identifiers_are_complete() -> None:
    assert tokens("ORD-7K4M2P ORD-7K4M2R") == ["ORD7K4M2P", "ORD7K4M2R"]
    assert tokens("ORD-7K4M2P 2 weeks ago") == ["ORD7K4M2P", "2"]
    assert tokens("ref ORD-7K4M2P") == ["REFORD7K4M2P", "ORD7K4M2P"]
    assert tokens("ACC 4729-18") == ["ACC472918", "472918"]
    assert tokens("ORD-7K4M2P's status") == ["ORD7K4M2P"]
    assert tokens("I've got two orders: ORD-7K4M2P and ORD-7K4M2R.")[-2:] == ["ORD7K4M2P", "ORD7K4M2R"]


def test_identifiers_meeting_without_a_pause_are_split_at_the_letters() -> None:
    assert tokens("ACC 4729 18 INV 2026 1018") == ["ACC472918", "472918", "INV20261018", "20261018"]
    assert tokens("ON 1234") == ["ON1234", "1234"]  # capitals are spelled letters, even "ON"
    assert tokens("OK 1234") == ["1234"]


def test_spoken_numbers_become_digits() -> None:
    assert tokens("seventy nine eighteen") == ["7918"]
    assert tokens("double four seven oh nine") == ["44709"]
    assert tokens("oh I see") == []  # "oh" is 0 only between numbers
    assert tokens("ORD 7K4M2P one more thing") == ["ORD7K4M2P", "7K4M2P", "1"]  # no "ORD7K4M2P1"


def test_unicode_dashes_and_full_width_digits_are_normalised() -> None:
    assert tokens("ACC–4729—18") == ["ACC472918"]
    assert tokens("ＡＣＣ ４７２９ １８") == ["ACC472918", "472918"]


@PROPERTY
@given(
    st.text("0123456789", min_size=2, max_size=5), st.text("0123456789", min_size=2, max_size=5),
    st.sampled_from(["flat {a}, {b} Main Street", "{a} and {b}", "{a}. {b}", "unit {a}; {b}", "{a} street {b}",
                     "I'm {a}, my number's {b}", "{a}\n{b}"]),
)
def test_no_token_crosses_a_word_or_punctuation(a: str, b: str, template: str) -> None:
    said = template.format(a=a, b=b)
    assert a + b not in tokens(said)
    lane = TranscriptLane()
    lane.append_caller(1, said)
    (check,) = guard.check(LOOKUP, {"ref": f"{a}-{b}"}, Ledger(), lane.entries)
    assert not check.accepted


# --- spoken identifiers against the guard --------------------------------------------------------------------------

PREFIXES = st.sampled_from(["ACC", "INV", "ORD", "REF", "TKT", "ZX", "B"])
GROUPS = st.lists(st.text("0123456789", min_size=1, max_size=4), min_size=1, max_size=3)


def renderings(prefix: str, groups: list[str]) -> list[str]:
    """How a caller (through a recogniser) may say ``prefix-groups``."""
    digits = "".join(groups)
    return [
        f"{prefix}-{'-'.join(groups)}",
        f"{prefix} {' '.join(groups)}",
        f"{prefix.lower()} {' '.join(groups)}",
        " ".join([*prefix.lower(), *(DIGIT_WORDS[int(d)] for d in digits)]),
        " ".join([*prefix, *digits]),
    ]


@PROPERTY
@given(PREFIXES, GROUPS, st.data())
def test_a_spoken_identifier_is_one_token_and_ok_for_a_lookup(prefix: str, groups: list[str],
                                                               data: st.DataObject) -> None:
    written = f"{prefix}-{'-'.join(groups)}"
    assume(len(canonical(written)) >= 4)
    spoken = data.draw(st.sampled_from(renderings(prefix, groups)))
    said = f"yes, my reference is {spoken}, thanks"
    assert canonical(written) in tokens(said)
    lane = TranscriptLane()
    lane.append_caller(1, said)
    for value in (written, written.lower(), canonical(written), f"{prefix} {' '.join(groups)}"):
        (check,) = guard.check(LOOKUP, {"ref": value}, Ledger(), lane.entries)
        assert check.verdict is IdVerdict.OK and check.from_caller
        (change,) = guard.check(CHANGE, {"ref": value}, Ledger(), lane.entries)
        assert change.verdict is IdVerdict.UNVERIFIED


@PROPERTY
@given(PREFIXES, GROUPS, st.data())
def test_a_cut_short_spoken_identifier_is_mutated(prefix: str, groups: list[str], data: st.DataObject) -> None:
    full = canonical(f"{prefix}{''.join(groups)}")
    assume(len(full) >= 5)
    spoken = data.draw(st.sampled_from(renderings(prefix, groups)))
    cut = data.draw(st.integers(4, len(full) - 1))
    lane = TranscriptLane()
    lane.append_caller(1, f"it's {spoken}")
    (check,) = guard.check(LOOKUP, {"ref": full[:cut]}, Ledger(), lane.entries)
    assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.TRUNCATED


# --- tool results and the index ------------------------------------------------------------------------------------


def test_every_string_and_number_leaf_of_a_completed_result_is_one_token() -> None:
    lane = TranscriptLane()
    result = {
        "account_id": "ACC-4729-18", "open": True, "count": 3, "total": 19.99, "note": None,
        "invoices": [{"invoice_id": "INV-2026-1018", "description": "Fibre 1000"}],
    }
    entry = lane.append_tool_result(2, "list_invoices", "c1", result, ToolOutcome.COMPLETED)
    found = {(t.path, t.canonical, t.reference) for t in entry_tokens(entry)}
    assert found == {
        ("account_id", "ACC472918", True), ("count", "3", True), ("total", "1999", False),
        ("invoices[].invoice_id", "INV20261018", True), ("invoices[].description", "FIBRE1000", False),
    }
    assert all(t.source is EntryKind.TOOL_RESULT and t.tool_name == "list_invoices" for t in entry_tokens(entry))


def test_only_caller_words_and_completed_results_give_tokens() -> None:
    lane = TranscriptLane()
    lane.append_caller(1, "it's ACC 4729 18")
    lane.append_agent(1, "Is that ACC-4729-18?")
    lane.append_tool_call(1, "lookup_account", "c1", {"account_id": "ACC-4729-19"})
    lane.append_tool_result(1, "lookup_account", "c1", {"account_id": "ACC-4729-19"}, ToolOutcome.REJECTED)
    lane.append_tool_result(1, "lookup_account", "c2", {"error": "ACC-4729-17"}, ToolOutcome.FAILED)
    index = IdTokenIndex(lane.entries)
    assert sorted(t.canonical for t in index) == ["472918", "ACC472918"]


def test_the_index_grows_entry_by_entry_and_drops_turns_that_leave_the_window() -> None:
    lane = TranscriptLane()
    lane.append_caller(1, "it's ACC 4729 18")
    lane.append_tool_result(2, "lookup_account", "c1", {"account_id": "ACC-4729-18"}, ToolOutcome.COMPLETED)
    lane.append_caller(3, "and order ORD-7K4M2P")
    incremental = IdTokenIndex()
    added = [incremental.add(entry) for entry in lane.entries]
    assert [len(a) for a in added] == [2, 1, 1]
    assert list(incremental) == list(IdTokenIndex(lane.entries))
    assert [t.source for t in incremental.find("ACC472918")] == [EntryKind.CALLER, EntryKind.TOOL_RESULT]
    incremental.prune(2)
    assert [t.turn for t in incremental.find("ACC472918")] == [2]
    assert incremental.find("472918") == []
    incremental.prune(3)
    assert [t.canonical for t in incremental] == ["ORD7K4M2P"]


def test_references_are_one_per_value_and_leave_out_short_and_prose_tokens() -> None:
    lane = TranscriptLane()
    lane.append_caller(1, "flat 47, ORD-7K4M2P")
    lane.append_tool_result(1, "lookup_order", "c1", {"order_id": "ORD-7K4M2P", "item": "Wireless Headphones"},
                            ToolOutcome.COMPLETED)
    refs = list(IdTokenIndex(lane.entries).references())
    assert [(t.canonical, t.source) for t in refs] == [
        ("ORD7K4M2P", EntryKind.TOOL_RESULT), ("FLAT47", EntryKind.CALLER),
    ]


def test_tokens_of_an_entry_are_memoised() -> None:
    lane = TranscriptLane()
    entry = lane.append_caller(1, "it's ACC 4729 18")
    assert entry_tokens(entry) is entry_tokens(entry)


# --- the near-miss measure -----------------------------------------------------------------------------------------


def _osa(a: str, b: str) -> int:
    """Reference optimal-string-alignment distance, the full table."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


@settings(max_examples=400, deadline=None)
@given(st.text("AB1", max_size=9), st.text("AB1", max_size=9), st.integers(1, 3))
def test_bounded_edit_distance_is_the_optimal_string_alignment_distance(a: str, b: str, limit: int) -> None:
    exact = _osa(a, b)
    assert bounded_edit_distance(a, b, limit) == (exact if exact <= limit else None)


def test_near_miss_kinds() -> None:
    assert near_miss_kind("ORD-7K4M", "ORD-7K4M2P") is NearMiss.TRUNCATED
    assert near_miss_kind("ACC-", "ACC-4729-18") is NearMiss.TRUNCATED
    assert near_miss_kind("1414G5812", "1414-5812") is NearMiss.SEPARATOR
    assert near_miss_kind("ORD-K74M2P", "ORD-7K4M2P") is NearMiss.EDITED  # a swap is one edit
    assert near_miss_kind("ORD-7K4M2P", "ord 7k4m2p") is None  # the same identifier
    assert near_miss_kind("ABC", "ABD") is None  # too short to resemble anything
    assert near_miss_kind("1243", "1234") is NearMiss.EDITED
    assert near_miss_kind("1253", "1234") is None  # two edits: only from 8 characters
    assert near_miss_kind("INV-2026-1053", "INV-2026-1063") is NearMiss.EDITED


# --- properties of the guard ---------------------------------------------------------------------------------------

LEDGER_VALUES = st.builds(
    lambda groups, seps: "".join(g + s for g, s in zip(groups, seps, strict=False)) + groups[-1]
    if len(groups) > 1 else groups[0],
    st.lists(st.text(ALNUM, min_size=1, max_size=5), min_size=1, max_size=4),
    st.lists(st.sampled_from("-/."), min_size=3, max_size=3),
).filter(lambda v: len(canonical(v)) >= 6)


def _mutations(value: str, data: st.DataObject) -> str:
    """One substitution, deletion or insertion that changes the canonical form."""
    kind = data.draw(st.sampled_from(["substitute", "delete", "insert"]))
    if kind == "insert":
        i = data.draw(st.integers(0, len(value)))
        return value[:i] + data.draw(st.sampled_from(ALNUM)) + value[i:]
    positions = [i for i, c in enumerate(value) if c.isalnum()] if kind == "delete" else list(range(len(value)))
    i = data.draw(st.sampled_from(positions))
    if kind == "delete":
        return value[:i] + value[i + 1 :]
    return value[:i] + data.draw(st.sampled_from([c for c in ALNUM if c != value[i]])) + value[i + 1 :]


def _recent(value: str) -> TranscriptLane:
    """The caller said ``value`` and a tool returned it: the evidence is all there, for the right value."""
    lane = TranscriptLane()
    lane.append_caller(1, f"my reference is {value}")
    lane.append_tool_result(2, "lookup", "c1", {"ref": value, "status": "open"}, ToolOutcome.COMPLETED)
    return lane


@PROPERTY
@given(LEDGER_VALUES, st.data())
def test_a_single_character_change_of_a_ledger_value_is_never_ok(value: str, data: st.DataObject) -> None:
    mutated = _mutations(value, data)
    assert canonical(mutated) != canonical(value)
    ledger = Ledger()
    ledger.record_from_tool("ref", value, 2, "lookup", "ref")
    for recent in ((), _recent(value).entries):
        for tool in (LOOKUP, CHANGE):
            (check,) = guard.check(tool, {"ref": mutated}, ledger, recent)
            assert check.verdict is IdVerdict.MUTATED, (value, mutated, check.reason)
            assert check.resembles is not None and check.resembles.value == value


@PROPERTY
@given(LEDGER_VALUES, st.data())
def test_a_truncation_to_four_or_more_characters_is_mutated(value: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(4, len(value) - 1))
    truncated = value[:cut]
    assume(canonical(truncated) != canonical(value))  # dropping only a trailing separator is the same value
    ledger = Ledger()
    ledger.record_from_tool("ref", value, 2, "lookup", "ref")
    for recent in ((), _recent(value).entries):
        for tool in (LOOKUP, CHANGE):
            (check,) = guard.check(tool, {"ref": truncated}, ledger, recent)
            assert check.verdict is IdVerdict.MUTATED and check.near_miss is NearMiss.TRUNCATED, truncated


@PROPERTY
@given(LEDGER_VALUES)
def test_the_ledger_value_itself_is_ok_in_any_spelling(value: str) -> None:
    ledger = Ledger()
    ledger.record_from_tool("ref", value, 2, "lookup", "ref")
    for spelling in (value, value.lower(), canonical(value), value.replace("-", " ").replace("/", "-")):
        for tool in (LOOKUP, CHANGE):
            (check,) = guard.check(tool, {"ref": spelling}, ledger, _recent(value).entries)
            assert check.verdict is IdVerdict.OK and check.match is not None and check.match.value == value


def test_the_token_and_near_miss_names_are_still_importable_from_the_guard_module() -> None:
    from voice_agent.core.guards import id_guard

    moved = (
        IdTokenIndex, NearMiss, bounded_edit_distance, caller_candidates, canonical, entry_tokens, near_miss,
        near_miss_kind,
    )
    assert all(getattr(id_guard, thing.__name__) is thing for thing in moved)
