"""G-STEP in a fork: the continues its parent gave count, so the fork stops where the parent would."""

from __future__ import annotations

from pathlib import Path

import pytest

from guards.chain import GuardChain
from kernels.jupyter import JupyterKernel
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.fork import fork_point
from tuiagent.core.loop import Agent
from tuiagent.core.trajectory import Recorder, load

ANSWER = split_tokens("So it is \\boxed{42}.", -0.01)
CHECK = split_tokens("Let me check.\n```python\nprint(6 * 7)\n```\n```output", -0.01)


@pytest.fixture
async def kernel(tmp_path: Path):
    async with JupyterKernel(images_dir=tmp_path / "images") as k:
        yield k


async def record(path: Path, kernel, turns, gate: str, fork=None) -> list[ev.Event]:
    settings = {"weights": gate, "max_extra_turns": 1, "agreeing_check": False}  # the paper has no agreeing check
    chain = GuardChain({"gstep": settings}, {"gstep"})
    with Recorder(path) as recorder:
        agent = Agent(ScriptedBackend(turns), kernel, guards=chain, recorder=recorder)
        return [e async for e in agent.stream("What is 6 times 7?", gold="42", fork=fork)]


def decisions(events) -> list[str]:
    return [e.data["decision"] for e in events if isinstance(e, ev.GuardVerdict) and e.hook == "on_answer"]


async def test_a_fork_after_a_continue_knows_the_extra_turn_is_spent(tmp_path, kernel, constant_gate):
    gate = constant_gate(0.9)  # p(continue) 0.9 >= tau 0.05 on every answer
    parent = await record(tmp_path / "parent.jsonl", kernel, [ANSWER, CHECK, ANSWER], gate)
    assert decisions(parent) == ["continue", "safety stop"]  # max_extra_turns 1: the second answer commits
    point = fork_point(load(tmp_path / "parent.jsonl").events, 1, tmp_path / "parent.jsonl")
    await kernel.restart()
    forked = await record(tmp_path / "fork.jsonl", kernel, [CHECK, ANSWER], gate, fork=point)
    own = forked[len(point.prefix) :]
    assert decisions(own) == ["safety stop"] and forked[-1].answer == "42"
    assert any(isinstance(e, ev.Notice) and e.message.startswith("guard state taken over: gstep") for e in own)
