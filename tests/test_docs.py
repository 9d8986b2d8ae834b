"""The README is an entry point, and every link and command in the README and docs/ is real.

- ``README.md`` is at most 200 lines (the detail lives in ``docs/``).
- Every relative markdown link in ``README.md`` and ``docs/*.md`` resolves to a file inside the repository,
  and an anchor (``page.md#heading``, ``#heading``) names a heading of its page.
- Every ``scripts/...`` named in a fenced code block exists, and every ``voice-agent SUB`` (with or without
  ``.venv/bin/``) names a subcommand that ``voice-agent --help`` lists (a nested one, ``eval dates``, must be
  in ``voice-agent eval --help``); the options each command is given are checked by the benchmarks page's
  checker (``tests/test_benchmarks_doc.py``), run here on every page.

The checkers are tested on pages with a broken link, a missing anchor, a missing script and a renamed
subcommand, so a check that stops finding anything fails too.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from tests.test_benchmarks_doc import check_page
from voice_agent.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
MAX_README_LINES = 200

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
SCRIPT = re.compile(r"(?<![\w./-])(scripts/[\w./-]*[\w-])")
VOICE_AGENT = re.compile(r"(?<![\w/-])(?:\.venv/bin/)?voice-agent\s+(.*)")
WORD = re.compile(r"^[a-z][a-z0-9-]*$")
COMMENT = re.compile(r"(?:^|\s)#")


def _prose_and_blocks(text: str) -> tuple[list[str], list[str]]:
    """The page's lines outside fenced code blocks, and the lines inside them (``\\`` continuations joined)."""
    prose: list[str] = []
    code: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif fence is not None and stripped.startswith(fence):
            fence = None
        elif fence is not None:
            if code and code[-1].endswith("\\"):
                code[-1] = code[-1][:-1] + " " + stripped
            else:
                code.append(stripped)
        else:
            prose.append(line)
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor on a page (outside code blocks); a repeated heading gets -1, -2, ... as on GitHub."""
    prose, _ = _prose_and_blocks(text)
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose:
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> Iterator[str]:
    """Every link target in a page's prose (inline code spans and fenced blocks are not links)."""
    prose, _ = _prose_and_blocks(text)
    for line in prose:
        yield from LINK.findall(re.sub(r"`[^`]*`", "", line))


def check_links(page: Path, text: str | None = None) -> list[str]:
    """Problems with a page's relative links: a missing file, a path outside the repository, a missing anchor."""
    text = page.read_text(encoding="utf-8") if text is None else text
    problems: list[str] = []
    for target in links(text):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        where = page if not path else (page.parent / path).resolve()
        name = f"{page.relative_to(ROOT)}: ({target})"
        if not where.is_relative_to(ROOT):
            problems.append(f"{name} points outside the repository")
        elif not where.exists():
            problems.append(f"{name} names a missing file")
        elif anchor:
            if where.suffix != ".md" or where.is_dir():
                problems.append(f"{name} has an anchor on a page that is not markdown")
            else:
                heads = anchors(text if where == page else where.read_text(encoding="utf-8"))
                if anchor not in heads:
                    problems.append(f"{name}: no heading #{anchor}")
    return problems


@cache
def help_text(*words: str) -> tuple[int, str]:
    """``voice-agent WORDS --help``: exit status and output."""
    result = CliRunner().invoke(app, [*words, "--help"])
    return result.exit_code, result.output


def listed_commands(help_output: str) -> set[str]:
    """The subcommands a ``--help`` lists (typer's rich panel ``│ name  text │`` or click's ``  name  text``)."""
    names: set[str] = set()
    in_commands = False
    for line in help_output.splitlines():
        if re.match(r"^(?:╭─ )?Commands\b", line.strip()):
            in_commands = True
        elif in_commands and (line.startswith("╰") or not line.strip()):
            in_commands = False
        elif in_commands:
            # A name starts one column into its row; a wrapped description line is indented further.
            match = re.match(r"^(?:│ |  )([a-z][a-z0-9-]*)(?:\s|$)", line)
            if match:
                names.add(match.group(1))
    return names


def command_words(line: str) -> list[str]:
    """The subcommand words after ``voice-agent`` on a code line: up to the first option, argument or comment."""
    match = VOICE_AGENT.search(line)
    if not match:
        return []
    words: list[str] = []
    for word in match.group(1).split():
        if not WORD.match(word):
            break
        words.append(word)
    return words


def check_commands(page: Path, text: str | None = None) -> list[str]:
    """Problems with the scripts and ``voice-agent`` subcommands named in a page's fenced code blocks."""
    text = page.read_text(encoding="utf-8") if text is None else text
    _, code = _prose_and_blocks(text)
    problems: list[str] = []
    for line in code:
        for script in SCRIPT.findall(line):  # comments too: a script a comment names must exist
            if not (ROOT / script).is_file():
                problems.append(f"{page.name}: {script} is missing (in `{line}`)")
        words = command_words(COMMENT.split(line, maxsplit=1)[0])  # prose in a comment is not a command
        path: list[str] = []
        for word in words:
            status, output = help_text(*path)
            listed = listed_commands(output)
            if status != 0:
                problems.append(f"{page.name}: voice-agent {' '.join(path)} --help exited {status}")
                break
            if not listed:  # a command, not a group: the rest are its arguments
                break
            if word not in listed:  # (a group's default command takes paths, which are not plain words)
                problems.append(f"{page.name}: voice-agent {' '.join(path)}: no subcommand {word!r} (in `{line}`)"
                                .replace("voice-agent : ", "voice-agent: "))
                break
            path.append(word)
    return problems


# The real pages.


def test_the_readme_is_an_entry_point() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_pages_exist_and_the_readme_links_to_each() -> None:
    readme = README.read_text(encoding="utf-8")
    assert len(PAGES) >= 8
    assert [p.name for p in PAGES[1:] if f"docs/{p.name}" not in readme] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert check_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_and_subcommand_in_code_exists(page: Path) -> None:
    assert check_commands(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_takes_the_options_it_is_given(page: Path) -> None:
    assert check_page(page.read_text(encoding="utf-8")) == []


def test_the_readme_names_the_two_commands() -> None:
    _, code = _prose_and_blocks(README.read_text(encoding="utf-8"))
    assert any(line.startswith("scripts/run ") for line in code)
    assert any(line.startswith("scripts/test ") for line in code)


def test_every_settings_section_is_in_the_configuration_reference() -> None:
    settings = tomllib.loads((ROOT / "config" / "settings.toml").read_text(encoding="utf-8"))
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert [s for s in settings if f"`[{s}]`" not in page] == []


def test_the_sgd_attribution_is_kept() -> None:
    readme = README.read_text(encoding="utf-8")
    assert "Schema-Guided Dialogue dataset" in readme and "CC BY-SA 4.0" in readme


# The checkers themselves: each kind of breakage is reported.

BROKEN = """# A page

## A heading

See [the docs](docs/library.md), [a heading](#a-heading), [gone](docs/no-such-page.md),
[a missing anchor](docs/benchmarks.md#no-such-section), [the main job](docs/benchmarks.md#main-job),
[outside](../shared/docs/DESIGN.md), [pipecat](https://github.com/pipecat-ai/pipecat) and `[not](a-link.md)`.

```bash
scripts/run --runs 1
scripts/nope.sh
.venv/bin/python scripts/bench_gone.py --fast
.venv/bin/voice-agent simulate billing_dispute --runs 1
.venv/bin/voice-agent no-such-command --flag
voice-agent eval dates --set dev
voice-agent eval ../x.jsonl --policy all
voice-agent evaluate retention
voice-agent eval datez --set dev   # voice-agent simulate with its defaults: a comment, not a command
```
"""


def test_the_link_checker_reports_a_missing_file_an_outside_path_and_a_missing_anchor() -> None:
    problems = check_links(README, BROKEN)
    assert len(problems) == 3, problems
    for expected in ("(docs/no-such-page.md) names a missing file", "(../shared/docs/DESIGN.md) points outside",
                     "no heading #no-such-section"):
        assert any(expected in p for p in problems), (expected, problems)


def test_the_command_checker_reports_missing_scripts_and_subcommands() -> None:
    problems = check_commands(README, BROKEN)
    assert len(problems) == 5, problems
    for expected in ("scripts/nope.sh is missing", "scripts/bench_gone.py is missing",
                     "voice-agent: no subcommand 'no-such-command'", "voice-agent: no subcommand 'evaluate'",
                     "voice-agent eval: no subcommand 'datez'"):
        assert any(expected in p for p in problems), (expected, problems)


def test_help_lists_the_commands() -> None:
    top = listed_commands(help_text()[1])
    tree = typer.main.get_command(app)
    assert top == set(tree.commands) and {"simulate", "serve", "eval"} <= top  # type: ignore[attr-defined]
    # A hidden command (an old name kept working) is not listed, by design.
    shown = {name for name, command in tree.commands["eval"].commands.items() if not command.hidden}  # type: ignore[attr-defined]
    assert listed_commands(help_text("eval")[1]) == shown
    assert listed_commands(help_text("simulate")[1]) == set()  # a command lists no subcommands


def test_anchors_follow_github() -> None:
    page = "# T\n\n## Load test, side by side with plain pipecat\n\n```bash\n# not a heading\n```\n\n## T\n"
    assert anchors(page) == {"t", "load-test-side-by-side-with-plain-pipecat", "t-1"}
    assert slug("Where the time goes: `--profile`") == "where-the-time-goes---profile"
