"""docs/benchmarks.md (and the README) name only commands that exist, with options those commands take.

The page is parsed for every command in its code (fenced blocks and inline backticks):
``[.venv/bin/python] scripts/X.py [--option ...]`` and ``[.venv/bin/]voice-agent SUB [SUB2] [--option ...]``.
A script must exist, and each option it is given must appear in its ``--help`` (run in a subprocess; a
script without an argument parser is never run). A ``voice-agent`` subcommand must exist in the typer app's
command tree, and each option must be one of that command's parameters.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer.main

from voice_agent.cli import app

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"

SCRIPT = re.compile(r"(?:^|\s)(?:\.venv/bin/python\s+)?(scripts/[\w-]+\.py)(?=\s|$)(.*)")
VOICE_AGENT = re.compile(r"(?:^|\s)(?:\.venv/bin/)?voice-agent(?=\s|$)(.*)")
OPTION = re.compile(r"^--?[A-Za-z][\w-]*$")
SEPARATORS = {"&", "&&", "|", "||", ";"}
# Every benchmark script must have a section on the page.
BENCHMARK_SCRIPTS = ("bench_*.py", "loadtest.py", "known_facts_size.py")
SECTION_LABELS = ("**Command", "**Machine", "**Measured", "**What it does not show")


@dataclass(frozen=True)
class Command:
    """One command named on a page: the program, its words (subcommands and arguments) and its options."""

    program: str  # "scripts/X.py" or "voice-agent"
    words: tuple[str, ...]
    options: tuple[str, ...]
    text: str


def code_spans(page: str) -> Iterator[str]:
    """Yields each line of every fenced block (``\\`` continuations joined) and every inline code span."""
    prose: list[str] = []
    block: list[str] | None = None
    for line in page.splitlines():
        if line.strip().startswith("```"):
            if block is not None:
                yield from block
            block = [] if block is None else None
        elif block is None:
            prose.append(line)
        elif block and block[-1].endswith("\\"):
            block[-1] = block[-1][:-1] + " " + line.strip()
        else:
            block.append(line.strip())
    yield from (m.group(1) for m in re.finditer(r"`([^`]+)`", "\n".join(prose)))


def _tokens(rest: str) -> list[str]:
    """The shell words of a command's tail, up to a comment or a separator; ``[a|b]`` opens into a, b."""
    rest = re.split(r"(?:^|\s)#", rest, maxsplit=1)[0]
    try:
        words = shlex.split(rest)
    except ValueError:  # an unbalanced quote in prose: plain words are enough to find options
        words = rest.split()
    out: list[str] = []
    for word in words:
        if word in SEPARATORS:
            break
        out += [part for part in word.strip("[]").split("|") if part]
    return out


def find_commands(page: str) -> list[Command]:
    """Every script and voice-agent command named in the page's code."""
    found: list[Command] = []
    for span in code_spans(page):
        for line in span.splitlines():
            for pattern, program in ((SCRIPT, None), (VOICE_AGENT, "voice-agent")):
                match = pattern.search(line)
                if not match:
                    continue
                name, rest = (program, match.group(1)) if program else (match.group(1), match.group(2))
                tokens = _tokens(rest)
                options = tuple(t.split("=", 1)[0] for t in tokens if OPTION.match(t.split("=", 1)[0]))
                words = tuple(t for t in tokens if not t.startswith("-"))
                found.append(Command(name, words, options, line.strip()))
    return found


@cache
def script_help(script: str) -> tuple[int, str]:
    """``python SCRIPT --help``: exit status and output (run once per script)."""
    done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    return done.returncode, done.stdout + done.stderr


def _takes_arguments(script: Path) -> bool:
    # A script without a parser would run the whole benchmark on --help: never start one.
    return "ArgumentParser" in script.read_text(encoding="utf-8")


def check_script(command: Command) -> list[str]:
    """Problems with one ``scripts/X.py`` command: the file is missing, or an option is not in its --help."""
    path = ROOT / command.program
    if not path.is_file():
        return [f"{command.program}: missing (named in `{command.text}`)"]
    if not command.options:
        return []
    if not _takes_arguments(path):
        return [f"{command.program}: takes no options, but the page gives it {', '.join(command.options)}"]
    status, text = script_help(command.program)
    if status != 0:
        return [f"{command.program} --help exited {status}: {text.strip()[-300:]}"]
    return [f"{command.program}: no option {option} in its --help (named in `{command.text}`)"
            for option in command.options
            if option != "--help" and not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)]


def _option_names(command: Any) -> set[str]:
    # typer vendors its own click (typer._click), so the tree is read by duck typing, not isinstance.
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *getattr(param, "secondary_opts", ())) if o.startswith("-"))
    return names


def _is_argument(word: str) -> bool:
    # A path, a file name or a placeholder (FILE, N) goes to a group's default command.
    return "/" in word or "." in word or word.isupper()


def check_voice_agent(command: Command, root: Any) -> list[str]:
    """Problems with one ``voice-agent`` command: an unknown subcommand, or an option it does not take."""
    current, path = root, ["voice-agent"]
    for word in command.words:
        subcommands = getattr(current, "commands", None)
        if subcommands is None:  # a command, not a group: the rest are its arguments
            break
        if word in subcommands:
            current = subcommands[word]
            path.append(word)
            continue
        default = getattr(current, "default_command", None)
        if default and _is_argument(word):
            current = subcommands[default]
            path.append(f"({default})")
            break
        return [f"{' '.join(path)}: no subcommand {word!r} (named in `{command.text}`)"]
    accepted = _option_names(current)
    return [f"{' '.join(path)}: no option {option} (named in `{command.text}`)"
            for option in command.options if option not in accepted]


def check_page(page: str) -> list[str]:
    """Every problem with the commands a page names (empty when every one exists as written)."""
    commands = find_commands(page)
    scripts = sorted({c.program for c in commands if c.program != "voice-agent" and c.options
                      and (ROOT / c.program).is_file() and _takes_arguments(ROOT / c.program)})
    with ThreadPoolExecutor(max_workers=4) as pool:  # the --help runs are independent: start them together
        list(pool.map(script_help, scripts))
    root = typer.main.get_command(app)
    problems: list[str] = []
    for command in commands:
        problems += check_voice_agent(command, root) if command.program == "voice-agent" else check_script(command)
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: str) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", page, re.M)}


def sections(page: str) -> dict[str, str]:
    """The page's ``## `` sections by heading."""
    parts = re.split(r"^## (.+)$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


# The real page and README.


@pytest.mark.timeout(300)
def test_every_command_on_the_page_exists_with_its_options() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert len(find_commands(page)) >= 15  # the parser found the page's commands at all
    assert check_page(page) == []


def test_every_command_in_the_readme_exists_with_its_options() -> None:
    assert check_page(README.read_text(encoding="utf-8")) == []


def test_every_benchmark_script_has_a_section() -> None:
    page = PAGE.read_text(encoding="utf-8")
    named = {c.program for c in find_commands(page)}
    scripts = {f"scripts/{p.name}" for pattern in BENCHMARK_SCRIPTS for p in (ROOT / "scripts").glob(pattern)}
    assert scripts - named == set()


def test_every_section_says_command_machine_date_and_limits() -> None:
    found = sections(PAGE.read_text(encoding="utf-8"))
    assert len(found) >= 10
    missing = {heading: [label for label in SECTION_LABELS if label not in body] for heading, body in found.items()}
    assert {h: m for h, m in missing.items() if m} == {}


def test_links_to_the_page_land_on_a_heading() -> None:
    page = PAGE.read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    targets = re.findall(r"docs/benchmarks\.md#([\w-]+)", readme) + re.findall(r"\]\(#([\w-]+)\)", page)
    assert "docs/benchmarks.md" in readme
    assert sorted(set(targets) - anchors(page)) == []


# The checker itself: a renamed command or option is reported.

FAKE_PAGE = """
## A benchmark

```bash
.venv/bin/python scripts/nope.py --fast
.venv/bin/python scripts/known_facts_size.py --sgd x.jsonl --no-such-option
.venv/bin/voice-agent eval nope-command --json out.json
.venv/bin/voice-agent simulate billing_dispute --runs 3 --no-such-flag   # a comment --not-an-option
.venv/bin/python scripts/bench_guards.py --turns 5
```

Also `voice-agent eval retrieval --strict`, `voice-agent eval ../x.jsonl --policy all` and
`scripts/bench_gone.py` in prose; `voice-agent policy [--alignments|--json] --capture 0.16`.
"""


def test_the_checker_reports_each_renamed_command_and_option() -> None:
    problems = check_page(FAKE_PAGE)
    assert len(problems) == 6, problems
    expected = (
        "scripts/nope.py: missing",
        "scripts/known_facts_size.py: no option --no-such-option",
        "voice-agent eval: no subcommand 'nope-command'",
        "voice-agent simulate: no option --no-such-flag",
        "scripts/bench_guards.py: takes no options",
        "scripts/bench_gone.py: missing",
    )
    for start in expected:
        assert any(p.startswith(start) for p in problems), (start, problems)


def test_the_parser_reads_words_options_and_continuations() -> None:
    page = "```bash\n.venv/bin/voice-agent serve --port 8765 \\\n    --max-calls 4 &   # two lines\n```\n"
    (command,) = find_commands(page)
    assert (command.program, command.words, command.options) == ("voice-agent", ("serve", "8765", "4"),
                                                                  ("--port", "--max-calls"))
    (inline,) = find_commands("see `voice-agent simulate [--paraphrased|--scripted-only] --runs=2`")
    assert inline.options == ("--paraphrased", "--scripted-only", "--runs")
    assert check_page("`voice-agent eval retrieval --strict`") == []
    assert check_page("`voice-agent eval FILE --policy all`") == []


def test_slugs_match_githubs_anchors() -> None:
    assert slug("Side by side with pipecat's own summarizer") == "side-by-side-with-pipecats-own-summarizer"
    assert slug("Real summarizer: retention") == "real-summarizer-retention"
    assert slug("KNOWN FACTS size") == "known-facts-size"
