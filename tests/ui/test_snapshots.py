"""How the main screens look (pytest-textual-snapshot), at 80x24 and 160x50, dark and light.

Regenerate after an intended change: pytest tests/ui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.conftest import screen_up, wait_for
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import load
from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.screens.export import ExportScreen
from tuiagent.ui.screens.solve import SolveScreen
from tuiagent.ui.widgets.guard_list import GuardList
from tuiagent.ui.widgets.status_line import StatusLine
from tuiagent.ui.widgets.trajectory import TrajectoryView

DATA = Path(__file__).resolve().parent / "data"
GATE = {"gstep": {"weights": str(DATA / "gate.npz")}}


def all_mounted(pilot) -> bool:
    """Every widget of the screen shown is mounted (what was drawn last is in place)."""
    screen = pilot.app.screen
    return screen.is_mounted and all(w.is_mounted for w in screen.walk_children())


def current_in_view(pilot) -> bool:
    """Replay's current event is scrolled into the trajectory pane."""
    trajectory = pilot.app.screen.query_one(TrajectoryView)
    current = trajectory._current
    return current is not None and trajectory.scrollable_content_region.overlaps(current.region)


def solve_app():
    return make_app(
        AppConfig(model="scripted", run_spec=RunSpec(guards=("all",), guard_settings=GATE), sandbox="off")
    )  # "off": no probe, no race


async def fed(pilot, name: str = "guarded.jsonl", theme: str | None = None) -> None:
    """The solve screen after a run: the recorded events fed to it as they came."""
    app = pilot.app
    if theme:
        app.theme = theme
    await screen_up(pilot, app, SolveScreen)
    events = load(DATA / name).events  # (an absolute name replaces DATA)
    for e in events:
        app.screen.on_run_event(e)
    app.screen.query_one(StatusLine).show_run(events)
    app.screen.query_one(TrajectoryView).focus()
    await wait_for(pilot, lambda: all_mounted(pilot), 10, "the run's widgets")


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
        guards = pilot.app.screen.query_one(GuardList)
        await wait_for(pilot, lambda: guards.has_focus, 10, "the guard list's focus")

    assert snap_compare(solve_app(), terminal_size=(80, 24), run_before=panel)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_replay(snap_compare, size):
    app = make_app(AppConfig(model="scripted", sandbox="off", screen="replay", replay=DATA / "guarded.jsonl"))
    assert snap_compare(app, terminal_size=size, press=["g", "g", "g", "g", "g"])


def test_replay_rtts_light(snap_compare):
    app = make_app(AppConfig(model="scripted", sandbox="off", screen="replay", replay=DATA / "rtts.jsonl"))

    async def to_end(pilot):
        pilot.app.theme = "textual-light"
        await pilot.press("end", "G")
        await pilot.pause()  # the scroll to the highlighted step runs after a refresh: wait for the queue, not a clock
        await pilot.wait_for_scheduled_animations()
        await wait_for(pilot, lambda: current_in_view(pilot), 10, "the highlighted step in view")

    assert snap_compare(app, terminal_size=(120, 36), run_before=to_end)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_compare(snap_compare, size):
    app = make_app(
        AppConfig(
            model="scripted", sandbox="off", screen="compare", compare=(DATA / "guarded.jsonl", DATA / "plain.jsonl")
        )
    )
    assert snap_compare(app, terminal_size=size)


def test_help(snap_compare):
    assert snap_compare(solve_app(), terminal_size=(80, 24), press=["f1"])


# -- the views of issue 16: token confidence, the runs browser, the export dialog -----------------

VIEWS = [
    ((80, 24), "textual-dark"),
    ((160, 50), "textual-dark"),
    ((80, 24), "textual-light"),
    ((160, 50), "textual-light"),
]
VIEW_IDS = ["80x24-dark", "160x50-dark", "80x24-light", "160x50-light"]


@pytest.mark.parametrize(("size", "theme"), VIEWS, ids=VIEW_IDS)
def test_solve_token_confidence(snap_compare, size, theme, unsure_trajectory):
    async def shaded(pilot):
        pilot.app.theme = theme
        await pilot.press("f8")
        await fed(pilot, str(unsure_trajectory))
        pilot.app.clear_notifications()
        await wait_for(pilot, lambda: not pilot.app.screen.query("Toast"), 10, "the toasts to go")

    assert snap_compare(solve_app(), terminal_size=size, run_before=shaded)


@pytest.fixture
def fixed_runs(tmp_path, monkeypatch):
    """Three saved runs with fixed times (UTC), in ./runs (the browser shows the path)."""
    import os
    import shutil
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    runs = tmp_path / "runs"
    runs.mkdir()
    for age, name in enumerate(("guarded", "plain", "rtts")):
        shutil.copy(DATA / f"{name}.jsonl", runs / f"{name}.jsonl")
        os.utime(runs / f"{name}.jsonl", (1_780_000_000 - age * 600,) * 2)
    monkeypatch.chdir(tmp_path)
    yield Path("runs")
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("size", "theme"), VIEWS, ids=VIEW_IDS)
def test_runs_browser(snap_compare, size, theme, fixed_runs):
    from tuiagent.ui.screens.open_run import OpenRunScreen

    async def browse(pilot):
        pilot.app.theme = theme
        await pilot.app.push_screen(OpenRunScreen(fixed_runs))
        await pilot.press("space")
        await wait_for(pilot, lambda: bool(pilot.app.screen.marked), 10, "a run marked")

    assert snap_compare(solve_app(), terminal_size=size, run_before=browse)


@pytest.mark.parametrize(("size", "theme"), VIEWS, ids=VIEW_IDS)
def test_export_dialog(snap_compare, size, theme):
    app = make_app(AppConfig(model="scripted", sandbox="off", screen="replay", replay=DATA / "guarded.jsonl"))

    async def export(pilot):
        pilot.app.theme = theme
        await pilot.press("end", "f9")
        await screen_up(pilot, pilot.app, ExportScreen)
        await wait_for(pilot, lambda: all_mounted(pilot), 10, "the dialog's widgets")

    assert snap_compare(app, terminal_size=size, run_before=export)


def test_solve_injected_output(snap_compare):
    """A run whose tool output was injected (solve --inject wrong-number): the output marked as such."""

    async def injected(pilot):
        await fed(pilot, "injected.jsonl")

    assert snap_compare(solve_app(), terminal_size=(100, 30), run_before=injected)


def test_edit_dialog(snap_compare):
    """Replay's edit key on a tool output: the output in an editor, what ctrl+s does."""
    app = make_app(AppConfig(model="scripted", sandbox="off", screen="replay", replay=DATA / "guarded.jsonl"))

    async def edit(pilot):
        from textual.widgets import TextArea

        from tests.ui.conftest import wait_for
        from tuiagent.ui.screens.edit_text import EditTextScreen

        screen = pilot.app.screen
        await wait_for(pilot, lambda: bool(screen.events), 10, "the run")
        screen.go(next(i for i, e in enumerate(screen.events) if e.type == "ToolResult" and e.call == 2) + 1)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, EditTextScreen), 10, "the editor")
        area = pilot.app.screen.query_one(TextArea)
        await wait_for(pilot, lambda: area.has_focus, 10, "the editor's focus")
        # A blinking cursor is drawn or not; a steady one is drawn, once the lines the TextArea drew
        # (and cached) while it blinked are dropped.
        area.cursor_blink = False
        area.notify_style_update()
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(120, 36), run_before=edit)
