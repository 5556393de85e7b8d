"""Soak: runs back to back and concurrently for minutes, watching this process for leaks.

Every run takes the path of `tuiagent eval`: ``run_eval`` with a KernelPool of real Jupyter kernels
(``--concurrency`` warm, a fresh kernel per run, shut down after it), a trajectory per run and the
results file. Batches of ``--batch`` problems follow one another until ``--minutes`` are up. Runs
cycle through four scripted shapes that take the kernel's different paths: a plain cell; a
NameError, then the fix; a cell past its timeout (interrupted); a cell that kills its kernel
(restarted). Every ``--sample-s`` the RSS, open file descriptors, child processes and live kernels
of this process are sampled. Between batches every pool is closed, so no child process and no
kernel directory may be left, and the descriptors must be back at their level after the first
batch. The first batch is the warm-up (imports, the shared ZeroMQ context): RSS growth is taken
from the first quarter to the last of the time after it.

Passes when nothing leaked and every trajectory is complete: it loads without warnings, ends with
a finish, has the right answer and the tool results of its shape.

    python bench/bench_soak.py [--minutes 5] [--concurrency 4] [--batch 16] [--sample-s 1]

Writes bench/results/soak.json; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from kernels.sandbox import describe
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import load
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.presets import resolve_settings

RESULTS = Path(__file__).parent / "results" / "soak.json"
EXEC_TIMEOUT_S = 3.0  # a fresh kernel's first traceback took over 1 s on the loaded 2-core machine
# shape -> the cell that goes wrong before the right one, and what its tool result must show
SHAPES = {
    "plain": None,
    "error": ("print(total)", lambda r: r.error_name == "NameError"),
    "timeout": ("import time\ntime.sleep(30)", lambda r: r.timed_out),
    "dies": ("import os\nos._exit(1)", lambda r: r.died and r.restarted),
}
ORDER = list(SHAPES)


def shape_of(n: int) -> str:
    return ORDER[n % len(ORDER)]


def number_in(question: str) -> int:
    """The i of 'What is i plus i?'."""
    return int(question.split("What is ", 1)[1].split(" ", 1)[0])


def turns(n: int) -> list[str]:
    """The model's turns for problem ``n``: its shape's cells, then the answer 2n."""
    first = SHAPES[shape_of(n)]
    cells = ([first[0]] if first else []) + [f"total = {n} + {n}\nprint(total)"]
    return [f"Compute it.\n```python\n{c}\n```\n```output\n" for c in cells] + [f"So \\boxed{{{2 * n}}}."]


def check_run(path: Path) -> str | None:
    """Why the trajectory at ``path`` is not a complete, right run of its shape; None when it is."""
    loaded = load(path)
    if loaded.warnings:
        return loaded.warnings[0]
    events = loaded.events
    if not events or not isinstance(events[-1], ev.RunFinished):
        return f"{path}: no finish event"
    n = number_in(events[0].problem)
    finish, shape = events[-1], shape_of(n)
    first = SHAPES[shape]
    if finish.reason != "answer" or finish.correct is not True:
        return f"{path}: ended {finish.reason} with answer {finish.answer!r}"
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    if len(results) != (2 if first else 1) or results[-1].shown != str(2 * n) or (first and not first[1](results[0])):
        return f"{path}: {shape} run's tool results are {[r.shown for r in results]}"
    return None


def is_kernel(process: psutil.Process) -> bool:
    try:
        return "ipykernel_launcher" in process.cmdline()
    except psutil.Error:  # gone meanwhile, or a zombie
        return False


class Sampler:
    """This process's RSS, descriptors, children and kernels, now and every ``every_s`` while running.
    Children it had before (say, of earlier tests in the same process) are not counted."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self.me = psutil.Process()
        self.earlier = set(self.me.children(recursive=True))
        self.t0 = time.monotonic()
        self.runs = 0
        self.samples: list[dict] = []

    def sample(self) -> dict:
        children = [p for p in self.me.children(recursive=True) if p not in self.earlier]
        return {
            "t": round(time.monotonic() - self.t0, 2),
            "runs": self.runs,
            "rss_mb": round(self.me.memory_info().rss / 2**20, 1),
            "fds": self.me.num_fds(),
            "children": len(children),
            "kernels": sum(map(is_kernel, children)),
        }

    async def settled(self, first: dict | None, within_s: float = 10.0) -> dict:
        """A sample once what a closed batch lets go of is gone: no child left and no more descriptors
        than after the ``first`` batch. A closed socket can take a moment to be released (ZeroMQ's reaper
        thread closes a socket's descriptors after ``close`` returns), so this waits for that condition;
        a real leak still shows, in the sample taken when ``within_s`` is up."""
        deadline = time.monotonic() + within_s
        while True:
            sample = self.sample()
            done = sample["children"] == 0 and (first is None or sample["fds"] <= first["fds"])
            if done or time.monotonic() > deadline:
                return sample
            await asyncio.sleep(0.05)

    async def run(self) -> None:
        while True:
            self.samples.append(self.sample())
            await asyncio.sleep(self.every_s)


def rss_summary(samples: list[dict], warm_t: float) -> dict:
    """Peak RSS, and its growth from the first quarter to the last (means of the samples) of the time
    after ``warm_t``: the first batch imports what the runs need (math-verify, sympy), which is not a leak."""
    end = samples[-1]["t"]
    quarter = (end - warm_t) / 4
    first = statistics.mean(s["rss_mb"] for s in samples if warm_t <= s["t"] <= warm_t + quarter)
    last = statistics.mean(s["rss_mb"] for s in samples if s["t"] >= end - quarter)
    return {
        "start": samples[0]["rss_mb"],
        "after_first_batch": next(s["rss_mb"] for s in samples if s["t"] >= warm_t),
        "peak": max(s["rss_mb"] for s in samples),
        "first_quarter_mean": round(first, 1),
        "last_quarter_mean": round(last, 1),
        "growth_mb": round(last - first, 1),
        "growth_pct": round(100 * (last - first) / first, 1),
    }


async def soak(
    tmp: Path,
    *,
    minutes: float | None = None,
    max_runs: int | None = None,
    concurrency: int = 4,
    batch: int = 16,
    token_s: float = 0.002,
    sample_s: float = 1.0,
) -> dict:
    """Run batches (at least two) under ``tmp`` until ``minutes`` or ``max_runs``; the figures and checks."""
    data = tmp / "problems.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"What is {i} plus {i}?", "answer": f"#### {2 * i}"}) + "\n"
            for i in range(1, batch + 1)
        ),
        encoding="utf-8",
    )
    kernel_tmp = tmp / "tmp"  # the kernels' directories go here, so leftovers are ours to count
    kernel_tmp.mkdir()
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(kernel_tmp)
    sampler = Sampler(sample_s)
    sampling = asyncio.create_task(sampler.run())
    deadline = None if minutes is None else time.monotonic() + 60 * minutes
    rests: list[dict] = []
    problems: list[str] = []
    log: list[str] = []

    def backend(job) -> ScriptedBackend:
        return ScriptedBackend(
            [split_tokens(t, -0.01) for t in turns(number_in(job.problem.question))], delay_s=token_s
        )

    def counted(record: dict) -> None:
        sampler.runs += 1

    try:
        while len(rests) < 2 or (
            (deadline is None or time.monotonic() < deadline) and (max_runs is None or sampler.runs + batch <= max_runs)
        ):
            out = tmp / f"batch-{len(rests):04d}"
            cfg = EvalConfig(
                datasets=[str(data)],
                settings=resolve_settings(["none"]),
                out=out,
                model="scripted",
                concurrency=concurrency,
                base=RunSpec(run={"exec_timeout_s": EXEC_TIMEOUT_S}),
            )
            outcome = await run_eval(cfg, backend_factory=backend, log=log.append, on_record=counted)
            if outcome.failed:
                problems.append(f"batch {len(rests)}: {outcome.failed} run(s) failed")
            paths = sorted((out / "runs").rglob("*.jsonl"))
            if len(paths) != batch:
                problems.append(f"batch {len(rests)}: {len(paths)} trajectories for {batch} runs")
            problems += [why for why in map(check_run, paths) if why]
            shutil.rmtree(out)
            rest = await sampler.settled(rests[0] if rests else None)  # every pool is closed: nothing may be left
            rest["kernel_dirs"] = sum(p.name.startswith("tuiagent-") for p in kernel_tmp.iterdir())
            rests.append(rest)
    finally:
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
        tempfile.tempdir = saved_tempdir
    samples = sorted(sampler.samples + rests, key=lambda s: s["t"])
    wall_min = samples[-1]["t"] / 60
    return {
        "runs": sampler.runs,
        "batches": len(rests),
        "minutes": round(wall_min, 2),
        "runs_per_min": round(sampler.runs / wall_min, 1),
        "rss_mb": rss_summary(samples, rests[0]["t"]),
        "peak": {k: max(s[k] for s in samples) for k in ("fds", "children", "kernels")},
        "leaks": {
            "processes": max(r["children"] for r in rests),
            "kernels": max(r["kernels"] for r in rests),
            "fds": max(rests[-1]["fds"] - rests[0]["fds"], 0),  # fewer than after the first batch is no leak
            "kernel_dirs": max(r["kernel_dirs"] for r in rests),
        },
        "problems": problems,
        "log": log,
        "rests": rests,
        "samples": sampler.samples,
    }


async def main(args: argparse.Namespace) -> dict:
    result: dict = {
        "benchmark": "soak: eval-harness runs with real Jupyter kernels, back to back and concurrently",
        "settings": {
            "minutes": args.minutes,
            "concurrency": args.concurrency,
            "batch": args.batch,
            "token_ms": args.token_ms,
            "sample_s": args.sample_s,
            "exec_timeout_s": EXEC_TIMEOUT_S,
            "shapes": ORDER,
            "sandbox": describe("auto"),
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TUIAGENT_DATA_DIR"] = str(Path(tmp) / "data")
        result.update(
            await soak(
                Path(tmp),
                minutes=args.minutes,
                concurrency=args.concurrency,
                batch=args.batch,
                token_s=args.token_ms / 1000,
                sample_s=args.sample_s,
            )
        )
    result["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["passed"] = not result["problems"] and not any(result["leaks"].values())
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16, help="problems per eval (one kernel pool)")
    parser.add_argument("--token-ms", type=float, default=2.0, help="scripted model's time per token")
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = asyncio.run(main(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    r, leaks = data, data["leaks"]
    print(
        f"{r['runs']} runs in {r['minutes']} min ({r['runs_per_min']}/min, concurrency {args.concurrency}); "
        f"RSS peak {r['rss_mb']['peak']} MB, growth first->last quarter {r['rss_mb']['growth_mb']} MB "
        f"({r['rss_mb']['growth_pct']}%); leaked: {leaks}; problems: {len(r['problems'])}"
    )
    for problem in r["problems"][:10]:
        print("  " + problem)
    print(f"wrote {args.out}")
    sys.exit(0 if data["passed"] else 1)
