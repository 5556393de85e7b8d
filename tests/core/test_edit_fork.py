"""Edit and continue (tuiagent.core.fork.edit_point): a step's tool output, its code block or its
text from a token on, replaced, recorded as an Intervention, and the run goes on from exactly there —
through the real loop, the scripted backend (exact text) and a real Jupyter kernel. The engine half
(the kept tokens decoded as sampled, on real llama.cpp) is tests/backends/test_edit_resume.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.fork import ForkError, edit_point, fork_point
from tuiagent.core.loop import Agent
from tuiagent.core.steps import steps
from tuiagent.core.trajectory import Recorder, load

PROBLEM = "What is 6 times 7?"


def code_turn(code: str) -> list:
    return split_tokens(f"Let me compute.\n```python\n{code}\n```\n```output", -0.01)


def answer(text: str) -> list:
    return split_tokens(f"So the answer is \\boxed{{{text}}}.", -0.02)


async def record(path: Path, kernel, turns, *, fork=None) -> tuple[list[ev.Event], ScriptedBackend]:
    backend = ScriptedBackend(turns)
    with Recorder(path) as recorder:
        agent = Agent(backend, kernel, recorder=recorder)
        problem = fork.started.problem if fork is not None else PROBLEM
        return [e async for e in agent.stream(problem, gold="42", fork=fork)], backend


PARENT_TURNS = [code_turn("x = 6\nprint('set')"), code_turn("print(x * 7)"), answer("42")]


@pytest.fixture
async def parent(tmp_path: Path, kernel) -> Path:
    path = tmp_path / "parent.jsonl"
    await record(path, kernel, PARENT_TURNS)
    await kernel.restart()
    return path


def own(events: list[ev.Event]) -> list[ev.Event]:
    """The fork's own events: after its rebuild notices."""
    mark = next(i for i, e in enumerate(events) if isinstance(e, ev.Notice) and e.message.startswith("forked from"))
    rest = events[mark + 1 :]
    rebuilt = ("model state", "kernel state", "ScriptedBackend cannot replay")
    return [e for e in rest if not (isinstance(e, ev.Notice) and e.message.startswith(rebuilt))]


def the(kind, events):
    return [e for e in events if isinstance(e, kind)]


async def test_an_edited_output_is_what_the_model_reads_and_the_kernel_keeps_the_original_state(
    parent, tmp_path, kernel
):
    events = load(parent).events
    point = edit_point(events, 2, "output", "41", path=parent)
    forked, backend = await record(tmp_path / "fork.jsonl", kernel, [code_turn("print(x)"), answer("41")], fork=point)
    mine = own(forked)
    edit = mine[0]
    assert edit == ev.Intervention(
        target="output", by="person", turn=2, call=2, replaced="42", replacement="41", t=edit.t
    )
    result = the(ev.ToolResult, mine)[0]
    assert (result.call, result.shown, result.error, result.executed) == (2, "41", False, True)
    assert "```output\n41\n```" in backend.prompts[0] and "```output\n42" not in backend.prompts[0]
    # the kernel ran the original cells again: x is still 6 (what the original code left)
    assert the(ev.ToolResult, mine)[1].shown == "6"
    assert any("kernel state rebuilt: 2 cells" in e.message for e in the(ev.Notice, forked))
    assert forked[-1].answer == "41" and forked[-1].tool_calls == 3
    assert forked[0].parent == {"run_id": events[0].run_id, "trajectory": str(parent), "step": 2, "edit": "output"}
    reread = load(tmp_path / "fork.jsonl").events
    assert reread == forked and "```output\n41\n```" in working_context(reread).text
    assert [s.result.shown for s in steps(reread) if s.result] == ["set", "41", "6"]


async def test_a_fork_of_a_run_with_a_replaced_output_checks_the_kernel_against_its_own_output(
    parent, tmp_path, kernel
):
    """The rebuilt kernel prints what the kernel printed, not the edit (or injected fault) the model
    read instead: no false "output differs" warning when forking such a run again."""
    point = edit_point(load(parent).events, 2, "output", "41", path=parent)
    await record(tmp_path / "edited.jsonl", kernel, [code_turn("print(x)"), answer("41")], fork=point)
    edited = load(tmp_path / "edited.jsonl").events
    again = fork_point(edited, 3, tmp_path / "edited.jsonl")
    assert [c.shown for c in again.cells] == ["set", "42", "6"]  # call 2: the kernel's 42, not the edit's 41
    forked, _ = await record(tmp_path / "again.jsonl", kernel, [answer("41")], fork=again)
    rebuilt = [e.message for e in the(ev.Notice, forked) if "kernel state rebuilt" in e.message]
    assert rebuilt and all("differs" not in m for m in rebuilt), rebuilt


async def test_an_edited_code_block_runs_for_real_on_the_state_before_it(parent, tmp_path, kernel):
    point = edit_point(load(parent).events, 2, "code", "print(x * 100)", path=parent)
    forked, backend = await record(tmp_path / "fork.jsonl", kernel, [answer("600")], fork=point)
    mine = own(forked)
    assert mine[0] == ev.Intervention(
        target="code", by="person", turn=2, call=2, replaced="print(x * 7)", replacement="print(x * 100)", t=mine[0].t
    )
    ended = the(ev.TurnEnded, mine)[0]
    assert ended.turn == 2 and "print(x * 100)" in ended.text and "x * 7" not in ended.text
    assert ended.token_ids is None  # the text is no longer what the model sampled
    block, result = the(ev.CodeBlock, mine)[0], the(ev.ToolResult, mine)[0]
    assert (block.call, block.code, result.shown) == (2, "print(x * 100)", "600")  # run, with x from cell 1
    assert any("kernel state rebuilt: 1 cell " in e.message for e in the(ev.Notice, forked))
    assert "print(x * 100)\n```\n```output\n600\n```" in backend.prompts[0] and "x * 7" not in backend.prompts[0]
    assert forked[-1].answer == "600"
    assert [s.code.code for s in steps(forked) if s.code] == ["x = 6\nprint('set')", "print(x * 100)"]


async def test_an_edited_text_keeps_k_tokens_then_the_text_then_the_model_goes_on(parent, tmp_path, kernel):
    events = load(parent).events
    point = edit_point(events, 3, "text", " surely", token=4, path=parent)
    forked, backend = await record(tmp_path / "fork.jsonl", kernel, [split_tokens(" \\boxed{41}.", -0.3)], fork=point)
    mine = own(forked)
    assert mine[0] == ev.Intervention(
        target="text",
        by="person",
        turn=3,
        token=4,
        replaced=" \\boxed{42}.",
        replacement=" surely",
        t=mine[0].t,
    )
    ended = the(ev.TurnEnded, mine)[0]
    assert ended.turn == 3 and ended.text == "So the answer is surely \\boxed{41}."
    deltas = [(d.text, d.logprob) for d in the(ev.TokenDelta, mine)]
    assert deltas[:5] == [("So", -0.02), (" the", -0.02), (" answer", -0.02), (" is", -0.02), (" surely", None)]
    assert backend.prompts[0].endswith("```output\n42\n```\nSo the answer is surely")
    assert forked[-1].answer == "41" and forked[-1].tool_calls == 2
    assert any("kernel state rebuilt: 2 cells" in e.message for e in the(ev.Notice, forked))


def step_view(events: list[ev.Event], first: int) -> list[tuple]:
    return [
        (s.turn, s.text, s.stop, s.code and s.code.code, s.result and s.result.shown, s.answer and s.answer.answer)
        for s in steps(events)
        if s.turn >= first
    ]


@pytest.mark.parametrize(
    "target, step, replacement, token, script",
    [
        ("output", 2, "42", None, PARENT_TURNS[2:]),
        ("code", 2, "print(x * 7)", None, PARENT_TURNS[2:]),
        ("text", 2, "", 3, [split_tokens("\n```python\nprint(x * 7)\n```\n```output", -0.01), PARENT_TURNS[2]]),
        ("text", 3, "", 5, [[], *PARENT_TURNS[3:]]),  # the whole turn kept: nothing more to say
    ],
)
async def test_an_edit_that_changes_nothing_repeats_the_parent_step_for_step(
    parent, tmp_path, kernel, target, step, replacement, token, script
):
    events = load(parent).events
    point = edit_point(events, step, target, replacement, token=token, path=parent)
    forked, _ = await record(tmp_path / "fork.jsonl", kernel, script, fork=point)
    assert step_view(forked, step) == step_view(events, step)
    assert working_context(forked).text == working_context(events).text
    assert (forked[-1].answer, forked[-1].tool_calls) == (events[-1].answer, events[-1].tool_calls)


async def test_what_cannot_be_edited_is_a_clear_error(parent):
    events = load(parent).events
    with pytest.raises(ForkError, match="step 3 has no tool output to replace") as e:
        edit_point(events, 3, "output", "x")
    assert "fix: `tuiagent runs show RUN`" in str(e.value) and e.value.exit_code == 2
    with pytest.raises(ForkError, match="step 3 has no code block"):
        edit_point(events, 3, "code", "x")
    with pytest.raises(ForkError, match="token 8 is not in step 3: its turn has 5 tokens") as e:
        edit_point(events, 3, "text", "", token=8)
    assert "keep 0 to 5 tokens" in str(e.value)
    with pytest.raises(ForkError, match="step 4 is not a step of this run: it has 3 turns, so steps 1 to 3"):
        edit_point(events, 4, "output", "x")
    with pytest.raises(ForkError, match="step 0 is not a step"):
        edit_point(events, 0, "text", "", token=0)


def tuiagent(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_edit_and_continue_from_the_command_line(tmp_path, write_script):
    parent_script = write_script(
        "Let me compute.\n```python\nx = 6\nprint(x * 7)\n```\n```output", "So \\boxed{42}.", name="p.jsonl"
    )
    parent = tmp_path / "parent.jsonl"
    done = tuiagent(
        "solve", PROBLEM, "--model", "scripted", "--script", str(parent_script), "--out", str(parent),
        "--sandbox", "off", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (tmp_path / "out.txt").write_text("41\n")
    fork_script = write_script("So \\boxed{41}.", name="f.jsonl")
    common = ["--model", "scripted", "--script", str(fork_script), "--sandbox", "off"]
    forked = tuiagent(
        "fork", str(parent), "--step", "1", "--output", "@out.txt", *common, "--out", str(tmp_path / "f1.jsonl"),
        cwd=tmp_path,
    )  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert (
        "[edit] output of call 1 (step 1) replaced by a person: was '42', now '41'" in forked.stdout
        and "answer: 41" in forked.stdout
    )
    assert "(output of call 1 edited)" in forked.stderr
    intervention = the(ev.Intervention, load(tmp_path / "f1.jsonl").events)[0]
    assert (intervention.replaced, intervention.replacement) == ("42", "41")

    fork_script = write_script("So \\boxed{7}.", name="s2.jsonl")
    coded = tuiagent(
        "fork", str(parent), "-s", "1", "--code", "print(7)", "--model", "scripted", "--script", str(fork_script),
        "--sandbox", "off", "--out", str(tmp_path / "f2.jsonl"), cwd=tmp_path,
    )  # fmt: skip
    assert coded.returncode == 0, coded.stderr
    assert "answer: 7" in coded.stdout

    fork_script = write_script("3}.", name="s3.jsonl")
    texted = tuiagent(
        "fork", str(parent), "-s", "2", "--at-token", "1", "--text", " \\boxed{4", "--model", "scripted",
        "--script", str(fork_script), "--sandbox", "off", "--out", str(tmp_path / "f3.jsonl"), cwd=tmp_path,
    )  # fmt: skip
    assert texted.returncode == 0, texted.stderr
    assert "answer: 43" in texted.stdout

    for args, message in [
        (["--output", "1", "--code", "2"], "--output and --code are two edits: a fork makes one"),
        (["--output", "@missing.txt"], "in missing.txt: cannot read the --output file: No such file or directory"),
        (["--at-token", "99"], "token 99 is not in step 1: its turn has"),
        (["--text", "x"], "--text goes with --at-token K"),
        (["-s", "2", "--output", "1"], "step 2 has no tool output to replace"),
    ]:
        bad = tuiagent("fork", str(parent), "-s", "1", *args, cwd=tmp_path)
        assert bad.returncode == 2, (args, bad.stderr)
        assert message in bad.stderr and "Traceback" not in bad.stderr
        assert bad.stderr.startswith("error: ")


async def test_the_edit_shows_in_the_transcript_compare_and_the_exports(parent, tmp_path, kernel):
    from io import StringIO

    from rich.console import Console

    from tuiagent.core.compare import step_cells
    from tuiagent.export import export_runs
    from tuiagent.transcript import TranscriptPrinter

    point = edit_point(load(parent).events, 2, "output", "41", path=parent)
    await record(tmp_path / "fork.jsonl", kernel, [answer("41")], fork=point)
    events = load(tmp_path / "fork.jsonl").events
    buffer = StringIO()
    printer = TranscriptPrinter(Console(file=buffer, width=200))
    for e in events:
        printer(e)
    assert "[edit] output of call 2 (step 2) replaced by a person: was '42', now '41'" in buffer.getvalue()
    cells = step_cells(events)
    assert [(c.turn, c.forked, c.edited) for c in cells] == [
        (1, False, ""),
        (2, True, "output of call 2 edited"),
        (3, False, ""),
    ]
    assert "> ✎ output of call 2 edited" in export_runs([tmp_path / "fork.jsonl"], "md")
    assert "✎ output of call 2 edited" in export_runs([tmp_path / "fork.jsonl"], "html")
    both = export_runs([parent, tmp_path / "fork.jsonl"], "md")
    assert "✎ output of call 2 edited" in both

    inspect_sample = pytest.importorskip("tuiagent.export.inspect_sample")
    pytest.importorskip("inspect_ai")
    sample = inspect_sample.sample(inspect_sample.RunSample(events, "q", 1))
    assert sample.metadata["interventions"] == [
        {"target": "output", "by": "person", "turn": 2, "replaced": "42", "replacement": "41", "call": 2,
         "token": None, "fault": None, "detail": {}}
    ]  # fmt: skip
    info = [e for e in sample.events if getattr(e, "source", "") == "intervention by a person"]
    assert len(info) == 1 and info[0].data["action"] == "output of call 2 edited"
