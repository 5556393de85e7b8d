"""Benchmark bit-exact runs: do settings that only flag (necessity in flag mode, the TIM monitor)
generate exactly what `none` generates, and what does a run cost in time and prompt tokens?

    python bench/bench_determinism.py [--model qwen2.5-coder-1.5b] [--offset 2000 --limit 20]
        [--settings none,necessity,tim] [--tree PATH] [--out bench/results/determinism.json]

Every problem runs under every setting in turn on one loaded model (as `tuiagent eval` runs the
llama_cpp backend), greedy, with the real Jupyter kernel. A generation is one turn: the sampled
tokens with their log-probabilities. For each setting the report counts the runs whose
generations differ from `none`'s in any token or logprob, and the mean wall time and prompt
tokens evaluated per run (the backend's own counter). ``--tree`` runs another checkout's code
(e.g. a `git worktree` of an older commit) in this environment, to compare before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, json, sys, time
from pathlib import Path
from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec
from tuiagent.runner import RunInput, open_model, resolve_spec, run_problem
model, data, offset, limit, settings, out = sys.argv[1:7]
problems = [json.loads(l) for l in open(data)][int(offset):int(offset) + int(limit)]
spec = resolve_spec(model)
backend = open_model(spec)
rows = []
async def main():
    for i, p in enumerate(problems):
        for setting in settings.split(","):
            guards = () if setting == "none" else tuple(setting.split("+"))
            events = []
            before = backend.stats.prompt_tokens_evaluated
            t0 = time.perf_counter()
            given = RunInput(p["question"], gold=p["answer"].split("####")[-1].strip(), model=model, out=Path(out))
            finished = await run_problem(RunSpec(guards=guards), given, events.append, backend=backend,
                                         model_spec=spec)
            turns, current = [], []
            for e in events:
                if isinstance(e, ev.TokenDelta):
                    current.append([e.text, e.logprob])
                elif isinstance(e, ev.TurnEnded):
                    turns.append(current); current = []
            rows.append({"problem": int(offset) + i, "setting": setting, "turns": turns, "correct": finished.correct,
                         "reason": finished.reason, "wall_s": time.perf_counter() - t0,
                         "prompt_evaluated": backend.stats.prompt_tokens_evaluated - before})
            print(json.dumps(rows[-1]), flush=True)
asyncio.run(main())
asyncio.run(backend.aclose())
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl"))
    ap.add_argument("--offset", type=int, default=2000)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--settings", default="none,necessity,tim")
    ap.add_argument("--tree", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "determinism.json")
    args = ap.parse_args()
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"tuiagent-determinism-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": str(args.tree.resolve())}
    started = time.time()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            args.model,
            args.data,
            str(args.offset),
            str(args.limit),
            args.settings,
            str(scratch),
        ],
        env=env,
        cwd=args.tree,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    base = {r["problem"]: r for r in rows if r["setting"] == "none"}
    report: dict[str, dict] = {}
    for setting in args.settings.split(","):
        mine = [r for r in rows if r["setting"] == setting]
        report[setting] = {
            "runs": len(mine),
            "differ_from_none": sum(r["turns"] != base[r["problem"]]["turns"] for r in mine),
            "first_token_differs": sum(
                bool(r["turns"] and base[r["problem"]]["turns"])
                and r["turns"][0][:1] != base[r["problem"]]["turns"][0][:1]
                for r in mine
            ),
            "correct": sum(bool(r["correct"]) for r in mine),
            "mean_wall_s": round(statistics.mean(r["wall_s"] for r in mine), 2),
            "mean_prompt_evaluated": round(statistics.mean(r["prompt_evaluated"] for r in mine), 1),
        }
    print(f"\n{args.model}, problems {args.offset}..{args.offset + args.limit - 1}, tree {args.tree}")
    print(f"  {'setting':<10} {'runs':>5} {'differ':>7} {'right':>6} {'wall s':>7} {'prompt eval':>12}")
    for setting, s in report.items():
        print(
            f"  {setting:<10} {s['runs']:>5} {s['differ_from_none']:>7} {s['correct']:>6} {s['mean_wall_s']:>7}"
            f" {s['mean_prompt_evaluated']:>12}"
        )
    args.out.write_text(
        json.dumps(
            {
                "model": args.model,
                "tree": str(args.tree),
                "offset": args.offset,
                "limit": args.limit,
                "minutes": round((time.time() - started) / 60, 1),
                "report": report,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
