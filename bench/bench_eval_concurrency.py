"""Eval throughput against concurrency, with a scripted backend that simulates a shared model server.

The simulated server generates one token every ``--token-ms`` (20 ms) per stream while it serves at
most ``--capacity`` streams (N); beyond that its total token rate is fixed, so every stream slows in
proportion (model saturation): per-token time = token_ms * max(1, active / N). Each request also
waits a time-to-first-token (``--ttft-ms``), scaled the same way. Each problem is one run of the
whole eval path (``tuiagent.eval.harness.run_eval``: results file fsynced per run, trajectory,
metrics, math-verify): a code turn, a tool call, an answer turn.

Part 1 (harness + server): tool calls go to an in-process stub kernel; throughput in problems per
minute for concurrency 1, 2, 4, 8, 16. Expected: nearly linear up to N, flat after.
Part 2 (kernel-pool overhead): the same with real Jupyter kernels from the KernelPool (one fresh
kernel per run, ``concurrency`` warm); the difference per run is the pool's cost on this machine.

    python bench/bench_eval_concurrency.py [--capacity 8] [--token-ms 20] [--levels 1,2,4,8,16]
        [--jupyter-levels 1,2,4] [--quick]

Writes bench/results/eval_concurrency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.presets import resolve_settings

RESULTS = Path(__file__).parent / "results" / "eval_concurrency.json"

REASONING = (
    "We need the total of the two numbers. Adding them step by step, keeping track of each value, "
    "and then checking the sum with the tool."
)


class SimulatedServer:
    """A shared model server: full speed for up to ``capacity`` streams, then a fixed total token rate."""

    def __init__(self, capacity: int, token_s: float, ttft_s: float):
        self.capacity, self.token_s, self.ttft_s = capacity, token_s, ttft_s
        self.active = 0
        self.peak = 0
        self.tokens = 0

    def slowdown(self) -> float:
        return max(1.0, self.active / self.capacity)


class ServerBackend(ScriptedBackend):
    """A scripted backend whose tokens arrive at the simulated server's pace."""

    def __init__(self, turns, server: SimulatedServer):
        super().__init__(turns, model_id="scripted")
        self.server = server

    async def generate(self, out, prompt, sampling, stop):
        server = self.server
        server.active += 1
        server.peak = max(server.peak, server.active)
        try:
            await asyncio.sleep(server.ttft_s * server.slowdown())
            async for token in super().generate(out, prompt, sampling, stop):
                await asyncio.sleep(server.token_s * server.slowdown())
                server.tokens += 1
                yield token
        finally:
            server.active -= 1


class StubKernel:
    """Benchmark double for a kernel: evaluates ``print(a + b)`` in-process, no subprocess."""

    def __init__(self, **_: object):
        pass

    async def start(self) -> None: ...

    async def execute(self, code: str, timeout: float) -> CellResult:
        expr = code.strip().removeprefix("print(").removesuffix(")")
        return CellResult(outputs=(Output("stdout", f"{eval(expr, {'__builtins__': {}})}\n"),))

    async def interrupt(self) -> None: ...

    async def restart(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None: ...


def turns_for(job) -> list[list]:
    i = int(job.problem.question.split("What is ", 1)[1].split(" ", 1)[0])
    code = f"{REASONING}\n```python\nprint({i} + {i})\n```\n```output\n"
    return [split_tokens(code, -0.01), split_tokens(f"The sum is {2 * i}, so the answer is \\boxed{{{2 * i}}}.", -0.01)]


def write_dataset(path: Path, n: int) -> None:
    rows = [json.dumps({"question": f"What is {i} plus {i}?", "answer": f"#### {2 * i}"}) for i in range(1, n + 1)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


async def one_level(concurrency: int, problems: int, server: SimulatedServer, *, jupyter: bool, tmp: Path) -> dict:
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / f"bench-{concurrency}-{'jupyter' if jupyter else 'stub'}.jsonl"
    write_dataset(data, problems)
    out = tmp / f"out-{concurrency}-{'jupyter' if jupyter else 'stub'}"
    cfg = EvalConfig(
        datasets=[str(data)], settings=resolve_settings(["none"]), out=out, model="scripted", concurrency=concurrency
    )
    server.peak = server.tokens = 0
    kernels = None if jupyter else {"jupyter": lambda gold=None: StubKernel()}
    started = time.perf_counter()
    outcome = await run_eval(
        cfg, backend_factory=lambda job: ServerBackend(turns_for(job), server), kernels=kernels, log=lambda m: None
    )
    wall = time.perf_counter() - started  # includes warming the kernel pool
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert outcome.ran == problems and all(r["correct"] for r in records), "every simulated run should be right"
    return {
        "concurrency": concurrency,
        "problems": problems,
        "wall_s": round(wall, 3),
        "problems_per_min": round(60 * problems / wall, 1),
        "peak_streams": server.peak,
        "tokens_per_problem": round(server.tokens / problems, 1),
        "mean_run_wall_s": round(sum(r["wall_s"] for r in records) / len(records), 3),
    }


async def main(args: argparse.Namespace) -> dict:
    server = SimulatedServer(args.capacity, args.token_ms / 1000, args.ttft_ms / 1000)
    levels = [int(x) for x in args.levels.split(",") if x]
    jupyter_levels = [int(x) for x in args.jupyter_levels.split(",") if x]
    result: dict = {
        "benchmark": "eval throughput vs concurrency (simulated shared server)",
        "server": {
            "capacity_streams": args.capacity,
            "token_ms": args.token_ms,
            "ttft_ms": args.ttft_ms,
            "model": "per-token time = token_ms * max(1, active_streams / capacity)",
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        },
        "stub_kernel": [],
        "jupyter_pool": [],
    }
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["TUIAGENT_DATA_DIR"] = str(tmp / "data")
        await one_level(1, 2, server, jupyter=False, tmp=tmp / "warmup")  # imports, math-verify's first parse
        for c in levels:
            n = max(args.min_problems, args.per_stream * c)
            row = await one_level(c, n, server, jupyter=False, tmp=tmp)
            result["stub_kernel"].append(row)
            print(
                f"stub kernel  c={c:>2}: {row['problems']:>3} problems in {row['wall_s']:6.2f} s = "
                f"{row['problems_per_min']:7.1f} problems/min (peak {row['peak_streams']} streams)",
                flush=True,
            )
        base = result["stub_kernel"][0]["problems_per_min"]
        for row in result["stub_kernel"]:
            row["speedup"] = round(row["problems_per_min"] / base, 2)
            row["ideal_speedup"] = min(row["concurrency"], args.capacity)
            row["efficiency"] = round(row["speedup"] / row["ideal_speedup"], 2)
        stub = {r["concurrency"]: r for r in result["stub_kernel"]}
        for c in jupyter_levels:
            n = max(args.min_problems // 2, args.per_stream * c)
            row = await one_level(c, n, server, jupyter=True, tmp=tmp)
            ref = stub.get(c)
            if ref:
                per_run_stub = ref["wall_s"] / ref["problems"]
                per_run = row["wall_s"] / row["problems"]
                row["overhead_per_problem_s"] = round(per_run - per_run_stub, 3)
                row["throughput_vs_stub"] = round(row["problems_per_min"] / ref["problems_per_min"], 2)
            result["jupyter_pool"].append(row)
            print(
                f"jupyter pool c={c:>2}: {row['problems']:>3} problems in {row['wall_s']:6.2f} s = "
                f"{row['problems_per_min']:7.1f} problems/min (overhead/problem "
                f"{row.get('overhead_per_problem_s', 'n/a')} s)",
                flush=True,
            )
    result["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=8, help="streams the simulated server serves at full speed")
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--levels", default="1,2,4,8,16")
    parser.add_argument("--jupyter-levels", default="1,2,4")
    parser.add_argument("--per-stream", type=int, default=4, help="problems per concurrent stream at each level")
    parser.add_argument("--min-problems", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="fewer problems (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.per_stream, args.min_problems, args.levels, args.jupyter_levels = 2, 4, "1,4,16", "1"
    data = asyncio.run(main(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
