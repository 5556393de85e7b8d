"""Every action has a key, shown in the footer, in the command palette and on the help screen."""

from __future__ import annotations

from textual.widgets import Footer

from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.screens.compare import CompareScreen
from tuiagent.ui.screens.help import HelpScreen
from tuiagent.ui.screens.open_run import OpenRunScreen
from tuiagent.ui.screens.replay import ReplayScreen
from tuiagent.ui.screens.solve import SolveScreen


def descriptions(bindings) -> set[str]:
    return {b.description for b in bindings if getattr(b, "description", "")}


async def test_help_lists_the_keys_of_the_screen_and_the_app(ui):
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="x")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("f1")
        await ui.screen_up(pilot, app, HelpScreen, 5)
        text = "\n".join(w.render().plain for w in app.screen.query("Static"))
        for words in (
            "Run",
            "Stop",
            "Guards",
            "Copy answer",
            "Open run",
            "Copy code",
            "Expand output",
            "Show/hide pruned",
            "On/off",
            "Mouse",
        ):
            assert words in text, words
        assert "^r" in text and "f1" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_palette_has_every_action_with_its_key(ui):
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="x")
    async with app.run_test(size=(100, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        for mode, kind in (("solve", SolveScreen), ("replay", OpenRunScreen), ("compare", CompareScreen)):
            await app.switch_mode(mode)
            await ui.screen_up(pilot, app, kind)
            if mode == "replay":  # no run open: the open dialog came up; escape leaves the empty screen
                await pilot.press("escape")
                await ui.screen_up(pilot, app, ReplayScreen)
            screen = app.screen
            commands = {c.title: c.help for c in app.get_system_commands(screen)}
            wanted = descriptions(b for b in screen.BINDINGS if b.show) | descriptions(app.BINDINGS)
            assert wanted <= set(commands), wanted - set(commands)
            assert all(commands[w].startswith("key: ") for w in wanted)


async def test_footer_shows_the_main_keys_at_80x24(ui):
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="x")
    async with app.run_test(size=(80, 24)) as pilot:

        def laid_out_keys() -> list:
            footers = app.screen.query(Footer)
            return [k for k in footers.first().query("FooterKey") if k.region.width] if footers else []

        await ui.wait_for(pilot, lambda: "Help" in {k.description for k in laid_out_keys()}, 10, "the footer's keys")
        keys = [k.description for k in laid_out_keys()]
        for wanted in ("Run", "Stop", "Guards panel", "Help"):
            assert wanted in keys
        # the first keys fit in 80 columns
        shown = [k for k in laid_out_keys() if k.region.right <= 80]
        assert {"Run", "Stop", "Guards panel", "Help"} <= {k.description for k in shown}


async def test_palette_command_runs_the_action(ui):
    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem=ui.PROBLEM)
    async with app.run_test(size=(100, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        run = next(c for c in app.get_system_commands(app.screen) if c.title == "Run")
        run.callback()
        await ui.wait_for(pilot, lambda: app.screen.running, 10, "the run to start from the palette")
        await ui.wait_for(pilot, lambda: not app.screen.running, 60)


async def test_light_theme_toggle(ui):
    app = make_app(AppConfig(model="scripted"))
    async with app.run_test() as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        assert app.current_theme.dark
        await pilot.press("ctrl+t")
        assert not app.current_theme.dark


async def test_choose_model_lists_models_toml(ui):
    from tuiagent.ui.screens.models import ModelsScreen

    app = make_app(AppConfig(model="scripted", screen="replay"))
    async with app.run_test(size=(120, 30)) as pilot:
        dialog = await ui.screen_up(pilot, app, OpenRunScreen)
        await pilot.press("escape")  # the open-run dialog of an empty replay screen
        await ui.screen_up(pilot, app, ReplayScreen)
        await pilot.pause()
        assert app.screen is not dialog and isinstance(app.screen, ReplayScreen)  # escape did not bring it back
        await pilot.press("ctrl+l")
        await ui.screen_up(pilot, app, ModelsScreen)
        assert isinstance(app.screen, ModelsScreen)
        assert {"scripted", "qwen2.5-coder-1.5b"} <= set(app.screen.ids)
        await pilot.press("escape")
        assert not isinstance(app.screen, ModelsScreen)


async def test_help_lists_the_choices_of_ours_in_force_for_the_guards_on(ui):
    """The guard panel's help says which settings of the guards on are not their paper's (issue 42's
    list, as `tuiagent guards --explain` prints it), and follows the panel."""
    from guards.base import parse_settings
    from guards.chain import guard_class, ours_in_force
    from tuiagent.ui.widgets.guard_panel import GuardPanel

    app = ui.scripted_app(ui.DATA / "guarded_script.jsonl", problem="x")
    async with app.run_test(size=(100, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        states = app.screen.query_one(GuardPanel).states
        on = [name for name, s in states.items() if s.enabled]
        expected = [
            f"{name}.{key} = {value!r}"
            for name in on
            for key, value, _ in ours_in_force(
                name, parse_settings(guard_class(name).Settings, states[name].settings, guard=name)
            )
        ]
        assert on and expected
        await pilot.press("f1")
        await ui.screen_up(pilot, app, HelpScreen, 5)
        text = "\n".join(w.render().plain for w in app.screen.query("Static"))
        assert "Choices of ours in force" in text
        assert all(row in text for row in expected), [row for row in expected if row not in text]
        await pilot.press("escape")
        for name in on:
            states[name].enabled = False
        await pilot.press("f1")
        await ui.screen_up(pilot, app, HelpScreen, 5)
        text = "\n".join(w.render().plain for w in app.screen.query("Static"))
        assert "no guard is on" in text and expected[0] not in text
