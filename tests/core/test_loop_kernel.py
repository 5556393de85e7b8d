"""The loop with a real Jupyter kernel: state across calls, errors, images, timeouts — driven by the scripted backend."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.protocol import RunSettings
from tuiagent.transcript import TranscriptPrinter


def turn(code: str, prose: str = "Let me compute.") -> list:
    return split_tokens(f"{prose}\n```python\n{code}\n```\n```output", -0.01)


async def run(kernel, *turns, settings: RunSettings | None = None) -> list[ev.Event]:
    backend = ScriptedBackend([*turns, split_tokens("Done: \\boxed{42}", -0.01)])
    return [e async for e in Agent(backend, kernel, settings=settings).stream("problem")]


async def test_state_errors_and_preimports(kernel):
    events = await run(
        kernel,
        turn("x = 6"),
        turn("print(x * 7, sympy.factorint(42), np.int64(3) + 1)"),
        turn("1 / 0"),
    )
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    assert results[1].shown == "42 {2: 1, 3: 1, 7: 1} 4"
    assert results[2].error and results[2].error_name == "ZeroDivisionError"
    assert "\x1b[" not in results[2].shown and "ZeroDivisionError" in results[2].shown
    assert events[-1].erroneous_calls == 1 and events[-1].tool_calls == 3


async def test_timeout_reported_to_model_and_kernel_survives(kernel):
    settings = RunSettings(exec_timeout_s=1.0)
    events = await run(kernel, turn("while True: pass"), turn("print('alive')"), settings=settings)
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    assert results[0].timed_out and results[0].error and "timed out" in results[0].shown.lower()
    assert results[1].shown == "alive"


async def test_dead_kernel_restarted_and_model_told(kernel):
    events = await run(kernel, turn("y = 1"), turn("import os; os._exit(1)"), turn("print('y' in dir())"))
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    assert results[1].died and results[1].restarted and "lost" in results[1].shown.lower()
    assert results[2].shown == "False"
    assert any(isinstance(e, ev.Notice) and "restarted" in e.message for e in events)


async def test_long_output_truncated_for_the_model(kernel):
    events = await run(kernel, turn("print('a' * 5000 + 'END')"), settings=RunSettings(output_chars=100))
    shown = next(e for e in events if isinstance(e, ev.ToolResult)).shown
    assert shown.startswith("a" * 50) and shown.endswith("END") and "truncated" in shown


async def test_images_saved_beside_the_trajectory(kernel, tmp_path):
    svg = "<svg xmlns='http://www.w3.org/2000/svg' width='4' height='4'><rect width='4' height='4'/></svg>"
    events = await run(kernel, turn(f"from IPython.display import SVG, display\ndisplay(SVG({svg!r}))"))
    result = next(e for e in events if isinstance(e, ev.ToolResult))
    paths = [o["path"] for o in result.outputs if o.get("path")]
    assert paths and Path(paths[0]).exists() and Path(paths[0]).parent == tmp_path / "images"
    assert "[image saved:" in result.shown


async def test_a_required_first_call_starts_the_first_turn_inside_a_code_block(kernel):
    """Appendix I.1 of the tool-use-tax paper (arXiv 2605.00136): the gate's training runs are "initialized
    with a required tool-use step". The model is given the opening fence; what it writes is run."""
    required = RunSettings(first_call="required")
    events = await run(kernel, split_tokens("print(6 * 7)\n```\n```output", -0.01), settings=required)
    (made,) = [e for e in events if isinstance(e, ev.Intervention)]
    assert (made.by, made.target, made.turn, made.token, made.replaced, made.replacement) == (
        "protocol",
        "text",
        1,
        0,
        "",
        "```python\n",
    )
    first = next(e for e in events if isinstance(e, ev.TurnEnded))
    assert first.text.startswith("```python\nprint(6 * 7)\n```")
    assert next(e for e in events if isinstance(e, ev.ToolResult)).shown == "42"
    assert events[-1].tool_calls == 1
    buffer = io.StringIO()
    printer = TranscriptPrinter(Console(file=buffer, width=200))
    for e in events:
        printer(e)
    assert "mode: tool, first call: required" in buffer.getvalue()
    # by default the model decides, and in chain-of-thought mode there is no tool to require
    for settings in (RunSettings(), RunSettings(mode="cot", first_call="required")):
        free = await run(kernel, split_tokens("It is 42.", -0.01), settings=settings)
        assert not [e for e in free if isinstance(e, ev.Intervention)]
        assert next(e for e in free if isinstance(e, ev.TurnEnded)).text == "It is 42."
