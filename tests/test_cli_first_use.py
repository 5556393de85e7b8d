"""Rough edges a new user meets on the command line (issue 39): real processes, as a person runs them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tuiagent.config import shipped_models_file


def tuiagent(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_an_untouched_copy_of_the_shipped_models_toml_works_with_models(tmp_path):
    copy = tmp_path / "elsewhere" / "models.toml"
    copy.parent.mkdir()
    shutil.copy(str(shipped_models_file()), copy)
    listed = tuiagent("models", "--models", str(copy))
    assert listed.returncode == 0, listed.stderr
    guards = tuiagent("guards", "--models", str(copy))
    assert guards.returncode == 0, guards.stderr
    assert "attc.threshold = 0.9112" in guards.stdout  # the shipped calibration is still found


def test_a_missing_calibration_file_names_the_paths_tried_and_a_fix_that_works(tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(
        '[models.m]\nbackend = "scripted"\ncalibration = "calibration/m.toml"\n[models.m.source]\nkind = "script"\n'
    )
    out = tuiagent("models", "--models", str(models))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(tmp_path / "calibration" / "m.toml") in out.stderr and "fix:" in out.stderr
    assert "remove the key" in out.stderr


def test_the_commands_models_toml_names_exist():
    text = Path(str(shipped_models_file())).read_text(encoding="utf-8")
    helped = tuiagent("--help").stdout
    for command in ("doctor", "calibrate", "fetch"):
        assert f"`tuiagent {command}" in text and command in helped
    assert "tuiagent paths" not in text


def test_guards_shows_the_value_a_run_gets_and_where_it_comes_from(tmp_path):
    shown = tuiagent("guards")
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if "attc.threshold" in x)
    assert "attc.threshold = 0.9112" in line and "calibration/qwen2.5-coder-1.5b.toml" in line
    assert "default 0.97 [ref]" in line
    models = tmp_path / "models.toml"
    models.write_text(
        '[models.m]\nbackend = "scripted"\n[models.m.source]\nkind = "script"\n'
        "[models.m.guards.attc]\nthreshold = 0.8\n"
    )
    own = tuiagent("guards", "--models", str(models), "-m", "m")
    assert own.returncode == 0, own.stderr
    line = next(x for x in own.stdout.splitlines() if "attc.threshold" in x)
    assert "attc.threshold = 0.8" in line and str(models) in line
    assert "attc.threshold = 0.97  [ref]" in tuiagent("guards", "-m", "scripted").stdout  # no calibration


def test_fork_says_the_kernel_sandbox_once(write_script, tmp_path):
    script = write_script("Compute.\n```python\nprint(6 * 7)\n```\n```output", "So \\boxed{42}.")
    common = ["-m", "scripted", "--script", str(script)]
    parent = tuiagent("solve", "What is 6 times 7?", *common, "--out", str(tmp_path / "parent.jsonl"))
    assert parent.returncode == 0, parent.stderr
    assert parent.stdout.count("kernel sandbox: ") == 1
    fork = tuiagent("fork", str(tmp_path / "parent.jsonl"), "-s", "1", *common, "--out", str(tmp_path / "f.jsonl"))
    assert fork.returncode == 0, fork.stderr
    assert fork.stdout.count("kernel sandbox: ") == 1, fork.stdout
    assert "forked from run" in fork.stdout


def test_a_problem_that_leaves_no_room_to_answer_is_refused_before_any_work(write_script, tmp_path):
    from tuiagent.runner import MIN_ROOM_TOKENS

    script = write_script("So \\boxed{1}.")
    common = ["-m", "scripted", "--script", str(script), "--out", str(tmp_path / "runs")]
    out = tuiagent("solve", "word " * 4000, *common)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    error, fix = out.stderr.strip().splitlines()
    assert "leaves too little room to answer" in error and "of the 4096 tokens of scripted's context" in error
    assert f"needs at least {MIN_ROOM_TOKENS}" in error and fix.strip().startswith("fix: shorten the problem")
    assert not (tmp_path / "runs").exists()  # no run was started


def test_a_problem_that_leaves_little_room_runs_with_a_warning_that_states_the_room(write_script, tmp_path):
    """Room for the answer, but less than a turn may generate: the run goes on, and its first lines
    (and the trajectory) say how many tokens are left (issue 39 item 3)."""
    script = write_script("So \\boxed{1}.")
    out = tuiagent(
        "solve", "word " * 3500, "-m", "scripted", "--script", str(script), "--out", str(tmp_path / "r.jsonl")
    )
    assert out.returncode == 0, out.stderr
    warning = next(line for line in out.stdout.splitlines() if "to answer in" in line)
    room = int(re.search(r"leaves (\d+) of the 4096 tokens of scripted's context", warning).group(1))
    assert 256 <= room < 1024 and "may end cut off" in warning
    assert "answer: 1" in out.stdout
    assert "to answer in" in (tmp_path / "r.jsonl").read_text(encoding="utf-8")
    roomy = tuiagent(
        "solve", "word " * 100, "-m", "scripted", "--script", str(script), "--out", str(tmp_path / "s.jsonl")
    )
    assert roomy.returncode == 0 and "to answer in" not in roomy.stdout


def test_solve_echoes_a_long_problem_shortened(write_script, tmp_path):
    script = write_script("So \\boxed{1}.")
    problem = "How many apples? " + "x" * 2000
    out = tuiagent("solve", problem, "-m", "scripted", "--script", str(script), "--no-tool", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    header = next(line for line in out.stdout.splitlines() if line.startswith("problem: "))
    assert header.startswith("problem: How many apples? xxx") and header.endswith(f"… ({len(problem):,} chars)")
    assert len(header) < 260
