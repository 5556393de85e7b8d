"""The runs browser (ctrl+o): columns that tell runs of one problem apart, filter, sort, open,
compare, export; search across saved runs and within a run from the command palette."""

from __future__ import annotations

import os
import shutil

from textual.widgets import DataTable, Input

from tuiagent import paths
from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.screens.open_run import OpenRunScreen
from tuiagent.ui.screens.replay import ReplayScreen


def saved_runs(ui) -> None:
    runs = paths.runs_dir()
    runs.mkdir(parents=True, exist_ok=True)
    for age, name in enumerate(("guarded", "plain", "rtts")):
        shutil.copy(ui.DATA / f"{name}.jsonl", runs / f"{name}.jsonl")
        os.utime(runs / f"{name}.jsonl", (1_700_000_000 - age * 60, 1_700_000_000 - age * 60))


def rows(screen) -> list[str]:
    return [info.path.stem for info in screen.shown]


async def test_columns_filter_sort_and_the_empty_path(ui):
    saved_runs(ui)
    app = make_app(AppConfig(model="scripted"))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("ctrl+o")
        await ui.screen_up(pilot, app, OpenRunScreen, 5)
        screen = app.screen
        table = screen.query_one(DataTable)
        assert [str(c.label).split()[0] for c in table.columns.values()] == [
            "date",
            "problem",
            "answer",
            "✓/✗",
            "guards",
            "model",
            "calls",
            "tokens",
            "time",
        ]
        assert rows(screen) == ["guarded", "plain", "rtts"]  # newest first
        first = [str(c) for c in table.get_row_at(0)]
        assert "scripted" in first and "all" in first and "3" in first and "70" in first  # every guard on: "all"
        await pilot.press("slash", *"none")  # a filter: the run without guards
        await ui.wait_for(pilot, lambda: rows(screen) == ["plain"], 5, "the filter")
        screen.query_one("#filter", Input).value = "right attc"
        await ui.wait_for(pilot, lambda: rows(screen) == ["guarded", "rtts"], 5, "the filter")
        screen.query_one("#filter", Input).value = ""
        await ui.wait_for(pilot, lambda: len(rows(screen)) == 3, 5, "no filter")
        await pilot.press("tab")
        for _ in range(6):  # problem, answer, ✓/✗, guards, model, calls: sort by calls
            await pilot.press("s")
        assert screen.sort_column == 6 and rows(screen) == ["plain", "guarded", "rtts"]
        await pilot.press("r")
        assert rows(screen) == ["rtts", "guarded", "plain"]
        screen.query_one("#filter", Input).focus()
        await pilot.press("enter")  # an empty filter box: back to the list, no "no file ." error
        assert app.errors == [] and isinstance(app.screen, OpenRunScreen)


async def test_open_compare_and_export_from_the_browser(ui):
    from tuiagent.ui.screens.export import ExportScreen

    saved_runs(ui)
    app = make_app(AppConfig(model="scripted"))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("ctrl+o")
        await ui.screen_up(pilot, app, OpenRunScreen, 5)
        await pilot.press("space", "space", "e")  # the two marked runs, as a comparison
        await ui.screen_up(pilot, app, ExportScreen, 5)
        await pilot.press("0")  # Markdown
        out = paths.runs_dir() / "guarded-compare2.md"
        await ui.wait_for(pilot, out.exists, 5, "the export")
        assert "| | 1. guarded | 2. plain |" in out.read_text(encoding="utf-8")
        await pilot.press("ctrl+o")
        await ui.screen_up(pilot, app, OpenRunScreen, 5)
        await pilot.press("down", "down", "enter")
        await ui.wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.path is not None, 5)
        assert app.screen.path.name == "rtts.jsonl"


async def test_search_within_a_run_and_across_saved_runs(ui):
    from tuiagent.ui.search import RunSearch, SavedRunsSearch

    saved_runs(ui)
    app = make_app(AppConfig(model="scripted", screen="replay", replay=ui.DATA / "guarded.jsonl"))
    async with app.run_test(size=(120, 30)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        screen = app.screen
        hits = [h async for h in RunSearch(screen).search("totl")]  # the misspelt name: code, output, text
        kinds = [h.match_display.plain.split(" · ")[2] for h in hits]
        assert "CodeBlock" in kinds and "ToolResult" in kinds
        hits[kinds.index("ToolResult")].command()
        await pilot.pause()
        assert screen.events[screen.position - 1].type == "ToolResult"
        across = SavedRunsSearch(screen)
        await across.startup()
        found = [h async for h in across.search("remainder 481")]
        assert len(found) == 1 and "3^2024" in found[0].match_display.plain
        found[0].command()
        await ui.wait_for(pilot, lambda: screen.path is not None and screen.path.name == "rtts.jsonl", 5)
        await pilot.press("ctrl+p")  # the palette itself lists them
        await pilot.press(*"481")  # the answer: in this run (rtts) and among the saved runs

        def prompts() -> list[str]:
            from textual.command import CommandList

            found = app.screen.query(CommandList)
            if not found:
                return []
            listing = found.first()
            return [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]

        await ui.wait_for(pilot, lambda: any("in this run" in p for p in prompts()), 10, "hits in this run")
        assert any("saved run" in p for p in prompts())


async def test_the_model_column_fits_the_longest_model_name(ui):
    """A model id such as qwen2.5-coder-1.5b (18 characters) reads whole (issue 39: it was cut to
    "qwen2.5-cod…")."""
    import json

    runs = paths.runs_dir()
    runs.mkdir(parents=True, exist_ok=True)
    lines = (ui.DATA / "plain.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record.get("type") == "RunStarted":
            record["model_id"] = "qwen2.5-coder-1.5b"
            lines[i] = json.dumps(record) + "\n"
    (runs / "long.jsonl").write_text("".join(lines), encoding="utf-8")
    app = make_app(AppConfig(model="scripted"))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("ctrl+o")
        await ui.screen_up(pilot, app, OpenRunScreen, 5)
        first = [str(c) for c in app.screen.query_one(DataTable).get_row_at(0)]
        assert "qwen2.5-coder-1.5b" in first
