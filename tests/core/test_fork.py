"""Forking a recorded run (tuiagent.core.fork): the prefix taken over, the kernel's state rebuilt and
checked, budgets and guards carried on — driven by the scripted backend and a real Jupyter kernel.
The model-state half (exact replay on real llama.cpp) is in tests/backends/test_llama_cpp.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.fork import ForkError, fork_point, guards_at
from tuiagent.core.loop import Agent
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import Recorder, load
from tuiagent.protocol import RunSettings
from tuiagent.runner import fork_run


def code_turn(code: str) -> list:
    return split_tokens(f"Let me compute.\n```python\n{code}\n```\n```output", -0.01)


def answer(text: str) -> list:
    return split_tokens(f"So the answer is \\boxed{{{text}}}.", -0.02)


async def record(path: Path, kernel, turns, *, settings: RunSettings | None = None, fork=None, guards=None) -> list:
    with Recorder(path) as recorder:
        agent = Agent(ScriptedBackend(turns), kernel, settings=settings, recorder=recorder, guards=guards)
        problem = fork.started.problem if fork is not None else "What is 6 times 7?"
        return [e async for e in agent.stream(problem, gold="42", fork=fork)]


@pytest.fixture
async def parent(tmp_path: Path, kernel) -> Path:
    path = tmp_path / "parent.jsonl"
    await record(path, kernel, [code_turn("x = 6\nprint('set')"), code_turn("print(x * 7)"), answer("42")])
    await kernel.restart()
    return path


async def test_a_fork_takes_over_the_prefix_and_rebuilds_the_kernel(parent, tmp_path, kernel):
    events = load(parent).events
    point = fork_point(events, 1, parent)
    forked = await record(tmp_path / "fork.jsonl", kernel, [code_turn("print(x + 1)"), answer("7")], fork=point)

    started = forked[0]
    assert isinstance(started, ev.RunStarted) and started.prompt == events[0].prompt
    assert started.parent == {"run_id": events[0].run_id, "trajectory": str(parent), "step": 1}
    cut = next(i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted) and e.turn == 2)
    assert forked[1:cut] == events[1:cut]  # the parent's first step, as it was recorded
    notices = [e.message for e in forked if isinstance(e, ev.Notice)]
    assert any("forked from run" in m and "after step 1" in m for m in notices)
    assert any("kernel state rebuilt: 1 cell" in m and "as recorded" in m for m in notices)
    assert any("cannot replay" in m for m in notices)  # the scripted backend has no model state
    results = [e for e in forked if isinstance(e, ev.ToolResult)]
    assert results[-1].shown == "7"  # x from the parent's cell, run again in this kernel
    end = forked[-1]
    assert end.answer == "7" and end.tool_calls == 2 and end.correct is False
    # The fork's own trajectory reads back as a whole run: prefix, then the fork's turns.
    reread = load(tmp_path / "fork.jsonl").events
    assert reread == forked
    assert "print(x + 1)" in working_context(reread).text


async def test_an_output_that_differs_from_the_record_is_reported(parent, tmp_path, kernel):
    lines = parent.read_text().splitlines()
    tampered = [
        json.dumps({**d, "shown": "41"}) if d.get("type") == "ToolResult" and d.get("call") == 2 else line
        for line, d in ((line, json.loads(line)) for line in lines)
    ]
    parent.write_text("\n".join(tampered) + "\n")
    point = fork_point(load(parent).events, 2, parent)
    forked = await record(tmp_path / "fork.jsonl", kernel, [answer("42")], fork=point)
    warning = next(e for e in forked if isinstance(e, ev.Notice) and "kernel state" in e.message)
    assert warning.level == "warning"
    assert "1 output differs" in warning.message and "cell 2 gave '42', recorded '41'" in warning.message


async def test_budgets_count_the_prefix(parent, tmp_path, kernel):
    point = fork_point(load(parent).events, 2, parent)
    forked = await record(
        tmp_path / "fork.jsonl",
        kernel,
        [code_turn("print(1)"), answer("42")],
        fork=point,
        settings=RunSettings(max_tool_calls=2),
    )
    assert any(isinstance(e, ev.Notice) and "tool budget of 2 calls reached" in e.message for e in forked)
    assert forked[-1].tool_calls == 2


def test_steps_that_cannot_be_forked_are_clear_errors(tmp_path):
    events = [
        ev.RunStarted(
            run_id="r", problem="p", model_id="m", backend="b", mode="tool", prompt="x", sampling={}, settings={}
        ),
        ev.TurnStarted(turn=1, context_tokens=1),
    ]
    assert fork_point(events, 0).prefix == ()
    with pytest.raises(ForkError, match="step 1 is not a step this run can be forked at: it has 1 turn, so step 0"):
        fork_point(events, 1)
    with pytest.raises(ForkError, match="has no start"):
        fork_point(events[1:], 0)


def started(settings: dict, sampling: dict | None = None, **fields) -> ev.RunStarted:
    """A recorded run's start with these settings (model m, tool mode)."""
    return ev.RunStarted(
        run_id="r",
        problem="p",
        model_id="m",
        backend="b",
        mode="tool",
        prompt="x",
        sampling=sampling or {},
        settings=settings,
        **fields,
    )


def test_the_fork_keeps_the_parents_guards_unless_told_otherwise():
    events = [
        started({"max_tool_calls": 9}, sampling={"temperature": 0.0}, gold="3"),
        ev.GuardToggled(guard="tim", enabled=True, settings={"window": 3}),
        ev.GuardToggled(guard="attc", enabled=True, settings={"threshold": 0.9}),
        ev.TurnStarted(turn=1, context_tokens=1),
        ev.GuardToggled(guard="attc", enabled=False, settings={"threshold": 0.9}),
        ev.TurnStarted(turn=2, context_tokens=1),
    ]
    point = fork_point(events, 1)
    assert guards_at(point) == (("tim",), {"tim": {"window": 3}})
    inherited, given = fork_run(point)
    assert (inherited.guards, inherited.guard_settings, given.model, given.gold) == (
        ("tim",),
        {"tim": {"window": 3}},
        "m",
        "3",
    )
    assert inherited.settings().max_tool_calls == 9 and inherited.sampling == {"temperature": 0.0}
    replaced, _ = fork_run(point, RunSpec(guards=(), run={"max_tool_calls": 2}, sampling={"seed": 5}))
    assert replaced.guards == () and replaced.guard_settings == {}
    assert replaced.settings().max_tool_calls == 2 and replaced.sampling == {"temperature": 0.0, "seed": 5}
    # a condition preset's run keys that are no run setting (its kernel, OracleEvidence's evidence) stay behind
    condition, _ = fork_run(point, RunSpec(run={"kernel": "noop", "evidence": "oracle", "max_tool_calls": 1}))
    assert condition.settings().max_tool_calls == 1 and condition.kernel == "jupyter"
    assert inherited.settings().tool == "python"


def test_a_fork_of_a_calculator_run_keeps_the_calculator():
    """Its prompt offered a calculator and its cells are expressions: the fork keeps both."""
    events = [started({"max_tool_calls": 4, "tool": "calculator"}), ev.TurnStarted(turn=1, context_tokens=1)]
    spec, _ = fork_run(fork_point(events, 0), RunSpec(run={"kernel": "noop"}))
    assert spec.settings().tool == "calculator" and spec.kernel == "calculator"


def tuiagent(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_fork_from_the_command_line(tmp_path, write_script):
    parent_script = write_script("Let me compute.\n```python\nx = 6\n```\n```output", "So \\boxed{6}.", name="p.jsonl")
    done = tuiagent(
        "solve",
        "What is 6 times 7?",
        "--model",
        "scripted",
        "--script",
        str(parent_script),
        "--out",
        str(tmp_path / "parent.jsonl"),
        "--sandbox",
        "off",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    fork_script = write_script(
        "Let me compute.\n```python\nprint(x * 7)\n```\n```output", "So \\boxed{42}.", name="f.jsonl"
    )
    forked = tuiagent(
        "fork",
        str(tmp_path / "parent.jsonl"),
        "--step",
        "1",
        "--model",
        "scripted",
        "--script",
        str(fork_script),
        "--no-guards",
        "--out",
        str(tmp_path / "fork.jsonl"),
        "--sandbox",
        "off",
        cwd=tmp_path,
    )
    assert forked.returncode == 0, forked.stderr
    assert "forked from run" in forked.stdout and "answer: 42" in forked.stdout
    assert "kernel state rebuilt: 1 cell" in forked.stdout
    bad = tuiagent("fork", str(tmp_path / "parent.jsonl"), "--step", "7", cwd=tmp_path)
    assert bad.returncode != 0 and "step 7 is not a step" in bad.stderr and "Traceback" not in bad.stderr


def test_what_the_record_cannot_rebuild_exactly_is_named():
    started = ev.RunStarted(
        run_id="r", problem="p", model_id="m", backend="b", mode="tool", prompt="x", sampling={}, settings={}
    )

    def turn(n: int, **ended) -> list[ev.Event]:
        return [
            ev.TurnStarted(turn=n, context_tokens=1),
            ev.TurnEnded(turn=n, text="t", stop="stop", tokens=1, **ended),
        ]

    exact = fork_point(
        [
            started,
            *turn(1, token_ids=[5], layout="fresh"),
            *turn(2, token_ids=[6], layout="extend"),
            *turn(3, token_ids=[7], layout="fresh"),
            *turn(4),
        ],
        3,
    )
    assert [t.turn for t in exact.chain] == [3] and exact.next_layout is None  # from the last fresh turn on
    old = fork_point([started, *turn(1), *turn(2)], 1)
    assert old.chain is None and "without its token ids" in old.inexact
    batched = fork_point([started, *turn(1, token_ids=[5], layout="batched"), *turn(2)], 1)
    assert batched.chain is None and "batched engine" in batched.inexact


async def test_a_fork_goes_on_from_the_guard_state_its_parent_left(tmp_path, kernel):
    """PruneTIR opened an error episode at the parent's step 1; a fork after that step under the
    parent's guards prunes the episode when the fix succeeds, as the parent did. A guard the fork
    switches on itself starts at the fork point, knowing nothing of the parent's steps."""
    from guards.chain import GuardChain

    def prunetir() -> GuardChain:
        return GuardChain({"prunetir": {}}, {"prunetir"})

    turns = [code_turn("print(undefined_name)"), code_turn("print(6 * 7)"), answer("42")]
    parent = await record(tmp_path / "parent.jsonl", kernel, turns, guards=prunetir())
    assert [e.guard for e in parent if isinstance(e, ev.ContextPruned)] == ["prunetir"]
    events = load(tmp_path / "parent.jsonl").events
    point = fork_point(events, 1, tmp_path / "parent.jsonl")
    await kernel.restart()
    forked = await record(tmp_path / "fork.jsonl", kernel, turns[1:], fork=point, guards=prunetir())
    own = forked[len(point.prefix) :]
    assert [e.guard for e in own if isinstance(e, ev.ContextPruned)] == ["prunetir"]
    notices = [e.message for e in own if isinstance(e, ev.Notice)]
    assert any(m.startswith("guard state taken over: prunetir") for m in notices)
    assert working_context(forked).text == working_context(parent).text  # the same pruned context

    plain = tmp_path / "plain.jsonl"
    await kernel.restart()
    await record(plain, kernel, turns)
    point = fork_point(load(plain).events, 1, plain)
    await kernel.restart()
    switched_on = await record(tmp_path / "on.jsonl", kernel, turns[1:], fork=point, guards=prunetir())
    own = switched_on[len(point.prefix) :]
    assert not [e for e in own if isinstance(e, ev.ContextPruned)]
    assert not any(isinstance(e, ev.Notice) and e.message.startswith("guard state taken over") for e in own)
