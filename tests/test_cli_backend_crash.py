"""`tuiagent solve` on the real SmolLM2 model whose worker process is killed mid-generation: the run
ends "backend_crashed" with a readable message (no traceback), the trajectory is complete, the exit
code is 1 and no worker or kernel process is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load

pytestmark = pytest.mark.slow
WORKER = "tuiagent.backends.llama_worker"


@pytest.fixture
def smollm2() -> str:
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    try:
        resolve_model_file(load_models().get("smollm2-135m"))
        import llama_cpp  # noqa: F401
    except Exception as e:  # noqa: BLE001 - no model here: skip, saying why
        pytest.skip(f"SmolLM2-135M is not available: {type(e).__name__}: {e}")
    return "smollm2-135m"


def until(condition, timeout: float, what: str):
    """Poll ``condition()`` until it returns something true; that value (fails after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return value


def cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone already
        return []


def tokens_recorded(runs: Path) -> bool:
    files = list(runs.glob("*.jsonl"))
    return bool(files) and any(isinstance(e, ev.TokenDelta) for e in load(files[0]).events)


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL], ids=["SIGSEGV", "SIGKILL"])
def test_solve_whose_model_process_dies_exits_1_with_the_reason(tmp_path, smollm2, sig):
    runs = tmp_path / "runs"
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuiagent",
                "solve",
                "-m",
                smollm2,
                "--out",
                str(runs),
                "--max-tokens",
                "400",
                "Count from 1 to 100, one number a line, then add them up.",
            ],
            stdout=stdout,
            stderr=stderr,  # the dead worker's log is kept in the cache dir: keep it in tmp_path
            env={**os.environ, "NO_COLOR": "1", "TUIAGENT_CACHE_DIR": str(tmp_path / "cache")},
        )
    try:
        parent = psutil.Process(proc.pid)

        def worker() -> psutil.Process | None:
            return next((p for p in parent.children(recursive=True) if WORKER in " ".join(cmdline(p))), None)

        model = until(worker, 120, "the model worker")
        until(lambda: tokens_recorded(runs), 120, "tokens in the trajectory")
        started = parent.children(recursive=True)  # the worker and the kernel
        assert len(started) >= 2, started
        os.kill(model.pid, sig)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    said = out.read_text() + err.read_text()
    assert code == 1, said
    assert f"died with {sig.name} while generating" in said
    assert "likely cause:" in said and "fix:" in said
    assert "Traceback" not in said
    assert f"log: {tmp_path / 'cache' / 'logs'}" in said
    loaded = load(next(runs.glob("*.jsonl")))
    assert loaded.warnings == []
    assert isinstance(loaded.events[-1], ev.RunFinished) and loaded.events[-1].reason == "backend_crashed"
    assert psutil.wait_procs(started, timeout=10)[1] == []  # no worker, no kernel left
