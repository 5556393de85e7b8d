"""The loop, driven by the scripted backend; kernels are canned here and real in test_loop_kernel.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.core.trajectory import Loaded, Recorder, load
from tuiagent.protocol import RunSettings, Sampling, Token

CODE_TURN = "Let me compute.\n```python\nprint(6 * 7)\n```\n```output\n42\n```"
ANSWER_TURN = "So the answer is \\boxed{42}."


async def run(agent: Agent, problem: str = "What is 6 times 7?", **kw) -> list[ev.Event]:
    return [e async for e in agent.stream(problem, **kw)]


def backend_for(write_script, *turns) -> ScriptedBackend:
    return ScriptedBackend(load_script(write_script(*turns)))


async def test_code_then_answer(write_script, canned_kernel, tmp_path):
    kernel = canned_kernel([CellResult(outputs=(Output("stdout", "42\n"),))])
    with Recorder(tmp_path / "run.jsonl") as rec:
        events = await run(Agent(backend_for(write_script, CODE_TURN, ANSWER_TURN), kernel, recorder=rec), gold="42")
    assert kernel.calls == ["print(6 * 7)"]
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished)
    assert (finished.reason, finished.answer, finished.correct, finished.tool_calls) == ("answer", "42", True, 1)
    tool = next(e for e in events if isinstance(e, ev.ToolResult))
    assert tool.shown == "42" and not tool.error
    # the model never saw its own hallucinated output: generation stopped at the output fence
    turn1 = next(e for e in events if isinstance(e, ev.TurnEnded))
    assert turn1.stop == "stop" and "```output" not in turn1.text
    assert load(tmp_path / "run.jsonl") == Loaded(events, [])


async def test_wrong_answer_is_checked(write_script, canned_kernel):
    events = await run(Agent(backend_for(write_script, "It is \\boxed{41}."), canned_kernel()), gold="42")
    assert (events[-1].answer, events[-1].correct) == ("41", False)


async def test_no_answer_and_unclosed_fence(write_script, canned_kernel):
    kernel = canned_kernel()
    events = await run(Agent(backend_for(write_script, "Let me try\n```python\nx = 1\n"), kernel))
    assert events[-1].reason == "no_answer" and events[-1].answer is None
    assert kernel.calls == []  # an unclosed fence is not a tool call


async def test_last_boxed_wins_and_nested_braces(write_script, canned_kernel):
    text = "First \\boxed{1}, then \\boxed{\\frac{1}{2}}."
    events = await run(Agent(backend_for(write_script, text), canned_kernel()), gold="0.5")
    assert events[-1].answer == "\\frac{1}{2}" and events[-1].correct is True


async def test_tool_budget_notes_then_stops(write_script, canned_kernel):
    kernel = canned_kernel()
    turns = [CODE_TURN] * 4
    events = await run(Agent(backend_for(write_script, *turns), kernel, settings=RunSettings(max_tool_calls=2)))
    assert len(kernel.calls) == 2
    skipped = [e for e in events if isinstance(e, ev.ToolResult) and not e.executed]
    assert len(skipped) == 1 and "budget" in skipped[0].shown
    assert events[-1].reason == "tool_budget" and events[-1].tool_calls == 2
    # no answer was given: the budget note's "\\boxed{}" (or the prompt's example) is not one
    assert events[-1].answer is None and not any(isinstance(e, ev.AnswerAttempt) for e in events)


async def test_token_budget(write_script, canned_kernel):
    long_turn = "word " * 50
    events = await run(
        Agent(backend_for(write_script, long_turn), canned_kernel(), settings=RunSettings(max_tokens=10))
    )
    assert events[-1].reason == "token_budget" and events[-1].generated_tokens == 10


async def test_a_turn_cut_at_its_own_length_with_budget_left_says_so(write_script, canned_kernel):
    """A degenerate turn stopped by the model's max_tokens per turn is not the run's token budget."""
    long_turn = "word " * 50
    events = await run(
        Agent(
            backend_for(write_script, long_turn),
            canned_kernel(),
            sampling=Sampling(max_tokens=10),
            settings=RunSettings(max_tokens=100),
        )
    )
    assert events[-1].reason == "turn_length" and events[-1].generated_tokens == 10


async def test_error_output_truncated_head_and_tail(write_script, canned_kernel):
    trace = "Traceback start\n" + "x" * 1000 + "\nZeroDivisionError: division by zero"
    kernel = canned_kernel([CellResult(outputs=(Output("error", trace),), error=True, error_name="ZeroDivisionError")])
    events = await run(
        Agent(backend_for(write_script, CODE_TURN, ANSWER_TURN), kernel, settings=RunSettings(output_chars=100))
    )
    tool = next(e for e in events if isinstance(e, ev.ToolResult))
    assert tool.shown.startswith("Traceback start") and tool.shown.endswith("division by zero")
    assert "characters truncated" in tool.shown
    assert events[-1].erroneous_calls == 1


async def test_cot_mode_runs_no_code(write_script):
    backend = backend_for(write_script, CODE_TURN + "\n" + ANSWER_TURN)
    events = await run(Agent(backend, None, settings=RunSettings(mode="cot")))
    assert not any(isinstance(e, ev.CodeBlock) for e in events)
    assert events[-1].answer == "42"


async def test_cancel_records_finish(write_script, canned_kernel, tmp_path):
    backend = ScriptedBackend(load_script(write_script("word " * 500)), delay_s=0.01)
    path = tmp_path / "cancelled.jsonl"
    seen = []

    async def consume():
        with Recorder(path) as rec:
            async for e in Agent(backend, canned_kernel(), recorder=rec).stream("p"):
                seen.append(e)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    saved = load(path).events
    assert isinstance(saved[-1], ev.RunFinished) and saved[-1].reason == "cancelled"
    assert sum(isinstance(e, ev.TokenDelta) for e in saved) >= 3


async def test_backend_failure_ends_readably(canned_kernel):
    class Broken(ScriptedBackend):
        async def generate(self, out, prompt, sampling, stop):
            yield Token("Let me", -0.1)
            yield Token(" think", -0.1)
            raise RuntimeError("model exploded")

    events = await run(Agent(Broken([]), canned_kernel()))
    assert any(isinstance(e, ev.Notice) and "model exploded" in e.message for e in events)
    ended = next(e for e in events if isinstance(e, ev.TurnEnded))
    assert (ended.stop, ended.text, ended.tokens) == ("error", "Let me think", 2)  # the partial turn is kept
    assert events[-1].reason == "error" and events[-1].generated_tokens == 2


async def test_folded_context_is_what_the_model_saw(write_script, canned_kernel):
    backend = backend_for(write_script, CODE_TURN, CODE_TURN, ANSWER_TURN)
    events = await run(Agent(backend, canned_kernel()))
    from tuiagent.core.context import working_context
    from tuiagent.core.steps import steps

    starts = [i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted)]
    assert [working_context(events[:i]).text for i in starts] == backend.prompts
    folded = steps(events)
    assert [s.turn for s in folded] == [1, 2, 3]
    assert folded[0].code.code == "print(6 * 7)" and folded[0].result.shown == "ok"
    assert folded[2].answer.answer == "42"


async def test_asking_before_code_runs_it_only_when_approved(write_script, canned_kernel):
    asked: list[tuple[str, bool]] = []

    async def approve(code: str) -> bool:
        seen_block = any(isinstance(e, ev.CodeBlock) and e.code == code for e in events_so_far)
        asked.append((code, seen_block))
        return len(asked) == 1  # yes to the first block, no to the second

    events_so_far: list[ev.Event] = []
    kernel = canned_kernel([CellResult(outputs=(Output("stdout", "42\n"),))])
    agent = Agent(backend_for(write_script, CODE_TURN, CODE_TURN, ANSWER_TURN), kernel, approve=approve)
    async for event in agent.stream("What is 6 times 7?"):
        events_so_far.append(event)
    assert asked == [("print(6 * 7)", True), ("print(6 * 7)", True)]  # the block is shown before the question
    assert kernel.calls == ["print(6 * 7)"]
    results = [e for e in events_so_far if isinstance(e, ev.ToolResult)]
    assert [r.executed for r in results] == [True, False]
    assert "chose not to run" in results[1].shown
    assert any(isinstance(e, ev.Notice) and "declined" in e.message for e in events_so_far)
    assert events_so_far[-1].answer == "42"


def test_a_script_turn_may_hold_line_separators(tmp_path):
    """One turn a "\\n"-ended line: U+2028 or U+0085 inside a turn's text (JSON written without ASCII
    escapes) stays in that turn."""
    text = "First\u2028second\u0085third, so \\boxed{1}."
    path = tmp_path / "script.jsonl"
    path.write_text(json.dumps({"text": text, "logprob": -0.1}, ensure_ascii=False) + "\n", encoding="utf-8")
    turns = load_script(path)
    assert len(turns) == 1 and "".join(t.text for t in turns[0]) == text
