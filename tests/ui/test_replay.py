"""Replay: step by event or by step, jump to guard decisions and to the ends; what the model saw
(working_context(events[:i])) beside the full trajectory; opening runs from inside the app."""

from __future__ import annotations

import shutil

from tuiagent import paths
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.trajectory import load
from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.describe import is_guard_decision
from tuiagent.ui.screens.open_run import OpenRunScreen
from tuiagent.ui.screens.replay import ReplayScreen
from tuiagent.ui.widgets.banner import Banner
from tuiagent.ui.widgets.context_view import ContextView
from tuiagent.ui.widgets.replay_bar import ReplayBar
from tuiagent.ui.widgets.step_header import StepHeader
from tuiagent.ui.widgets.trajectory import TrajectoryView


def context_text(screen) -> str:
    """The working context as the context pane shows it (its segments, not the removed ones)."""
    view = screen.query_one(ContextView)
    return "".join(w.render().plain for w in view.children if not w.has_class("-label") and not w.has_class("-removed"))


async def drawn(ui, pilot, app) -> ReplayScreen:
    """The replay screen once its run is open and every widget it drew is mounted."""

    def ready() -> bool:
        screen = app.screen
        return (
            isinstance(screen, ReplayScreen)
            and screen.path is not None
            and screen.is_mounted
            and all(w.is_mounted for w in screen.walk_children())
        )

    await ui.wait_for(pilot, ready, 10, "the saved run to be drawn")
    return app.screen


async def test_stepping_through_a_run(ui):
    path = ui.DATA / "guarded.jsonl"
    events = [e for e in load(path).events if not isinstance(e, ev.TokenDelta)]
    app = make_app(AppConfig(model="scripted", screen="replay", replay=path))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await drawn(ui, pilot, app)
        assert isinstance(screen, ReplayScreen) and screen.position == 1
        assert context_text(screen) == working_context(events[:1]).text

        await pilot.press("right", "right")
        assert screen.position == 3
        await pilot.press("left")
        assert screen.position == 2

        await pilot.press("n")
        assert isinstance(events[screen.position - 1], ev.TurnStarted)
        assert events[screen.position - 1].turn == 1
        await pilot.press("n")
        assert events[screen.position - 1].turn == 2
        await pilot.press("p")
        assert events[screen.position - 1].turn == 1

        await pilot.press("g")
        current = events[screen.position - 1]
        assert is_guard_decision(current) and isinstance(current, ev.GuardVerdict) and current.guard == "necessity"
        assert "necessity" in screen.query_one(ReplayBar).render().plain
        i = screen.position
        assert context_text(screen) == working_context(events[:i]).text

        # to the prune: the context loses the erroneous call; the trajectory keeps it
        while not isinstance(events[screen.position - 1], ev.ContextPruned):
            await pilot.press("g")
        i = screen.position
        assert context_text(screen) == working_context(events[:i]).text
        removed = [w for w in screen.query_one(ContextView).children if w.has_class("-removed")]
        assert removed and any("totl" in w.render().plain for w in removed)
        assert "print(totl)" not in context_text(screen)

        await pilot.press("end")
        assert screen.position == len(events) and isinstance(events[-1], ev.RunFinished)
        await pilot.press("G")
        assert is_guard_decision(events[screen.position - 1])
        await pilot.press("home")
        assert screen.position == 1
        await pilot.press("y")
        assert app.clipboard == "338350"


async def test_pruned_branches_are_collapsed_and_expand(ui):
    app = make_app(AppConfig(model="scripted", screen="replay", replay=ui.DATA / "rtts.jsonl"))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await drawn(ui, pilot, app)
        headers = {h.turn: h for h in screen.query(StepHeader)}
        labels = {t: h.mark.label for t, h in headers.items() if h.mark}
        assert labels == {
            1: "STPR",
            2: "STPR",
            3: "STPR",
            4: "STPR",
            5: "STPR+RTTS",
            6: "STPR+RTTS",
            7: "STPR+RTTS",
            8: "STPR+RTTS",
        }
        trajectory = screen.query_one(TrajectoryView)
        hidden = [w for w in trajectory.pruned_items[2]]
        assert hidden and all(w.has_class("-hidden") for w in hidden)
        banner = screen.query_one(Banner)
        assert "RTTS" in banner.render().plain and not banner.has_class("-hidden")
        headers[2].focus()
        await pilot.press("enter")
        assert not any(w.has_class("-hidden") for w in trajectory.pruned_items[2])
        trajectory.focus()
        await pilot.press("x")  # all of them
        assert not any(w.has_class("-hidden") for w in trajectory.pruned_items[5])
        await pilot.press("x")
        assert all(w.has_class("-hidden") for w in trajectory.pruned_items[5])


async def test_open_a_recent_run_from_inside_the_app(ui):
    runs = paths.runs_dir()
    runs.mkdir(parents=True, exist_ok=True)
    for name in ("guarded", "plain", "rtts"):
        shutil.copy(ui.DATA / f"{name}.jsonl", runs / f"{name}.jsonl")
    app = make_app(AppConfig(model="scripted"))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("ctrl+o")
        await ui.screen_up(pilot, app, OpenRunScreen, 5)
        assert len(app.screen.runs) == 3
        listing = app.screen.query_one("#runs")
        target = next(i for i, r in enumerate(app.screen.shown) if r.path.name == "rtts.jsonl")
        listing.move_cursor(row=target)
        await pilot.press("enter")
        await ui.wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.path is not None, 5)
        assert app.screen.path.name == "rtts.jsonl"
        await pilot.press("ctrl+o")  # mark two and compare them
        await ui.screen_up(pilot, app, OpenRunScreen, 5)
        await pilot.press("space", "space", "c")
        await ui.wait_for(pilot, lambda: type(app.screen).__name__ == "CompareScreen", 5)
        assert len(app.screen.events) == 2


async def test_a_file_that_is_not_a_trajectory_is_a_notice(ui, tmp_path):
    bogus = tmp_path / "x.jsonl"
    bogus.write_text("hello\n")
    app = make_app(AppConfig(model="scripted", screen="replay", replay=bogus))
    async with app.run_test() as pilot:
        await ui.wait_for(pilot, lambda: bool(app.errors), 10, "the file to be refused")
        assert any("not a tuiagent trajectory" in e for e in app.errors)
        assert app.is_running


async def test_a_damaged_trajectory_opens_with_a_warning(ui, tmp_path):
    lines = (ui.DATA / "guarded.jsonl").read_text(encoding="utf-8").splitlines()
    bad = next(i for i, line in enumerate(lines) if '"TurnEnded"' in line)
    lines[bad] = "{oops"  # the first turn's end: the prune after it names a segment that is not there
    path = tmp_path / "damaged.jsonl"
    path.write_text("\n".join(lines)[:-30], encoding="utf-8")  # and the last line cut short
    app = make_app(AppConfig(model="scripted", screen="replay", replay=path))
    async with app.run_test(size=(140, 40)) as pilot:
        await drawn(ui, pilot, app)
        await ui.wait_for(pilot, lambda: any(n.severity == "warning" for n in app._notifications), 10, "the warning")
        warnings = [n.message for n in app._notifications if n.severity == "warning"]
        assert len(warnings) == 1
        assert f"{path}:{bad + 1}: not valid JSON" in warnings[0] and f"{path}:{len(lines)}: cut short" in warnings[0]
        screen = app.screen
        assert isinstance(screen, ReplayScreen) and screen.path == path
        assert screen.events == [e for e in load(path).events if not isinstance(e, ev.TokenDelta)]
        await pilot.press("end")  # every step folds, the prune included
        assert screen.position == len(screen.events)
        assert app.errors == [] and app.is_running


async def test_the_header_names_the_model_that_made_the_saved_run(ui):
    from tuiagent.ui.widgets.top_bar import TopBar

    app = make_app(AppConfig(model="smollm2-135m", screen="replay", replay=ui.DATA / "guarded.jsonl"))
    async with app.run_test(size=(120, 30)) as pilot:
        bar = (await drawn(ui, pilot, app)).query_one(TopBar)
        assert (bar.model, bar.state) == ("scripted", "recorded")  # not the app's own model


async def test_the_left_side_is_what_happened_and_the_right_what_the_model_saw_as_the_docs_say(ui):
    """README and docs/app.md describe the two sides; the layout must match them."""
    from pathlib import Path

    app = make_app(AppConfig(model="scripted", screen="replay", replay=ui.DATA / "guarded.jsonl"))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await drawn(ui, pilot, app)
        happened, saw = screen.query_one(TrajectoryView), screen.query_one(ContextView)
        await ui.wait_for(
            pilot, lambda: happened.region.width > 0 and saw.region.width > 0, 10, "the two sides laid out"
        )
        assert happened.region.x < saw.region.x and happened.region.y == saw.region.y
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8").split())
    assert "the left side is what had happened by that moment, the right what the model saw" in readme


async def test_escape_closes_the_open_dialog_of_an_empty_replay_screen_and_coming_back_asks_again(ui):
    """The dialog an empty replay screen puts up closes on escape and stays closed (it came straight back
    before: the screen asked again each time it was shown, closing the dialog included); F3 from
    another screen asks again."""
    from tuiagent.ui.screens.solve import SolveScreen

    app = make_app(AppConfig(model="scripted", screen="replay"))
    async with app.run_test(size=(120, 30)) as pilot:
        first = await ui.screen_up(pilot, app, OpenRunScreen)
        await pilot.press("escape")
        await ui.screen_up(pilot, app, ReplayScreen)
        for _ in range(5):  # a dialog that came back would be up after these
            await pilot.pause()
        assert isinstance(app.screen, ReplayScreen) and first not in app.screen_stack
        await pilot.press("f2")
        await ui.screen_up(pilot, app, SolveScreen)
        await pilot.press("f3")
        again = await ui.screen_up(pilot, app, OpenRunScreen)
        assert again is not first and sum(isinstance(s, OpenRunScreen) for s in app.screen_stack) == 1
