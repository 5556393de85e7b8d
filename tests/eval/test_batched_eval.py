"""An eval on the real local model (SmolLM2-135M through llama.cpp) with 4 runs in flight on the
batched engine: killed with SIGKILL midway and resumed, it ends with the same results, turn for
turn, as the same eval run one at a time on the single-sequence engine, and no run of either is cut by
a wall clock (an eval has none unless asked). Kernels: the CalcKernel
test double from the pool (the model and its engine are what this test is about)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.backends.conftest import smollm2_path  # noqa: F401 - a fixture
from tuiagent.core.trajectory import load
from tuiagent.eval.results import ResultStore

pytestmark = pytest.mark.slow

DRIVER = """
import asyncio, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from tests.eval.helpers import CalcKernel
from tuiagent.core.run_spec import RunSpec
from tuiagent.presets import resolve_settings
from tuiagent.eval.harness import EvalConfig, run_eval

cfg = EvalConfig(datasets=[{data!r}], settings=resolve_settings(["none"]), out=Path({out!r}), model="smollm2-135m",
                 concurrency={concurrency}, base=RunSpec(run={{"max_tokens": 120, "max_tool_calls": 2}}))
asyncio.run(run_eval(cfg, kernels={{"jupyter": lambda gold=None: CalcKernel()}},
                     on_record=lambda r: print("done", r["key"], flush=True), log=lambda m: print(m, flush=True)))
"""
CONTENT = ("answer", "correct", "reason", "tcn", "tool_calls", "blocks", "generated_tokens", "turns", "wtn")


@pytest.fixture
def problems(tmp_path: Path, smollm2_path) -> Path:  # noqa: F811 - the fixture imported above
    path = tmp_path / "tiny.jsonl"
    rows = [
        {"question": f"A shop sells {i} boxes of {i + 3} pens. How many pens is that?", "answer": f"#### {i * (i + 3)}"}
        for i in range(2, 8)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def driver(tmp_path: Path, data: Path, out: Path, concurrency: int) -> list[str]:
    root = str(Path(__file__).resolve().parents[2])
    script = tmp_path / f"driver{concurrency}.py"
    script.write_text(textwrap.dedent(DRIVER.format(root=root, data=str(data), out=str(out), concurrency=concurrency)))
    return [sys.executable, str(script)]


def content(out: Path) -> dict[str, tuple]:
    """Per run: its numbers and the model's text, turn by turn (not its timings or paths)."""
    records = ResultStore(out).records
    return {
        key: (
            tuple(r[k] for k in CONTENT),
            tuple(e.text for e in load(Path(r["trajectory"])).events if e.type == "TurnEnded"),
        )
        for key, r in records.items()
    }


def test_four_in_flight_killed_and_resumed_equals_one_at_a_time(tmp_path, problems):
    one = subprocess.run(driver(tmp_path, problems, tmp_path / "one", 1), capture_output=True, text=True, timeout=900)
    assert one.returncode == 0, one.stderr[-2000:]

    four = tmp_path / "four"
    proc = subprocess.Popen(driver(tmp_path, problems, four, 4), stdout=subprocess.PIPE, text=True)
    done, said = [], []
    deadline = time.monotonic() + 600
    while len(done) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        said.append(line)
        if line.startswith("done"):
            done.append(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)  # a crash: no clean-up; the model worker exits with its parent
    proc.wait()
    assert len(done) == 2, "".join(said)
    assert any("4 run(s) in flight on llama.cpp's batched engine" in line for line in said)
    saved = set(ResultStore(four).records)
    assert set(done) <= saved and len(saved) < 6
    rest = subprocess.run(driver(tmp_path, problems, four, 4), capture_output=True, text=True, timeout=900)
    assert rest.returncode == 0, rest.stderr[-2000:]
    ran = {line.split()[1] for line in rest.stdout.splitlines() if line.startswith("done")}
    assert ran.isdisjoint(saved) and len(ran | saved) == 6

    runs = content(four)
    assert runs == content(tmp_path / "one")
    assert all(numbers[CONTENT.index("generated_tokens")] > 0 and turns[0] for numbers, turns in runs.values())
    # no wall clock (an eval's default): no run ends where the load put it, 1 or 4 in flight
    for out in (four, tmp_path / "one"):
        records = ResultStore(out).records.values()
        assert all(r["reason"] != "time_budget" for r in records)
        assert all(load(Path(r["trajectory"])).events[0].settings["max_wall_s"] is None for r in records)
