"""A short soak (bench/bench_soak.py): 16 runs of the eval harness with real kernels, 4 at a time, in
four shapes (plain, error then fix, timeout, dead kernel), leave no process, kernel, descriptor or
kernel directory behind, and every trajectory is complete and right."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import pytest


def bench_soak():
    """The benchmark's module (bench/ is not a package)."""
    if "bench_soak" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "bench" / "bench_soak.py"
        spec = importlib.util.spec_from_file_location("bench_soak", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_soak"]


@pytest.mark.slow  # 10-30 s
async def test_short_soak_leaks_nothing():
    # A short directory of its own, so the kernels' directories stay in it to be counted: under a
    # temp dir too long for their IPC sockets (pytest-xdist's tmp_path) they would go to /tmp.
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    try:
        result = await bench_soak().soak(tmp, max_runs=16, concurrency=4, batch=8, sample_s=0.5)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert result["problems"] == []
    assert result["runs"] == 16 and result["batches"] == 2
    assert result["leaks"] == {"processes": 0, "kernels": 0, "fds": 0, "kernel_dirs": 0}
    assert result["peak"]["kernels"] >= 4  # the sampler saw the pool's kernels at work
