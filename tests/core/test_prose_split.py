"""A turn's prose/code split is computed once, when it ends (``TurnEnded.prose_end``), and a turn
recorded before the field existed gets the same split when its trajectory is loaded."""

from __future__ import annotations

import json

from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.core.trajectory import Recorder, load

CODE_TURN = "Let me compute.\n```python\nprint(6 * 7)\n```\n```output\n42\n```"
ANSWER_TURN = "So the answer is \\boxed{42}."


async def record(write_script, canned_kernel, path):
    kernel = canned_kernel([CellResult(outputs=(Output("stdout", "42\n"),))])
    agent = Agent(ScriptedBackend(load_script(write_script(CODE_TURN, ANSWER_TURN))), kernel, recorder=Recorder(path))
    try:
        return [e async for e in agent.stream("What is 6 times 7?")]
    finally:
        agent.recorder.close()


async def test_a_turn_records_where_its_prose_ends(write_script, canned_kernel, tmp_path):
    ended = [
        e for e in await record(write_script, canned_kernel, tmp_path / "run.jsonl") if isinstance(e, ev.TurnEnded)
    ]
    code_turn, answer_turn = ended
    assert code_turn.text[: code_turn.prose_end] == "Let me compute.\n"
    assert code_turn.text[code_turn.prose_end :].startswith("```python\nprint(6 * 7)")
    assert answer_turn.prose_end == len(answer_turn.text)


async def test_a_turn_recorded_without_prose_end_loads_with_the_same_split(write_script, canned_kernel, tmp_path):
    path = tmp_path / "run.jsonl"
    await record(write_script, canned_kernel, path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        line.pop("prose_end", None)
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert "prose_end" not in old.read_text()
    assert load(old).events == load(path).events
