"""The core (lanes, policy, assembler, guards) imports nothing from pipecat; nor do the settings it takes."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

CORE = pathlib.Path(__file__).resolve().parent.parent / "voice_agent" / "core"


def test_no_pipecat_import_statement_in_core() -> None:
    offenders = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "pipecat"]
    assert offenders == []


def test_importing_the_whole_core_loads_no_pipecat() -> None:
    modules = sorted(
        ".".join(p.relative_to(CORE.parent.parent).with_suffix("").parts)
        for p in CORE.rglob("*.py") if p.name != "__init__.py"
    )
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + \
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pipecat'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_settings_are_a_leaf() -> None:
    # The core takes its settings sections unchanged (the output guard its ``output_guard``, the LLM recovery its
    # ``llm``), so the settings module sits below it: pydantic, and of ours only the data-file lookup.
    code = "import sys, voice_agent.settings\n" \
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pipecat', 'voice_agent', 'processors')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['voice_agent', 'voice_agent.datafiles', 'voice_agent.settings']"
