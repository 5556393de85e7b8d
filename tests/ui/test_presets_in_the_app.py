"""The app's front ends run a preset's budgets and sampling unchanged (``tuiagent --preset``, a
compare column, a fork in the app), and the app lists the presets of the model in use, again after a
model switch. The command-line front ends: tests/test_presets_reach_the_run.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.test_presets_reach_the_run import RUN, SAMPLING, assert_the_preset_reached, write_budgeted_preset
from tuiagent.app import app_config
from tuiagent.backends.scripted import ScriptedBackend
from tuiagent.core import events as ev
from tuiagent.protocol import Token
from tuiagent.ui import make_app
from tuiagent.ui.screens.compare import CompareScreen
from tuiagent.ui.screens.solve import SolveScreen

TURNS = [[Token("Count.\n```python\nn = 1\nprint(n)\n```\n```output\n", -0.05)], [Token("So \\boxed{1}.", -0.01)]]


def recorded(events: list[ev.Event]) -> list[dict]:
    """Events as their trajectory lines read (what assert_the_preset_reached checks)."""
    return [json.loads(json.dumps(ev.to_dict(e), default=str)) for e in events]


def scripted(config):
    return make_app(config, backend_factory=lambda: ScriptedBackend([list(t) for t in TURNS], delay_s=0.001))


async def test_tuiagent_preset_runs_its_budgets_and_sampling(ui, tmp_path):
    write_budgeted_preset()
    app = scripted(app_config(model="scripted", preset="budgeted", problem="count", out=tmp_path / "runs"))
    async with app.run_test(size=(120, 36)) as pilot:
        await ui.solve(pilot, app)
        assert_the_preset_reached(recorded(app.screen.query_one("#trajectory").events))
        assert app.errors == []


async def test_a_preset_chosen_in_the_app_runs_its_budgets_and_sampling_from_the_next_run(ui, tmp_path):
    write_budgeted_preset()
    app = scripted(app_config(model="scripted", preset="none", problem="count", out=tmp_path / "runs"))
    async with app.run_test(size=(120, 36)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        app.screen.apply_preset(app.controller.presets()["budgeted"])  # what `p` and a number in the guard panel do
        await ui.solve(pilot, app)
        assert_the_preset_reached(recorded(app.screen.query_one("#trajectory").events))
        app.screen.apply_preset(app.controller.preset_choices()[0])  # `none`: the budgets go back to their defaults
        await ui.solve(pilot, app)
        started = next(e for e in app.screen.query_one("#trajectory").events if isinstance(e, ev.RunStarted))
        assert started.settings["max_tool_calls"] != RUN["max_tool_calls"] and started.settings["explicit"] == []
        assert app.errors == []


async def test_a_compare_column_runs_a_presets_budgets_and_sampling(ui, tmp_path):
    write_budgeted_preset()
    app = scripted(
        app_config(
            model="scripted",
            preset="none",
            problem="count",
            screen="compare",
            columns=("budgeted", "none"),
            out=tmp_path / "runs",
        )
    )
    async with app.run_test(size=(140, 36)) as pilot:
        screen = await ui.screen_up(pilot, app, CompareScreen)
        await pilot.press("ctrl+r")
        await ui.wait_for(
            pilot,
            lambda: (
                len(screen.events) == 2
                and all(any(isinstance(e, ev.RunFinished) for e in evs) for evs in screen.events)
            ),
            60,
            "both columns",
        )
        assert_the_preset_reached(recorded(screen.events[0]))
        other = next(e for e in screen.events[1] if isinstance(e, ev.RunStarted))
        assert other.settings["max_tool_calls"] != RUN["max_tool_calls"]  # the preset did not leak into `none`
        assert screen.labels[0] == "tim:tim.flag_at=3," + ",".join(f"{k}={v}" for k, v in {**RUN, **SAMPLING}.items())
        assert app.errors == []


async def test_a_fork_in_the_app_runs_a_presets_budgets_and_sampling(ui, tmp_path):
    write_budgeted_preset()
    app = scripted(app_config(model="scripted", preset="none", problem="count", out=tmp_path / "runs"))
    async with app.run_test(size=(120, 36)) as pilot:
        await ui.solve(pilot, app)
        solve, parent = app.screen, app.screen.run_path
        app.run_fork(parent, 1, app.controller.presets()["budgeted"])
        await ui.wait_for(
            pilot,
            lambda: solve.run_path not in (None, parent) and not solve.running and solve.finished is not None,
            60,
            "the fork",
        )
        events = recorded(solve.query_one("#trajectory").events)
        assert_the_preset_reached(events, guards=False)
        assert events[0]["parent"]["step"] == 1
        assert app.errors == []


CALIBRATION = """
[calibration]
model = "other"
date = "2026-12-03"

[presets.recommended]
description = "other's own"
guards = ["attc"]
"""


async def test_the_app_lists_the_presets_of_the_model_in_use(ui, tmp_path: Path):
    (tmp_path / "other.toml").write_text(textwrap.dedent(CALIBRATION), encoding="utf-8")
    models = tmp_path / "models.toml"
    models.write_text(
        textwrap.dedent("""
        [models.plain]
        backend = "scripted"
        [models.plain.source]
        kind = "script"
        [models.other]
        backend = "scripted"
        calibration = "other.toml"
        [models.other.source]
        kind = "script"
        """),
        encoding="utf-8",
    )
    app = scripted(app_config(model="plain", models_file=models, preset="none"))
    async with app.run_test(size=(120, 36)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        assert app.controller.presets()["recommended"].spec.guards == ("necessity", "tim")  # the shipped one
        app.change_model("other")
        await ui.wait_for(pilot, lambda: app.session.model_id == "other", 30, "the model switch")
        assert app.controller.presets()["recommended"].spec.guards == ("attc",)
        choices = {p.name: p for p in app.screen.presets() or []}
        assert choices["recommended"].spec.guards == ("attc",)
