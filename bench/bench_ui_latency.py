"""Key-to-effect latency of the app while a model streams tokens.

The app runs headless (Textual's own test driver, the same message path a terminal uses), solving a
scripted problem at 200+ tokens/s through the real loop, the real guards and the real Jupyter kernel.
While tokens stream, a key (up/down in the guard panel) is sent every ``--interval`` seconds through
the driver; latency = from sending the key to the end of the first screen refresh that shows its
effect (the guard row moved), measured with ``call_after_refresh``. The same keys are also timed
with nothing streaming, as a baseline.

    python bench/bench_ui_latency.py [--keys 200] [--rate 250] [--interval 0.05] [--shade] [--math]

``--shade``: token confidence on (f8), with one token in seven unsure (p 0.37) so the shading has
bands to draw. ``--math``: the model writes math-heavy prose (inline and display LaTeX in every
sentence) and the keys take turns, five at a time, with math rendered and shown raw (f10), so both
sides of the ratio are measured in one run under the same load; each side is also given without
the keys that a full garbage collection (CPython's generation 2, timed with gc.callbacks) delayed,
since those pauses (tens of ms) land on either side by chance and decide the p95. Writes
bench/results/ui_latency.json (ui_latency_shade.json with --shade, ui_latency_math.json with --math).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "ui_latency.json"

PROSE = (
    "Let us work through the problem carefully, one step at a time, checking each intermediate "
    "value against the numbers given before moving on to the next part of the computation. "
)
# Prose as math models write it (ours: the shapes of the examples and of GSM8K/MATH answers).
MATH_PROSE = (
    "The initial number of marbles is \\(3 \\times 17\\), so after giving away 9 and getting \\(4 \\times 6\\) "
    "more there are \\((3 \\times 17 - 9) + 4 \\times 6\\) marbles, that is \\[ 51 - 9 + 24 = 66 \\] and half "
    "of them, \\(\\frac{66}{2} = 33\\), are red; with $x^2 + 2x = 63$ we get $x = 7$ and "
    "\\(\\sqrt{49} = 7\\). "
)


def script(turns: int, words: int, unsure: bool = False, math: bool = False) -> list:
    from dataclasses import replace

    from tuiagent.backends.scripted import split_tokens

    text = MATH_PROSE if math else PROSE
    prose = (text * (words // len(text.split()) + 1)).split()[:words]
    out = []
    for i in range(turns):
        text = " ".join(prose) + f"\n```python\nx = sum(range({i + 10}))\nprint(x)\n```\n```output\n"
        tokens = split_tokens(text, -0.01)
        if unsure:  # one token in seven at p 0.37: shading has something to draw
            tokens = [replace(t, logprob=-1.0) if j % 7 == 3 else t for j, t in enumerate(tokens)]
        out.append(tokens)
    out.append(split_tokens("So the answer is \\boxed{55}.", -0.01))
    return out


def paced_backend(turns: list, rate: float):
    """A scripted backend that keeps a steady ``rate`` tokens/s (it sleeps to a schedule, so the time
    the loop and the UI take per token is not added on top, and it catches up when it falls behind)."""
    from tuiagent.backends.scripted import ScriptedBackend

    class Paced(ScriptedBackend):
        async def generate(self, out, prompt, sampling, stop):
            start, n = time.perf_counter(), 0
            async for token in super().generate(out, prompt, sampling, stop):
                n += 1
                wait = start + n / rate - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                yield token

    return Paced([list(t) for t in turns])


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


# With --math, the keys take turns this many at a time with math rendered and raw (ours: often
# enough that a burst of load falls on both sides alike).
MATH_TURN_KEYS = 5


def summary(ms: list[float]) -> dict:
    return {
        "keys": len(ms),
        "p50": round(pct(ms, 50), 2),
        "p95": round(pct(ms, 95), 2),
        "max": round(max(ms), 2) if ms else None,
    }


async def measure(
    keys: int, rate: float, interval: float, turns: int, words: int, shade: bool = False, math: bool = False
) -> dict:
    from textual import events

    from tuiagent.core.run_spec import RunSpec
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.widgets.guard_list import GuardList
    from tuiagent.ui.widgets.status_line import StatusLine

    turns_tokens = script(turns, words, unsure=shade, math=math)
    config = AppConfig(
        model="scripted",
        problem="How much is it?",
        run_spec=RunSpec(
            guards=("attc", "necessity", "prunetir", "tim"),
            run={"max_tokens": 100_000, "max_tool_calls": turns + 1, "max_wall_s": 3600},
        ),
    )
    app = make_app(config, backend_factory=lambda: paced_backend(turns_tokens, rate))

    pending: dict[int, float] = {}
    done: asyncio.Queue[tuple[float, float]] = asyncio.Queue()
    original = GuardList.watch_highlighted

    def watched(self, highlighted):
        original(self, highlighted)
        sent = pending.pop(highlighted, None) if highlighted is not None else None
        if sent is not None:
            effect = time.perf_counter()
            self.call_after_refresh(lambda: done.put_nowait((effect - sent, time.perf_counter() - sent)))

    GuardList.watch_highlighted = watched
    collections: list[tuple[float, float]] = []  # CPython's full (generation 2) collections: (start, end)

    def full_gc(phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                collections.append((time.perf_counter(), float("inf")))
            elif collections:
                collections[-1] = (collections[-1][0], time.perf_counter())

    try:
        async with app.run_test(size=(120, 40)) as pilot:
            app.shade_tokens = shade
            await pilot.pause(0.2)
            guard_list = app.screen.query_one(GuardList)
            guard_list.focus()
            guard_list.highlighted = 0
            await pilot.pause(0.1)

            rendered: list[bool] = []  # per key measured while streaming: math rendered (else raw)
            spans: list[tuple[float, float]] = []  # per key measured while streaming: (sent, shown)

            async def press_many(n: int, while_streaming: bool) -> tuple[list[float], list[float]]:
                applied, shown = [], []
                for i in range(n):
                    if while_streaming and not app.screen.running:
                        break
                    if while_streaming and math and i and i % MATH_TURN_KEYS == 0:
                        app.raw_math = not app.raw_math  # every turn is drawn again: not a key's cost
                        redrawn = asyncio.Event()
                        app.call_after_refresh(redrawn.set)
                        await asyncio.wait_for(redrawn.wait(), timeout=10)
                        await asyncio.sleep(interval)
                    key = "down" if guard_list.highlighted in (None, 0) or (i % 8) < 4 else "up"
                    target = (guard_list.highlighted or 0) + (1 if key == "down" else -1)
                    pending.clear()
                    pending[target] = sent = time.perf_counter()
                    event = events.Key(key, None)
                    event.set_sender(app)
                    app._driver.send_message(event)
                    try:
                        a, s = await asyncio.wait_for(done.get(), timeout=5)
                    except TimeoutError:
                        continue
                    applied.append(a * 1000)
                    shown.append(s * 1000)
                    if while_streaming:
                        rendered.append(not app.raw_math)
                        spans.append((sent, sent + s))
                    await asyncio.sleep(interval)
                return applied, shown

            idle_applied, idle_shown = await press_many(min(keys, 60), False)

            status = app.screen.query_one(StatusLine)
            app.screen.action_run()
            while status.tokens < 20:
                await asyncio.sleep(0.01)
            guard_list.focus()  # starting a run focuses the trajectory; the keys go to the guard panel
            await asyncio.sleep(0.05)
            t0, tok0 = time.perf_counter(), status.tokens
            gc.callbacks.append(full_gc)
            try:
                applied, shown = await press_many(keys, True)
            finally:
                gc.callbacks.remove(full_gc)
            t1, tok1 = time.perf_counter(), status.tokens
            while app.screen.running:
                await asyncio.sleep(0.05)
            finished = app.screen.finished
    finally:
        GuardList.watch_highlighted = original
    streamed_rate = (tok1 - tok0) / (t1 - t0) if t1 > t0 else 0.0
    paused = [any(a < end and b > sent for a, b in collections) for sent, end in spans]  # a full GC ran meanwhile
    gc_ms = [(b - a) * 1000 for a, b in collections]
    sides: dict = {
        "full_gc_while_streaming": {
            "count": len(gc_ms),
            "max_ms": round(max(gc_ms, default=0), 1),
            "keys_it_delayed": sum(paused),
        }
    }
    if math:
        for name, keep in (("", lambda hit: True), ("_without_full_gc", lambda hit: not hit)):
            on = [ms for ms, r, hit in zip(shown, rendered, paused, strict=True) if r and keep(hit)]
            off = [ms for ms, r, hit in zip(shown, rendered, paused, strict=True) if not r and keep(hit)]
            sides.update(
                {
                    f"math_rendered_key_to_effect_ms{name}": summary(on),
                    f"math_raw_key_to_effect_ms{name}": summary(off),
                    f"p95_rendered_over_raw{name}": round(pct(on, 95) / pct(off, 95), 3) if on and off else None,
                }
            )
    return {
        "token_shading": shade,
        "math_heavy_prose": math,
        **sides,
        "keys_measured_while_streaming": len(shown),
        "tokens_per_s_while_measuring": round(streamed_rate, 1),
        "target_tokens_per_s": rate,
        "key_to_effect_ms": {
            "p50": round(pct(shown, 50), 2),
            "p95": round(pct(shown, 95), 2),
            "max": round(max(shown), 2),
            "mean": round(statistics.fmean(shown), 2),
        },
        "key_to_state_change_ms": {"p50": round(pct(applied, 50), 2), "p95": round(pct(applied, 95), 2)},
        "idle_key_to_effect_ms": {"p50": round(pct(idle_shown, 50), 2), "p95": round(pct(idle_shown, 95), 2)},
        "run_reason": finished.reason if finished else None,
        "generated_tokens": finished.generated_tokens if finished else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--rate", type=float, default=250.0, help="scripted tokens per second")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between keys")
    parser.add_argument("--turns", type=int, default=24)
    parser.add_argument("--words", type=int, default=220, help="words of prose per turn")
    parser.add_argument("--shade", action="store_true", help="token confidence on (f8)")
    parser.add_argument("--math", action="store_true", help="math-heavy prose; keys alternate rendered/raw math (f10)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    name = "ui_latency" + ("_shade" if args.shade else "") + ("_math" if args.math else "") + ".json"
    out = args.out or RESULTS.with_name(name)
    os.environ.setdefault("TUIAGENT_DATA_DIR", tempfile.mkdtemp(prefix="tuiagent-bench-"))
    result = asyncio.run(measure(args.keys, args.rate, args.interval, args.turns, args.words, args.shade, args.math))
    result.update(
        {
            "what": "key press (guard panel up/down) to the first screen refresh showing it, while tokens stream",
            "driver": "Textual headless driver (run_test), app size 120x40, token flush every 50 ms",
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
            "python": sys.version.split()[0],
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
