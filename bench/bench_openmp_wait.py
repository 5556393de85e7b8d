"""How llama.cpp's OpenMP threads wait at a barrier, against decode speed, idle and beside a busy core.

llama-cpp-python 0.3.36 builds llama.cpp with GCC's OpenMP (libgomp). A decode step is a graph of
about a thousand small operations with a barrier after each; what a thread does while it waits
there is set by the environment when the library loads:
- ``OMP_WAIT_POLICY=passive``: sleep at once (a futex wait; the waker pays a system call);
- ``GOMP_SPINCOUNT=N``: spin N times, then sleep (libgomp estimates about 100,000 spins a ms);
- neither: libgomp's default, 300,000 spins (about 3 ms);
- ``OMP_WAIT_POLICY=active``: spin for minutes.
Each configuration is measured in a fresh process (the variables are read once), decoding one token
for 1 sequence (plain weights, the one-sequence path) and for 4 (repacked weights, the batched
engine's 4 in flight), with the machine otherwise idle and beside one process that keeps a core
busy (what a Jupyter kernel running code, or another job, does). The configurations take turns
(``--rounds``) so that a busy spell hits them alike.

    python bench/bench_openmp_wait.py [--models qwen2.5-coder-1.5b,smollm2-135m] [--steps 30]
        [--rounds 2] [--spin 100,300,1000] [--out FILE]

Writes bench/results/openmp_wait.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

RESULTS = Path(__file__).parent / "results" / "openmp_wait.json"
OMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

# Runs in a fresh process: load the engine, fill 64 cells of each sequence, time decode steps.
STEP_LOOP = """
import sys, time
from tuiagent.backends.llama_batch import BatchEngine
path, width, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
engine = BatchEngine(path, n_ctx=1024, n_threads=2, n_batch=512, seed=0, min_p=0.0, prompt_chunk=None,
                     n_seq=width, repack=width > 1)
for s in range(width):
    engine._fill([(100 + i, i, s, i == 63) for i in range(64)])
for k in range(steps + 3):  # three warm-up steps
    if k == 3:
        started = time.perf_counter()
    engine._fill([(200, 64 + k, s, True) for s in range(width)])
print(1000 * (time.perf_counter() - started) / steps)
"""


def settings(spins: list[int]) -> dict[str, dict[str, str]]:
    return {
        "passive": {"OMP_WAIT_POLICY": "passive"},
        **{f"spin {n}": {"GOMP_SPINCOUNT": str(n)} for n in spins},
        # an empty value is not a valid policy, so libgomp keeps its default, and the product,
        # which sets its own only when neither variable is there, leaves it alone
        "libgomp default": {"OMP_WAIT_POLICY": ""},
        "active": {"OMP_WAIT_POLICY": "active"},
    }


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def step_ms(path: str, width: int, steps: int, variables: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARIABLES} | variables
    out = subprocess.run(
        [sys.executable, "-c", STEP_LOOP, path, str(width), str(steps)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen2.5-coder-1.5b,smollm2-135m")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--spin", default="100,300,1000")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    configs = settings([int(n) for n in args.spin.split(",") if n])
    models = {m: str(resolve_model_file(load_models().get(m))) for m in args.models.split(",") if m}
    times: dict[tuple[str, int, int, str], list[float]] = {}
    results: dict[str, Any] = {
        "threads": 2,
        "cpu_count": os.cpu_count(),
        "steps": args.steps,
        "load_avg_at_start": os.getloadavg(),
        "ms_per_step": {},
    }
    for _ in range(args.rounds):
        for hogs in (0, 1):
            with busy_cores(hogs):
                for model, path in models.items():
                    for width in (1, 4):
                        for name, variables in configs.items():
                            ms = step_ms(path, width, args.steps, variables)
                            times.setdefault((model, hogs, width, name), []).append(ms)
                            print(f"{model} busy={hogs} width={width} {name}: {ms:.1f} ms", flush=True)
    for (model, hogs, width, name), values in times.items():
        row = results["ms_per_step"].setdefault(model, {}).setdefault(f"busy cores {hogs}", {})
        row.setdefault(f"{width} sequence{'s' if width > 1 else ''}", {})[name] = round(statistics.median(values), 1)
    results["load_avg_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["ms_per_step"], indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
