"""Math rendered for reading in the app: the model's LaTeX reads as Unicode live, in replay and in
compare; f10 shows it as written and back; token confidence still shades the tokens a formula came
from; the trajectory keeps the text verbatim."""

from __future__ import annotations

import math

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.ui.token_shade import BANDS
from tuiagent.ui.widgets.compare_grid import CompareGrid
from tuiagent.ui.widgets.final_answer import FinalAnswer
from tuiagent.ui.widgets.note_line import NoteLine
from tuiagent.ui.widgets.turn_text import TurnText

# One turn, token by token: the formula's "17" is unsure (p 0.2, band 0), so is "apples" after it (p 0.5).
TOKENS = [
    ("There are ", -0.01),
    ("\\(3 ", -0.01),
    ("\\times ", -0.01),
    ("17", math.log(0.2)),
    ("\\)", -0.01),
    (" red ", -0.01),
    ("apples", math.log(0.5)),
    (", and \\(\\frac{1}{2}\\) of them are ripe. ", -0.01),
    ("So \\boxed{\\frac{51}{2}}.", -0.01),
]
SOURCE = "".join(t for t, _ in TOKENS)
SHOWN = "There are 3 × 17 red apples, and ½ of them are ripe. So ⟦⁵¹⁄₂⟧."
PROBLEM = "How many are ripe if $n = 3 \\times 17$ and a bag costs $5?"


def math_app(**config):
    from tuiagent.backends.scripted import ScriptedBackend
    from tuiagent.core.run_spec import RunSpec
    from tuiagent.protocol import Token
    from tuiagent.ui import AppConfig, make_app

    turn = [Token(t, lp) for t, lp in TOKENS]
    return make_app(
        AppConfig(model="scripted", problem=PROBLEM, run_spec=RunSpec(guards=()), **config),
        backend_factory=lambda: ScriptedBackend([list(turn)], delay_s=0.001),
    )


def shown(app) -> str:
    return app.screen.query(TurnText).first().render().plain


def problem(app) -> str:
    return next(w for w in app.screen.query(NoteLine) if w.kind == "problem").render().plain


async def test_live_math_reads_rendered_and_f10_shows_it_raw(ui):
    app = math_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await ui.solve(pilot, app)
        assert shown(app) == SHOWN
        assert problem(app) == "problem How many are ripe if n = 3 × 17 and a bag costs $5?"
        answer = ui.text(app.screen.query_one(FinalAnswer))
        assert "⁵¹⁄₂" in answer and "\\frac" not in answer
        await pilot.press("f10")
        await ui.wait_for(pilot, lambda: shown(app) == SOURCE, 5, "the raw LaTeX")
        assert "\\frac{51}{2}" in ui.text(app.screen.query_one(FinalAnswer))
        assert problem(app) == f"problem {PROBLEM}"
        await pilot.press("f10")
        await ui.wait_for(pilot, lambda: shown(app) == SHOWN, 5, "the rendered math again")
        # the trajectory keeps what the model wrote, verbatim
        events = load(ui.run_file(app)).events
        assert next(e.text for e in events if isinstance(e, ev.TurnEnded)) == SOURCE
        assert "".join(e.text for e in events if isinstance(e, ev.TokenDelta)) == SOURCE


async def test_token_confidence_lines_up_with_rendered_math(ui):
    app = math_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("f8")
        await ui.solve(pilot, app)
        content = app.screen.query(TurnText).first().render()
        shaded = {content.plain[s.start : s.end]: s.style for s in content.spans if isinstance(s.style, str)}
        # the formula is shaded whole, as its least sure token; the unsure word after it, exactly
        assert shaded == {"3 × 17": BANDS[0][1], "apples": BANDS[1][1]}
        values = {
            content.plain[s.start : s.end]: s.style.meta["p"]
            for s in content.spans
            if not isinstance(s.style, str) and "p" in s.style.meta
        }
        assert values == {"3 × 17": 0.2, "apples": 0.5}
        marked = [
            content.plain[s.start : s.end]
            for s in content.spans
            if not isinstance(s.style, str) and s.style.meta.get("formula")
        ]
        assert marked == ["3 × 17", "½", "⟦⁵¹⁄₂⟧"]
        text = app.screen.query(TurnText).first()
        await pilot.hover(text, offset=(content.plain.index("×") + 1, 0))  # padding: 1 cell
        await ui.wait_for(
            pilot,
            lambda: text.tooltip == "least sure token of this formula: p = 0.2000",
            5,
            f"the formula's p on hover: {text.tooltip}",
        )
        await pilot.press("f10")  # raw: the token itself, as before
        await ui.wait_for(pilot, lambda: shown(app) == SOURCE, 5, "the raw LaTeX")
        content = app.screen.query(TurnText).first().render()
        shaded = {content.plain[s.start : s.end] for s in content.spans if isinstance(s.style, str)}
        assert shaded == {"17", "apples"}


async def test_replay_and_compare_render_and_toggle(ui, tmp_path):
    from tuiagent.ui import AppConfig, make_app

    live = math_app()
    async with live.run_test(size=(120, 30)) as pilot:
        await ui.solve(pilot, live)
        saved = ui.run_file(live)

    app = make_app(AppConfig(model="scripted", screen="replay", replay=saved))
    async with app.run_test(size=(120, 30)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        await pilot.press("end")
        await ui.wait_for(pilot, lambda: shown(app) == SHOWN, 5, "the rendered math in replay")
        await pilot.press("f10")
        await ui.wait_for(pilot, lambda: shown(app) == SOURCE, 5, "the raw LaTeX in replay")

    app = make_app(AppConfig(model="scripted", screen="compare", compare=(saved, saved)))
    async with app.run_test(size=(120, 30)) as pilot:

        def cells() -> str:
            return "\n".join(ui.text(w) for w in app.screen.query_one(CompareGrid).query("Static"))

        await ui.wait_for(pilot, lambda: "½ of them are ripe" in cells(), 10, "the rendered math in compare")
        assert "\\frac" not in cells()
        await pilot.press("f10")
        await ui.wait_for(pilot, lambda: "\\(\\frac{1}{2}\\)" in cells(), 5, "the raw LaTeX in compare")


async def test_the_app_can_start_with_raw_math(ui):
    app = math_app(raw_math=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await ui.solve(pilot, app)
        assert shown(app) == SOURCE


async def test_help_and_footer_name_the_raw_math_key(ui):
    from textual.widgets import Footer, Static

    from tuiagent.ui.screens.help import HelpScreen

    app = math_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.is_mounted, 10, "the screen")
        footer = app.screen.query_one(Footer)
        await ui.wait_for(pilot, lambda: any(k.key == "f10" for k in footer.query("FooterKey")), 5, "f10 in the footer")
        await pilot.press("f1")
        await ui.screen_up(pilot, app, HelpScreen, 5)
        rows = "\n".join(str(w.render()) for w in app.screen.query(Static))
        assert any(line.startswith("f10") and line.rstrip().endswith("Raw math") for line in rows.splitlines())
