"""Export a saved run or a comparison to Markdown and to one self-contained HTML page (headless),
from the command line and from the app (f9)."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tuiagent.errors import UserError
from tuiagent.export import default_output, export_runs

DATA = Path(__file__).resolve().parents[1] / "ui" / "data"
GUARDED, PLAIN = DATA / "guarded.jsonl", DATA / "plain.jsonl"


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=120)


def test_markdown_has_the_summary_every_step_the_guards_and_the_pruned_branch():
    md = export_runs([GUARDED], "md")
    assert md.startswith("# tuiagent run · 338350 · right (gold 338350)")
    assert "| guards | attc+gstep+necessity+prunetir+tim |" in md and "| tool calls | 3 (1 erroneous) |" in md
    assert "## Step 1 · ✂ pruned" in md and "✂ pruned by STP" in md  # the pruned branch is kept, marked
    assert "```python\ntotal = sum(i**2 for i in range(1, 101))\nprint(totl)\n```" in md
    assert "*call 1 · ✗ NameError · 12 ms*" in md
    assert "> **attc** · inject: conf 0.951 / τ 0.97 rethink" in md
    assert "**answer attempt:** 338350 (final)" in md


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]


def test_html_is_one_self_contained_page_with_highlighted_code_and_shading(unsure_trajectory):
    page = export_runs([unsure_trajectory], "html", shade=True)
    tags = _Tags()
    tags.feed(page)
    assert tags.links == [] and "script" not in tags.tags  # nothing fetched, nothing run
    assert page.count('<section class="step pruned">') == 2 and "✂ pruned by STP" in page
    assert re.search(r'<span style="color:#[0-9A-Fa-f]{6}[^"]*">print</span>', page)  # pygments colours
    assert 'title="p = ' in page  # a shaded token gives its exact probability on hover
    plain = export_runs([GUARDED], "html")
    assert 'title="p = ' not in plain and "Token confidence" not in plain


def test_a_comparison_exports_side_by_side():
    md = export_runs([GUARDED, PLAIN], "md")
    assert "| | 1. guarded | 2. plain |" in md and "| guards | attc+gstep+necessity+prunetir+tim | none |" in md
    assert "The runs first differ at step" in md
    page = export_runs([GUARDED, PLAIN], "html")
    assert "comparison of 2 runs" in page and "class=diverge" in page
    assert default_output([GUARDED, PLAIN], "html").name == "guarded-compare2.html"


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="unknown export format"):
        export_runs([GUARDED], "pdf")
    bogus = tmp_path / "x.jsonl"
    bogus.write_text("hello\n", encoding="utf-8")
    done = tuiagent("export", str(bogus))
    assert done.returncode != 0 and "not a tuiagent trajectory" in done.stderr and "Traceback" not in done.stderr
    done = tuiagent("export", str(GUARDED), "--html", "--md")
    assert done.returncode != 0 and "only one of --html, --md and --inspect" in done.stderr


def test_cli_writes_markdown_to_stdout_and_html_to_a_file(tmp_path):
    done = tuiagent("export", str(GUARDED))
    assert done.returncode == 0 and done.stdout.startswith("# tuiagent run")
    out = tmp_path / "run.html"
    done = tuiagent("export", str(GUARDED), str(PLAIN), "-o", str(out))  # the suffix picks HTML
    assert done.returncode == 0 and "wrote" in done.stderr
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
