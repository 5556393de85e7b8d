"""Time to first paint and to interactive when opening big things in the app: a 5,000-event
trajectory in replay, and the runs browser over 1,000 saved runs.

The app runs headless (Textual's test driver, which lays out and renders every frame as a terminal
would, minus the terminal's own drawing). First paint: from starting the app (replay) or pressing
ctrl+o (browser) to the end of the first screen refresh that shows the run or the list. Interactive:
from then, a key (right: next event; s: sort by the next column) to the refresh that shows its effect.

    python bench/bench_ui_open.py [--events 5000] [--runs 1000] [--repeat 3]

Writes bench/results/ui_open.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "ui_open.json"
DATA = Path(__file__).resolve().parents[1] / "tests" / "ui" / "data"
TOKENS_PER_TURN = 30  # ours: a short step; the rest of a turn is its code, output and a verdict


def big_trajectory(path: Path, events: int) -> dict:
    """A trajectory of about ``events`` events: turns of tokens, a code block, a verdict, its output."""
    from tuiagent.core import events as ev

    lines = (DATA / "guarded.jsonl").read_text(encoding="utf-8").splitlines()
    header, started = lines[0], json.loads(lines[1])
    attc = next(json.loads(line) for line in lines if '"guard": "attc"' in line and '"GuardVerdict"' in line)
    out = [header, json.dumps(started)]
    t, turn, count, kinds = started["t"], 0, 0, {"TokenDelta": 0, "other": 0}
    while count < events - 1:
        turn += 1
        code = f"x{turn} = sum(i * i for i in range({turn + 10}))\nprint(x{turn})"
        prose = f"Step {turn}: the sum of squares below {turn + 10}, checked with Python. "
        text = prose + f"\n```python\n{code}\n```\n```output\n"
        pieces = [prose[i : i + 3] for i in range(0, len(prose), 3)][:TOKENS_PER_TURN]
        turn_events = [ev.TurnStarted(t=t, turn=turn, context_tokens=200 + turn * 40)]
        turn_events += [
            ev.TokenDelta(t=t, turn=turn, text=p, logprob=-0.02 if i % 9 else -1.2) for i, p in enumerate(pieces)
        ]
        turn_events += [
            ev.TurnEnded(t=t, turn=turn, text=text, stop="stop", tokens=len(pieces) + 20),
            ev.CodeBlock(t=t, turn=turn, call=turn, code=code),
        ]
        verdict = dict(attc, turn=turn, t=t)
        turn_events += [
            ev.ToolResult(
                t=t, call=turn, shown=str(turn * 7), error=False, timed_out=False, duration_s=0.01, outputs=[]
            ),
            ev.ContextAppended(t=t, text=str(turn * 7), source="kernel", kind="tool", call=turn),
        ]
        for e in turn_events:
            kinds["TokenDelta" if isinstance(e, ev.TokenDelta) else "other"] += 1
        out += [json.dumps(ev.to_dict(e)) for e in turn_events] + [json.dumps(verdict)]
        kinds["other"] += 1
        count += len(turn_events) + 1
        t += 1.0
    finished = ev.RunFinished(
        t=t,
        reason="answer",
        answer="1",
        correct=None,
        tool_calls=turn,
        erroneous_calls=0,
        generated_tokens=turn * TOKENS_PER_TURN,
        context_tokens=200 + turn * 40,
        wall_s=t - started["t"],
    )
    out.append(json.dumps(ev.to_dict(finished)))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return {"events": count + 1, "turns": turn, "token_events": kinds["TokenDelta"], "other_events": kinds["other"] + 1}


def saved_runs(directory: Path, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    text = (DATA / "guarded.jsonl").read_text(encoding="utf-8")
    for i in range(n):
        path = directory / f"run-{i:05d}.jsonl"
        path.write_text(text.replace("338350", str(338350 + i % 7)), encoding="utf-8")
        os.utime(path, (1_780_000_000 + i, 1_780_000_000 + i))


async def refreshed(app) -> float:
    """The time at the end of the next screen refresh."""
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    app.screen.call_after_refresh(lambda: done.done() or done.set_result(time.perf_counter()))
    return await done


async def replay_once(path: Path) -> tuple[float, float]:
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.screens.replay import ReplayScreen

    app = make_app(AppConfig(model="scripted", screen="replay", replay=path))
    t0 = time.perf_counter()
    async with app.run_test(size=(120, 40)):
        while not (isinstance(app.screen, ReplayScreen) and app.screen.events):
            await asyncio.sleep(0.002)
        painted = await refreshed(app)
        position = app.screen.position
        sent = time.perf_counter()
        app.screen.action_step(1)  # what the right arrow runs (the key path is the bench_ui_latency one)
        assert app.screen.position == position + 1
        shown = await refreshed(app)
    return painted - t0, shown - sent


async def browser_once() -> tuple[float, float, int]:
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.screens.open_run import OpenRunScreen

    app = make_app(AppConfig(model="scripted"))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.2)
        t0 = time.perf_counter()
        app.action_open_run()  # what ctrl+o runs
        while not (isinstance(app.screen, OpenRunScreen) and app.screen.is_mounted):
            await asyncio.sleep(0.002)
        painted = await refreshed(app)
        rows = len(app.screen.shown)
        sent = time.perf_counter()
        app.screen.action_sort()
        shown = await refreshed(app)
    return painted - t0, shown - sent, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tuiagent-bench-open-"))
    os.environ["TUIAGENT_DATA_DIR"] = str(work / "data")
    trajectory = work / "big.jsonl"
    shape = big_trajectory(trajectory, args.events)
    saved_runs(work / "data" / "runs", args.runs)
    replay = [asyncio.run(replay_once(trajectory)) for _ in range(args.repeat)]
    browser = [asyncio.run(browser_once()) for _ in range(args.repeat)]

    def ms(values: list[float]) -> dict:
        return {"median": round(statistics.median(values) * 1000, 1), "max": round(max(values) * 1000, 1)}

    result = {
        "replay": {
            "trajectory": shape,
            "first_paint_ms": ms([r[0] for r in replay]),
            "next_event_to_screen_ms": ms([r[1] for r in replay]),
        },
        "runs_browser": {
            "saved_runs": browser[0][2],
            "first_paint_ms": ms([b[0] for b in browser]),
            "sort_to_screen_ms": ms([b[1] for b in browser]),
        },
        "repeat": args.repeat,
        "driver": "Textual headless driver (run_test): replay at 120x40 (from app start), browser at 160x50 (from ctrl+o)",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
        "python": sys.version.split()[0],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
