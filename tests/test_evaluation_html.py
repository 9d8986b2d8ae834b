"""``voice-agent eval --html DIR``: the page holds the four figures and renders in headless Chromium.

Chromium comes from Debian (``scripts/ensure_chromium`` installs it during test set-up); without it
the rendering test is skipped with the reason. Data: the public SGD-derived calls (Schema-Guided
Dialogue, Rastogi et al. 2019, CC BY-SA 4.0).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from voice_agent.harness.evaluation.html_report import FIGURE_IDS, render_html
from voice_agent.harness.evaluation.replay import ReplayConfig, evaluate_records
from voice_agent.harness.scenarios import load_call_records

SGD = Path(__file__).resolve().parents[2] / "shared" / "data" / "sgd-calls-public.jsonl"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    if not SGD.is_file():
        pytest.skip(f"public SGD calls not found at {SGD}")
    records, _ = load_call_records(SGD)
    result = asyncio.run(evaluate_records(records[:12], ReplayConfig()))
    return render_html(result.report, tmp_path_factory.mktemp("html"), timeline_calls=2)


def test_the_page_references_all_four_figures(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for figure in FIGURE_IDS:
        assert f'id="{figure}"' in text
    assert text.count('src="data:image/png;base64,') == 5  # two timelines + three figures
    for name in ("survival.png", "tokens.png", "date-guard.png", "presence-timeline-1.png"):
        assert (page.parent / name).stat().st_size > 1000


def test_the_page_renders_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (scripts/ensure_chromium installs it when run as root)")
    shot = tmp_path / "page.png"
    command = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert shot.is_file(), done.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1280, 2000)
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=rgb.width * rgb.height) or []
        assert len(colours) > 50  # text, tables and plots, not a blank page
        assert max(ImageStat.Stat(rgb).stddev) > 10
        # The plots' green (value in context) shows up.
        rgbs = [c for _, c in colours if isinstance(c, tuple)]
        assert any(c[1] > 120 and c[0] < 80 and c[2] < 120 for c in rgbs)
