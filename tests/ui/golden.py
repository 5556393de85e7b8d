"""Writes the golden trajectories and scripts under tests/ui/data (run it again after a schema change):

    .venv/bin/python tests/ui/golden.py

- ``gate.npz``: a tiny G-STEP gate in the shipped file format (p = sigmoid(3 - 4 x successful calls)):
  it asks for one more call after the first success and commits after the second. A stand-in for
  the trained gate, so the UI tests show every G-STEP decision whether or not weights are installed.
- ``guarded.jsonl``: every guard on; a NameError fixed (STP), ATTC rethink then trust, a necessity
  flag, a G-STEP continue then commit, a TIM flag. Run through the real loop and the real kernel.
- ``rtts.jsonl``: tests/data/erroneous/07 (stuck twice: two STPRs, then RTTS) with PruneTIR and ATTC.
- ``plain.jsonl``: the guarded script with no guard on.
- ``guarded_script.jsonl``: the scripted-backend turns of guarded.jsonl (for live Pilot tests and tmux).

Timestamps, durations and paths are normalised so that snapshots do not change from run to run.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(ROOT))

PROBLEM = "What is the sum of the squares of the first 100 positive integers?"
GOLD = "338350"

TURNS = [
    {
        "text": "I will add up the squares with a generator.\n```python\ntotal = sum(i**2 for i in range(1, 101))\n"
        "print(totl)\n```\n```output\n",
        "logprob": -0.05,
    },
    {
        "text": "I misspelled the variable name.\n```python\ntotal = sum(i**2 for i in range(1, 101))\nprint(total)\n"
        "```\n```output\n",
        "logprob": -0.01,
    },
    {"text": "So the sum is \\boxed{338350}.", "logprob": -0.02},
    {
        "text": "Let's verify this numerically with the closed formula n(n+1)(2n+1)/6.\n```python\nn = 100\n"
        "print(n*(n+1)*(2*n+1)//6)\n```\n```output\n",
        "logprob": -0.02,
    },
    {"text": "Both computations agree, so the answer is \\boxed{338350}.", "logprob": -0.01},
]


def write_gate(path: Path) -> None:
    from guards.gstep.features import N_FEATURES

    w = np.zeros((N_FEATURES, 1))
    w[1, 0] = -4.0  # successful_calls
    np.savez(
        path,
        mean=np.zeros(N_FEATURES),
        scale=np.ones(N_FEATURES),
        W0=w,
        b0=np.array([3.0]),
        meta=np.array(json.dumps({"n_layers": 1, "about": "UI test stand-in, not a trained gate"})),
    )


def normalise(path: Path, name: str) -> None:
    """Fixed times, durations, ids and paths: the same file every time it is made."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = [lines[0]]
    for k, line in enumerate(lines[1:]):
        d = json.loads(line)
        d["t"] = round(1_760_000_000 + 0.05 * k, 3)
        if d["type"] == "RunStarted":
            d["run_id"] = name
        if d["type"] == "ToolResult":
            d["duration_s"] = 0.012 if d["executed"] else 0.0
            for o in d["outputs"]:
                if o.get("path"):
                    o["path"] = Path(o["path"]).name
        if d["type"] == "RunFinished":
            d["wall_s"], d["trajectory"] = 3.25, f"{name}.jsonl"
        if d["type"] == "GuardToggled" and "weights" in d["settings"]:
            d["settings"]["weights"] = "tests/ui/data/gate.npz"
        out.append(json.dumps(d, ensure_ascii=False))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


async def guarded(name: str, guards: tuple[str, ...]) -> None:
    from tuiagent.backends.scripted import ScriptedBackend, split_tokens
    from tuiagent.core.run_spec import RunSpec
    from tuiagent.runner import RunInput, guard_chain, resolve_spec, run_problem

    target = DATA / f"{name}.jsonl"
    target.unlink(missing_ok=True)
    run = RunSpec(guards=guards, guard_settings={"gstep": {"weights": str(DATA / "gate.npz")}} if guards else {})
    given = RunInput(PROBLEM, gold=GOLD, model="scripted", out=target)
    spec = resolve_spec(given.model)
    backend = ScriptedBackend([split_tokens(t["text"], t["logprob"]) for t in TURNS])
    chain = guard_chain(spec, run, toggleable=bool(guards))
    await run_problem(run, given, lambda e: None, backend=backend, model_spec=spec, guards=chain)
    normalise(target, name)


async def rtts() -> None:
    from guards.chain import GuardChain
    from tuiagent.core.loop import Agent
    from tuiagent.core.trajectory import Recorder

    spec = importlib.util.spec_from_file_location("bench_prunetir", ROOT / "bench" / "bench_prunetir.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    rec = bench.load_recorded(ROOT / "tests" / "data" / "erroneous" / "07_stuck_twice_rtts.jsonl")
    target = DATA / "rtts.jsonl"
    target.unlink(missing_ok=True)
    chain = GuardChain({"prunetir": {"resample_seed": 7}, "attc": {}}, {"prunetir", "attc"})
    with Recorder(target) as recorder:
        agent = Agent(
            bench.BranchingBackend(rec.branches),
            bench.ReplayKernel(rec.results),
            settings=bench.SETTINGS,
            guards=chain,
            recorder=recorder,
        )
        async for _ in agent.stream(rec.problem, gold=rec.gold, run_id="rtts"):
            pass
    normalise(target, "rtts")


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    write_gate(DATA / "gate.npz")
    (DATA / "guarded_script.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TURNS), encoding="utf-8")
    asyncio.run(guarded("guarded", ("all",)))
    asyncio.run(guarded("plain", ()))
    asyncio.run(rtts())
    for p in sorted(DATA.glob("*.jsonl")):
        print(p.name, len(p.read_text().splitlines()), "lines")


if __name__ == "__main__":
    main()
