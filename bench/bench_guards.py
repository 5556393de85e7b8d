"""Guard cost: microseconds per decision for every guard, and as a share of a real run's wall time.

Replays the recorded erroneous trajectories (tests/data/erroneous, see bench_prunetir.py) with
every guard on, timing each guard's hooks. The share of wall time compares the guards' total
time per run with the wall time of real runs of the default model (the tool-mode runs recorded
by the G-STEP collection in data/gstep/). Target: under 1%.

    python bench/bench_guards.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_prunetir import SETTINGS, BranchingBackend, ReplayKernel, all_recorded  # noqa: E402

from guards.chain import GuardChain, available  # noqa: E402
from tuiagent.core.loop import Agent  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "data" / "gstep" / "records-qwen2.5-coder-1.5b.jsonl"
RESULTS = Path(__file__).parent / "results" / "guards.json"
HOOKS = ("on_start", "on_code", "on_tool_result", "on_answer", "on_finish")


def timed(method, samples: list[float]):
    """Wrap a sync or async hook so each call's own time is recorded."""
    if asyncio.iscoroutinefunction(method):

        async def wrapper(*args):
            start = time.perf_counter()
            result = await method(*args)
            samples.append(time.perf_counter() - start)
            return result
    else:

        def wrapper(*args):
            start = time.perf_counter()
            result = method(*args)
            samples.append(time.perf_counter() - start)
            return result

    return wrapper


async def replay_all(repeats: int) -> tuple[dict[str, list[float]], float]:
    """Per-guard decision times over all replays, and the mean total guard time per run."""
    per_guard: dict[str, list[float]] = {}
    totals = []
    recs = all_recorded()
    for i in range(repeats + 1):
        if i == 1:  # the first pass warms caches and imports
            per_guard.clear()
            totals.clear()
        for rec in recs:
            chain = GuardChain({name: {} for name in available()}, set(available()))
            run_samples: list[float] = []
            for name, guard in chain.instances.items():
                bucket = per_guard.setdefault(name, [])
                for hook in HOOKS:
                    if hasattr(guard, hook):
                        inner = timed(getattr(guard, hook), bucket)
                        setattr(guard, hook, timed(inner, run_samples))
            agent = Agent(BranchingBackend(rec.branches), ReplayKernel(rec.results), settings=SETTINGS, guards=chain)
            async for _ in agent.stream(rec.problem, gold=rec.gold):
                pass
            totals.append(sum(run_samples))
    return per_guard, statistics.mean(totals)


def real_run_wall_s() -> float | None:
    """Median wall time of real tool-mode runs of the default model, if recorded."""
    if not RECORDS.exists():
        return None
    walls = [json.loads(line)["tool"]["wall_s"] for line in RECORDS.read_text().splitlines() if line.strip()]
    return statistics.median(walls) if walls else None


def main(repeats: int) -> dict:
    per_guard, total_per_run = asyncio.run(replay_all(repeats))
    out: dict = {"per_guard": {}}
    for name, samples in sorted(per_guard.items()):
        samples.sort()
        out["per_guard"][name] = {
            "decisions": len(samples),
            "us_p50": round(statistics.median(samples) * 1e6, 1),
            "us_p95": round(samples[int(0.95 * (len(samples) - 1))] * 1e6, 1),
        }
        print(
            f"{name:10s} {len(samples):5d} decisions  p50 {out['per_guard'][name]['us_p50']:8.1f} us  "
            f"p95 {out['per_guard'][name]['us_p95']:8.1f} us"
        )
    wall = real_run_wall_s()
    out["guard_ms_per_run"] = round(total_per_run * 1e3, 3)
    out["real_run_wall_s_median"] = wall
    out["share_of_real_run"] = round(total_per_run / wall, 6) if wall else None
    print(f"all guards: {total_per_run * 1e3:.2f} ms per run", end="")
    if wall:
        print(f"; a real default-model run takes {wall:.1f} s (median): {100 * total_per_run / wall:.4f}% of it")
    else:
        print()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    result = main(args.repeats)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
