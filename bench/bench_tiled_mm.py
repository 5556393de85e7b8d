"""llama.cpp's tiled K-quant matmul: on (llama.cpp's default, which the backend keeps), off and forced.

llama-cpp-python 0.3.36's llama.cpp has a "tiled" matrix multiply for K-quant weights that were not
repacked (ggml-cpu/tiled/tiled.cpp): on by default, taken only for steps 8 or more columns wide,
at every width with ``GGML_CPU_TILED_MM_FORCE=1``. Both variables are read once per process, so
each setting runs in a process of its own (``--child``), the settings taking turns (``--rounds``).
Each child loads the batched engine on the default model (plain and repacked weights, 8 sequences) and
measures:
- exactness: 8 greedy prompts, each alone and then all 8 together, through the engine (whose decode
  ubatches are at most STEP_COLUMNS wide): how many sequences differ in their tokens or logprobs,
  by how much at most, and what the engine's step with all 8 generating costs;
- the cost of one decode ubatch of 1, 2, 4 and 8 columns (bench_batch.step_costs: what llama.cpp
  does with that many columns at once);
- prompt reading: 64-token chunks of one sequence, tokens per second.

    python bench/bench_tiled_mm.py [--model qwen2.5-coder-1.5b] [--rounds 2] [--out FILE]

Writes bench/results/tiled_mm.json (or --out). Compare within one run: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).parent / "results" / "tiled_mm.json"
SETTINGS = {
    "off": {"GGML_CPU_TILED_MM": "0"},
    "on at 8+ columns": {"GGML_CPU_TILED_MM": "1"},
    "forced at every width": {"GGML_CPU_TILED_MM": "1", "GGML_CPU_TILED_MM_FORCE": "1"},
}
PROMPTS = [
    f"A shop sells {i + 2} boxes of {i + 5} pens and gives away {i} pens. How many pens are left?" for i in range(8)
]
N_SEQ = 8


def exactness(engine: Any, tokens: int) -> dict[str, Any]:
    from tuiagent.backends.llama_batch import Request
    from tuiagent.protocol import Sampling

    sampling = Sampling(temperature=0.0, max_tokens=tokens)
    prompts = [
        engine.vocab.tokenize(f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n", add_bos=True)
        for p in PROMPTS
    ]

    full_steps: list[float] = []  # seconds of the engine's steps in which all of a run's sequences generate

    def run(ids: list[int]) -> dict[int, tuple[list[int], list[float]]]:
        out: dict[int, tuple[list[int], list[float]]] = {}
        for i in ids:
            got: list[Any] = []
            engine.submit(
                Request(
                    i,
                    prompts[i],
                    sampling,
                    [],
                    threading.Event(),
                    got.extend,
                    lambda r, i=i, got=got: out.__setitem__(i, (r.token_ids, [t.logprob for t in got])),
                )
            )
        while not engine.idle:
            generating = sum(s.run is not None and s.run.pending is not None for s in engine.sequences)
            started = time.perf_counter()
            engine.step()
            if generating == len(ids) == N_SEQ:
                full_steps.append(time.perf_counter() - started)
        engine.reset()
        return out

    alone: dict[int, tuple[list[int], list[float]]] = {}
    for i in range(N_SEQ):
        alone.update(run([i]))
    together = run(list(range(N_SEQ)))
    differ = [i for i in range(N_SEQ) if together[i] != alone[i]]
    delta = max((abs(a - b) for i in range(N_SEQ) for a, b in zip(alone[i][1], together[i][1])), default=0.0)
    tokens_differ = sum(together[i][0] != alone[i][0] for i in range(N_SEQ))
    return {
        "sequences_differ": len(differ),
        "tokens_differ": tokens_differ,
        "max_abs_logprob_delta": delta,
        "engine_step_ms_8_in_flight": round(1000 * statistics.median(full_steps), 1),
    }


def prompt_speed(engine: Any, chunks: int = 6) -> float:
    """Tokens per second reading 64-token chunks of one sequence's prompt."""
    engine.reset()
    took = []
    for c in range(chunks):
        started = time.perf_counter()
        engine._fill([(100 + (i % 50), 64 * c + i, 0, i == 63) for i in range(64)])
        took.append(time.perf_counter() - started)
    engine.reset()
    return round(64 / statistics.median(took), 1)


def child(model: str, tokens: int) -> None:
    from bench_batch import step_costs

    from tuiagent.backends.llama_batch import BatchEngine
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    path = str(resolve_model_file(load_models().get(model)))
    common = {
        "n_ctx": 512,
        "n_threads": os.cpu_count() or 1,
        "n_batch": 512,
        "seed": 0,
        "min_p": 0.0,
        "prompt_chunk": None,
        "n_seq": N_SEQ,
    }
    engines = {
        "plain": BatchEngine(path, **common, repack=False),
        "repacked_padded": BatchEngine(path, **common, repack=True),
    }
    out: dict[str, Any] = {"decode_step": step_costs(engines, rounds=1)}
    for name, engine in engines.items():
        out[name] = {"exactness": exactness(engine, tokens), "prompt_tokens_per_s": prompt_speed(engine)}
        engine.close()
    print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--tokens", type=int, default=16, help="greedy tokens per prompt in the exactness probe")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.tokens)
        return
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    for k in range(args.rounds):
        for name, env in SETTINGS.items():
            clean = {key: v for key, v in os.environ.items() if not key.startswith("GGML_CPU_TILED_MM")}
            done = subprocess.run(
                [sys.executable, __file__, "--child", "--model", args.model, "--tokens", str(args.tokens)],
                env={**clean, **env},
                capture_output=True,
                text=True,
                check=True,
            )
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {k + 1}, {name}: {runs[name][-1]}", flush=True)
    summary: dict[str, Any] = {
        "model": args.model,
        "rounds": args.rounds,
        "load_avg_at_end": os.getloadavg(),
        "settings": {},
    }
    for name, results in runs.items():
        row: dict[str, Any] = {"env": SETTINGS[name]}
        for weights in ("plain", "repacked_padded"):
            row[weights] = {
                "exactness": results[-1][weights]["exactness"],
                "engine_step_ms_8_in_flight": statistics.median(
                    r[weights]["exactness"]["engine_step_ms_8_in_flight"] for r in results
                ),
                "prompt_tokens_per_s": statistics.median(r[weights]["prompt_tokens_per_s"] for r in results),
                "ms_per_step": {
                    b: statistics.median(r["decode_step"][weights][b]["ms_per_step"] for r in results)
                    for b in results[0]["decode_step"][weights]
                },
            }
        summary["settings"][name] = row
        print(name, json.dumps(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
