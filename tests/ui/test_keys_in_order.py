"""Keys typed in one burst (a paste, tmux send-keys, fast typing on a busy machine) reach the field that
has focus when each key's turn comes (issue 39 item 5): a key that moves the focus takes the keys
after it along. Each burst is queued on the app before any key of it is handled."""

from __future__ import annotations

from textual import events
from textual.widgets import Input

from tuiagent.ui.widgets.problem_input import ProblemInput


def burst(app, *keys: str) -> None:
    for key in keys:
        app._driver.send_message(events.Key(key, key if len(key) == 1 else None))


async def ready_for_keys(ui, pilot, app) -> None:
    """The solve screen is up and its problem box has the focus (where typed keys go first)."""
    await ui.wait_for(pilot, lambda: isinstance(app.screen.focused, ProblemInput), 10, "the problem box's focus")


async def test_a_gold_answer_typed_right_after_tab_goes_to_the_gold_field(ui, tmp_path):
    app = ui.scripted_app([{"text": "\\boxed{1}", "logprob": -0.1}], guards=(), tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await ready_for_keys(ui, pilot, app)
        burst(app, *"abc", "tab", *"42")
        await ui.wait_for(pilot, lambda: app.screen.query_one("#gold", Input).value == "42", 10, "the gold answer")
        assert app.screen.query_one(ProblemInput).text == "abc"


async def test_a_paste_then_tab_then_the_gold_answer(ui, tmp_path):
    app = ui.scripted_app([{"text": "\\boxed{1}", "logprob": -0.1}], guards=(), tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await ready_for_keys(ui, pilot, app)
        app._driver.send_message(events.Paste("What is 6 times 7?"))
        burst(app, "tab", *"42", "ctrl+r")
        await ui.wait_for(pilot, lambda: app.screen.finished is not None, 30, "the run to end")
        assert app.screen.query_one(ProblemInput).text == "What is 6 times 7?"
        assert app.screen.query_one("#gold", Input).value == "42"


async def test_a_key_after_ctrl_g_goes_to_the_guard_panel(ui):
    """ctrl+g focuses the panel through the app's queue (Widget.focus); 'a' right behind it toggles
    every guard instead of landing in the problem box."""
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="")
    async with app.run_test(size=(120, 40)) as pilot:
        await ready_for_keys(ui, pilot, app)
        panel = app.screen.query_one("#guards")
        assert all(s.enabled for s in panel.states.values())
        burst(app, "ctrl+g", "a")
        await ui.wait_for(pilot, lambda: not any(s.enabled for s in panel.states.values()), 10, "guards off")
        assert app.screen.query_one(ProblemInput).text == ""


async def test_fast_presses_in_replay_each_count_from_where_the_last_left(ui):
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.describe import is_guard_decision
    from tuiagent.ui.widgets.trajectory import TrajectoryView

    app = make_app(AppConfig(model="scripted", screen="replay", replay=ui.DATA / "guarded.jsonl"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        screen = app.screen
        guards = [i + 1 for i, e in enumerate(screen.events) if is_guard_decision(e)]
        burst(app, "end", "G", "G", "G")
        await ui.wait_for(pilot, lambda: screen.position == guards[-3], 10, "the third guard from the end")
        burst(app, "g", "n", "home", "right", "right")
        await ui.wait_for(pilot, lambda: screen.position == 3, 10, "the third event")
        trajectory = screen.query_one(TrajectoryView)

        def in_view() -> bool:
            current = trajectory._current
            return current is not None and trajectory.scrollable_content_region.overlaps(current.region)

        await ui.wait_for(pilot, in_view, 10, "the third event scrolled into view")
        current = trajectory._current
        assert current is not None and trajectory.scrollable_content_region.overlaps(current.region)
