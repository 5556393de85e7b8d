"""The guard panel: switch a guard or change a setting while a run goes on; the change applies at the
next decision point and is recorded in the trajectory (GuardToggled)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.ui.screens.edit_value import EditValueScreen
from tuiagent.ui.screens.solve import SolveScreen
from tuiagent.ui.widgets.code_block import CodeBlockView
from tuiagent.ui.widgets.guard_list import GuardList
from tuiagent.ui.widgets.guard_panel import GuardPanel

THREE_CALLS = [
    {
        "text": f"Step {i}: compute part {i}.\n```python\nx{i} = sum(range({i * 10}))\nprint(x{i})\n```\n```output\n",
        "logprob": -0.01,
    }
    for i in (1, 2, 3)
] + [{"text": "Adding the parts gives \\boxed{1335}.", "logprob": -0.01}]


def row_of(panel: GuardPanel, guard: str, key: str | None = None) -> int:
    rows = panel.query_one(GuardList).rows
    return next(i for i, (g, info) in enumerate(rows) if g == guard and (info.name if info else None) == key)


def release_waiting_cells() -> None:
    """Let a cell of WAIT_FOR_GO go on: it waits for a file ``go`` in its kernel's working directory."""
    for workdir in Path(tempfile.gettempdir()).glob(f"tuiagent-run-{os.getpid()}-*"):
        (workdir / "go").touch()


WAIT_FOR_GO = {
    "text": "Step 0: wait for the go.\n```python\nimport os, time\nwhile not os.path.exists('go'):\n"
    "    time.sleep(0.02)\nprint(0)\n```\n```output\n",
    "logprob": -0.01,
}


async def test_toggle_a_guard_and_a_setting_mid_run(ui, tmp_path):
    slow_first = [WAIT_FOR_GO] + THREE_CALLS  # the first cell runs until the test has made its changes
    app = ui.scripted_app(slow_first, delay_s=0.01, problem="sum of parts", tmp_path=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+r")
        await ui.wait_for(
            pilot,
            lambda: any(c.status == "running" for c in app.screen.query(CodeBlockView)),
            30,
            "the first cell to run",
        )
        await pilot.press("ctrl+g")  # narrow screen: the panel opens and takes the focus
        panel = app.screen.query_one(GuardPanel)
        assert panel.display and panel.query_one(GuardList).has_focus
        guard_list = panel.query_one(GuardList)
        guard_list.highlighted = row_of(panel, "attc")
        await pilot.press("space")
        assert panel.states["attc"].pending and not panel.states["attc"].enabled
        assert "next step" in guard_list.get_option_at_index(row_of(panel, "attc")).prompt.plain
        guard_list.highlighted = row_of(panel, "prunetir", "turn_limit")
        await pilot.press("right")
        assert panel.states["prunetir"].settings["turn_limit"] == 4
        release_waiting_cells()
        await ui.wait_for(pilot, lambda: not app.screen.running, 60, "the run to end")
        await ui.wait_for(pilot, lambda: ui.runs_over(app), 30, "the run's worker to finish")
        await ui.wait_for(pilot, lambda: not panel.states["attc"].pending, 10, "the run to confirm the toggle")
        events = load(ui.run_file(app)).events
        toggles = [
            (i, e)
            for i, e in enumerate(events)
            if isinstance(e, ev.GuardToggled) and e.reason == "changed during the run"
        ]
        attc_off = next(i for i, e in toggles if e.guard == "attc" and not e.enabled)
        assert any(e.guard == "prunetir" and e.settings["turn_limit"] == 4 for _, e in toggles)
        first_code = next(i for i, e in enumerate(events) if isinstance(e, ev.CodeBlock))
        assert attc_off > first_code  # applied at a decision point after the key press, not before
        attc_after = [e for e in events[attc_off:] if isinstance(e, ev.GuardVerdict) and e.guard == "attc"]
        assert attc_after == []


async def test_changes_made_between_runs_apply_to_the_next_run(ui, tmp_path):
    app = ui.scripted_app(THREE_CALLS, problem="sum of parts", tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:  # wide: the panel is always shown
        panel = app.screen.query_one(GuardPanel)
        assert panel.display
        await pilot.press("ctrl+g")
        panel.query_one(GuardList).highlighted = row_of(panel, "attc")
        await pilot.press("space")
        panel.query_one(GuardList).highlighted = row_of(panel, "attc", "threshold")
        await pilot.press("left")
        assert abs(panel.states["attc"].settings["threshold"] - 0.96) < 1e-9
        assert not panel.states["attc"].pending  # no run: nothing waits for a decision point
        await ui.solve(pilot, app)
        events = load(ui.run_file(app)).events
        started = {e.guard for e in events if isinstance(e, ev.GuardToggled) and e.enabled}
        assert "attc" not in started and "prunetir" in started
        assert not any(isinstance(e, ev.GuardVerdict) and e.guard == "attc" for e in events)


async def test_a_bad_value_is_refused_with_a_notice(ui, tmp_path):
    app = ui.scripted_app(THREE_CALLS, problem="x", tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.screen.query_one(GuardPanel)
        await pilot.press("ctrl+g")
        panel.query_one(GuardList).highlighted = row_of(panel, "attc", "threshold")
        await pilot.press("enter")
        await ui.screen_up(pilot, app, EditValueScreen, 5)
        app.screen.query_one("Input").value = "2"
        await pilot.press("enter")
        await ui.wait_for(
            pilot, lambda: any("out of range" in n.message for n in app._notifications), 10, "the refusal"
        )
        assert panel.states["attc"].settings["threshold"] == 0.97
        assert any("out of range" in n.message for n in app._notifications)
        await pilot.press("enter")  # the row again: type a good value this time
        await ui.screen_up(pilot, app, EditValueScreen, 5)
        app.screen.query_one("Input").value = "0.9"
        await pilot.press("enter")
        await ui.wait_for(pilot, lambda: panel.states["attc"].settings["threshold"] == 0.9, 10, "the new threshold")
        assert panel.states["attc"].settings["threshold"] == 0.9
        assert app.session.overrides["attc"]["threshold"] == 0.9


async def test_clicking_a_guard_row_toggles_it(ui, tmp_path):
    app = ui.scripted_app(THREE_CALLS, problem="x", tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.screen.query_one(GuardPanel)
        row = row_of(panel, "necessity")
        await pilot.click(GuardList, offset=(3, row))
        await ui.wait_for(pilot, lambda: not panel.states["necessity"].enabled, 10, "the click to toggle the guard")
        assert panel.states["necessity"].enabled is False
        assert "necessity" not in app.session.enabled


async def test_a_preset_sets_every_guard_and_setting_at_once(ui, tmp_path):
    """p in the panel: flag-only turns everything but necessity and tim off; a setting changed
    earlier goes back to its default; the next run starts with exactly that."""
    from tuiagent.ui.screens.presets import PresetsScreen

    app = ui.scripted_app(THREE_CALLS, problem="sum of parts", tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        panel = (await ui.screen_up(pilot, app, SolveScreen)).query_one(GuardPanel)
        assert panel.states["attc"].enabled and panel.states["gstep"].enabled
        app.screen.on_guard_panel_changed(GuardPanel.Changed("attc", setting=("threshold", 0.9)))
        panel.focus_list()
        await pilot.press("p")
        await ui.screen_up(pilot, app, PresetsScreen, 10)
        names = [p.name for p in app.screen.presets]
        assert names[:2] == ["none", "all"] and "flag-only" in names
        app.screen.dismiss(app.screen.presets[names.index("flag-only")])
        await ui.wait_for(
            pilot, lambda: any(n.message.startswith("preset flag-only") for n in app._notifications), 10, "the preset"
        )
        on = {name for name, s in panel.states.items() if s.enabled}
        assert on == {"necessity", "tim"} and panel.states["attc"].settings["threshold"] == 0.97
        await ui.solve(pilot, app)
        started = [
            e for e in load(ui.run_file(app)).events if isinstance(e, ev.GuardToggled) and e.reason == "on at start"
        ]
        assert sorted(e.guard for e in started) == ["necessity", "tim"]


async def test_the_preset_list_keeps_a_row_a_line_and_says_the_rest_under_it(ui, tmp_path):
    """At 100 columns a preset's settings and description cut mid-word and wrapped into the next row;
    now a row is its name and guards, and the highlighted preset's settings and whole description
    are shown under the list."""
    from textual.widgets import OptionList, Static

    from tuiagent.ui.screens.presets import PresetsScreen

    app = ui.scripted_app(THREE_CALLS, problem="sum of parts", tmp_path=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        app.screen.query_one(GuardPanel).focus_list()
        await pilot.press("p")
        await ui.screen_up(pilot, app, PresetsScreen, 10)
        screen = app.screen
        rows = screen.query_one(OptionList)
        assert all(rows.get_option_at_index(i).prompt.cell_length < 90 for i in range(rows.option_count))
        light = next(i for i, p in enumerate(screen.presets) if p.name == "light")
        for _ in range(light):
            await pilot.press("down")
        details = screen.query_one("#chooser-details", Static)
        await ui.wait_for(pilot, lambda: screen.presets[light].description in str(details.render()), 10, "details")
        await pilot.press("up", "up")
        await ui.wait_for(pilot, lambda: screen.presets[light].description not in str(details.render()), 10, "moved")
