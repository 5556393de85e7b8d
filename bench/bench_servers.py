"""Eval throughput on two OpenAI-compatible servers against one, with the same total threads.

Side A: one ``python -m llama_cpp.server`` with ``--threads`` (2) threads; side B: ``--threads``
servers with one thread each, named together by one models.toml entry's ``base_urls`` (runs
pinned to the least loaded, ``tuiagent.backends.servers``). Both run the same eval, through
``tuiagent.eval.harness.run_eval``: the first ``--problems`` (8) demo problems under ``none``,
greedy, the real Jupyter kernel, ``--concurrency`` (2) runs in flight. The servers are started
before the clock starts (each side gets fresh ones, so both begin with empty caches) and stopped
after. On a shared machine the sides take turns, A B A B ..., and the ratio B/A is reported per
round, with each side's answers (the same model, greedy: they should agree).

    python bench/bench_servers.py [--model smollm2-135m] [--problems 8] [--rounds 2] [--threads 2]

Writes bench/results/servers.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.backends.conftest import _resolve  # noqa: E402
from tests.backends.llama_server import LlamaServer, pool_entry  # noqa: E402
from tuiagent.core.run_spec import RunSpec  # noqa: E402
from tuiagent.eval.harness import EvalConfig, run_eval  # noqa: E402
from tuiagent.presets import resolve_settings  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "servers.json"
RUN = {"max_tool_calls": 2, "max_tokens": 300}  # per run: bounds a round on a loaded 2-core machine


async def one_side(model: Path, servers: int, threads: int, args: argparse.Namespace, tmp: Path) -> dict:
    """One eval on ``servers`` fresh servers of ``threads`` threads each."""
    with contextlib.ExitStack() as stack:
        started = [
            stack.enter_context(LlamaServer(model, tmp / f"server{i}.log", threads=threads)) for i in range(servers)
        ]
        models = tmp / "models.toml"
        models.write_text(pool_entry("bench-pool", started))
        cfg = EvalConfig(
            datasets=["demo"],
            settings=resolve_settings(["none"]),
            out=tmp / "out",
            model="bench-pool",
            models_file=models,
            limit=args.problems,
            concurrency=args.concurrency,
            base=RunSpec(run=dict(RUN)),
        )
        outcome = await run_eval(cfg, log=lambda m: None)
    records = [json.loads(line) for line in (tmp / "out" / "results.jsonl").read_text().splitlines()]
    by_server: dict[str, int] = {}
    for r in records:
        by_server[r["server"]] = by_server.get(r["server"], 0) + 1
    return {
        "servers": servers,
        "threads_each": threads,
        "runs": outcome.ran,
        "failed": outcome.failed,
        "wall_s": round(outcome.wall_s, 2),
        "runs_per_min": round(outcome.throughput_per_min, 3),
        "generated_tokens": sum(r["generated_tokens"] for r in records),
        "tokens_per_s": round(sum(r["generated_tokens"] for r in records) / outcome.wall_s, 2),
        "right": sum(bool(r["correct"]) for r in records),
        "runs_per_server": sorted(by_server.values()),
        "reasons": sorted(r["reason"] for r in records),
        "answers": {r["problem_id"]: r["answer"] for r in records},
    }


async def main(args: argparse.Namespace) -> dict:
    path, why = _resolve(args.model)
    if path is None:
        raise SystemExit(f"cannot find {args.model}: {why}")
    result: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": args.model,
        "problems": args.problems,
        "concurrency": args.concurrency,
        "run": RUN,
        "threads_total": args.threads,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        },
        "rounds": [],
    }
    for n in range(args.rounds):
        sides = {}
        for name, servers, threads in (("A", 1, args.threads), ("B", args.threads, 1)):
            with tempfile.TemporaryDirectory() as tmp:
                sides[name] = await one_side(path, servers, threads, args, Path(tmp))
            print(
                f"round {n + 1} {name}: {sides[name]['servers']} server(s) x {sides[name]['threads_each']} "
                f"thread(s): {sides[name]['runs_per_min']} runs/min, {sides[name]['wall_s']} s, "
                f"{sides[name]['tokens_per_s']} tok/s, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        ratio = sides["B"]["runs_per_min"] / sides["A"]["runs_per_min"]
        same = sides["A"]["answers"] == sides["B"]["answers"]
        result["rounds"].append({**sides, "ratio_B_over_A": round(ratio, 3), "same_answers": same})
        print(f"round {n + 1}: B/A = {ratio:.3f} (same answers: {same})", flush=True)
    ratios = sorted(r["ratio_B_over_A"] for r in result["rounds"])
    result["ratio_median"] = (
        ratios[len(ratios) // 2]
        if len(ratios) % 2
        else round((ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2, 3)
    )
    result["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a llama_cpp entry of models.toml (its GGUF)")
    parser.add_argument("--problems", type=int, default=8, help="demo problems per eval")
    parser.add_argument("--rounds", type=int, default=2, help="A B turns")
    parser.add_argument("--threads", type=int, default=2, help="total threads; side B runs this many servers")
    parser.add_argument("--concurrency", type=int, default=2, help="runs in flight, both sides")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = asyncio.run(main(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
