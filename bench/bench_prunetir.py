r"""PruneTIR on recorded erroneous trajectories: WTN and TCN with and without the guard, and its cost.

The trajectories in tests/data/erroneous/*.jsonl are scripted model turns with kernel outputs
recorded on the real Jupyter kernel (``--record`` re-runs every code block there and rewrites
the result lines). One file, JSON lines:

    {"problem": "...", "gold": "...", "about": "...", "expect": {"stp": 1, "stpr": 0, "rtts": 0}}
    {"branch": 0, "turn": "prose\n```python\ncode\n```\n```output\n"}    one model turn
    {"code": "...", "outputs": [["error", "Traceback..."]], "error": true, "timed_out": false,
     "error_name": "NameError"}                                          the kernel's answer to a code block

Branch 0 is what the model generates when left alone (the run without the guard). Branch k
holds the turns generated after the k-th resample: the replay backend switches branch when a
turn is requested with a seed it has not seen (PruneTIR's STPR/RTTS draw a new seed), which
is how a real sampler would diverge. The kernel double answers by code text, so the same
block gets the same output in both arms. ``expect`` pins what the guard must do on the file
(guards/prunetir/tests/test_prunetir.py checks it).

WTN = tokens of the final working context, TCN = executed tool calls (pruned and resampled
ones included). These are recorded scripts, not a model's fresh samples: after a prune the
scripted turns do not change, so only the context and the resampled branches differ. The
paper's numbers (Qwen3-8B, AIME24: WTN -17.4%, TCN 7.7 -> 4.2) are not comparable.

    python bench/bench_prunetir.py [--repeats 5] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from guards.chain import GuardChain
from guards.prunetir.guard import code_tokens, failing_statement
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.core.steps import run_metrics
from tuiagent.parsing import last_closed_block
from tuiagent.protocol import RunSettings, Sampling

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "erroneous"
RESULTS = Path(__file__).parent / "results" / "prunetir.json"
# Both arms: a tool budget that lets the episodes play out (the reference loop's 4 would end
# most stuck runs at the first STPR); everything else is the loop's default.
SETTINGS = RunSettings(max_tool_calls=12, max_tokens=20_000)


@dataclass
class Recorded:
    name: str
    problem: str
    gold: str | None
    about: str
    expect: dict
    branches: list[list[str]] = field(default_factory=list)
    results: dict[str, dict] = field(default_factory=dict)
    timeout_s: float = 5.0


def load_recorded(path: Path) -> Recorded:
    lines = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    head = lines[0]
    rec = Recorded(
        Path(path).stem,
        head["problem"],
        head.get("gold"),
        head.get("about", ""),
        head.get("expect", {}),
        timeout_s=head.get("timeout_s", 5.0),
    )
    for entry in lines[1:]:
        if "turn" in entry:
            k = entry.get("branch", 0)
            while len(rec.branches) <= k:
                rec.branches.append([])
            rec.branches[k].append(entry["turn"])
        elif "code" in entry:
            rec.results[entry["code"]] = entry
    return rec


def all_recorded() -> list[Recorded]:
    return [load_recorded(p) for p in sorted(DATA.glob("*.jsonl"))]


class BranchingBackend(ScriptedBackend):
    """Scripted backend that moves to the next branch of turns when asked for a turn with a new seed."""

    def __init__(self, branches: list[list[str]]):
        self.branches = [[split_tokens(t, -0.01) for t in b] for b in branches]
        super().__init__(self.branches[0])
        self.branch = 0
        self.samplings: list[Sampling] = []
        self._seeds: set[int] = set()

    def stream(self, prompt: str, sampling: Sampling, stop):
        self.samplings.append(sampling)
        if sampling.seed is not None and sampling.seed not in self._seeds:
            self._seeds.add(sampling.seed)
            if self.branch + 1 < len(self.branches):
                self.branch += 1
                self.turns, self._next = self.branches[self.branch], 0
        return super().stream(prompt, sampling, stop)


class ReplayKernel:
    """Kernel double answering each code block with its recorded result (by exact code text)."""

    def __init__(self, results: dict[str, dict]):
        self.results = results
        self.calls: list[str] = []

    async def execute(self, code: str, timeout: float) -> CellResult:
        self.calls.append(code)
        r = self.results[code]  # a block without a recorded result is a broken file: fail loudly
        return CellResult(
            outputs=tuple(Output(k, t) for k, t in r["outputs"]),
            error=r["error"],
            timed_out=r["timed_out"],
            error_name=r.get("error_name"),
        )


async def replay(rec: Recorded, *, guarded: bool, settings: dict | None = None) -> tuple[list[ev.Event], Agent]:
    chain = GuardChain({"prunetir": settings or {"resample_seed": 7}}, {"prunetir"}) if guarded else None
    agent = Agent(BranchingBackend(rec.branches), ReplayKernel(rec.results), settings=SETTINGS, guards=chain)
    events = [e async for e in agent.stream(rec.problem, gold=rec.gold)]
    return events, agent


def codes_in_order(rec: Recorded) -> list[str]:
    seen, out = set(), []
    for branch in rec.branches:
        for turn in branch:
            block = last_closed_block(turn.split("```output", 1)[0])
            if block is not None and block.code not in seen:
                seen.add(block.code)
                out.append(block.code)
    return out


async def record(path: Path) -> None:
    """Re-run every code block of a file (branch order) on a fresh real kernel; rewrite its result lines."""
    from kernels.jupyter import JupyterKernel

    rec = load_recorded(path)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = [entry for entry in lines if "code" not in entry]
    async with JupyterKernel() as kernel:
        for code in codes_in_order(rec):
            r = await kernel.execute(code, rec.timeout_s)
            kept.append(
                {
                    "code": code,
                    "outputs": [[o.kind, o.text] for o in r.outputs] + [["stderr", n] for n in r.notes],
                    "error": r.error,
                    "timed_out": r.timed_out,
                    "error_name": r.error_name,
                }
            )
    path.write_text("".join(json.dumps(entry) + "\n" for entry in kept), encoding="utf-8")


def tokenizer():
    """(name, count) for WTN: tiktoken cl100k_base when its file is cached, else the default
    model's own vocabulary (GGUF, vocab only), else the scripted backend's word pieces."""
    try:
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base")
        return "tiktoken cl100k_base", lambda text: len(enc.encode(text, disallowed_special=()))
    except Exception:
        pass
    try:
        import llama_cpp

        from tuiagent.paths import models_cache_dir

        gguf = next(iter(sorted(models_cache_dir().glob("qwen2.5-coder-1.5b*.gguf"))), None)
        if gguf is not None:
            llm = llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)
            return (
                f"{gguf.name} vocabulary (tiktoken cl100k_base not cached offline)",
                lambda text: len(llm.tokenize(text.encode(), add_bos=False, special=True)),
            )
    except Exception:
        pass
    return "word pieces (no tokenizer available)", ScriptedBackend([]).count_tokens


class _Timed:
    """Wraps the guard's hook to time each decision (by the action it returned; "none" for no verdict)."""

    def __init__(self, guard, samples: dict[str, list[float]]):
        self.samples = samples
        self.inner = guard.on_tool_result

    def __call__(self, call, view):
        start = time.perf_counter()
        verdict = self.inner(call, view)
        self.samples.setdefault(verdict.action if verdict else "none", []).append(time.perf_counter() - start)
        return verdict


def _stats(samples: list[float]) -> dict:
    samples = sorted(samples)
    return {
        "n": len(samples),
        "us_p50": round(statistics.median(samples) * 1e6, 1),
        "us_p95": round(samples[int(0.95 * (len(samples) - 1))] * 1e6, 1),
    }


async def guard_cost(recs: list[Recorded], repeats: int) -> dict:
    """Microseconds per on_tool_result decision over every replayed run (the first pass warms up and is dropped)."""
    samples: dict[str, list[float]] = {}
    for i in range(repeats + 1):
        if i == 1:
            samples.clear()
        for rec in recs:
            code_tokens.cache_clear()  # time fresh work, not cache hits from the previous pass
            failing_statement.cache_clear()
            chain = GuardChain({"prunetir": {"resample_seed": 7}}, {"prunetir"})
            guard = chain.instances["prunetir"]
            guard.on_tool_result = _Timed(guard, samples)
            agent = Agent(BranchingBackend(rec.branches), ReplayKernel(rec.results), settings=SETTINGS, guards=chain)
            async for _ in agent.stream(rec.problem, gold=rec.gold):
                pass
    return {
        "all": _stats([x for v in samples.values() for x in v]),
        "by_action": {k: _stats(v) for k, v in sorted(samples.items())},
    }


def _change(before: float, after: float) -> float | None:
    return round(100.0 * (after - before) / before, 1) if before else None


async def main(repeats: int) -> dict:
    name, count = tokenizer()
    recs = all_recorded()
    runs = []
    for rec in recs:
        row = {"trajectory": rec.name, "about": rec.about}
        for arm, guarded in (("off", False), ("prunetir", True)):
            events, _ = await replay(rec, guarded=guarded)
            m = run_metrics(events, count)
            fin = events[-1]
            row[arm] = {
                "wtn": m["wtn"],
                "wtn_chars": m["wtn_chars"],
                "tcn": m["tcn"],
                "erroneous": m["erroneous"],
                "stp": m["stp"],
                "stpr": m["stpr"],
                "rtts": m["rtts"],
                "reason": fin.reason,
                "answer": fin.answer,
                "correct": fin.correct,
            }
        runs.append(row)
    mean = {
        arm: {k: round(statistics.mean(r[arm][k] for r in runs), 2) for k in ("wtn", "wtn_chars", "tcn", "erroneous")}
        for arm in ("off", "prunetir")
    }
    summary = {
        "trajectories": len(runs),
        "mean": mean,
        "wtn_change_pct": _change(mean["off"]["wtn"], mean["prunetir"]["wtn"]),
        "tcn_change_pct": _change(mean["off"]["tcn"], mean["prunetir"]["tcn"]),
        "correct": {arm: sum(bool(r[arm]["correct"]) for r in runs) for arm in ("off", "prunetir")},
    }
    return {
        "what": "recorded scripted trajectories with real-kernel outputs (tests/data/erroneous), replayed "
        "with and without PruneTIR; not fresh model samples, not comparable to the paper's AIME numbers",
        "paper": {
            "model": "Qwen3-8B",
            "benchmark": "AIME24",
            "wtn_change_pct": -17.4,
            "tcn": [7.7, 4.2],
            "tcn_change_pct": -45.5,
        },
        "tokenizer": name,
        "run_settings": {
            "max_tool_calls": SETTINGS.max_tool_calls,
            "exec_timeout_s": SETTINGS.exec_timeout_s,
            "output_chars": SETTINGS.output_chars,
        },
        "guard_settings": {"resample_seed": 7, "others": "defaults"},
        "summary": summary,
        "guard_cost_per_decision": await guard_cost(recs, repeats),
        "runs": runs,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="re-run the code blocks on the real kernel first")
    args = parser.parse_args()
    if args.record:
        for path in sorted(DATA.glob("*.jsonl")):
            asyncio.run(record(path))
            print("recorded", path.name)
    out = asyncio.run(main(args.repeats))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: out[k] for k in ("tokenizer", "summary", "guard_cost_per_decision")}, indent=2))
