"""f9 exports what the screen shows, beside its trajectory."""

from __future__ import annotations

from pathlib import Path


async def test_f9_exports_the_replayed_run_beside_it(ui, unsure_trajectory: Path):
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.screens.export import ExportScreen

    run = unsure_trajectory
    app = make_app(AppConfig(model="scripted", screen="replay", replay=run))
    async with app.run_test(size=(100, 30)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        await pilot.press("f9")
        await ui.wait_for(pilot, lambda: isinstance(app.screen, ExportScreen), 5, "the export choices")
        await pilot.press("2")  # HTML with token confidence
        await ui.wait_for(pilot, lambda: run.with_suffix(".html").exists(), 10, "the file")
    assert 'title="p = ' in run.with_suffix(".html").read_text(encoding="utf-8")
