"""Every file tuiagent reads goes through safe_read: a FIFO or a link to /dev/zero gets a clear
error at once (never a hang, never MemoryError), and `runs list` skips such files with a note.
The CLI cases run the real program with a timeout: a hang fails the test instead of hanging it."""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.test_cli import tuiagent
from tuiagent.safe_read import UnreadableFile, read_bytes, read_text

DATA = Path(__file__).parent / "ui" / "data"


@pytest.fixture(params=["fifo", "zero"])
def odd_file(request, tmp_path) -> tuple[Path, str]:
    """A FIFO, or a symlink to /dev/zero, named like a JSONL file; and what the refusal calls it."""
    path = tmp_path / f"{request.param}.jsonl"
    if request.param == "fifo":
        os.mkfifo(path)
        return path, "not a regular file (a FIFO)"
    path.symlink_to("/dev/zero")
    return path, "not a regular file (a character device)"


def test_the_reader_refuses_what_is_not_a_regular_file_or_too_big(tmp_path, odd_file):
    path, why = odd_file
    with pytest.raises(UnreadableFile, match=re.escape(f"in {path}: cannot read the script: {why}")):
        read_bytes(path, limit=1 << 20, what="script")
    for what, noun in (("script", "script file"), ("records file", "records file")):  # "file" said once
        with pytest.raises(UnreadableFile, match=re.escape(f"fix: name a regular {noun} of at most 1 MB")):
            read_bytes(path, limit=1 << 20, what=what)
    big = tmp_path / "big.toml"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(UnreadableFile, match="more than a presets file can be"):
        read_bytes(big, limit=1024, what="presets file")
    assert read_bytes(big, limit=2048) == b"x" * 2048
    with pytest.raises(UnreadableFile, match="No such file") as missing:
        read_bytes(tmp_path / "gone", limit=1024)
    assert missing.value.missing and missing.value.exit_code == 2 and "\n  fix: " in str(missing.value)
    (tmp_path / "latin1").write_bytes(b"caf\xe9")
    with pytest.raises(UnreadableFile, match=r"not UTF-8 text \(byte 3\)"):
        read_text(tmp_path / "latin1", limit=1024)


def test_stdin_only_where_dash_is_given_and_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"1 + 1")))
    assert read_text("-", limit=1024, stdin=True) == "1 + 1"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnreadableFile, match="No such file"):  # a file named "-" otherwise
        read_text("-", limit=1024)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x" * 2000)))
    with pytest.raises(UnreadableFile, match="standard input holds more than"):
        read_text("-", limit=1024, stdin=True)


def test_runs_list_skips_a_fifo_and_a_link_to_dev_zero_with_a_note():
    runs = Path(os.environ["TUIAGENT_DATA_DIR"]) / "runs"
    runs.mkdir(parents=True)
    shutil.copy(DATA / "plain.jsonl", runs / "plain.jsonl")
    os.mkfifo(runs / "fifo.jsonl")
    (runs / "zero.jsonl").symlink_to("/dev/zero")
    (runs / "dangling.jsonl").symlink_to(runs / "nothing")
    listed = tuiagent("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"id": "plain"' in listed.stdout
    assert f"skipped {runs / 'fifo.jsonl'}: cannot read the trajectory: not a regular file (a FIFO)" in listed.stderr
    assert f"skipped {runs / 'zero.jsonl'}: cannot read the trajectory: not a regular file (a character device)" in (
        listed.stderr
    )
    assert f"skipped {runs / 'dangling.jsonl'}: cannot read the trajectory: No such file" in listed.stderr
    assert "Traceback" not in listed.stderr


def refused(result, path: Path, why: str) -> None:
    assert result.returncode == 2, result.stderr
    assert f"in {path}: " in result.stderr and why in result.stderr and "fix: " in result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr


def test_solve_with_such_a_script_exits_2_at_once(odd_file, tmp_path):
    path, why = odd_file
    solved = tuiagent("solve", "1 + 1", "-m", "scripted", "--script", str(path), "--out", str(tmp_path / "runs"))
    refused(solved, path, f"cannot read the script: {why}")


def test_models_with_such_a_models_file_exits_2_at_once(odd_file):
    path, why = odd_file
    refused(tuiagent("models", "--models", str(path)), path, f"cannot read the models file: {why}")


def test_replay_and_eval_of_such_a_file_exit_at_once(odd_file, tmp_path):
    path, why = odd_file
    replayed = tuiagent("replay", str(path), "--print")
    assert replayed.returncode != 0 and why in replayed.stderr and "Traceback" not in replayed.stderr
    evaluated = tuiagent("eval", str(path), "-m", "scripted", "--out", str(tmp_path / "out"), "-q")
    refused(evaluated, path, f"cannot read the dataset: {why}")
