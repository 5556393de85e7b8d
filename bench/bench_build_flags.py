"""Decode speed of llama-cpp-python builds made with different llama.cpp build flags (issue 13).

Each build is llama-cpp-python 0.3.36 compiled with its own CMAKE_ARGS, installed into its own
directory (``pip install --target``). Builds compared by default:

- ``ours``: the flags ``tuiagent.llama_build.plan()`` gives this CPU (native detection off, the
  instruction sets /proc/cpuinfo lists, AMX off); the wheel the project cached for them is reused.
- ``native-no-amx``: ``GGML_NATIVE=ON`` (``-march=native``) with ``GGML_AMX_{TILE,INT8,BF16}=OFF``.
- ``avx2-portable``: native off, AVX/AVX2/FMA/F16C/BMI2 (and SSE4.2) only, no AVX-512, no AVX-VNNI.

Not compared: ``-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON`` (runtime dispatch). llama-cpp-python
0.3.36 cannot use such a build as it is: its CMakeLists installs only the fixed targets (``ggml-cpu``,
not the ``ggml-cpu-<variant>`` modules) and it never calls ``ggml_backend_load_all()``, so
``llama_model_load_from_file`` would fail with "no backends are loaded".

New builds add ``-DLLAVA_BUILD=OFF`` (the multimodal library is not used here and only lengthens the
build; it does not touch libllama or libggml).

Every build runs in its own worker process (so each imports its own ``llama_cpp``), with the
OpenMP wait the app sets (``openmp_defaults``; the committed results, of 2026-12-01 afternoon,
were taken with passive waits). A worker loads the model with
``Llama(n_ctx=2048, n_threads=2, verbose=False)`` and, on each request, measures one greedy
generation of ``--tokens`` tokens after the same ChatML prompt (~100 tokens), from an empty KV cache:
prompt tok/s = prompt tokens / time to evaluate the prompt (one ``eval`` of all of them), decode
tok/s = generated tokens / time of the ``--tokens`` single-token evals that follow (argmax of the
logits between them; llama.cpp's own context timings are recorded beside, as a check). Repetitions go
round-robin over the builds (after one warm-up generation each), so a busy spell of a shared machine
hits them alike; the median of ``--reps`` is reported, with the ratio to ``ours``.

The machine may be shared: compare ratios within one run, not absolute numbers across runs.

    python bench/bench_build_flags.py [--build] [--builds ours,native-no-amx,avx2-portable]
        [--reps 3] [--tokens 128] [--threads 2] [--model PATH] [--site NAME=DIR ...] [--sdist FILE] [--out FILE]

Without ``--build`` a build is found in ``/tmp/lcp-<name>`` (or ``--site NAME=DIR``) and is skipped
when absent; with ``--build`` missing ones are built (``pip wheel --no-cache-dir`` of the sdist with
``CMAKE_ARGS``, under ``nice``; several minutes each), the wheels kept under
``<cache>/bench-build-flags/<name>-<hash of the flags>/`` and reused by later runs, then installed
into ``/tmp/lcp-<name>``. Writes bench/results/build_flags.json and prints a table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "build_flags.json"
NO_AMX = "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
NO_LLAVA = "-DLLAVA_BUILD=OFF"

SYSTEM = "You are a careful mathematician. Solve the problem step by step and put the final answer in \\boxed{}."
QUESTION = (
    "A train leaves a station at 9:00 at 72 km/h. A second train leaves the same station at 9:45 on the "
    "same track at 96 km/h in the same direction. When does the second train catch up with the first, "
    "and how far from the station are they then? Explain each step, then check it with Python."
)


def build_args(name: str) -> str:
    """The CMAKE_ARGS of a named build."""
    from tuiagent.llama_build import X86_OPTIONS, cpu_flags, portable_cmake_args

    if name == "ours":
        return portable_cmake_args(cpu_flags())
    if name == "native-no-amx":
        return f"-DGGML_NATIVE=ON {NO_AMX} {NO_LLAVA}"
    if name == "avx2-portable":
        wanted = {"GGML_SSE42", "GGML_AVX", "GGML_F16C", "GGML_FMA", "GGML_BMI2", "GGML_AVX2"}
        opts = " ".join(f"-D{opt}={'ON' if opt in wanted else 'OFF'}" for opt, _ in X86_OPTIONS)
        return f"-DGGML_NATIVE=OFF {opts} {NO_AMX} {NO_LLAVA}"
    raise SystemExit(f"unknown build {name!r}")


def cache_root() -> Path:
    from tuiagent.llama_build import wheel_cache_dir

    ours = wheel_cache_dir("x", {k: v for k, v in os.environ.items() if k != "PIP_NO_CACHE_DIR"})
    assert ours is not None
    return ours.parents[2] / "bench-build-flags"  # <cache>/wheels/llama-cpp-python/x -> <cache>/bench-...


def wheel_for(name: str, args: str, *, build: bool, sdist: str) -> Path | None:
    """The wheel of a build: the project's own for ``ours``, else ours cached or (with build) built now."""
    from tuiagent.llama_build import PACKAGE, VERSION, plan, wheel_cache_dir

    if name == "ours":
        p = plan(env={})
        cache = wheel_cache_dir(p.key)
        found = sorted(cache.glob("*.whl")) if cache else []
        if found or not build:
            return found[-1] if found else None
        key_dir = cache_root() / f"ours-{p.key}"
    else:
        key_dir = cache_root() / f"{name}-{hashlib.sha256(args.encode()).hexdigest()[:8]}"
    found = sorted(key_dir.glob("*.whl"))
    if found or not build:
        return found[-1] if found else None
    key_dir.mkdir(parents=True, exist_ok=True)
    (key_dir / "cmake_args.txt").write_text(args + "\n")
    env = {**os.environ, "CMAKE_ARGS": args, "FORCE_CMAKE": "1", "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
    cmd = [
        "nice",
        "-n",
        "19",
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-cache-dir",
        "--no-binary",
        PACKAGE,
        "--wheel-dir",
        str(key_dir),
        sdist or f"{PACKAGE}=={VERSION}",
    ]
    print(f"[{name}] building (several minutes): CMAKE_ARGS={args}\n  $ {shlex.join(cmd)}", flush=True)
    t0 = time.monotonic()
    with open(key_dir / "build.log", "w") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    print(f"[{name}] built in {time.monotonic() - t0:.0f} s", flush=True)
    return sorted(key_dir.glob("*.whl"))[-1]


def install_site(wheel: Path, site: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-cache-dir",
        "--target",
        str(site),
        str(wheel),
    ]
    print("  $", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


# ----------------------------------------------------------------------------- the worker (one per build)


def worker(model: str, threads: int, tokens: int) -> None:
    """Load the model with this process's llama_cpp, then answer one line of JSON per request line."""
    out = os.fdopen(os.dup(1), "w")  # the answer channel; whatever else prints to fd 1 goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import llama_cpp
    import numpy as np

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=model, n_ctx=2048, n_threads=threads, verbose=False)
    prompt = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    n_vocab = llm.n_vocab()
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    hello = {
        "llama_cpp": llama_cpp.__file__,
        "version": llama_cpp.__version__,
        "load_s": time.perf_counter() - t0,
        "prompt_tokens": len(ids),
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
    }
    print(json.dumps(hello), file=out, flush=True)
    for _line in sys.stdin:
        llm.reset()  # the next eval drops every cell from position 0 on: an empty KV cache
        llama_cpp.llama_perf_context_reset(llm.ctx)
        t0 = time.perf_counter()
        llm.eval(ids)
        llama_cpp.llama_synchronize(llm.ctx)  # llama.cpp books a decode's time when it next synchronizes
        t1 = time.perf_counter()
        gen: list[int] = []
        for _ in range(tokens):
            # greedy: the last token's logits (what llama.cpp keeps without logits_all); end of text does not stop it
            tok = int(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).argmax())
            gen.append(tok)
            llm.eval([tok])
        llama_cpp.llama_synchronize(llm.ctx)  # (else the last one would count toward the next prompt)
        t2 = time.perf_counter()
        perf = llama_cpp.llama_perf_context(llm.ctx)
        print(
            json.dumps(
                {
                    "prompt_s": t1 - t0,
                    "decode_s": t2 - t1,
                    "prompt_tps": len(ids) / (t1 - t0),
                    "decode_tps": tokens / (t2 - t1),
                    "llama_prompt_tps": perf.n_p_eval / (perf.t_p_eval_ms / 1e3) if perf.t_p_eval_ms else None,
                    "llama_decode_tps": perf.n_eval / (perf.t_eval_ms / 1e3) if perf.t_eval_ms else None,
                    "tokens_sha": hashlib.sha256(json.dumps(gen).encode()).hexdigest()[:12],
                    "text_head": llm.detokenize(gen[:24]).decode(errors="replace"),
                }
            ),
            file=out,
            flush=True,
        )


class Worker:
    def __init__(self, name: str, site: Path, args: argparse.Namespace):
        path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        from tuiagent.backends.llama_model import openmp_defaults

        env = {**os.environ, "PYTHONPATH": path}
        openmp_defaults(env)
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "--model",
            args.model,
            "--threads",
            str(args.threads),
            "--tokens",
            str(args.tokens),
        ]
        self.name = name
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self._read()
        if not self.hello["llama_cpp"].startswith(str(site)):
            raise SystemExit(f"[{name}] imported {self.hello['llama_cpp']}, not the build in {site}")

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise SystemExit(f"[{self.name}] worker exited (rc {self.proc.wait()})")
        return json.loads(line)

    def measure(self) -> dict[str, Any]:
        self.proc.stdin.write("go\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait()


def default_model() -> str:
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    return str(resolve_model_file(load_models().get("qwen2.5-coder-1.5b")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", default="ours,native-no-amx,avx2-portable")
    parser.add_argument("--build", action="store_true", help="build (and install) the builds not found")
    parser.add_argument(
        "--site",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="where a build is installed (default /tmp/lcp-NAME)",
    )
    parser.add_argument("--sdist", default="", help="the llama-cpp-python sdist to build from (default: from PyPI)")
    parser.add_argument("--model", default="")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.model, args.threads, args.tokens)
    args.model = args.model or default_model()
    sites = dict(s.split("=", 1) for s in args.site)
    results: dict[str, Any] = {
        "model": args.model,
        "tokens": args.tokens,
        "reps": args.reps,
        "threads": args.threads,
        "n_ctx": 2048,
        "cpu": cpu_name(),
        "cpu_flags_x86": cpu_flags_summary(),
        "gcc_march_native": gcc_native(),
        "load_avg_at_start": os.getloadavg(),
        "builds": {},
    }
    workers: list[Worker] = []
    for name in [b for b in args.builds.split(",") if b]:
        cmake_args = build_args(name)
        site = Path(sites.get(name, f"/tmp/lcp-{name}"))
        wheel = wheel_for(name, cmake_args, build=args.build, sdist=args.sdist)
        if not (site / "llama_cpp").is_dir():
            if wheel is None:
                print(f"[{name}] skipped: nothing installed in {site} and no wheel built (use --build)", flush=True)
                continue
            install_site(wheel, site)
        w = Worker(name, site, args)
        print(
            f"[{name}] {w.hello['prompt_tokens']} prompt tokens; loaded in {w.hello['load_s']:.1f} s\n"
            f"  {w.hello['system_info']}",
            flush=True,
        )
        results["builds"][name] = {
            "cmake_args": cmake_args,
            "site": str(site),
            "wheel": str(wheel) if wheel else None,
            **w.hello,
            "runs": [],
        }
        workers.append(w)
    for w in workers:  # warm-up: page cache, first-touch of the weights, thread start
        results["builds"][w.name]["warmup"] = w.measure()
    for rep in range(args.reps):
        for w in workers:
            r = w.measure()
            results["builds"][w.name]["runs"].append(r)
            print(
                f"rep {rep + 1} {w.name:14s} prompt {r['prompt_tps']:7.1f} tok/s  decode {r['decode_tps']:6.2f} tok/s"
                f"  load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    for w in workers:
        w.close()
    results["load_avg_at_end"] = os.getloadavg()
    summarize(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


def summarize(results: dict[str, Any]) -> None:
    builds = results["builds"]
    for b in builds.values():
        for key in ("prompt_tps", "decode_tps", "llama_prompt_tps", "llama_decode_tps"):
            vals = [r[key] for r in b["runs"] if r.get(key)]
            b[f"median_{key}"] = round(statistics.median(vals), 2) if vals else None
        b["same_tokens_every_rep"] = len({r["tokens_sha"] for r in b["runs"] + [b["warmup"]]}) == 1
    base = builds.get("ours")
    print(
        f"\n{'build':14s} {'prompt tok/s':>12s} {'decode tok/s':>12s} {'prompt/ours':>11s} {'decode/ours':>11s}  tokens"
    )
    for name, b in builds.items():
        for key in ("prompt_tps", "decode_tps"):
            b[f"{key.split('_')[0]}_vs_ours"] = (
                round(b[f"median_{key}"] / base[f"median_{key}"], 3) if base and base[f"median_{key}"] else None
            )
        print(
            f"{name:14s} {b['median_prompt_tps']:12.1f} {b['median_decode_tps']:12.2f} "
            f"{b['prompt_vs_ours'] or float('nan'):11.3f} {b['decode_vs_ours'] or float('nan'):11.3f}  "
            f"{b['runs'][0]['tokens_sha'] if b['runs'] else '-'}"
        )


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags_summary() -> list[str]:
    from tuiagent.llama_build import cpu_flags

    return sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma", "f16c", "bmi")))


def gcc_native() -> str:
    """What ``-march=native`` means to this machine's gcc: the arch it picks, and whether AMX is on."""
    try:
        out = subprocess.run(
            ["gcc", "-march=native", "-Q", "--help=target"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return "gcc not found"
    keep = [
        " ".join(line.split())
        for line in out.splitlines()
        if line.strip().startswith(("-march=", "-mtune=", "-mamx", "-mavx512f ", "-mavx512bf16", "-mavxvnni "))
    ]
    return "; ".join(keep)


if __name__ == "__main__":
    main()
