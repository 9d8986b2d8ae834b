"""``voice-agent policy`` reproduces DESIGN section 1 through the real console entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from voice_agent.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["policy", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_matches_design() -> None:
    code, out, _ = run("--keep", "6", "--every", "5", "--stated", "4", "--needed", "31",
                       "--retention", "0.9", "--facts", "5", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["schedule"] == [15, 20, 25, 30] and report["rewrites"] == 4 and report["bound"] == 5
    assert round(report["survival"], 3) == 0.656
    assert round(report["expected_facts"], 2) == 3.28 and round(report["all_facts"] * 100, 1) == 12.2
    # Every pass by turn 31 (turns 10, 15, 20, 25, 30) rewrites the prompt prefix once.
    assert report["cache_breaks"] == 5


def test_a_faster_cadence_shows_more_cache_breaks() -> None:
    breaks = {}
    for every in ("2", "10"):
        _, out, _ = run("--keep", "6", "--every", every, "--stated", "4", "--needed", "60", "--json")
        breaks[every] = json.loads(out)["cache_breaks"]
    assert breaks["2"] > 3 * breaks["10"]
    _, text, _ = run("--keep", "6", "--every", "5", "--stated", "4", "--needed", "31")
    assert "cache breaks by turn 31: 5" in text


def test_alignments_json_and_text() -> None:
    code, out, _ = run("--stated", "1", "--needed", "28", "--alignments", "--json")
    counts = {a["stated"]: a["rewrites"] for a in json.loads(out)["alignments"]}
    assert code == 0 and counts == {1: 4, 2: 4, 3: 5, 4: 4, 5: 4, 6: 4, 7: 4, 8: 5, 9: 4, 10: 4}
    code, out, _ = run("--stated", "4", "--needed", "31", "--facts", "5", "--alignments")
    assert "passes that rewrite it: 15, 20, 25, 30" in out
    assert "65.6 %" in out and "3.28 kept" in out and "12.2 %" in out and "stated   3 -> needed  30: 5" in out


@pytest.mark.parametrize("args", [
    ("--stated", "10", "--needed", "3"), ("--keep", "0"), ("--every", "0"),
    ("--retention", "1.5"), ("--retention", "-0.1"),
])
def test_bad_arguments_give_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    code, out, err = run(*args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("voice-agent: error:")


def test_console_script_is_installed() -> None:
    out = subprocess.run([sys.executable, "-m", "voice_agent.cli", "policy", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["rewrites"] == 4


def test_check_dates_acceptance() -> None:
    result = runner.invoke(app, ["check-dates", "--reference-date", "2026-11-30",
                                 "she is travelling until the 14th", "my account number is 4729 18", "--json"])
    assert result.exit_code == 0
    first, second = json.loads(result.stdout)["results"]
    assert [s["constraint"]["end"] for s in first["statements"]] == ["2026-12-14"]
    assert [(s["subject"], s["kind"]) for s in first["statements"]] == [("availability", "constraint")]
    assert second["statements"] == []


def test_check_dates_prints_the_verdict_with_its_citation() -> None:
    result = runner.invoke(app, ["check-dates", "--reference-date", "2026-11-30", "I'm flying to Denver on the 3rd",
                                 "don't call me until after the 14th", "--date", "2026-12-10"])
    assert result.exit_code == 0
    assert "trip" in result.stdout and "2026-12-10: REFUSE (breaks)" in result.stdout
    assert "turn 2: \"don't call me until after the 14th\"" in result.stdout
    assert "rules reader: conflict" in result.stdout


def test_check_dates_reads_back_then_runs_after_the_yes() -> None:
    lines = ["not before the 1st of December please", "agent: When would suit?", "the 2nd I guess"]
    asked = runner.invoke(app, ["check-dates", "--reference-date", "2026-11-18", *lines, "--date", "2026-12-02",
                                "--json"])
    decision = json.loads(asked.stdout)["decision"]
    assert decision["action"] == "confirm" and "Wednesday 2 December" in decision["readback"]
    yes = runner.invoke(app, ["check-dates", "--reference-date", "2026-11-18", *lines,
                              "agent: " + decision["readback"], "yes", "--date", "2026-12-02"])
    assert "2026-12-02: RUN (asked_last)" in yes.stdout


def test_check_dates_text_and_bad_reference() -> None:
    result = runner.invoke(app, ["check-dates", "--reference-date", "2026-11-30", "not Tuesday, that's the school run"])
    assert result.exit_code == 0 and "exclude_weekday" in result.stdout and "weekday=1" in result.stdout
    bad = runner.invoke(app, ["check-dates", "--reference-date", "30/11/2026", "x"])
    assert bad.exit_code == 2 and "YYYY-MM-DD" in bad.stderr


def test_simulate_names_a_paraphrase_folder_that_is_not_there() -> None:
    from typer.testing import CliRunner

    from voice_agent.cli import app

    result = CliRunner().invoke(app, ["simulate", "billing_dispute", "--paraphrases", "blind/nope", "--runs", "1",
                                      "--quiet", "--no-knowledge"])
    assert result.exit_code != 0 and "no folder 'blind/nope'" in result.output
