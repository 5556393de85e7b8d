"""Would a requantized default model make a batched step cheaper, and at what quality cost?

The default model (Q4_K_M) keeps about a third of its weight bytes in Q6_K, for which this llama.cpp
has no multi-column x86 kernel under 8 columns: at 4 in flight each Q6_K tensor is read once but
multiplied column by column. This builds variants whose Q6_K tensors are requantized by llama.cpp's
own ``llama_model_quantize`` (``allow_requantize``, a per-tensor type for every tensor, so every other
tensor is copied unchanged) and measures, in one run, against the shipped model:

- the cost of one batched decode step of 1, 2, 4 and 8 columns (``bench_batch.step_costs``, each
  variant on the batched engine with its default, repacked weights; the shipped model also on plain
  weights with llama.cpp's tiled K-quant matmul forced at every width, ``GGML_CPU_TILED_MM_FORCE``);
  the variants in one process, their steps taking turns, the tiled-forced ones in another;
- the quality cost: on ``--positions`` positions of greedy text the shipped model wrote for math
  prompts, the mean KL divergence of each variant's next-token distribution from the shipped one's
  and how often their greedy tokens agree.

The step cost at 4 columns bounds the batched throughput a variant can give (4 / cost); a variant worth
the end-to-end measurement (eval throughput at 1, 4, 8 in flight, Pass@1 on GSM8K) gives at least 1.3x.

    python bench/bench_requant.py [--model qwen2.5-coder-1.5b] [--rounds 2] [--positions 256] [--out FILE]

Variants are built once into the user cache (tuiagent's cache dir, ``variants/``). Writes
bench/results/requant.json (or --out).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).parent / "results" / "requant.json"
# What each variant turns the Q6_K tensors into (ggml type names); "shipped" is the model as it ships.
VARIANTS = {"q6k-as-q8_0": "Q8_0", "q6k-as-q4_k": "Q4_K"}
# Each group runs in a process of its own (the tiled switches are read once per process); within a
# group the engines take turns step by step, so a busy spell of the shared machine hits them alike.
GROUPS = {  # group: (environment, {setting: (variant, repacked weights)})
    "default matmul": ({}, {"shipped": ("shipped", True), **{name: (name, True) for name in VARIANTS}}),
    "tiled forced": (
        {"GGML_CPU_TILED_MM": "1", "GGML_CPU_TILED_MM_FORCE": "1"},
        {"shipped, plain, tiled forced": ("shipped", False), "shipped, repacked, tiled forced": ("shipped", True)},
    ),
}
PROMPTS = [
    f"A shop sells {i + 2} boxes of {i + 5} pens and gives away {i} pens. How many pens are left? Reason step by step."
    for i in range(8)
]


def shipped_path(model: str) -> Path:
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    path = resolve_model_file(load_models().get(model))
    if path is None:
        raise SystemExit(f"{model} is not assembled: run tuiagent fetch {model}")
    return Path(path)


def tensor_types(path: Path) -> dict[str, str]:
    """Each tensor's name and ggml type, read from the GGUF header."""
    from gguf import GGUFReader

    return {t.name: t.tensor_type.name for t in GGUFReader(str(path)).tensors}


def build(source: Path, name: str, target: str) -> Path:
    """The variant of ``source`` whose Q6_K tensors are ``target``; built once, kept in the cache."""
    import llama_cpp
    from gguf import GGMLQuantizationType

    from tuiagent import paths

    digest = hashlib.sha256(f"{source.name}:{source.stat().st_size}:{target}".encode()).hexdigest()[:12]
    out = paths.cache_dir() / "variants" / f"{source.stem}-{name}-{digest}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    types = tensor_types(source)
    wanted = {t: (target if kind == "Q6_K" else kind) for t, kind in types.items() if kind not in ("F32", "F16")}
    keep = [
        (f"^{t.replace('.', chr(92) + '.')}$".encode(), GGMLQuantizationType[kind].value) for t, kind in wanted.items()
    ]
    overrides = (llama_cpp.llama_model_tensor_override * (len(keep) + 1))(
        *[llama_cpp.llama_model_tensor_override(p, k) for p, k in keep], llama_cpp.llama_model_tensor_override(None, 0)
    )
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = os.cpu_count() or 1
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.allow_requantize = True
    params.quantize_output_tensor = True
    params.pure = True  # no mixture rule: the overrides alone decide
    params.tt_overrides = ctypes.cast(overrides, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
    partial = out.with_suffix(".partial")
    started = time.perf_counter()
    if llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_model_quantize failed for {name}")
    got = tensor_types(partial)
    wrong = {t: (got.get(t), k) for t, k in wanted.items() if got.get(t) != k}
    if wrong:
        raise SystemExit(f"{name}: tensors with another type than asked: {dict(list(wrong.items())[:5])}")
    partial.rename(out)
    print(f"built {out} in {time.perf_counter() - started:.0f} s", flush=True)
    return out


def paths_of(model: str) -> dict[str, Path]:
    source = shipped_path(model)
    return {"shipped": source, **{name: build(source, name, target) for name, target in VARIANTS.items()}}


def child(engines: dict[str, tuple[str, bool]], rounds: int) -> None:
    from bench_batch import step_costs

    from tuiagent.backends.llama_batch import BatchEngine

    loaded = {
        name: BatchEngine(
            path,
            n_ctx=512,
            n_threads=os.cpu_count() or 1,
            n_batch=512,
            seed=0,
            min_p=0.0,
            prompt_chunk=None,
            n_seq=8,
            repack=repack,
        )
        for name, (path, repack) in engines.items()
    }
    print(json.dumps(step_costs(loaded, rounds=rounds)), flush=True)
    for engine in loaded.values():
        engine.close()


def quality(paths: dict[str, Path], positions: int) -> dict[str, Any]:
    """KL(shipped || variant) and greedy agreement over ``positions`` positions of the shipped model's own
    greedy continuations of PROMPTS, every model reading the same tokens."""
    import numpy as np
    from llama_cpp import Llama

    def load(path: Path) -> Llama:
        return Llama(str(path), n_ctx=1024, n_threads=os.cpu_count() or 1, logits_all=True, verbose=False)

    def log_softmax(x: Any) -> Any:
        x = x - x.max(axis=-1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))

    reference = load(paths["shipped"])
    texts: list[tuple[list[int], int]] = []  # (tokens, where the continuation starts)
    per_prompt = -(-positions // len(PROMPTS))
    for p in PROMPTS:
        prompt = reference.tokenize(f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n".encode(), special=True)
        done: Any = reference.create_completion(prompt, max_tokens=per_prompt, temperature=0.0)
        texts.append((prompt + reference.tokenize(done["choices"][0]["text"].encode(), add_bos=False), len(prompt)))
    reference.close()

    def logprobs(path: Path) -> list[np.ndarray]:
        llm = load(path)
        got = []
        for tokens, start in texts:
            llm.reset()
            llm.eval(tokens)
            got.append(log_softmax(np.asarray(llm.scores[start - 1 : len(tokens) - 1], dtype=np.float64)))
        llm.close()
        return got

    base = logprobs(paths["shipped"])
    out: dict[str, Any] = {"positions": sum(len(b) for b in base)}
    for name in VARIANTS:
        other = logprobs(paths[name])
        kl = [float((np.exp(b) * (b - o)).sum(axis=-1).mean()) for b, o in zip(base, other)]
        n = [len(b) for b in base]
        agree = sum(int((b.argmax(-1) == o.argmax(-1)).sum()) for b, o in zip(base, other))
        out[name] = {
            "mean_kl": round(sum(k * m for k, m in zip(kl, n)) / sum(n), 5),
            "greedy_agreement": round(agree / sum(n), 4),
            "file_mb": round(paths[name].stat().st_size / 2**20, 1),
        }
    out["shipped_file_mb"] = round(paths["shipped"].stat().st_size / 2**20, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--positions", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child), 2)
        return
    paths = paths_of(args.model)
    types: dict[str, int] = {}
    for kind in tensor_types(paths["shipped"]).values():
        types[kind] = types.get(kind, 0) + 1
    load_start = os.getloadavg()
    runs: list[dict[str, Any]] = []  # per round: setting -> width -> ms per step
    for k in range(args.rounds):
        runs.append({})
        for group, (env, settings) in GROUPS.items():
            clean = {key: v for key, v in os.environ.items() if not key.startswith("GGML_CPU_TILED_MM")}
            engines = {name: (str(paths[variant]), repack) for name, (variant, repack) in settings.items()}
            done = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(engines)],
                env={**clean, **env},
                capture_output=True,
                text=True,
                check=True,
            )
            got = json.loads(done.stdout.strip().splitlines()[-1])
            runs[-1].update({name: {b: c["ms_per_step"] for b, c in widths.items()} for name, widths in got.items()})
            print(f"round {k + 1}, {group}: {json.dumps({n: runs[-1][n] for n in got})}", flush=True)
    names = list(runs[0])
    steps = {name: {b: statistics.median(r[name][b] for r in runs) for b in runs[0][name]} for name in names}
    # a ratio within one process (the default-matmul group) is what the noise cannot move much
    ratio = {
        name: {b: round(statistics.median(r["shipped"][b] / r[name][b] for r in runs), 2) for b in ("1", "4", "8")}
        for name in names
    }
    summary: dict[str, Any] = {
        "model": args.model,
        "date": time.strftime("%Y-%m-%d"),
        "rounds": args.rounds,
        "shipped_tensor_types": types,
        "load_avg": {"start": load_start, "after_steps": os.getloadavg()},
        "ms_per_step": steps,
        "step_throughput_vs_shipped": ratio,  # median over rounds of shipped ms / setting ms, same width
        "quality": quality(paths, args.positions),
    }
    print(json.dumps(summary, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
