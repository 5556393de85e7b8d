"""Benchmark end-to-end exactness: does a run generate the same tokens and log-probabilities whatever
else is in flight on the batched engine?

    python bench/bench_exact_concurrency.py [--model qwen2.5-coder-1.5b] [--limit 8] [--levels 2,8]
        [--out bench/results/exact_concurrency.json]

Runs ``tuiagent eval demo --limit N -c none --no-reuse-generations --concurrency C`` as a user would,
once per level, each into its own results directory, then compares every run's trajectory with the
same run's at the first level: generated text and log-probabilities of every turn, tool outputs and
the answer. The target is 0 runs that differ (docs/evaluating.md, "Exactness").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load

RESULTS = Path(__file__).parent / "results" / "exact_concurrency.json"


def generations(path: Path) -> dict:
    """What a run produced: each turn's (text, logprob) pieces, each tool output, and how it ended."""
    turns: dict[int, list] = {}
    outputs, answer, reason = [], None, None
    for e in load(path).events:
        if isinstance(e, ev.TokenDelta):
            turns.setdefault(e.turn, []).append((e.text, e.logprob))
        elif isinstance(e, ev.ToolResult):
            outputs.append(e.shown)
        elif isinstance(e, ev.RunFinished):
            answer, reason = e.answer, e.reason
    return {"turns": [turns[t] for t in sorted(turns)], "outputs": outputs, "answer": answer, "reason": reason}


def first_difference(a: dict, b: dict) -> str | None:
    """Where run ``b`` first departs from run ``a`` (None when they are the same)."""
    for t, (ta, tb) in enumerate(zip(a["turns"], b["turns"])):
        for i, (pa, pb) in enumerate(zip(ta, tb)):
            if pa != pb:
                return f"turn {t} token {i}: {pa!r} vs {pb!r}"
        if len(ta) != len(tb):
            return f"turn {t}: {len(ta)} vs {len(tb)} tokens"
    if len(a["turns"]) != len(b["turns"]):
        return f"{len(a['turns'])} vs {len(b['turns'])} turns"
    for key in ("outputs", "answer", "reason"):
        if a[key] != b[key]:
            return f"{key} differ"
    return None


def run_level(model: str, limit: int, concurrency: int, out: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "tuiagent",
        "eval",
        "demo",
        "--model",
        model,
        "--limit",
        str(limit),
        "-c",
        "none",
        "--no-reuse-generations",
        "--concurrency",
        str(concurrency),
        "--out",
        str(out),
        "--quiet",
    ]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    runs = {str(p.relative_to(out / "runs")): generations(p) for p in sorted((out / "runs").rglob("*.jsonl"))}
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    tokens = sum(sum(len(t) for t in r["turns"]) for r in runs.values())
    return {
        "concurrency": concurrency,
        "wall_s": round(wall, 1),
        "runs": runs,
        "engines": sorted({r.get("engine", "?") for r in records}),
        "correct": sum(bool(r.get("correct")) for r in records),
        "tokens": tokens,
        "problems_per_min": round(60 * len(runs) / wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--levels", default="2,8")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="exact-concurrency-") as tmp:
        results = [run_level(args.model, args.limit, c, Path(tmp) / f"c{c}") for c in levels]
    base = results[0]
    report = []
    for level in results:
        differ = {
            key: why
            for key, run in level["runs"].items()
            if (why := first_difference(base["runs"][key], run) if key in base["runs"] else "missing")
        }
        report.append(
            {k: v for k, v in level.items() if k != "runs"}
            | {"differ_from_first_level": len(differ), "differences": differ}
        )
        print(
            f"concurrency {level['concurrency']}: {len(level['runs'])} runs, {len(differ)} differ from "
            f"concurrency {base['concurrency']}; {level['wall_s']} s, {level['tokens_per_s']} tok/s, "
            f"engine {', '.join(level['engines'])}",
            flush=True,
        )
    result = {
        "benchmark": "end-to-end exactness across concurrency (tuiagent eval demo, -c none, no reuse)",
        "model": args.model,
        "limit": args.limit,
        "levels": levels,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "report": report,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
