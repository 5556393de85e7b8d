"""The rough edges a first hour hits (issue 16): the gold answer typed and run at once, the gold
field's label, guards off/on in one key, presets by number, which guards are on at 80x24."""

from __future__ import annotations

from textual import events
from textual.widgets import Input

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.ui.screens.help import HelpScreen
from tuiagent.ui.screens.presets import PresetsScreen
from tuiagent.ui.screens.solve import SolveScreen


async def test_gold_typed_then_ctrl_r_at_once_is_kept(ui, tmp_path):
    """Keys sent in one burst (a paste, tmux send-keys): ctrl+r must see every character typed before it."""
    app = ui.scripted_app([{"text": "\\boxed{29461}", "logprob": -0.1}], problem="x?", guards=(), tmp_path=tmp_path)
    async with app.run_test() as pilot:
        app.screen.query_one("#gold", Input).focus()
        await pilot.pause()
        for key in [*"29461", "ctrl+r"]:  # no pause between keys: all queued before any is handled
            app._driver.send_message(events.Key(key, key if len(key) == 1 else None))
        await ui.wait_for(pilot, lambda: app.screen.finished is not None, 30, "the run to end")
        started = next(e for e in load(ui.run_file(app)).events if isinstance(e, ev.RunStarted))
        assert started.gold == "29461"
        assert app.screen.finished.correct is True


async def test_tab_goes_from_the_problem_to_the_labelled_gold_field(ui):
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="x")
    async with app.run_test(size=(80, 24)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        assert "gold answer" in ui.text(app.screen.query_one("#gold-label"))
        await pilot.press("tab")
        assert app.focused is app.screen.query_one("#gold", Input)
        await pilot.press("f1")
        await ui.screen_up(pilot, app, HelpScreen)
        text = "\n".join(w.render().plain for w in app.screen.query("Static"))
        assert "gold answer" in text and "All guards off/on" in text and "Preset 2" in text


async def test_the_footer_says_what_ctrl_g_does_and_a_second_press_goes_back(ui):
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="x")
    async with app.run_test(size=(120, 40)) as pilot:

        def footer() -> set[str]:
            return {k.description for k in app.screen.query("FooterKey")}

        await ui.wait_for(pilot, lambda: "Guards panel" in footer(), 10, "the footer to show its keys")
        assert "Back from guards" not in footer()
        await pilot.press("ctrl+g")
        await ui.wait_for(pilot, lambda: "Back from guards" in footer(), 5, "the footer to change")
        assert "Guards panel" not in footer()
        await pilot.press("ctrl+g")
        await ui.wait_for(pilot, lambda: "Guards panel" in footer(), 5, "the footer to change back")
        assert app.focused is app.screen.query_one("#trajectory")


async def test_all_guards_off_and_on_in_one_key_and_presets_by_number(ui):
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="x")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await ui.screen_up(pilot, app, SolveScreen)
        panel = screen.query_one("#guards")
        problem = screen.query_one("#problem")

        def on() -> set[str]:
            return {n for n, s in panel.states.items() if s.enabled}

        everything = set(panel.states)
        assert on() == everything and problem.border_subtitle.startswith("guards: " + " ".join(sorted(everything)))
        await pilot.press("f7")
        assert on() == set() and problem.border_subtitle.startswith("guards: none")  # seen at 80x24
        await pilot.press("f7")
        assert on() == everything
        await pilot.press("ctrl+g", "0")
        assert on() == set()
        await pilot.press("1")
        assert on() == everything
        await pilot.press("p")
        await ui.screen_up(pilot, app, PresetsScreen)
        await pilot.press("0")  # the chooser's rows are numbered too
        await ui.wait_for(pilot, lambda: on() == set(), 10, "preset 0 of the chooser to apply")
        assert on() == set()


async def test_a_block_waiting_for_a_yes_shows_as_waiting(ui, tmp_path):
    from tuiagent.ui.screens.confirm_code import ConfirmCodeScreen
    from tuiagent.ui.widgets.code_block import CodeBlockView
    from tuiagent.ui.widgets.status_line import StatusLine

    turns = [
        {"text": "One.\n```python\nprint('first')\n```\n```output\n", "logprob": -0.01},
        {"text": "\\boxed{2}", "logprob": -0.01},
    ]
    app = ui.scripted_app(turns, problem="one block", guards=(), tmp_path=tmp_path, confirm=True)
    async with app.run_test() as pilot:
        solve = app.screen
        await pilot.press("ctrl+r")
        await ui.screen_up(pilot, app, ConfirmCodeScreen, 30)
        status, block = solve.query_one(StatusLine), solve.query_one(CodeBlockView)
        assert status.state == "waiting" and "waiting" in ui.text(status)
        assert block.status == "pending" and "waiting" in ui.text(block)
        await pilot.press("y")
        await ui.wait_for(pilot, lambda: not solve.running, 30, "the run to end")
        assert status.state == "answer"


async def test_replay_shows_the_run_as_it_stood_at_the_current_event(ui):
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.widgets.final_answer import FinalAnswer
    from tuiagent.ui.widgets.trajectory import TrajectoryView

    app = make_app(AppConfig(model="scripted", screen="replay", replay=ui.DATA / "guarded.jsonl"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        trajectory = app.screen.query_one(TrajectoryView)
        final = trajectory.query_one(FinalAnswer)
        assert not final.display
        visible = [w for w in trajectory.children if w.display]
        assert len(visible) == 1  # the problem only
        await pilot.press("end")
        assert final.display
        await pilot.press("home")
        assert not final.display
