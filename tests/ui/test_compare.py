"""Compare: one problem under several guard settings, each column its own run and kernel; saved
trajectories side by side; and the headless pieces (alignment, summaries, column settings)."""

from __future__ import annotations

import asyncio

from tuiagent.core import events as ev
from tuiagent.core.compare import align, first_divergence, pruned_parts, run_columns, step_cells, summary
from tuiagent.core.trajectory import load
from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.screens.compare import CompareScreen
from tuiagent.ui.widgets.compare_grid import CompareGrid
from tuiagent.ui.widgets.compare_summary import CompareSummary

# Each kernel starts empty: a column that shared another's kernel would print 2.
COUNTER = [
    {
        "text": "Count.\n```python\ntry:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)\n```\n```output\n",
        "logprob": -0.05,
    },
    {"text": "So \\boxed{1}.", "logprob": -0.01},
]


async def test_live_compare_runs_each_column_with_its_own_kernel(ui, tmp_path):
    app = ui.scripted_app(
        COUNTER, problem="count", gold="1", screen="compare", columns=("none", "attc prunetir"), tmp_path=tmp_path
    )
    async with app.run_test(size=(120, 36)) as pilot:
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
        await ui.wait_for(pilot, lambda: ui.runs_over(app), 30, "the comparison to end")
        await pilot.pause()
        outputs = [[e.shown for e in evs if isinstance(e, ev.ToolResult)] for evs in screen.events]
        assert outputs == [["1"], ["1"]]
        guards = [summary(evs).guards for evs in screen.events]
        assert guards == ["none", "attc+prunetir"]
        assert not any(isinstance(e, ev.GuardVerdict) for e in screen.events[0])
        assert any(isinstance(e, ev.GuardVerdict) and e.guard == "attc" for e in screen.events[1])
        run_ids = {next(e.run_id for e in evs if isinstance(e, ev.RunStarted)) for evs in screen.events}
        assert len(run_ids) == 2
        cells = [w.render().plain for w in screen.query_one(CompareSummary).children]
        assert len(cells) == 2 and all("answer 1" in c and "right" in c for c in cells)
        grid = screen.query_one(CompareGrid)
        assert len(grid.rows) == 2  # two turns, aligned
        assert app.errors == []


async def test_a_column_runs_with_its_own_settings_only(ui, tmp_path):
    """A threshold typed on the solve screen does not leak into a compare column."""
    app = ui.scripted_app(
        COUNTER, problem="count", screen="compare", columns=("attc", "attc attc.threshold=0.9"), tmp_path=tmp_path
    )
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await ui.screen_up(pilot, app, CompareScreen)
        app.session.remember("attc", enabled=True, settings={"threshold": 0.98})  # as if typed on the solve screen
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
        thresholds = [
            next(e.settings["threshold"] for e in evs if isinstance(e, ev.GuardToggled) and e.guard == "attc")
            for evs in screen.events
        ]
        assert thresholds == [0.97, 0.9] and screen.labels == ["attc", "attc:attc.threshold=0.9"]


async def test_compare_columns_can_run_concurrently(ui, tmp_path):
    app = ui.scripted_app(
        COUNTER,
        problem="count",
        screen="compare",
        columns=("none", "attc", "all"),
        concurrent_columns=True,
        tmp_path=tmp_path,
    )
    async with app.run_test(size=(150, 40)) as pilot:
        screen = await ui.screen_up(pilot, app, CompareScreen)
        await pilot.press("ctrl+r")
        await ui.wait_for(
            pilot,
            lambda: (
                len(screen.events) == 3
                and all(any(isinstance(e, ev.RunFinished) for e in evs) for evs in screen.events)
            ),
            60,
            "three columns",
        )
        assert [[e.shown for e in evs if isinstance(e, ev.ToolResult)] for evs in screen.events] == [["1"]] * 3


async def test_add_and_remove_columns_and_bad_settings(ui, tmp_path):
    app = ui.scripted_app(COUNTER, problem="count", screen="compare", tmp_path=tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await ui.screen_up(pilot, app, CompareScreen)
        screen.query_one(CompareGrid).focus()
        await pilot.press("plus", "plus", "plus")
        assert len(screen.query(".column-spec")) == 4
        values = [box.value for box in screen.query(".column-spec")]
        assert len(set(values)) == 4, values  # each new column is a different setting
        await ui.wait_for(pilot, lambda: len(screen.query_one(CompareSummary).children) == 4, 5, "the summary row")
        await pilot.press("minus", "minus", "minus")
        assert len(screen.query(".column-spec")) == 2
        screen.query(".column-spec").first().value = "attc nonsense"
        reported = len(app.errors)
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: len(app.errors) > reported, 10, "the bad setting to be reported")
        assert any("nonsense" in e for e in app.errors)


async def test_new_columns_are_named_in_the_summary_row_before_they_run(ui, tmp_path):
    """Rerun-as sets the columns up: the summary row names them at once (it kept the earlier
    columns' names, "none", until the runs started, seconds later on a loaded machine)."""
    app = ui.scripted_app(COUNTER, problem="count", screen="compare", tmp_path=tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await ui.screen_up(pilot, app, CompareScreen)
        await screen.go_live("count", None, ["tim", "necessity"])
        summary_row = screen.query_one(CompareSummary)
        await ui.wait_for(pilot, lambda: len(summary_row.children) == 2, 10, "the summary row's two cells")
        cells = [w.render().plain for w in screen.query_one(CompareSummary).children]
        assert [c.splitlines()[0] for c in cells] == ["tim", "necessity"] and all("not started" in c for c in cells)


async def test_compare_saved_runs(ui):
    files = (ui.DATA / "guarded.jsonl", ui.DATA / "plain.jsonl", ui.DATA / "rtts.jsonl")
    app = make_app(AppConfig(model="scripted", screen="compare", compare=files))
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await ui.screen_up(pilot, app, CompareScreen)
        await ui.wait_for(pilot, lambda: len(screen.events) == 3, 10, "the saved runs")
        grid = screen.query_one(CompareGrid)
        assert len(grid.rows) == 9 and len(grid.rows[0]) == 3  # rtts has nine turns
        texts = [w.render().plain for w in screen.query_one(CompareSummary).children]
        assert "answer 338350" in texts[0] and "3 calls (1 err)" in texts[0] and "284 ctx tok" in texts[0]
        assert "answer 481" in texts[2] and "8 calls (8 err)" in texts[2]
        cells = [w.render().plain for w in grid.query("Static")]
        assert any("✂ STP" in c for c in cells) and any("✂ STPR+RTTS" in c for c in cells)
        assert not screen.check_action("stop", ()) and not screen.check_action("add_column", ())
        assert screen.check_action("run", ())  # ctrl+r sets their problem up live


# -- the headless pieces ---------------------------------------------------------------------------


def test_align_by_turn(ui):
    runs = [step_cells(load(ui.DATA / name).events) for name in ("guarded.jsonl", "plain.jsonl")]
    rows = align(runs)
    assert [tuple(c.turn if c else None for c in row) for row in rows] == [(1, 1), (2, 2), (3, 3), (4, None), (5, None)]


def test_pruned_parts_follow_the_working_context(ui):
    marks = pruned_parts(load(ui.DATA / "guarded.jsonl").events)
    assert marks[1].label == "STP" and marks[1].whole and "model" not in marks[1].parts  # reasoning before e0 kept
    assert marks[2].parts == {"model"} and not marks[2].whole  # the fix's prose went, its code stayed
    assert "no intent shift" in marks[1].detail


def test_the_first_divergence_is_the_first_step_the_runs_did_differently(ui):
    events = [load(ui.DATA / name).events for name in ("guarded.jsonl", "plain.jsonl")]
    rows = align([step_cells(e) for e in events])
    i = first_divergence(rows)
    assert i == 3 and rows[i][1] is None  # turn 4: the guarded run checked again, the plain one had stopped
    assert first_divergence(align([step_cells(events[0])] * 2)) is None


def test_runs_still_streaming_the_same_text_do_not_diverge(ui):
    """Two columns at different points of the same run agree: a turn still being written differs
    only where its text so far contradicts the other's, a missing step only once its run ended."""
    events = load(ui.DATA / "plain.jsonl").events
    started = next(i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted))
    first_token = next(i for i, e in enumerate(events) if isinstance(e, ev.TokenDelta) and i > started)
    behind = events[: first_token + 2]  # turn 1, two tokens in
    ahead = [e for e in events if not isinstance(e, ev.RunFinished)]  # every turn written, not finished
    rows = align([step_cells(behind), step_cells(ahead)])
    assert not rows[0][0].settled and rows[0][1].settled
    assert first_divergence(rows, open_columns=[True, True]) is None
    assert first_divergence(rows, open_columns=[False, True]) == 0  # the first run ended there: they differ
    assert first_divergence(rows) == 0  # saved runs (none open) compare whole steps
    strayed = [*behind[:-1], ev.TokenDelta(turn=1, text="Something else", logprob=-0.1)]
    assert first_divergence(align([step_cells(strayed), step_cells(ahead)]), open_columns=[True, True]) == 0


async def test_run_columns_in_turn_or_together():
    order: list[str] = []

    def column(name: str, fail: bool = False):
        async def start():
            order.append(f"{name}+")
            await asyncio.sleep(0.01)
            order.append(f"{name}-")
            if fail:
                raise RuntimeError(name)
            return name

        return start

    out = await run_columns([column("a", fail=True), column("b")])
    assert order == ["a+", "a-", "b+", "b-"] and isinstance(out[0], RuntimeError) and out[1] == "b"
    order.clear()
    out = await run_columns([column("a"), column("b")], concurrent=True)
    assert order[:2] == ["a+", "b+"] and out == ["a", "b"]


async def test_compare_a_damaged_saved_run_with_a_warning(ui, tmp_path):
    lines = (ui.DATA / "guarded.jsonl").read_text(encoding="utf-8").splitlines()
    bad = next(i for i, line in enumerate(lines) if '"ToolResult"' in line)
    lines[bad] = '{"type": "ToolResult", "call": "one"}'
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    app = make_app(AppConfig(model="scripted", screen="compare", compare=(damaged, ui.DATA / "plain.jsonl")))
    async with app.run_test(size=(160, 50)) as pilot:
        await ui.wait_for(pilot, lambda: any(n.severity == "warning" for n in app._notifications), 10, "the warning")
        await ui.screen_up(pilot, app, CompareScreen, 10)
        warnings = [n.message for n in app._notifications if n.severity == "warning"]
        assert len(warnings) == 1 and f"{damaged}:{bad + 1}: ToolResult" in warnings[0]
        assert len(app.screen.events) == 2 and app.errors == []


async def test_rerun_as_runs_the_problem_again_under_a_preset_beside_the_current_settings(ui, tmp_path):
    from tuiagent.ui.screens.presets import PresetsScreen
    from tuiagent.ui.screens.solve import SolveScreen
    from tuiagent.ui.widgets.guard_panel import GuardPanel

    app = ui.scripted_app(COUNTER, problem="count", gold="1", guards=("attc",), tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        app.screen.on_guard_panel_changed(GuardPanel.Changed("attc", setting=("threshold", 0.9)))
        await pilot.press("f6")
        await ui.screen_up(pilot, app, PresetsScreen, 10)
        app.screen.dismiss(next(p for p in app.screen.presets if p.name == "flag-only"))
        await ui.wait_for(
            pilot,
            lambda: (
                isinstance(app.screen, CompareScreen)
                and len(app.screen.events) == 2
                and all(any(isinstance(e, ev.RunFinished) for e in evs) for evs in app.screen.events)
            ),
            60,
            "both columns",
        )
        screen = app.screen
        assert screen.labels == ["attc:attc.threshold=0.9", "necessity+tim"]
        assert screen.query_one("#compare-problem").text == "count"
        started = [next(e for e in evs if isinstance(e, ev.RunStarted)) for evs in screen.events]
        assert all(s.problem == "count" and s.gold == "1" for s in started)


async def test_rerun_as_after_a_saved_compare_runs_live(ui, tmp_path):
    """f6 on the solve screen once the compare screen shows saved runs: the saved columns give way
    to a live comparison (issue 39: it used to relabel the saved columns and refuse to run)."""
    from tuiagent.ui.screens.presets import PresetsScreen
    from tuiagent.ui.screens.solve import SolveScreen
    from tuiagent.ui.widgets.top_bar import TopBar

    app = ui.scripted_app(COUNTER, problem="count", gold="1", guards=("attc",), tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        app.open_compare([ui.DATA / "plain.jsonl", ui.DATA / "guarded.jsonl"])
        await ui.wait_for(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.has_class("-files"))
        await pilot.press("f2")  # back to solve
        await ui.wait_for(pilot, lambda: not isinstance(app.screen, CompareScreen), 10, "the solve screen")
        await pilot.press("f6")
        await ui.screen_up(pilot, app, PresetsScreen, 10)
        assert "run this problem again under a preset" in app.screen.title_text
        app.screen.dismiss(next(p for p in app.screen.presets if p.name == "flag-only"))
        await ui.wait_for(
            pilot,
            lambda: (
                isinstance(app.screen, CompareScreen)
                and not app.screen.has_class("-files")
                and len(app.screen.events) == 2
                and all(any(isinstance(e, ev.RunFinished) for e in evs) for evs in app.screen.events)
            ),
            60,
            "both live columns",
        )
        screen = app.screen
        assert not screen.has_class("-files") and screen.files == []
        assert screen.labels == ["attc", "necessity+tim"]
        assert screen.query_one(TopBar).title == "· compare"
        assert [[e.shown for e in evs if isinstance(e, ev.ToolResult)] for evs in screen.events] == [["1"], ["1"]]
        assert app.errors == []


async def test_ctrl_r_on_saved_runs_sets_up_their_problem_live(ui, tmp_path):
    saved = [ui.DATA / "plain.jsonl", ui.DATA / "guarded.jsonl"]
    problem = next(e for e in load(saved[0]).events if isinstance(e, ev.RunStarted)).problem
    app = ui.scripted_app(COUNTER, screen="compare", compare=tuple(saved), tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await ui.wait_for(pilot, lambda: isinstance(app.screen, CompareScreen) and len(app.screen.events) == 2)
        screen = app.screen
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: not screen.has_class("-files"), 10, "the live compare")
        assert screen.query_one("#compare-problem").text == problem
        columns = [box.value for box in screen.query(".column-spec")]
        assert columns == [summary(load(p).events).guards.replace("+", " ") for p in saved]
        assert screen.events == [] and not any(w.is_running for w in screen.workers if w.group == "run")
        await pilot.press("ctrl+r")  # now it runs
        await ui.wait_for(
            pilot,
            lambda: (
                len(screen.events) == 2
                and all(any(isinstance(e, ev.RunFinished) for e in evs) for evs in screen.events)
            ),
            60,
            "both columns",
        )
