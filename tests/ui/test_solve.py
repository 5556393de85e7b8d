"""The solve screen with the scripted backend and the real Jupyter kernel: streaming, every guard's
numbers on screen, stop, copy, long outputs, errors as notices."""

from __future__ import annotations

import time

from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.ui.widgets.code_block import CodeBlockView
from tuiagent.ui.widgets.final_answer import FinalAnswer
from tuiagent.ui.widgets.guard_card import GuardCard
from tuiagent.ui.widgets.status_line import StatusLine
from tuiagent.ui.widgets.step_header import StepHeader
from tuiagent.ui.widgets.tool_output import ToolOutput
from tuiagent.ui.widgets.trajectory import TrajectoryView
from tuiagent.ui.widgets.turn_text import TurnText


async def test_solve_shows_every_guard(ui, guarded_script):
    app = ui.scripted_app(guarded_script, problem=ui.PROBLEM, gold="338350")
    async with app.run_test(size=(120, 40)) as pilot:
        await ui.solve(pilot, app)
        screen = app.screen
        final = screen.query_one(FinalAnswer)
        assert "338350" in ui.text(final) and "right" in ui.text(final)
        codes = list(screen.query(CodeBlockView))
        assert [c.call for c in codes] == [1, 2, 3]
        first = ui.text(codes[0])
        assert "NameError" in first and "0.951" in first and "τ 0.970" in first and "rethink" in first
        assert "ms" in first  # the tool call's duration
        assert "trust" in ui.text(codes[1])
        # 100 * 101 * 201 // 6 is a long multiplication: the arithmetic heuristic calls it needed
        assert "· necessary P(unnecessary) 0.00 (arithmetic)" in ui.text(codes[2])
        outputs = {o.call: o for o in screen.query(ToolOutput)}
        assert "338350" in outputs[2].text  # the real kernel ran the code
        assert outputs[1].has_class("-error") and "NameError" in ui.text(outputs[1])
        gates = [ui.text(g) for g in screen.query(GuardCard).filter(".-gstep")]
        assert len(gates) == 2 and "continue" in gates[0] and "0.269" in gates[0] and "τ 0.05" in gates[0]
        # the check after the continue used another formula and agrees: G-STEP commits on that
        assert "commit" in gates[1] and "an independent check (call 3) agrees with the earlier answer" in gates[1]
        tim = ui.text(screen.query(GuardCard).filter(".-tim").only_one())
        assert "flagged" in tim and "Let's verify this numerically" in tim
        headers = {h.turn: h for h in screen.query(StepHeader)}
        assert headers[1].mark is not None and headers[1].mark.label == "STP"
        assert "STP" in ui.text(headers[1]) and headers[1].collapsed
        status = screen.query_one(StatusLine)
        assert status.tool_calls == 3 and status.errors == 1 and status.state == "answer"
        assert "3 calls" in ui.text(status) and "ctx 284 tok" in ui.text(status)
        events = load(ui.run_file(app)).events
        assert isinstance(events[-1], ev.RunFinished) and events[-1].correct is True
        assert app.errors == []


async def test_tokens_stream_before_the_turn_ends(ui, tmp_path):
    long = "Let me think about it step by step. " * 30 + "\\boxed{1}"
    app = ui.scripted_app([{"text": long, "logprob": -0.1}], delay_s=0.01, problem="1?", guards=(), tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await pilot.press("ctrl+r")

        def partial() -> bool:
            texts = app.screen.query(TurnText)
            return bool(texts) and 0 < len(texts.first().text) < len(long) - 20

        await ui.wait_for(pilot, partial, 20, "partial text on screen")
        assert app.screen.running
        await ui.wait_for(pilot, lambda: not app.screen.running, 60)
        assert app.screen.query_one(FinalAnswer).finished.answer == "1"


async def test_stop_interrupts_the_kernel_and_keeps_the_trajectory(ui, tmp_path):
    turns = [
        {
            "text": "Wait a while.\n```python\nimport time\nprint('start', flush=True)\ntime.sleep(30)\n"
            "print('late')\n```\n```output\n",
            "logprob": -0.01,
        }
    ]
    app = ui.scripted_app(turns, problem="sleep", tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await pilot.press("ctrl+r")
        await ui.wait_for(
            pilot, lambda: any(c.status == "running" for c in app.screen.query(CodeBlockView)), 20, "the cell to run"
        )
        await pilot.pause(0.5)
        t0 = time.monotonic()
        await pilot.press("ctrl+s")
        await ui.wait_for(pilot, lambda: not app.screen.running, 10, "the run to stop")
        assert time.monotonic() - t0 < 4.0  # the 30 s cell (5 s timeout) was interrupted, not waited for
        await ui.wait_for(pilot, lambda: ui.runs_over(app), 30, "the run's worker to finish")
        await pilot.pause()
        assert app.screen.query_one(StatusLine).state == "cancelled"
        assert "stopped" in ui.text(app.screen.query_one(FinalAnswer))
        events = load(ui.run_file(app)).events
        assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "cancelled"
        assert any(isinstance(e, ev.CodeBlock) for e in events)  # the partial trajectory is kept


async def test_stop_during_generation(ui, tmp_path):
    app = ui.scripted_app([{"text": "word " * 400, "logprob": -0.1}], delay_s=0.02, problem="x", tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: app.screen.query_one(StatusLine).tokens > 5, 20)
        await pilot.click("#stop")
        await ui.wait_for(pilot, lambda: not app.screen.running, 5)
        events = load(ui.run_file(app)).events
        ended = [e for e in events if isinstance(e, ev.TurnEnded)]
        assert ended and ended[-1].stop == "cancelled" and 0 < ended[-1].tokens < 400
        assert events[-1].reason == "cancelled"


async def test_copy_answer_and_code(ui, guarded_script):
    app = ui.scripted_app(guarded_script, problem=ui.PROBLEM)
    async with app.run_test(size=(120, 40)) as pilot:
        await ui.solve(pilot, app)
        app.screen.query_one(TrajectoryView).focus()
        await pilot.press("y")
        assert app.clipboard == "338350"
        block = app.screen.query(CodeBlockView).last()
        block.focus()
        await pilot.press("c")
        assert app.clipboard == block.code and "n*(n+1)" in app.clipboard


async def test_long_output_is_truncated_and_expands(ui, tmp_path):
    turns = [
        {
            "text": "Print a lot.\n```python\nfor i in range(60):\n    print('line', i)\n```\n```output\n",
            "logprob": -0.01,
        },
        {"text": "\\boxed{60}", "logprob": -0.01},
    ]
    app = ui.scripted_app(turns, problem="lines", guards=(), tmp_path=tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await ui.solve(pilot, app)
        out = app.screen.query_one(ToolOutput)
        assert out.truncated and not out.expanded
        shown = ui.text(out)
        assert "line 0" in shown and "line 59" in shown and "line 30" not in shown and "more lines" in shown
        out.focus()
        await pilot.press("e")
        assert out.expanded and "line 30" in ui.text(out)
        trajectory = app.screen.query_one(TrajectoryView)
        trajectory.scroll_to_widget(out, animate=False, top=True)
        await ui.wait_for(
            pilot,
            lambda: trajectory.scrollable_content_region.contains(out.region.x + 4, out.region.y + 1),
            10,
            "the output scrolled into view",
        )
        await pilot.click(out, offset=(4, 1))
        assert not out.expanded


async def test_kernel_death_is_a_readable_notice(ui, tmp_path):
    turns = [
        {"text": "Crash.\n```python\nimport os\nos._exit(1)\n```\n```output\n", "logprob": -0.01},
        {"text": "\\boxed{0}", "logprob": -0.01},
    ]
    app = ui.scripted_app(turns, problem="crash", guards=(), tmp_path=tmp_path)
    async with app.run_test() as pilot:
        await ui.solve(pilot, app)
        out = app.screen.query_one(ToolOutput)
        assert "kernel died" in ui.text(out)
        notices = [n.message for n in app._notifications]
        assert any("restarted" in m for m in notices)
        assert app.screen.query_one(FinalAnswer).finished.answer == "0"  # the run went on


async def test_bad_config_is_a_notice_not_a_crash(ui, tmp_path):
    bad = tmp_path / "models.toml"
    bad.write_text("default = [")
    from tuiagent.ui import AppConfig, make_app

    app = make_app(AppConfig(models_file=bad, problem="1+1"))
    async with app.run_test() as pilot:
        await ui.wait_for(pilot, lambda: bool(app.errors), 10, "the bad config to be reported")
        assert app.errors and "models.toml" in app.errors[0]
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: len(app.errors) >= 2, 10, "the refusal")
        assert len(app.errors) == 2 and "no model" in app.errors[1]
        assert app.is_running


async def test_model_that_fails_to_load_is_a_notice(ui, tmp_path):
    toml = tmp_path / "models.toml"
    toml.write_text(
        'default = "gone"\n[models.gone]\nbackend = "llama_cpp"\n[models.gone.source]\n'
        f'kind = "path"\npath = "{tmp_path / "missing.gguf"}"\n'
    )
    from tuiagent.ui import AppConfig, make_app

    app = make_app(AppConfig(models_file=toml, problem="1+1"))
    async with app.run_test() as pilot:
        await ui.wait_for(pilot, lambda: app.session.state == "failed", 20, "the load to fail")
        assert any("could not be loaded" in e and "missing.gguf" in e for e in app.errors)
        assert app.model_state[1] == "failed"
        reported = len(app.errors)
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: len(app.errors) > reported, 10, "the refusal")
        assert app.is_running and not app.screen.running


async def test_ask_before_code_runs_only_what_the_user_approves(ui, tmp_path):
    from tuiagent.ui.screens.confirm_code import ConfirmCodeScreen

    turns = [
        {"text": "One.\n```python\nprint('first')\n```\n```output\n", "logprob": -0.01},
        {"text": "Two.\n```python\nprint('second')\n```\n```output\n", "logprob": -0.01},
        {"text": "\\boxed{2}", "logprob": -0.01},
    ]
    app = ui.scripted_app(turns, problem="two blocks", guards=(), tmp_path=tmp_path, out=tmp_path / "runs")
    async with app.run_test() as pilot:
        solve_screen = app.screen
        await pilot.press("ctrl+k")  # ask before running code: on
        await pilot.press("ctrl+r")
        for key in ("n", "y"):
            await ui.screen_up(pilot, app, ConfirmCodeScreen, 30)
            assert ("first" if key == "n" else "second") in app.screen.code
            await pilot.press(key)
        await ui.wait_for(pilot, lambda: not solve_screen.running, 30, "the run to end")
        outputs = {o.call: ui.text(o) for o in solve_screen.query(ToolOutput)}
        assert "chose not to run" in outputs[1] and "second" in outputs[2]
    run = next((tmp_path / "runs").glob("*.jsonl"))
    results = [e for e in load(run).events if isinstance(e, ev.ToolResult)]
    assert [r.executed for r in results] == [False, True]


async def test_the_status_line_shows_the_sandbox_level_in_force(ui, tmp_path):
    from kernels.sandbox import resolve
    from tuiagent.ui.widgets.status_line import StatusLine

    app = ui.scripted_app([{"text": "So \\boxed{1}."}], problem="x", tmp_path=tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        status = app.screen.query_one(StatusLine)
        await ui.wait_for(pilot, lambda: status.sandbox != "", 30, "the sandbox level")
        assert status.sandbox == resolve("auto")  # probed in a thread: auto may start a process
        assert f"sandbox {status.sandbox}" in str(status.render())
