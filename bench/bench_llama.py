"""Benchmark the llama_cpp backend: logprob cost on generation speed, and prefix reuse over a TIR run.

    python bench/bench_llama.py --model PATH [--tokens 128] [--reps 3] [--threads N] [--turns 4]

(1) Generation speed, greedy, same prompt and token count: our LlamaCppBackend (the model in its
    worker process, logprob of every token, tokens streamed back over a socket) against
    llama-cpp-python's own ``Llama.generate`` loop in this process, without logprobs, on a second
    Llama over the same file. Runs alternate (warm-up first); decode
    speed excludes the prompt (timed from the first token to the last), and each run starts from
    an empty KV cache, so both evaluate the same prompt. The baseline runs on a fresh thread (as
    the backend did before it moved to a worker process): with llama-cpp-python's OpenMP build, the same loop on the main thread is several
    times slower when the CPUs are shared with other processes (libgomp's spinning helper threads;
    OMP_WAIT_POLICY=passive removes the difference). It is measured too, for reference.
(2) Prefix reuse: a simulated tool-integrated run (ChatML system + user math question; each turn
    generates until "```output" or --turn-tokens tokens, then a fake tool output is appended).
    Reported: prompt tokens evaluated / final context tokens (and what no reuse would have cost).

Prints a table; writes bench/results/llama.json (one entry per model file, merged with earlier runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuiagent.backends.llama_cpp import LlamaCppBackend  # noqa: E402
from tuiagent.backends.templates import render_chatml  # noqa: E402
from tuiagent.protocol import Sampling  # noqa: E402

SPEED_PROMPT = "Count from 1 to 200 separated by commas."
SYSTEM = (
    "You are a careful mathematician. Solve the problem step by step. To compute, write Python in a "
    "```python block; its output will be shown to you in a ```output block. Put the final answer in \\boxed{}."
)
QUESTION = "Use Python to find the sum of all prime numbers below 10000."
TOOL_OUTPUT = "```output\n42\n```\n"
OUTPUT_FENCE = "```output"


def ours_run(backend: LlamaCppBackend, prompt: str, n: int) -> dict:
    async def go() -> dict:
        backend.reset_cache()
        before = dict(backend.stats.extra)
        t0 = time.perf_counter()
        stamps: list[float] = []
        stream = backend.stream(prompt, Sampling(temperature=0.0, max_tokens=n), [])
        async for _ in stream:
            stamps.append(time.perf_counter())
        extra = {k: v - before.get(k, 0.0) for k, v in backend.stats.extra.items()}
        return {
            "tokens": len(backend.last_token_ids),
            "stop": stream.stop_reason,
            "first_token_s": stamps[0] - t0,
            "decode_tps": (len(stamps) - 1) / (stamps[-1] - stamps[0]),
            "total_s": stamps[-1] - t0,
            "logprob_share": extra["logprob_s"] / extra["generate_s"],
        }

    return asyncio.run(go())


def base_run(llm, tokens: list[int], n: int) -> dict:
    llm.reset()
    t0 = time.perf_counter()
    stamps: list[float] = []
    for _tok in llm.generate(tokens, temp=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
        stamps.append(time.perf_counter())  # end of sequence ignored: always n tokens
        if len(stamps) == n:
            break
    return {
        "tokens": len(stamps),
        "first_token_s": stamps[0] - t0,
        "decode_tps": (len(stamps) - 1) / (stamps[-1] - stamps[0]),
        "total_s": stamps[-1] - t0,
    }


def base_run_in_thread(llm, tokens: list[int], n: int) -> dict:
    """The same loop on a fresh thread, as our backend's worker runs (see the module docstring)."""
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(base_run(llm, tokens, n)))
    t.start()
    t.join()
    return out


def speed(backend: LlamaCppBackend, model: str, threads: int, n_tokens: int, reps: int, main_thread: bool) -> dict:
    from llama_cpp import Llama

    base = Llama(
        model_path=model,
        n_ctx=backend.n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=False,
        verbose=False,
    )
    prompt = render_chatml([{"role": "user", "content": SPEED_PROMPT}])
    tokens = backend.tokenize(prompt, add_bos=True)
    # Our run decides the token count (it stops at end of sequence); the baseline then makes as many.
    warm = ours_run(backend, prompt, n_tokens)
    n = warm["tokens"] - (1 if warm["stop"] == "eos" else 0)
    base_run(base, tokens, n)
    contenders = {
        "llama_cpp": lambda: base_run_in_thread(base, tokens, n),
        "ours": lambda: ours_run(backend, prompt, n),
    }
    if main_thread:
        contenders["llama_cpp_main_thread"] = lambda: base_run(base, tokens, n)
    runs: dict[str, list[dict]] = {who: [] for who in contenders}
    names = list(contenders)
    for i in range(reps):
        for who in names if i % 2 == 0 else names[::-1]:
            runs[who].append(contenders[who]())
    base.close()
    med = {who: statistics.median(r["decode_tps"] for r in rs) for who, rs in runs.items()}
    med_e2e = {who: statistics.median(n / r["total_s"] for r in rs) for who, rs in runs.items()}
    return {
        "prompt_tokens": len(tokens),
        "generated_tokens": n,
        "ours_stop": warm["stop"],
        "reps": reps,
        "decode_tps": med,
        "end_to_end_tps": med_e2e,
        "ratio_decode": med["ours"] / med["llama_cpp"],
        "ratio_end_to_end": med_e2e["ours"] / med_e2e["llama_cpp"],
        "ratio_decode_vs_main_thread": med["ours"] / med["llama_cpp_main_thread"] if main_thread else None,
        "logprob_share_of_generation": statistics.median(r["logprob_share"] for r in runs["ours"]),
        "runs": runs,
    }


def tir_messages() -> list[dict[str, str]]:
    """The product's tool-mode prompt (with its worked example) when tuiagent.core is there."""
    try:
        from tuiagent.core.prompts import messages
    except ImportError:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    return messages(QUESTION, mode="tool")


def tir(backend: LlamaCppBackend, turns: int, turn_tokens: int) -> dict:
    async def go() -> dict:
        backend.reset_cache()
        s = backend.stats
        ev0, tot0 = s.prompt_tokens_evaluated, s.prompt_tokens_total
        context = backend.render_chat(tir_messages())
        rows = []
        for turn in range(1, turns + 1):
            ev, tot, t0 = s.prompt_tokens_evaluated, s.prompt_tokens_total, time.perf_counter()
            stream = backend.stream(context, Sampling(max_tokens=turn_tokens), [OUTPUT_FENCE])
            pieces = [t.text async for t in stream]
            text = "".join(pieces)
            rows.append(
                {
                    "turn": turn,
                    "context_tokens": s.prompt_tokens_total - tot,
                    "evaluated": s.prompt_tokens_evaluated - ev,
                    "generated": len(backend.last_token_ids),
                    "stop": stream.stop_reason,
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
            # The stop string is not yielded: the tool output block opens with it.
            context += text + ("" if text.endswith("\n") else "\n") + TOOL_OUTPUT
        final = backend.count_tokens(context) + (1 if backend.vocab.add_bos else 0)
        evaluated = s.prompt_tokens_evaluated - ev0
        return {
            "turns": rows,
            "transcript": context,
            "final_context_tokens": final,
            "prompt_tokens_evaluated": evaluated,
            "prompt_tokens_without_reuse": s.prompt_tokens_total - tot0,
            "ratio": evaluated / final,
            "ratio_without_reuse": (s.prompt_tokens_total - tot0) / final,
        }

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--turn-tokens", type=int, default=200)
    ap.add_argument(
        "--main-thread-baseline",
        action="store_true",
        help="also time Llama.generate on the main thread (slow when the CPUs are shared)",
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "llama.json"))
    args = ap.parse_args()

    backend = LlamaCppBackend(args.model, n_ctx=args.n_ctx, n_threads=args.threads)
    t0 = time.perf_counter()
    sp = speed(backend, args.model, args.threads, args.tokens, args.reps, args.main_thread_baseline)
    pr = tir(backend, args.turns, args.turn_tokens)
    asyncio.run(backend.aclose())
    load = os.getloadavg()

    name = Path(args.model).name
    if os.environ.get("OMP_WAIT_POLICY"):
        name += f" OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
    omp = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(
        f"\n{Path(args.model).name}  ({args.threads} threads, n_ctx {args.n_ctx}, OMP_WAIT_POLICY {omp}, "
        f"load avg at end {load[0]:.1f})"
    )
    print(
        f"(1) greedy generation, {sp['prompt_tokens']}-token prompt, {sp['generated_tokens']} tokens, "
        f"median of {sp['reps']} alternating runs"
    )
    print(f"    {'':28} {'decode tok/s':>13} {'end-to-end tok/s':>17}")
    for who, label in (
        ("llama_cpp", "Llama.generate, no logprobs"),
        ("ours", "LlamaCppBackend + logprobs"),
        ("llama_cpp_main_thread", "  same, from the main thread"),
    ):
        if who not in sp["decode_tps"]:
            continue
        print(f"    {label:28} {sp['decode_tps'][who]:13.2f} {sp['end_to_end_tps'][who]:17.2f}")
    print(
        f"    ratio ours/llama_cpp: decode {sp['ratio_decode']:.3f}, end-to-end {sp['ratio_end_to_end']:.3f}"
        f"   (target >= 0.95)"
        f"\n    logprob share of generation time {100 * sp['logprob_share_of_generation']:.2f}%"
    )
    print(f"(2) TIR run, {args.turns} turns (stop at {OUTPUT_FENCE!r} or {args.turn_tokens} tokens)")
    print(f"    {'turn':>4} {'context':>8} {'evaluated':>9} {'generated':>9} {'stop':>6} {'s':>6}")
    for r in pr["turns"]:
        print(
            f"    {r['turn']:4} {r['context_tokens']:8} {r['evaluated']:9} {r['generated']:9} {r['stop']:>6} "
            f"{r['seconds']:6.1f}"
        )
    print(
        f"    prompt tokens evaluated / final context: {pr['prompt_tokens_evaluated']} / "
        f"{pr['final_context_tokens']} = {pr['ratio']:.3f}   (target < 1.2; without reuse "
        f"{pr['ratio_without_reuse']:.2f})"
    )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(out.read_text()) if out.exists() else {}
    results[name] = {
        "model": str(args.model),
        "threads": args.threads,
        "n_ctx": args.n_ctx,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "loadavg_at_end": load},
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "llama_cpp_python": __import__("llama_cpp").__version__,
        "seconds": round(time.perf_counter() - t0, 1),
        "speed": sp,
        "prefix_reuse": pr,
    }
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
