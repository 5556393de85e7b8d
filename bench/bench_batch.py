"""Batched decoding against the serial engine, on the default model, in one run.

Each "problem" is two turns of a run, as an eval makes them: a shared system prompt and a question,
``--tokens`` greedy tokens, then the same prompt with that answer and a tool output appended and
``--tokens`` more (the second turn reuses the sequence's own cells). ``--problems`` problems go
through:
- the serial engine (``LlamaModel``: one at a time, repacked weights: the app's engine);
- the batched engine as ``eval --concurrency N`` loads it (``BatchEngine(n_seq=N)``: plain
  weights for N = 1, repacked ones with decode steps padded to groups of 4 above) with N = 1, 2,
  4, 8 in flight;
- the batched engine with plain weights at N in flight (``repack=False``) at the ``--plain-levels``.
The configurations take turns (``--rounds``), so a busy spell of a shared machine hits them alike.
First, the bare cost of one decode step with B sequences (plain weights; repacked weights padded to
a multiple of 4 columns, as the engine decodes them); last, the latency of one interactive
generation while 3 long ones share the engine, against alone.

The machine is shared: compare the ratios within one run, not the absolute numbers across runs.

    python bench/bench_batch.py [--model qwen2.5-coder-1.5b] [--problems 8] [--tokens 32]
        [--levels 1,2,4,8] [--plain-levels 1,4,8] [--rounds 2] [--threads 2] [--out FILE]

Writes bench/results/batch.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from tuiagent.backends.llama_batch import BatchEngine, Request, round_up
from tuiagent.backends.llama_model import LlamaModel
from tuiagent.protocol import Sampling

RESULTS = Path(__file__).parent / "results" / "batch.json"
SYSTEM = (
    "You are a careful math assistant. Solve the problem by writing Python code in ```python blocks; "
    "the code runs in a Jupyter kernel and you see its output. Put the final answer in \\boxed{}. "
) * 3


def question(i: int) -> str:
    return f"A shop sells {i + 2} boxes of {i + 5} pens and gives away {i} pens. How many pens are left?"


def first_prompt(i: int) -> str:
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question(i)}<|im_end|>\n<|im_start|>assistant\n"


def second_prompt(i: int, answer: str) -> str:
    return first_prompt(i) + answer + f"\n```output\n{(i + 2) * (i + 5) - i}\n```\n"


def serial(model: LlamaModel, problems: range, sampling: Sampling) -> dict[str, Any]:
    tokens = 0
    started = time.perf_counter()
    for i in problems:
        pieces: list[str] = []
        out = model.generate(
            model.vocab.tokenize(first_prompt(i), add_bos=True),
            sampling,
            [],
            threading.Event(),
            lambda ts: pieces.extend(t.text for t in ts),  # noqa: B023 - called inside this iteration
        )
        second = model.generate(
            model.vocab.tokenize(second_prompt(i, "".join(pieces)), add_bos=True),
            sampling,
            [],
            threading.Event(),
            lambda ts: None,
        )
        tokens += len(out.token_ids) + len(second.token_ids)
    return measured(tokens, len(problems), time.perf_counter() - started)


def batched(engine: BatchEngine, problems: range, in_flight: int, sampling: Sampling) -> dict[str, Any]:
    """Two-turn ``problems`` with ``in_flight`` of them running at any time."""
    counts = {"tokens": 0, "finished": 0, "next": 0}

    def start(i: int) -> None:
        pieces: list[str] = []

        def second(result: Any) -> None:
            counts["tokens"] += len(result.token_ids)
            engine.submit(
                Request(
                    i,
                    engine.vocab.tokenize(second_prompt(i, "".join(pieces)), add_bos=True),
                    sampling,
                    [],
                    threading.Event(),
                    lambda ts: None,
                    ended,
                    session=i,
                )
            )

        def ended(result: Any) -> None:
            engine.end_session(i)  # the run is over, as the eval's session closes
            finished(result)

        engine.submit(
            Request(
                i,
                engine.vocab.tokenize(first_prompt(i), add_bos=True),
                sampling,
                [],
                threading.Event(),
                lambda ts: pieces.extend(t.text for t in ts),
                second,
                session=i,
            )
        )

    def finished(result: Any) -> None:
        counts["tokens"] += len(result.token_ids)
        counts["finished"] += 1
        launch()

    def launch() -> None:
        if counts["next"] < len(problems):
            counts["next"] += 1
            start(problems[counts["next"] - 1])

    started = time.perf_counter()
    for _ in range(in_flight):
        launch()
    while not engine.idle:
        engine.step()
    return measured(counts["tokens"], len(problems), time.perf_counter() - started)


def measured(tokens: int, problems: int, seconds: float) -> dict[str, Any]:
    return {
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 2),
        "problems_per_min": round(60 * problems / seconds, 2),
    }


def latency(engine: BatchEngine, tokens: int, busy: int) -> dict[str, Any]:
    """Seconds per token of one generation alone, then beside ``busy`` long ones."""
    engine.reset()
    sampling = Sampling(temperature=0.0, max_tokens=tokens)

    def one(background: list[threading.Event]) -> float:
        stamps: list[float] = []
        done: list[Any] = []
        engine.submit(
            Request(
                99,
                engine.vocab.tokenize(first_prompt(99), add_bos=True),
                sampling,
                [],
                threading.Event(),
                lambda ts: stamps.append(time.perf_counter()),
                done.append,
            )
        )
        while not done:
            engine.step()
        for cancel in background:
            cancel.set()
        while not engine.idle:
            engine.step()
        return (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)

    alone = one([])
    cancels = [threading.Event() for _ in range(busy)]
    for k, cancel in enumerate(cancels):
        engine.submit(
            Request(
                k,
                engine.vocab.tokenize(first_prompt(k), add_bos=True),
                Sampling(temperature=0.0, max_tokens=100000),
                [],
                cancel,
                lambda ts: None,
                lambda r: None,
            )
        )
    while sum(s.run is not None and s.run.pending is not None for s in engine.sequences) < busy:
        engine.step()  # the background ones are generating before the interactive one arrives
    shared = one(cancels)
    return {
        "alone_s_per_token": round(alone, 4),
        f"beside_{busy}_s_per_token": round(shared, 4),
        "slowdown": round(shared / alone, 2),
    }


def padded(engine: BatchEngine, b: int) -> int:
    """Columns of a decode step with ``b`` sequences generating (see BatchEngine._decode)."""
    return round_up(b, engine.group)


def step_costs(engines: dict[str, BatchEngine], rounds: int) -> dict[str, Any]:
    """Seconds per ``llama_decode`` of one token for each of B sequences (no sampling), the
    engines interleaved so that a busy spell of the machine hits them alike."""
    widths = [b for b in (1, 2, 4, 8) if all(b <= e.n_seq for e in engines.values())]
    positions = {}
    for name, engine in engines.items():
        engine.reset()
        for s in range(padded(engine, max(widths))):
            engine._fill([(100 + i, i, s, i == 63) for i in range(64)])
        positions[name] = [64] * padded(engine, max(widths))
    times: dict[tuple[str, int], list[float]] = {(n, b): [] for n in engines for b in widths}
    for _ in range(rounds):
        for b in widths:
            for name, engine in engines.items():
                for _ in range(3):
                    pos = positions[name]
                    started = time.perf_counter()
                    engine._fill([(200, pos[s], s, True) for s in range(padded(engine, b))])
                    times[(name, b)].append(time.perf_counter() - started)
                    for s in range(padded(engine, b)):
                        pos[s] += 1
    for engine in engines.values():
        engine.reset()
    out: dict[str, Any] = {}
    for name in engines:
        one = statistics.median(times[(name, 1)])
        out[name] = {
            str(b): {
                "ms_per_step": round(1000 * statistics.median(times[(name, b)]), 1),
                "tokens_per_s": round(b / statistics.median(times[(name, b)]), 2),
                "vs_one": round(b * one / statistics.median(times[(name, b)]), 2),
            }
            for b in widths
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--levels", default="1,2,4,8")
    parser.add_argument("--plain-levels", default="1,4,8")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rounds", type=int, default=2, help="the configurations take turns this many times")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    path = str(resolve_model_file(load_models().get(args.model)))
    sampling = Sampling(temperature=0.0, max_tokens=args.tokens)
    levels = [int(x) for x in args.levels.split(",") if x]
    plain_levels = [int(x) for x in args.plain_levels.split(",") if x]
    common = {"n_ctx": 2048, "n_threads": args.threads, "n_batch": 512, "seed": 0, "min_p": 0.0, "prompt_chunk": None}
    results: dict[str, Any] = {
        "model": args.model,
        "problems": args.problems,
        "tokens_per_turn": args.tokens,
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "load_avg_at_start": os.getloadavg(),
    }
    serial_model = LlamaModel(path, **common)
    results["openmp"] = {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}  # set on loading
    repacked = BatchEngine(path, **common, n_seq=max(levels + plain_levels), repack=True)
    plain = BatchEngine(path, **common, n_seq=max(levels + plain_levels), repack=False)
    results["decode_step"] = step_costs({"plain": plain, "repacked_padded": repacked}, args.rounds)
    repacked.close()
    engines = {n: BatchEngine(path, **common, n_seq=n) for n in levels}  # as the eval loads them
    print("decode step", json.dumps(results["decode_step"]), flush=True)

    per_round = max(1, args.problems // args.rounds)
    configs = (
        [("serial", 1, None)]
        + [("batched", n, engines[n]) for n in levels]
        + [("batched_plain", n, plain) for n in plain_levels]
    )
    totals = {(name, n): [0, 0.0] for name, n, _ in configs}
    for k in range(args.rounds):
        chosen = range(k * per_round, (k + 1) * per_round)  # new problems each round: no run is cached
        for name, n, engine in configs:
            r = serial(serial_model, chosen, sampling) if engine is None else batched(engine, chosen, n, sampling)
            totals[(name, n)][0] += r["tokens"]
            totals[(name, n)][1] += r["seconds"]
    problems = per_round * args.rounds
    base = totals[("serial", 1)][0] / totals[("serial", 1)][1]
    for (name, n), (tokens, seconds) in totals.items():
        r = measured(tokens, problems, seconds)
        r["vs_serial"] = round(r["tokens_per_s"] / base, 2)
        results.setdefault(name, {})[str(n)] = r
        print(name, n, r, flush=True)
    results["latency"] = latency(engines[max(n for n in levels if n <= 4)], args.tokens, 3)
    print("latency", results["latency"], flush=True)
    for closing in (serial_model, plain, *engines.values()):
        closing.close()
    results["load_avg_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
