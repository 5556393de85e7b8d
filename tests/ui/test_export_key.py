"""f9 exports what the screen shows, beside its trajectory."""

from __future__ import annotations

from pathlib import Path

import pytest


async def test_f9_exports_the_replayed_run_beside_it(ui, unsure_trajectory: Path):
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.screens.export import ExportScreen

    run = unsure_trajectory
    app = make_app(AppConfig(model="scripted", screen="replay", replay=run))
    async with app.run_test(size=(100, 30)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        await pilot.press("f9")
        await ui.screen_up(pilot, app, ExportScreen, 5)
        await pilot.press("2")  # HTML with token confidence
        await ui.wait_for(pilot, lambda: run.with_suffix(".html").exists(), 10, "the file")
    assert 'title="p = ' in run.with_suffix(".html").read_text(encoding="utf-8")


@pytest.mark.parametrize("raw, shown", [(False, "⟦338350⟧"), (True, "\\boxed{338350}")], ids=["rendered", "raw"])
async def test_f9_follows_f10_raw_math(ui, tmp_path: Path, raw: bool, shown: str):
    import shutil

    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.screens.export import ExportScreen

    run = tmp_path / "guarded.jsonl"
    shutil.copy(ui.DATA / "guarded.jsonl", run)  # its last turn ends "the answer is \boxed{338350}."
    app = make_app(AppConfig(model="scripted", screen="replay", replay=run, raw_math=raw))
    async with app.run_test(size=(100, 30)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        await pilot.press("f9")
        await ui.screen_up(pilot, app, ExportScreen, 5)
        await pilot.press("0")  # Markdown (rows count from 0)
        await ui.wait_for(pilot, lambda: run.with_suffix(".md").exists(), 10, "the file")
    assert f"so the answer is {shown}." in run.with_suffix(".md").read_text(encoding="utf-8")


async def test_f9_writes_an_inspect_log_beside_the_run(ui, tmp_path: Path):
    import shutil

    from inspect_ai.log import read_eval_log

    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.screens.export import ExportScreen

    run = tmp_path / "guarded.jsonl"
    shutil.copy(ui.DATA / "guarded.jsonl", run)
    app = make_app(AppConfig(model="scripted", screen="replay", replay=run))
    async with app.run_test(size=(100, 30)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        await pilot.press("f9")
        await ui.screen_up(pilot, app, ExportScreen, 5)
        await pilot.press("3")  # inspect log
        await ui.wait_for(
            pilot,
            lambda: list(tmp_path.glob("*.eval")) and not any(w.name == "export inspect" for w in app.workers),
            60,
            "the log written",
        )
    (written,) = tmp_path.glob("*.eval")
    log = read_eval_log(str(written))
    assert log.samples is not None and len(log.samples) == 1 and log.samples[0].metadata["trajectory"] == str(run)
