"""Arming a fault in the app (ctrl+b): the next tool output of the running solve is corrupted, marked
"injected" where it is shown, and recorded as an Intervention by a person."""

from __future__ import annotations

import asyncio

from tuiagent.backends.scripted import ScriptedBackend
from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.ui.screens.fault_menu import FaultMenuScreen
from tuiagent.ui.widgets.final_answer import FinalAnswer
from tuiagent.ui.widgets.tool_output import ToolOutput

PROSE = "Let me think about the product step by step. "


class HeldBackend(ScriptedBackend):
    """Test double: its first turn stops after one token until ``go`` is set, so the run is still going
    when the test has armed a fault, however loaded the machine (a run at full speed once ended first)."""

    held: HeldBackend | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.go = asyncio.Event()
        HeldBackend.held = self

    async def generate(self, out, prompt, sampling, stop):
        held = self._next == 0  # the first turn: after its first piece
        async for piece in super().generate(out, prompt, sampling, stop):
            yield piece
            if held:
                await self.go.wait()
                held = False


async def test_ctrl_b_arms_a_fault_for_the_next_output(ui, tmp_path):
    turns = [
        {"text": PROSE + "\n```python\nprint(6 * 7)\n```\n```output\n", "logprob": -0.01},
        {"text": "So the answer is \\boxed{42}.", "logprob": -0.01},
    ]
    app = ui.scripted_app(turns, backend=HeldBackend, problem="What is 6 times 7?", guards=("attc",), tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await ui.wait_for(pilot, lambda: app.screen.is_mounted and app.screen.focused is not None, 30, "the screen")
        await pilot.press("ctrl+b")  # not running: nothing to arm, said so
        assert not isinstance(app.screen, FaultMenuScreen)
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: app.screen.running, 30, "the run to start")
        await pilot.press("ctrl+b")
        await ui.screen_up(pilot, app, FaultMenuScreen, 10)
        await pilot.press("0")  # the first row: wrong-number
        await ui.wait_for(pilot, lambda: not isinstance(app.screen, FaultMenuScreen), 10, "the menu to close")
        solve = app.screen
        assert solve.faults is not None and solve.faults.pending == "wrong-number"
        assert HeldBackend.held is not None
        HeldBackend.held.go.set()  # the run goes on to its code block
        await ui.wait_for(pilot, lambda: not solve.running, 60, "the run to end")
        await ui.wait_for(pilot, lambda: ui.runs_over(app), 30, "the run's worker to finish")
        await pilot.pause()
        out = solve.query_one(ToolOutput)
        assert out.has_class("-injected")
        shown = ui.text(out)
        assert "injected: wrong-number by person; the kernel printed: 42" in shown
        events = load(ui.run_file(app)).events
        inter = next(e for e in events if isinstance(e, ev.Intervention))
        result = next(e for e in events if isinstance(e, ev.ToolResult))
        assert (inter.by, inter.fault, inter.replaced) == ("person", "wrong-number", "42")
        assert result.shown == inter.replacement != "42" and result.shown in shown
        attc = next(e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "attc")
        assert events.index(attc) > events.index(result)  # the guard answered the corrupted output
        assert solve.query_one(FinalAnswer).finished.answer == "42"
