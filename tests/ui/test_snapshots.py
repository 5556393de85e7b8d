"""How the main screens look (pytest-textual-snapshot), at 80x24 and 160x50, dark and light.

Regenerate after an intended change: pytest tests/ui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuiagent.core.trajectory import load
from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.widgets.status_line import StatusLine
from tuiagent.ui.widgets.trajectory import TrajectoryView

DATA = Path(__file__).resolve().parent / "data"
GATE = {"gstep": {"weights": str(DATA / "gate.npz")}}


def solve_app():
    return make_app(AppConfig(model="scripted", guard_settings=GATE))


async def fed(pilot, name: str = "guarded.jsonl", theme: str | None = None) -> None:
    """The solve screen after a run: the recorded events fed to it as they came."""
    app = pilot.app
    if theme:
        app.theme = theme
    await pilot.pause(0.1)
    events = load(DATA / name).events
    for e in events:
        app.screen.on_run_event(e)
    app.screen.query_one(StatusLine).show_run(events)
    app.screen.query_one(TrajectoryView).focus()
    await pilot.pause(0.3)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_solve(snap_compare, size):
    assert snap_compare(solve_app(), terminal_size=size, run_before=fed)


def test_solve_light(snap_compare):
    async def light(pilot):
        await fed(pilot, theme="textual-light")

    assert snap_compare(solve_app(), terminal_size=(80, 24), run_before=light)


def test_solve_guard_panel_open_narrow(snap_compare):
    async def panel(pilot):
        await fed(pilot)
        await pilot.press("ctrl+g", "down", "down")
        await pilot.pause(0.2)

    assert snap_compare(solve_app(), terminal_size=(80, 24), run_before=panel)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_replay(snap_compare, size):
    app = make_app(AppConfig(model="scripted", screen="replay", replay=DATA / "guarded.jsonl"))
    assert snap_compare(app, terminal_size=size, press=["g", "g", "g", "g", "g"])


def test_replay_rtts_light(snap_compare):
    app = make_app(AppConfig(model="scripted", screen="replay", replay=DATA / "rtts.jsonl"))

    async def to_end(pilot):
        pilot.app.theme = "textual-light"
        await pilot.press("end", "G")
        await pilot.pause()  # the scroll to the highlighted step runs after a refresh: wait for the queue, not a clock
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(120, 36), run_before=to_end)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_compare(snap_compare, size):
    app = make_app(AppConfig(model="scripted", screen="compare",
                             compare=(DATA / "guarded.jsonl", DATA / "plain.jsonl")))
    assert snap_compare(app, terminal_size=size)


def test_help(snap_compare):
    assert snap_compare(solve_app(), terminal_size=(80, 24), press=["f1"])
