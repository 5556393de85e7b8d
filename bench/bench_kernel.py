"""Round-trip latency of one cell: JupyterKernel vs a bare jupyter-client loop vs a fresh process per call.

    python bench/bench_kernel.py [--n 200] [--n-fresh 15] [--n-start 5]

Ours runs at the sandbox level ``auto`` resolves to here (the strongest: ``strict`` where the OS
boundary works); bare is the same ipykernel with no sandbox, no policy and no limits. Kernel start
time (start-up cell included) is measured at each level this machine has.

Ours and bare run interleaved (alternating which goes first) on two kernels
of the same kind, so load from elsewhere on the machine hits both alike.
Prints a table and writes bench/results/kernel.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.jupyter import JupyterKernel  # noqa: E402
from kernels.launch import launch_kwargs, new_kernel_manager  # noqa: E402
from kernels.limits import PRE_IMPORTS  # noqa: E402
from kernels.sandbox import LEVELS, SandboxUnavailable, describe, resolve  # noqa: E402

CELLS = {
    "print": "print(1)",
    "sympy": "print(sympy.factorint(2**32 + 1))",
}
WARMUP = 10
RESULTS = Path(__file__).resolve().parent / "results" / "kernel.json"


class BareKernel:
    """The same kind of kernel driven the plainest way: execute, then read IOPub until idle."""

    async def start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="bench-bare-"))
        self._km = new_kernel_manager(self._dir)
        await self._km.start_kernel(**launch_kwargs(self._dir, self._dir))
        self._client = self._km.client()
        self._client.start_channels(stdin=False, hb=False, control=False)
        while (await self._client.get_iopub_msg())["msg_type"] != "iopub_welcome":
            pass
        await self.run(PRE_IMPORTS)

    async def run(self, code: str) -> None:
        msg_id = self._client.execute(code)
        while True:
            msg = await self._client.get_iopub_msg()
            if (
                msg["parent_header"].get("msg_id") == msg_id
                and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"
            ):
                return

    async def shutdown(self) -> None:
        self._client.stop_channels()
        await self._km.shutdown_kernel(now=True)
        shutil.rmtree(self._dir, ignore_errors=True)


def summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {"p50_ms": round(statistics.median(ms), 2), "p90_ms": round(statistics.quantiles(ms, n=10)[8], 2)}


async def timed(call) -> float:
    start = time.perf_counter()
    await call
    return time.perf_counter() - start


async def bench_kernels(n: int) -> dict[str, dict[str, list[float]]]:
    ours, bare = JupyterKernel(), BareKernel()
    await asyncio.gather(ours.start(), bare.start())
    samples = {cell: {"ours": [], "bare": []} for cell in CELLS}
    try:
        for cell, code in CELLS.items():
            for i in range(WARMUP + n):
                pair = [("ours", ours.execute(code)), ("bare", bare.run(code))]
                for name, call in pair if i % 2 else reversed(pair):
                    took = await timed(call)
                    if i >= WARMUP:
                        samples[cell][name].append(took)
        check = await ours.execute(CELLS["sympy"])
        assert not check.error and "641" in check.text, check
    finally:
        await asyncio.gather(ours.shutdown(), bare.shutdown())
    return samples


async def bench_starts(n: int) -> dict[str, dict[str, float]]:
    """Seconds from start() to a kernel that has run its start-up cell, per sandbox level."""
    starts = {}
    for level in [lv for lv in LEVELS if lv != "auto"]:
        try:
            resolve(level)
        except SandboxUnavailable:
            continue
        took = []
        for _ in range(n):
            kernel = JupyterKernel(sandbox=level)
            took.append(await timed(kernel.start()))
            await kernel.shutdown()
        starts[level] = {"p50_s": round(statistics.median(took), 3), "max_s": round(max(took), 3)}
    return starts


def bench_fresh(code: str, n: int) -> list[float]:
    """A new interpreter per call, importing what our kernels pre-import."""
    argv = [sys.executable, "-c", f"import sympy, numpy\n{code}"]
    took = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        took.append(time.perf_counter() - start)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="calls per cell for ours and bare")
    parser.add_argument("--n-fresh", type=int, default=15, help="calls per cell for the fresh process")
    parser.add_argument("--n-start", type=int, default=5, help="kernel starts per sandbox level")
    args = parser.parse_args()

    samples = asyncio.run(bench_kernels(args.n))
    starts = asyncio.run(bench_starts(args.n_start))
    report: dict = {
        "n": args.n,
        "n_fresh": args.n_fresh,
        "sandbox": describe("auto"),
        "start": starts,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
        "cells": {},
    }
    print(f"{'cell':7} {'executor':6} {'p50 ms':>9} {'p90 ms':>9}")
    for cell, code in CELLS.items():
        stats = {name: summary(s) for name, s in samples[cell].items()}
        stats["fresh"] = summary(bench_fresh(code, args.n_fresh))
        stats["ratios"] = {
            "ours_over_bare_p50": round(stats["ours"]["p50_ms"] / stats["bare"]["p50_ms"], 3),
            "fresh_over_ours_p50": round(stats["fresh"]["p50_ms"] / stats["ours"]["p50_ms"], 1),
        }
        report["cells"][cell] = {"code": code, **stats}
        for name in ("ours", "bare", "fresh"):
            print(f"{cell:7} {name:6} {stats[name]['p50_ms']:9.2f} {stats[name]['p90_ms']:9.2f}")
        r = stats["ratios"]
        print(f"{cell:7} ours/bare {r['ours_over_bare_p50']:.3f}   fresh/ours {r['fresh_over_ours_p50']:.1f}")
    print(f"ours ran at sandbox {report['sandbox']}")
    for level, start in starts.items():
        print(f"kernel start at {level:6}: p50 {start['p50_s']:.2f} s, max {start['max_s']:.2f} s")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
