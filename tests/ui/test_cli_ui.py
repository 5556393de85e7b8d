"""`tuiagent replay FILE` and `tuiagent compare A B` open the app (or print with --print)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tuiagent.cli import app as cli

DATA = Path(__file__).resolve().parent / "data"


def test_replay_opens_the_replay_screen(monkeypatch):
    opened = {}
    monkeypatch.setattr("tuiagent.app.run_app", lambda **kw: opened.update(kw))
    result = CliRunner().invoke(cli, ["replay", str(DATA / "guarded.jsonl")])
    assert result.exit_code == 0, result.output
    assert opened == {"screen": "replay", "replay": DATA / "guarded.jsonl", "raw_math": False}
    result = CliRunner().invoke(cli, ["replay", str(DATA / "guarded.jsonl"), "--raw-math"])
    assert result.exit_code == 0 and opened["raw_math"] is True  # the app starts showing the LaTeX as written


def test_compare_opens_the_compare_screen(monkeypatch):
    opened = {}
    monkeypatch.setattr("tuiagent.app.run_app", lambda **kw: opened.update(kw))
    files = [str(DATA / "guarded.jsonl"), str(DATA / "plain.jsonl")]
    result = CliRunner().invoke(cli, ["compare", *files])
    assert result.exit_code == 0, result.output
    assert opened == {"screen": "compare", "compare": tuple(Path(f) for f in files), "raw_math": False}


def test_compare_print():
    out = subprocess.run(
        [sys.executable, "-m", "tuiagent", "compare", str(DATA / "guarded.jsonl"), str(DATA / "rtts.jsonl"), "--print"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "guarded.jsonl: guards attc+gstep+necessity+prunetir+tim · answer 338350 (right) · 3 tool calls" in lines[0]
    assert "rtts.jsonl: guards attc+prunetir · answer 481 (right) · 8 tool calls" in lines[1]


def test_compare_print_aligns_the_steps_and_marks_the_first_divergence():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuiagent",
            "compare",
            str(DATA / "plain.jsonl"),
            str(DATA / "guarded.jsonl"),
            "--print",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()[:1].isdigit() or "≠" in line]
    steps = [r for r in rows if not r[0].endswith(".")]  # not the summary lines ("1. plain.jsonl: ...")
    assert [r[0] for r in steps][:5] == ["1", "2", "3", "≠", "5"]  # turn 4: the guarded run checked again
    assert "call 1 error NameError" in " ".join(steps[0]) and "(no such step)" in " ".join(steps[3])
    assert out.stdout.rstrip().endswith("≠ marks the first step where the runs differ")
    same = subprocess.run(
        [sys.executable, "-m", "tuiagent", "compare", str(DATA / "plain.jsonl"), str(DATA / "plain.jsonl"), "--print"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert same.returncode == 0 and "≠" not in same.stdout and "the runs agree step for step" in same.stdout


def test_compare_needs_two_to_four_files():
    result = CliRunner().invoke(cli, ["compare", str(DATA / "guarded.jsonl")])
    assert result.exit_code == 2 and "two to four" in result.output


def test_the_app_opens_with_the_scripted_model(monkeypatch):
    opened = {}
    monkeypatch.setattr("tuiagent.app.run_app", lambda **kw: opened.update(kw))
    result = CliRunner().invoke(cli, ["--model", "scripted", "--script", str(DATA / "guarded_script.jsonl")])
    assert result.exit_code == 0, result.output
    assert opened["model"] == "scripted" and opened["script"] == DATA / "guarded_script.jsonl"
