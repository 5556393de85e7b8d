"""The real app in a real terminal (tmux), with the real default model: type a problem, run it, read
the screen. Slow: the model generates a few tokens a second on a loaded 2-core CPU."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = "What is 17 * 23? Use Python."

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.timeout(900),
]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_for_text(session: str, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(session)
        if text in shown:
            return shown
        time.sleep(1)
    raise AssertionError(f"{text!r} did not appear within {timeout} s; the screen shows:\n{screen(session)}")


def test_solve_with_the_default_model_in_tmux(tmp_path):
    ready = subprocess.run([sys.executable, "-m", "tuiagent", "models"], capture_output=True, text=True, timeout=120)
    default = next((line for line in ready.stdout.splitlines() if line.lstrip().startswith("*")), "")
    if "ready" not in default:
        pytest.skip(f"the default model is not assembled: {default.strip()}")
    session = f"tuiagent-test-{uuid.uuid4().hex[:6]}"
    env = (
        f"TUIAGENT_DATA_DIR={shlex.quote(os.environ['TUIAGENT_DATA_DIR'])} "
        f"TUIAGENT_CONFIG_DIR={shlex.quote(os.environ['TUIAGENT_CONFIG_DIR'])}"
    )
    command = f"cd {shlex.quote(str(ROOT))} && {env} {shlex.quote(sys.executable)} -m tuiagent"
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "30", command)
    try:
        wait_for_text(session, "tuiagent · solve", 60)  # the first frames may still be drawing
        wait_for_text(session, "● ready", 300)  # the model loads in a worker; the screen says how long so far
        tmux("send-keys", "-t", session, "-l", PROBLEM)
        time.sleep(0.5)
        tmux("send-keys", "-t", session, "Tab")  # the gold answer box
        time.sleep(0.3)
        tmux("send-keys", "-t", session, "-l", "391")
        wait_for_text(session, "391", 10)
        wait_for_text(session, "guards: necessity tim", 10)  # the default preset, shown under the problem
        tmux("send-keys", "-t", session, "C-r")
        wait_for_text(session, "running", 30)
        shown = wait_for_text(session, "ANSWER", 600)
        assert "391" in shown and "right" in shown
        assert "calls" in shown and "tok/s" in shown and "ctx" in shown  # the status line
        runs = list((Path(os.environ["TUIAGENT_DATA_DIR"]) / "runs").glob("*.jsonl"))
        assert len(runs) == 1
        tmux("send-keys", "-t", session, "C-q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and session in tmux("ls"):
            time.sleep(0.5)
        assert session not in tmux("ls")  # it quit, the kernel and the model closed
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
