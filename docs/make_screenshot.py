"""Regenerate docs/img/app.svg, the README's picture of the app.

The app is driven as its tests drive it (tests/ui/conftest.py): a scripted backend replays the
turns below through the real loop, the real guards and a real Jupyter kernel, so every code
block, output, guard verdict and the status line are what a run produces. Run from the checkout:

    .venv/bin/python docs/make_screenshot.py            # writes docs/img/app.svg
    .venv/bin/python docs/make_screenshot.py --size 120x40 --out /tmp/app.svg

It writes its run into a temporary data directory, never into your own runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = (
    "A bakery sells muffins for $3 each and cookies for $1.25 each. On Monday it sold 48 muffins "
    "and three times as many cookies. How much money did it take in?"
)
GOLD = "324"
GUARDS = ("prunetir", "necessity", "attc", "tim")

# (text, log-probability of each word-sized token); a few unsure words make the confidence real.
TURNS = [
    "The bakery sold 48 muffins and 3 * 48 cookies. I will compute the revenue.\n"
    "```python\nmuffins = 48\ncookies = 3 * muffins\nrevenue = muffins * 3 + cookie * 1.25\nprint(revenue)\n```\n```output\n",
    "I mistyped the variable name: it is `cookies`.\n"
    "```python\nmuffins = 48\ncookies = 3 * muffins\nrevenue = muffins * 3 + cookies * 1.25\nprint(revenue)\n```\n```output\n",
    "Muffins bring \\(48 \\times 3 = 144\\) dollars and cookies \\(144 \\times 1.25 = 180\\) dollars, "
    "so the bakery took in \\boxed{324} dollars.",  # the app shows the LaTeX as 48 × 3 = 144 (docs/app.md)
]
UNSURE = {"revenue.": -0.9, "mistyped": -1.2, "`cookies`.": -0.4, "180\\)": -0.35, "so": -0.5}
_PIECES = re.compile(r"\s*\S+|\s+")


def script_turns():
    from tuiagent.protocol import Token

    return [[Token(p, UNSURE.get(p.strip(), -0.02)) for p in _PIECES.findall(t)] for t in TURNS]


async def shoot(out: Path, size: tuple[int, int]) -> None:
    from tuiagent.backends.scripted import ScriptedBackend
    from tuiagent.core.run_spec import RunSpec
    from tuiagent.ui import AppConfig, make_app

    config = AppConfig(model="scripted", problem=PROBLEM, gold=GOLD, run_spec=RunSpec(guards=GUARDS))
    app = make_app(config, backend_factory=lambda: ScriptedBackend(script_turns(), delay_s=0.002))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.screen.is_mounted and app.screen.focused is not None, "the screen")
        await pilot.pause(0.3)
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.screen.running or app.screen.finished is not None, "the run to start")
        await until(pilot, lambda: not app.screen.running, "the run to end", timeout=120)
        await pilot.pause(0.5)
        await pilot.wait_for_scheduled_animations()
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=out.name, path=str(out.parent))


async def until(pilot, condition, what: str, timeout: float = 60) -> None:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"make_screenshot: timed out waiting for {what}")
        await pilot.pause(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "app.svg")
    parser.add_argument("--size", default="120x38", help="terminal columns x rows")
    args = parser.parse_args()
    cols, rows = (int(n) for n in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory(prefix="tuiagent-screenshot-") as tmp:
        os.environ["TUIAGENT_CONFIG_DIR"] = str(Path(tmp) / "config")
        os.environ["TUIAGENT_DATA_DIR"] = str(Path(tmp) / "data")
        sys.path.insert(0, str(ROOT))
        asyncio.run(shoot(args.out.resolve(), (cols, rows)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
