"""Stopping `tuiagent solve` mid-run, as a person or the system does it, with the real kernel.

Ctrl-C (SIGINT) cancels the run: generation stops, a running cell is interrupted, the kernel is shut
down, the trajectory ends with a "cancelled" finish and the process exits with 130 within a second
or two. SIGKILL gives the process no chance to clean up: everything written before stays readable,
and the kernel, losing its parent, exits on its own (ipykernel's parent poller, JPY_PARENT_PID).
The runs are slowed down with the scripted backend's ``options.delay_s``.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load

SLOW_MODELS = """
[models.scripted-slow]
backend = "scripted"
chat_template = "raw"
[models.scripted-slow.source]
kind = "script"
path = ""
[models.scripted-slow.options]
delay_s = 0.05
"""
LONG_TURN = "word " * 400  # 20 s at 0.05 s a token
QUICK_CELL = "Six sevens.\n```python\nprint(6 * 7)\n```\n```output\n"
SLEEPING_CELL = "Wait.\n```python\nimport time\ntime.sleep(60)\n```\n```output\n"


class Solve:
    """`tuiagent solve --json` as a child process; its events are read as it prints them."""

    def __init__(self, tmp_path: Path, script: Path):
        models = tmp_path / "slow.toml"
        models.write_text(SLOW_MODELS, encoding="utf-8")
        self.runs = tmp_path / "runs"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuiagent",
                "solve",
                "x",
                "--models",
                str(models),
                "-m",
                "scripted-slow",
                "--script",
                str(script),
                "--json",
                "--timeout",
                "120",
                "--out",
                str(self.runs),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.seen: list[ev.Event] = []

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)

    def read_until(self, done: Callable[[list[ev.Event]], bool], timeout: float = 60) -> list[ev.Event]:
        """The events printed so far, once ``done(events)`` holds."""
        deadline = time.monotonic() + timeout
        while not done(self.seen):
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"no progress within {timeout} s; stderr: {self.proc.stderr.read()}") from None
            self.seen.append(ev.from_dict(json.loads(line)))
        return list(self.seen)

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def trajectory(self) -> Path:
        files = list(self.runs.glob("*.jsonl"))
        assert len(files) == 1, files
        return files[0]


@pytest.fixture
def start_solve(write_script, tmp_path):
    """Start `tuiagent solve` on the given turns; killed at the end of the test if still running."""
    started: list[Solve] = []

    def start(*turns: str) -> Solve:
        started.append(Solve(tmp_path, write_script(*turns)))
        return started[-1]

    yield start
    for s in started:
        s.proc.kill()
        s.proc.wait()


def tokens(turn: int, n: int) -> Callable[[list[ev.Event]], bool]:
    return lambda events: sum(isinstance(e, ev.TokenDelta) and e.turn == turn for e in events) >= n


def cell_started(events: list[ev.Event]) -> bool:
    return any(isinstance(e, ev.CodeBlock) for e in events)


def running_after(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``procs`` still running after up to ``timeout`` s (a zombie has exited; reaping it is
    up to its parent, here init)."""
    deadline = time.monotonic() + timeout
    while (running := [p for p in procs if is_running(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return running


def is_running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    "turns, ready, sig, said",
    [
        ([LONG_TURN], tokens(1, 10), signal.SIGINT, "interrupted"),
        ([SLEEPING_CELL], cell_started, signal.SIGINT, "interrupted"),
        ([SLEEPING_CELL], cell_started, signal.SIGTERM, "terminated"),
        ([LONG_TURN], tokens(1, 10), signal.SIGHUP, "terminated"),
    ],
    ids=["ctrl-c generating", "ctrl-c in a 60 s cell", "sigterm in a 60 s cell", "terminal closed generating"],
)
def test_ctrl_c_stops_the_run_and_the_kernel_and_saves(start_solve, turns, ready, sig, said):
    solve = start_solve(*turns)
    seen = solve.read_until(ready)
    time.sleep(0.3)  # the cell is running (or more tokens came)
    children = solve.children()
    assert children, "the kernel should be running"
    started = time.monotonic()
    solve.proc.send_signal(sig)
    code = solve.proc.wait(timeout=30)
    took = time.monotonic() - started
    stderr = solve.proc.stderr.read()
    assert code == 128 + sig, stderr
    assert took < 2.0, f"exit took {took:.2f} s"
    assert f"{said}: the run so far is in {solve.trajectory()}" in stderr
    loaded = load(solve.trajectory())
    events = loaded.events
    assert loaded.warnings == [] and events[: len(seen)] == seen
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "cancelled"
    assert not any(isinstance(e, ev.ToolResult) for e in events)  # generation or the cell was cut short
    assert running_after(children, 0) == []  # already shut down by the app, not left to the parent poller


@pytest.mark.parametrize(
    "turns, ready",
    [([QUICK_CELL, LONG_TURN], tokens(2, 10)), ([SLEEPING_CELL], cell_started)],
    ids=["generating", "in a 60 s cell"],
)
def test_kill_9_keeps_what_was_written_and_the_kernel_exits(start_solve, turns, ready):
    solve = start_solve(*turns)
    seen = solve.read_until(ready)
    children = solve.children()
    assert children, "the kernel should be running"
    solve.proc.kill()
    solve.proc.wait(timeout=30)
    loaded = load(solve.trajectory())
    events = loaded.events
    assert len(seen) > 5 and events[: len(seen)] == seen
    assert all("cut short" in w for w in loaded.warnings)  # at most the line being written at the kill
    assert not any(isinstance(e, ev.RunFinished) for e in events)
    assert running_after(children, 5.0) == [], "the kernel outlived the app"


def test_a_bad_token_delay_is_a_config_error(write_script, tmp_path):
    models = tmp_path / "bad.toml"
    models.write_text(SLOW_MODELS.replace("delay_s = 0.05", 'delay_s = "slow"'), encoding="utf-8")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuiagent",
            "solve",
            "x",
            "--models",
            str(models),
            "-m",
            "scripted-slow",
            "--script",
            str(write_script("\\boxed{1}")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        out.returncode == 2 and "models.scripted-slow.options.delay_s" in out.stderr and "Traceback" not in out.stderr
    )
