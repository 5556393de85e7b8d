"""Forking from the app: ctrl+f on the solve screen (step, then settings), the fork runs live, f12 compares it
with its parent, the fork's first own step marked. Scripted backend, real kernel."""

from __future__ import annotations

from tuiagent.core import events as ev
from tuiagent.ui.screens.solve import SolveScreen

COUNTER = [  # counts the times the cell ran in this kernel: the fork's rebuilt kernel starts at 1
    {
        "text": "Count.\n```python\ntry:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)\n```\n```output\n",
        "logprob": -0.05,
    },
    {"text": "So \\boxed{1}.", "logprob": -0.01},
]


async def test_fork_from_the_solve_screen_then_compare_with_the_parent(ui, tmp_path):
    from tuiagent.ui.screens.compare import CompareScreen
    from tuiagent.ui.screens.edit_value import EditValueScreen
    from tuiagent.ui.screens.presets import PresetsScreen
    from tuiagent.ui.widgets.compare_grid import CompareGrid

    app = ui.scripted_app(COUNTER, problem="count", gold="1", guards=("tim",), tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        await pilot.press("ctrl+r")
        solve = app.screen
        await ui.wait_for(pilot, lambda: solve.finished is not None and not solve.running, 60, "the parent run")
        parent = solve.run_path
        await pilot.press("ctrl+f")
        await ui.screen_up(pilot, app, EditValueScreen, 10)
        app.screen.dismiss("1")
        await ui.screen_up(pilot, app, PresetsScreen, 10)
        assert app.screen.presets[0].name == "as recorded"
        app.screen.dismiss(next(p for p in app.screen.presets if p.name == "none"))
        await ui.wait_for(
            pilot,
            lambda: not solve.running and solve.finished is not None and solve.run_path not in (None, parent),
            60,
            "the fork",
        )
        started = next(e for e in solve.query_one("#trajectory").events if isinstance(e, ev.RunStarted))
        assert started.parent == {"run_id": parent.stem, "trajectory": str(parent), "step": 1}
        messages = [e.message for e in solve.query_one("#trajectory").events if isinstance(e, ev.Notice)]
        assert any("kernel state rebuilt: 1 cell" in m for m in messages)
        # The fork ran the counting cell once more in the rebuilt kernel: n was 1, now 2.
        assert [e.shown for e in solve.query_one("#trajectory").events if isinstance(e, ev.ToolResult)] == ["1", "2"]

        await pilot.press("f12")
        await ui.wait_for(
            pilot, lambda: isinstance(app.screen, CompareScreen) and len(app.screen.events) == 2, 10, "the comparison"
        )
        labels = app.screen.labels
        assert labels[0].endswith("· tim") and f"fork of …{parent.stem.rsplit('-', 1)[-1]} @ step 1 · none" in labels[1]
        rows = app.screen.query_one(CompareGrid).rows
        assert [c.forked for c in rows[1] if c is not None] == [False, True]
        assert app.errors == []
