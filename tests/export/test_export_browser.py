"""The HTML export opened in a real headless browser (Debian's chromium) and screenshotted: the page
draws, its text is there, and the token shades show. Skips, saying why, where chromium is absent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tuiagent.export import export_runs
from tuiagent.export.html import BAND_COLOURS

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser") if shutil.which(b)), None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BROWSER is None, reason="no chromium on this machine (apt-get install chromium) to open the HTML export in"
    ),
]


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_html_export_renders_in_chromium(tmp_path, unsure_trajectory):
    from PIL import Image  # comes with matplotlib (pinned in the test extra)

    page = tmp_path / "run.html"
    page.write_text(export_runs([unsure_trajectory], "html", shade=True), encoding="utf-8")
    dom = _chromium("--dump-dom", page.as_uri(), tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "tuiagent run · 338350" in dom.stdout and "✂ pruned by STP" in dom.stdout
    shot = tmp_path / "shot.png"
    done = _chromium(f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri(), tmp=tmp_path)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    colours = {colour for _, colour in image.getcolors(maxcolors=1 << 20)}
    assert len(colours) > 50  # text and highlighted code were drawn, not a blank page
    want = {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in BAND_COLOURS}
    assert want & colours, "no token shade on the screenshot"
