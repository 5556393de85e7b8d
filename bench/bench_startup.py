"""Benchmark start-up: seconds from a fresh process to the model being ready, and to the first
streamed token, for one or two source trees of tuiagent (e.g. before and after a change).

    python bench/bench_startup.py [--model qwen2.5-coder-1.5b] [--reps 3] [--before PATH]

Each measurement is a new Python process that does what the app does before it says "ready":
import the runner, resolve the model in models.toml, open its backend (for llama_cpp: load the
weights; since the worker process, also start the worker and sample the smoke-check token); then
it streams a one-line chat prompt and stops at the first token. Times are wall clock from just
before the process is spawned. With ``--before PATH`` (another checkout, e.g. a ``git worktree``
of an older commit) the two trees alternate, run by run, in the same virtual environment.

Prints a table; writes bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, sys, time
from tuiagent.runner import open_model, resolve_spec
from tuiagent.protocol import Sampling
backend = open_model(resolve_spec(sys.argv[1]))
ready = time.time()
async def first():
    prompt = backend.render_chat([{"role": "user", "content": "What is 2 + 3?"}])
    async for _ in backend.stream(prompt, Sampling(temperature=0.0, max_tokens=1), []):
        return time.time()
first_token = asyncio.run(first())
import tuiagent
print(ready, first_token, tuiagent.__file__, flush=True)
asyncio.run(backend.aclose())
"""


def measure(tree: Path, model: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, model], env=env, cwd=tree, capture_output=True, text=True, check=True
    ).stdout.split()
    ready, first, where = float(out[0]), float(out[1]), out[2]
    assert where.startswith(str(tree)), f"imported tuiagent from {where}, not {tree}"
    return {"ready_s": ready - t0, "first_token_s": first - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--before", type=Path, help="another source tree to compare with (e.g. a worktree of HEAD~1)")
    args = ap.parse_args()
    trees = {"after": ROOT}
    if args.before:
        trees = {"before": args.before.resolve(), **trees}
    measure(ROOT, args.model)  # warm the page cache for the model file
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for i in range(args.reps):
        for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
            runs[name].append(measure(trees[name], args.model))
    summary = {
        name: {k: statistics.median(r[k] for r in rs) for k in ("ready_s", "first_token_s")}
        for name, rs in runs.items()
    }
    print(f"\nstart-up, {args.model}, median of {args.reps} (wall seconds from process spawn)")
    print(f"  {'tree':<8} {'ready':>8} {'first token':>12}")
    for name, s in summary.items():
        print(f"  {name:<8} {s['ready_s']:>8.2f} {s['first_token_s']:>12.2f}")
    if "before" in summary:
        for k in ("ready_s", "first_token_s"):
            print(f"  after/before {k}: {summary['after'][k] / summary['before'][k]:.3f}")
    result = {
        "model": args.model,
        "reps": args.reps,
        "summary": summary,
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    out = ROOT / "bench" / "results" / "startup.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
