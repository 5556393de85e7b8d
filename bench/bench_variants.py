"""Tokens/s and problems/min at 1, 2, 4 and 8 in flight, the shipped default model against its
requantized variants, in one run.

The problems are ``bench_batch``'s two-turn ones (a shared system prompt and a question, ``--tokens``
greedy tokens, a tool output, ``--tokens`` more); the variants are ``bench_requant``'s (Q6_K tensors as
Q8_0, as Q4_K; built once into the cache). Each model runs them:
- through the serial engine (``LlamaModel``, repacked weights: the app's engine), the baseline;
- through the batched engine as ``eval --concurrency N`` loads it: plain weights for N = 1, repacked
  ones with decode steps padded to groups of 4 for N = 2, 4, 8 (one engine of 8 sequences serves
  all three: a step's width is set by the sequences generating, not by the engine's size).

Within a round every (level, model) pair runs on new problems, the models taking turns at each
level, so a busy spell of the shared machine hits them alike. Ratios are against the shipped
model's serial engine in the same run.

    python bench/bench_variants.py [--model qwen2.5-coder-1.5b] [--problems 16] [--tokens 32]
        [--rounds 2] [--out FILE]

Writes bench/results/variants.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_batch import batched, measured, serial  # noqa: E402
from bench_requant import paths_of  # noqa: E402

from tuiagent.backends.llama_batch import BatchEngine  # noqa: E402
from tuiagent.backends.llama_model import LlamaModel  # noqa: E402
from tuiagent.protocol import Sampling  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "variants.json"
LEVELS = (1, 2, 4, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--problems", type=int, default=16, help="per configuration, over all rounds")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    common = {"n_ctx": 2048, "n_threads": threads, "n_batch": 512, "seed": 0, "min_p": 0.0, "prompt_chunk": None}
    sampling = Sampling(temperature=0.0, max_tokens=args.tokens)
    models = {name: str(path) for name, path in paths_of(args.model).items()}
    engines: dict[str, dict[str, Any]] = {
        name: {
            "serial": LlamaModel(path, **common),
            "plain": BatchEngine(path, **common, n_seq=1, repack=False),
            "batched": BatchEngine(path, **common, n_seq=max(LEVELS), repack=True),
        }
        for name, path in models.items()
    }
    results: dict[str, Any] = {
        "model": args.model,
        "date": time.strftime("%Y-%m-%d"),
        "problems": args.problems,
        "tokens_per_turn": args.tokens,
        "rounds": args.rounds,
        "threads": threads,
        "cpu": platform.processor() or platform.machine(),
        "load_avg_at_start": os.getloadavg(),
    }
    per_round = max(1, args.problems // args.rounds)
    configs = [("serial", 1)] + [("batched", n) for n in LEVELS]
    totals = {(name, kind, n): [0, 0.0] for name in models for kind, n in configs}
    for k in range(args.rounds):
        for step, (kind, n) in enumerate(configs):
            # new problems for every configuration and round (no sequence reuses a cached prompt),
            # the same problems for every model at one configuration
            first = (k * len(configs) + step) * per_round
            chosen = range(first, first + per_round)
            for name, loaded in engines.items():
                if kind == "serial":
                    r = serial(loaded["serial"], chosen, sampling)
                else:
                    r = batched(loaded["plain"] if n == 1 else loaded["batched"], chosen, n, sampling)
                totals[(name, kind, n)][0] += r["tokens"]
                totals[(name, kind, n)][1] += r["seconds"]
                print(f"round {k + 1} {name} {kind} {n}: {r}", flush=True)
    problems = per_round * args.rounds
    base = totals[("shipped", "serial", 1)]
    base_rate = base[0] / base[1]
    for (name, kind, n), (tokens, seconds) in totals.items():
        r = measured(tokens, problems, seconds)
        r["vs_shipped_serial"] = round(r["tokens_per_s"] / base_rate, 2)
        own = totals[(name, "serial", 1)]
        r["vs_own_serial"] = round(r["tokens_per_s"] / (own[0] / own[1]), 2)
        results.setdefault(name, {}).setdefault(kind, {})[str(n)] = r
    for loaded in engines.values():
        for engine in loaded.values():
            engine.close()
    results["load_avg_at_end"] = os.getloadavg()
    print(json.dumps(results, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
