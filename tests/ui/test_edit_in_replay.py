"""Edit and continue from replay: e opens the item in view (a tool output, a code block, the text
from a token on) in an editor; ctrl+s asks the settings and continues from the edit as a fork, which
opens beside its parent in compare when it ends. Scripted backend, real kernel."""

from __future__ import annotations

import pytest

from tuiagent.core import events as ev
from tuiagent.core.fork import EditTarget, edit_target, text_edit
from tuiagent.core.trajectory import load
from tuiagent.ui.screens.solve import SolveScreen

COUNTER = [  # prints how often the cell ran in this kernel, then answers
    {
        "text": "Count.\n```python\ntry:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)\n```\n```output\n",
        "logprob": -0.05,
    },
    {"text": "So \\boxed{1}.", "logprob": -0.01},
]


def test_the_item_in_view_is_what_e_edits(ui):
    events = load(ui.DATA / "plain.jsonl").events
    first_turn = next(i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted))
    assert edit_target(events, first_turn) is None  # before the first turn: nothing to edit
    tokens = tuple(e.text for e in events if isinstance(e, ev.TokenDelta) and e.turn == 1)
    whole = EditTarget(1, "text", "".join(tokens), tokens)
    assert edit_target(events, first_turn + 1) == whole  # the turn's start: its text
    third = next(i for i, e in enumerate(events) if isinstance(e, ev.TokenDelta)) + 2
    assert edit_target(events, third + 1) == whole  # at a token: the same
    block = next(i for i, e in enumerate(events) if isinstance(e, ev.CodeBlock))
    code = edit_target(events, block + 1)
    assert code == EditTarget(1, "code", events[block].code)
    ended = next(i for i, e in enumerate(events) if isinstance(e, ev.TurnEnded))
    assert edit_target(events, ended + 1) == code  # the end of a turn with code: its code
    result = next(i for i, e in enumerate(events) if isinstance(e, ev.ToolResult))
    assert edit_target(events, result + 1) == EditTarget(1, "output", events[result].shown)


def test_an_edited_text_keeps_the_tokens_left_in_place():
    tokens = ("Count", ".", "\n", "So")
    assert text_edit(tokens, "Count.\nSo") == (4, "")
    assert text_edit(tokens, "Count. Then") == (2, " Then")  # edited after the second token
    assert text_edit(tokens, "Coun") == (0, "Coun")  # a token cut in half is not kept
    assert text_edit(tokens, "") == (0, "")
    assert text_edit(tokens, "Count.\nSo far") == (4, " far")


async def _parent_in_replay(ui, app, pilot):
    from tuiagent.ui.screens.replay import ReplayScreen

    await pilot.press("ctrl+r")
    solve = app.screen
    await ui.wait_for(pilot, lambda: solve.finished is not None and not solve.running, 60, "the parent run")
    parent = solve.run_path
    app.open_replay(parent)
    await ui.wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.events, 10, "replay")
    return parent, app.screen


async def _continue_as_recorded(ui, app, pilot, parent):
    from tuiagent.ui.screens.compare import CompareScreen
    from tuiagent.ui.screens.presets import PresetsScreen

    await pilot.press("ctrl+s")
    await ui.screen_up(pilot, app, PresetsScreen, 10)
    title = app.screen.title_text
    assert app.screen.presets[0].name == "as recorded"
    assert app.screen.presets[0].description == "the parent's settings: only the edit differs"
    app.screen.dismiss(app.screen.presets[0])
    await ui.wait_for(
        pilot,
        lambda: (
            isinstance(app.screen, CompareScreen)
            and len(app.screen.files) == 2
            and app.screen.files[0] == parent
            and len(app.screen.events) == 2
        ),
        60,
        "the fork beside its parent in compare",
    )
    fork = load(app.screen.files[1]).events
    return title, fork, app.screen


async def test_edit_an_output_in_replay_and_continue(ui, tmp_path):
    from textual.widgets import TextArea

    from tuiagent.ui.screens.edit_text import EditTextScreen
    from tuiagent.ui.widgets.compare_grid import CompareGrid

    app = ui.scripted_app(COUNTER, problem="count", gold="1", guards=("tim",), tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        parent, replay = await _parent_in_replay(ui, app, pilot)
        replay.go(next(i for i, e in enumerate(replay.events) if isinstance(e, ev.ToolResult)) + 1)
        await pilot.press("e")
        await ui.screen_up(pilot, app, EditTextScreen, 10)
        area = app.screen.query_one(TextArea)
        assert area.text == "1"  # what the kernel printed
        area.text = "41"
        title, fork, compare = await _continue_as_recorded(ui, app, pilot, parent)
        assert "output of call 1 of step 1 edited" in title
        edits = [e for e in fork if isinstance(e, ev.Intervention)]
        assert [(e.target, e.replaced, e.replacement, e.by, e.call) for e in edits] == [
            ("output", "1", "41", "person", 1)
        ]
        started = next(e for e in fork if isinstance(e, ev.RunStarted))
        assert started.parent["run_id"] == parent.stem and started.parent["edit"] == "output"
        assert fork[-1].__class__ is ev.RunFinished
        cells = [c for row in compare.query_one(CompareGrid).rows for c in row if c is not None]
        assert any(c.edited == "output of call 1 edited" for c in cells)
        assert compare.query_one(CompareGrid).divergence is not None
        assert app.errors == []


@pytest.mark.parametrize("cut", [0, 7], ids=["from the start", "after the first line"])
async def test_edit_the_text_in_replay_and_continue(ui, tmp_path, cut):
    """The turn's text in the editor: what is left in place of its start keeps those tokens as
    generated; the rest is read as the model's own, and the model goes on after it."""
    from textual.widgets import TextArea

    from tuiagent.ui.screens.edit_text import EditTextScreen

    app = ui.scripted_app(COUNTER, problem="count", gold="1", guards=("tim",), tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        parent, replay = await _parent_in_replay(ui, app, pilot)
        replay.go(next(i for i, e in enumerate(replay.events) if isinstance(e, ev.TurnStarted)) + 1)
        await pilot.press("e")
        await ui.screen_up(pilot, app, EditTextScreen, 10)
        area = app.screen.query_one(TextArea)
        assert area.text == COUNTER[0]["text"].removesuffix("```output\n")  # the turn as generated
        area.text = area.text[:cut] + "Let me count. "
        title, fork, _ = await _continue_as_recorded(ui, app, pilot, parent)
        tokens = [e.text for e in load(parent).events if isinstance(e, ev.TokenDelta) and e.turn == 1]
        assert tokens[0] == "Count."
        # the scripted backend's tokens: "Count.", "\n```python", ...: "Count.\n" keeps the first one
        kept, replacement = (0, "Let me count. ") if cut == 0 else (1, "\nLet me count. ")
        edits = [e for e in fork if isinstance(e, ev.Intervention)]
        assert [(e.target, e.token, e.replacement) for e in edits] == [("text", kept, replacement)]
        first = next(e for e in fork if isinstance(e, ev.TurnEnded))
        assert first.text.startswith(area.text) and app.errors == []
        assert f"from token {edits[0].token}" in title


async def test_an_unchanged_edit_is_refused_and_escape_cancels(ui, tmp_path):
    from textual.widgets import TextArea

    from tuiagent.ui.screens.edit_text import EditTextScreen
    from tuiagent.ui.screens.replay import ReplayScreen

    app = ui.scripted_app(COUNTER, problem="count", gold="1", guards=("tim",), tmp_path=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await ui.screen_up(pilot, app, SolveScreen)
        _, replay = await _parent_in_replay(ui, app, pilot)
        replay.go(next(i for i, e in enumerate(replay.events) if isinstance(e, ev.CodeBlock)) + 1)
        await pilot.press("e")
        await ui.screen_up(pilot, app, EditTextScreen, 10)
        assert "n += 1" in app.screen.query_one(TextArea).text
        await pilot.press("ctrl+s")  # unchanged
        await ui.screen_up(pilot, app, ReplayScreen, 10)
        assert any("nothing changed" in n.message for n in app._notifications)
        await pilot.press("e")
        await ui.screen_up(pilot, app, EditTextScreen, 10)
        await pilot.press("escape")
        await ui.screen_up(pilot, app, ReplayScreen, 10)
