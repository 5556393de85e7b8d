"""Math rendered for reading outside the app: solve's transcript, fork, `replay --print`,
`compare --print` and the Markdown/HTML exports show 3 × 17 for \\(3 \\times 17\\); `--raw-math`
shows what the model wrote; the trajectory keeps it verbatim."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.export import export_runs
from tuiagent.transcript import TranscriptPrinter

TURN = "There are \\(3 \\times 17\\) apples:\n\\[\n3 \\times 17 = 51\n\\]\nand $5 buys \\(\\frac{1}{2}\\) of them. So \\boxed{51}."
SHOWN = "There are 3 × 17 apples:\n3 × 17 = 51\nand $5 buys ½ of them. So ⟦51⟧."


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=120)


def solved(write_script, tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    script = write_script(TURN)
    out = tuiagent(
        "solve",
        "How many apples if $n = 3 \\times 17$?",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--no-tool",
        "--out",
        str(tmp_path / "runs"),
        *flags,
    )
    assert out.returncode == 0, out.stderr
    return out, next((tmp_path / "runs").glob("*.jsonl"))


def test_solve_transcript_renders_math_and_the_trajectory_keeps_it_verbatim(write_script, tmp_path):
    out, path = solved(write_script, tmp_path)
    assert SHOWN in out.stdout and "\\times" not in out.stdout
    assert "problem: How many apples if n = 3 × 17?" in out.stdout and "answer: 51" in out.stdout
    events = load(path).events
    assert next(e.text for e in events if isinstance(e, ev.TurnEnded)) == TURN
    assert "".join(e.text for e in events if isinstance(e, ev.TokenDelta)) == TURN

    raw = tuiagent("replay", str(path), "--print", "--raw-math")
    assert raw.returncode == 0 and TURN in raw.stdout
    rendered = tuiagent("replay", str(path), "--print")
    assert rendered.returncode == 0 and SHOWN in rendered.stdout


def test_solve_raw_math_streams_the_latex(write_script, tmp_path):
    out, _ = solved(write_script, tmp_path, "--raw-math")
    assert TURN in out.stdout


def test_transcript_streamed_token_by_token_reads_as_the_whole_turn():
    for math in (True, False):
        console = Console(file=io.StringIO(), highlight=False, soft_wrap=True, width=200)
        printer = TranscriptPrinter(console, math=math)
        printer(ev.TurnStarted(turn=1, context_tokens=10))
        for i in range(0, len(TURN), 3):  # tokens of three characters
            printer(ev.TokenDelta(turn=1, text=TURN[i : i + 3], logprob=-0.01))
        printer(ev.TurnEnded(turn=1, text=TURN, stop="eos", tokens=len(TURN) // 3))
        printed = console.file.getvalue()
        assert (SHOWN if math else TURN) + "\n" in printed


def test_exports_render_math_unless_asked_not_to(write_script, tmp_path):
    _, path = solved(write_script, tmp_path)
    md = export_runs([path], "md")
    assert SHOWN in md and "\\times" not in md and "| problem | How many apples if n = 3 × 17? |" in md
    assert TURN in export_runs([path], "md", math=False)
    page = export_runs([path], "html", shade=True)
    assert "3 × 17" in page and 'title="LaTeX: \\(3 \\times 17\\)"' in page  # the source on hover
    assert "\\times" not in page.replace('title="LaTeX: \\(3 \\times 17\\)"', "").replace(
        'title="LaTeX: \\[\n3 \\times 17 = 51\n\\]"', ""
    )
    raw = tuiagent("export", str(path), "--html", "--raw-math")
    assert raw.returncode == 0 and "\\(3 \\times 17\\)" in raw.stdout and "LaTeX:" not in raw.stdout
    compared = tuiagent("compare", str(path), str(path), "--print")
    assert compared.returncode == 0 and "answer 51" in compared.stdout


def test_fork_takes_raw_math(write_script, tmp_path):
    _, path = solved(write_script, tmp_path)
    script = write_script(TURN, name="fork.jsonl")
    out = tuiagent(
        "fork",
        str(path),
        "--step",
        "0",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--raw-math",
        "--out",
        str(tmp_path / "forks"),
    )
    assert out.returncode == 0, out.stderr
    assert TURN in out.stdout
