"""Loading what a user hands us: deeply nested or gigantic lines, device files, FIFOs, non-UTF-8
scripts and an --out that names someone else's file get clear errors or warnings, never a
traceback or unbounded memory."""

from __future__ import annotations

import json
import os

import pytest

from tests.test_cli import tuiagent
from tuiagent.core import trajectory
from tuiagent.core.events import SCHEMA, SCHEMA_VERSION
from tuiagent.core.trajectory import Recorder, TrajectoryError, load

HEADER = json.dumps({"schema": SCHEMA, "version": SCHEMA_VERSION})


def test_a_deeply_nested_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "nested.jsonl"
    path.write_text(HEADER + "\n" + "[" * 100_000 + "\n", encoding="utf-8")
    loaded = load(path)
    assert loaded.events == [] and "nested too deeply" in loaded.warnings[0]


def test_a_gigantic_line_is_skipped_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(trajectory, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "big.jsonl"
    path.write_text(HEADER + "\n" + json.dumps({"type": "Notice", "message": "x" * 5000}) + "\n", encoding="utf-8")
    assert "longer than" in load(path).warnings[0]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_file_is_refused_at_once(device):
    with pytest.raises(TrajectoryError, match="not a regular file"):
        load(device)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(TrajectoryError, match="not a regular file"):
        load(fifo)


def test_a_recorder_never_appends_to_a_file_that_is_not_a_trajectory(tmp_path):
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my notes\n")
    with pytest.raises(TrajectoryError, match="is not a trajectory"):
        Recorder(foreign)
    assert foreign.read_text() == "my notes\n"


def test_on_the_command_line_each_gets_a_clear_error(tmp_path, write_script):
    replayed = tuiagent("replay", "/dev/zero", "--print")
    assert replayed.returncode != 0 and "not a regular file" in replayed.stderr and "Traceback" not in replayed.stderr

    foreign = tmp_path / "notes.jsonl"
    foreign.write_text("my notes\n")
    script = write_script("\\boxed{1}")
    solved = tuiagent("solve", "p", "-m", "scripted", "--script", str(script), "--out", str(foreign))
    assert solved.returncode != 0 and "is not a trajectory" in solved.stderr and "Traceback" not in solved.stderr
    assert foreign.read_text() == "my notes\n"

    latin1 = tmp_path / "script.jsonl"
    latin1.write_bytes(json.dumps({"text": "caf\u00e9"}).encode().replace(b"\\u00e9", b"\xe9") + b"\n")
    bad = tuiagent("solve", "p", "-m", "scripted", "--script", str(latin1), "--out", str(tmp_path / "runs"))
    assert bad.returncode != 0 and "not UTF-8" in bad.stderr and "Traceback" not in bad.stderr
