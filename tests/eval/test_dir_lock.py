"""One writer per eval directory: a second eval on the same --out is refused, naming the holder;
a holder killed with SIGKILL leaves nothing that blocks the next one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.eval.helpers import answer_turn
from tuiagent.errors import ConfigError
from tuiagent.eval.dir_lock import DirectoryBusy, exclusive

HOLD = (
    "import sys; from pathlib import Path; from tuiagent.eval.dir_lock import exclusive\n"
    "with exclusive(Path(sys.argv[1])):\n"
    "    print('held', flush=True); sys.stdin.read()\n"
)


def holder(directory: Path) -> subprocess.Popen:
    """A child process that holds ``directory``'s lock until its stdin closes (or it is killed)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"  # waits for the condition, no sleep
    return proc


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("report_only", [False, True])
def test_a_second_eval_on_the_same_out_is_refused_naming_the_holder(write_script, tmp_path, report_only):
    out, script = tmp_path / "out", write_script(answer_turn("2"))
    proc = holder(out)
    try:
        args = ["eval", "demo", "-m", "scripted", "--script", str(script), "--out", str(out), "-q"]
        second = tuiagent(*args, *(["--report-only"] if report_only else []))
    finally:
        proc.kill()
        proc.wait()
    assert second.returncode == 2, second.stderr
    assert f"another tuiagent eval (PID {proc.pid}) is writing to {out}" in second.stderr
    assert "fix: wait for it to finish (or stop it), or pass another --out" in second.stderr
    assert not (out / "results.jsonl").exists()  # it wrote nothing


def test_a_holder_killed_with_sigkill_leaves_nothing_that_blocks(tmp_path):
    out = tmp_path / "out"
    proc = holder(out)
    with pytest.raises(DirectoryBusy, match=f"PID {proc.pid}"), exclusive(out):
        pass
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    with exclusive(out):  # the stale lock file is there, its lock is not
        assert (out / "eval.lock").read_text() == f"{os.getpid()}\n"
    with exclusive(out):  # and released again on leaving
        pass


def test_a_directory_that_cannot_hold_the_lock_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with (
        pytest.raises(ConfigError, match="cannot take the eval directory's lock") as refused,
        exclusive(tmp_path / "file" / "out"),
    ):
        pass
    assert "fix: pass an --out you can write to" in str(refused.value)


def test_two_real_evals_on_one_out_then_a_kill_9(write_script, tmp_path):
    """An eval in flight holds its --out: a second is refused naming it; after a kill -9 the next one runs."""
    models = tmp_path / "slow.toml"
    models.write_text(
        '[models.scripted-slow]\nbackend = "scripted"\nchat_template = "raw"\n'
        '[models.scripted-slow.source]\nkind = "script"\npath = ""\n[models.scripted-slow.options]\ndelay_s = 0.05\n',
        encoding="utf-8",
    )
    slow, out = write_script("word " * 400, name="slow.jsonl"), tmp_path / "out"  # 20 s a run
    args = ["eval", "demo", "--limit", "2", "-c", "none", "--out", str(out), "-q", "-f", "json"]
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuiagent",
            *args,
            "--models",
            str(models),
            "-m",
            "scripted-slow",
            "--script",
            str(slow),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(out.glob("runs/*/*/*.jsonl")) and time.monotonic() < deadline:  # a run is in flight
            time.sleep(0.05)
        assert any(out.glob("runs/*/*/*.jsonl")), "no run started within 60 s"
        fast = write_script(answer_turn("153"))
        second = tuiagent(*args, "-m", "scripted", "--script", str(fast))
        assert second.returncode == 2 and f"(PID {first.pid})" in second.stderr, second.stderr
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=60) == -signal.SIGKILL
    finally:
        first.kill()
        first.wait()
    third = tuiagent(*args, "-m", "scripted", "--script", str(fast))
    assert third.returncode == 0, third.stderr
    assert "is writing to" not in third.stderr
    lines = (out / "results.jsonl").read_text().splitlines()
    keys = [json.loads(line)["key"] for line in lines]
    assert len(keys) == len(set(keys)) == 2
