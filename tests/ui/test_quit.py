"""Quitting the app mid-run (ctrl+q) stops the run first: no kernel process outlives the app and the
trajectory ends with the run's "cancelled" finish."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.ui.widgets.code_block import CodeBlockView
from tuiagent.ui.widgets.status_line import StatusLine

LONG_TURN = [{"text": "word " * 400, "logprob": -0.1}]
SLEEPING_CELL = [{"text": "Wait.\n```python\nimport time\ntime.sleep(60)\n```\n```output\n", "logprob": -0.01}]


def generating(app) -> bool:
    return app.screen.query_one(StatusLine).tokens > 10


def in_cell(app) -> bool:
    return any(c.status == "running" for c in app.screen.query(CodeBlockView))


@pytest.mark.parametrize(
    "turns, busy, how",
    [
        (LONG_TURN, generating, "ctrl+q"),
        (SLEEPING_CELL, in_cell, "ctrl+q"),
        (SLEEPING_CELL, in_cell, signal.SIGTERM),
        (LONG_TURN, generating, signal.SIGHUP),
    ],
    ids=["generating", "in a 60 s cell", "sigterm in a 60 s cell", "terminal closed generating"],
)
async def test_quit_mid_run_leaves_no_kernel_and_records_the_end(ui, tmp_path, turns, busy, how):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    app = ui.scripted_app(turns, delay_s=0.02, problem="x", tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: busy(app), 30, "the run to be under way")

        def started() -> list[psutil.Process]:
            return [p for p in psutil.Process().children(recursive=True) if p.pid not in before]

        await ui.wait_for(pilot, lambda: bool(started()), 10, "the run's kernel process")
        kernels = started()
        assert kernels, "the run's kernel should be running"
        if isinstance(how, str):
            await pilot.press(how)
        else:  # the app handles these itself (without its handler this would end the test process)
            assert signal.getsignal(how) is not signal.SIG_DFL
            os.kill(os.getpid(), how)
            await ui.wait_for(pilot, lambda: not app.is_running, 10, "the app to quit")
    # the kernels are this process's children: nothing but the app's shutdown can end them
    assert psutil.wait_procs(kernels, timeout=1.0)[1] == []
    loaded = load(ui.run_file(app))
    events = loaded.events
    assert loaded.warnings == []
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "cancelled"
    assert not any(isinstance(e, ev.ToolResult) for e in events)
