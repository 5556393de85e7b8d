"""Orchestration overhead of the agent loop: a multi-turn scripted run where the model and the kernel cost nothing.

Reports time per step (one turn: generate, parse, execute, append) spent outside the model and the kernel,
with and without the trajectory recorder. Target: under 2 ms per step.

    python bench/bench_loop.py [--turns 8] [--repeats 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core.loop import Agent
from tuiagent.core.trajectory import Recorder
from tuiagent.protocol import RunSettings

RESULTS = Path(__file__).parent / "results" / "loop.json"


class InstantKernel:
    """Benchmark double: returns a fixed result at once, so only the loop's own work is timed."""

    async def execute(self, code: str, timeout: float) -> CellResult:
        return CellResult(outputs=(Output("stdout", "42\n"),))


def script(turns: int) -> list:
    reasoning = "We need to compute the value carefully, step by step, using the numbers given. " * 3
    code_turn = reasoning + "\n```python\nx = 6 * 7\nprint(x)\n```\n```output"
    return [split_tokens(code_turn, -0.01) for _ in range(turns - 1)] + [split_tokens("So \\boxed{42}.", -0.01)]


async def one_run(turns: int, record: bool) -> tuple[float, int, int]:
    backend = ScriptedBackend(script(turns))
    settings = RunSettings(max_tool_calls=turns, max_tokens=100_000)
    with tempfile.TemporaryDirectory() as tmp:
        recorder = Recorder(Path(tmp) / "run.jsonl") if record else None
        agent = Agent(backend, InstantKernel(), settings=settings, recorder=recorder)
        start = time.perf_counter()
        n_events = 0
        async for _ in agent.stream("What is 6 times 7?"):
            n_events += 1
        elapsed = time.perf_counter() - start
        if recorder:
            recorder.close()
    return elapsed, n_events, backend.stats.generated_tokens


async def main(turns: int, repeats: int) -> dict:
    results = {}
    for record in (False, True):
        times = []
        for _ in range(repeats):
            elapsed, n_events, n_tokens = await one_run(turns, record)
            times.append(elapsed)
        per_step = statistics.median(times) / turns * 1000
        key = "with_recorder" if record else "no_recorder"
        results[key] = {"ms_per_step_p50": round(per_step, 3), "events": n_events, "tokens": n_tokens}
        print(
            f"{key:14s} {per_step:7.3f} ms/step  ({turns} steps, {n_tokens} tokens, {n_events} events, median of {repeats})"
        )
    results["target_ms_per_step"] = 2.0
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    out = asyncio.run(main(args.turns, args.repeats))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
