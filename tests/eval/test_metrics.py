"""Per-run numbers folded from scripted runs whose outcome is known."""

from __future__ import annotations

from pathlib import Path

from kernels.base import CellResult, Output
from tests.eval.helpers import answer_turn, code_turn
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.run_spec import RunSpec
from tuiagent.eval.metrics import run_record
from tuiagent.runner import RunInput, resolve_spec, run_problem

SPEC = resolve_spec("scripted")
ERROR = CellResult(
    outputs=(Output("error", "NameError: name 'compute' is not defined"),), error=True, error_name="NameError"
)


def ok(text: str) -> CellResult:
    return CellResult(outputs=(Output("stdout", text + "\n"),))


async def run(tmp_path: Path, turns, kernel, *, gold="42", guards=(), logprob=-0.01, run=None, guard_settings=None):
    backend = ScriptedBackend([split_tokens(t, logprob) for t in turns])
    events: list[ev.Event] = []
    spec = RunSpec(guards=tuple(guards), guard_settings=guard_settings or {}, run=run or {})
    given = RunInput("What is 6 times 7?", gold=gold, model="scripted", out=tmp_path / "run.jsonl")
    await run_problem(spec, given, events.append, backend=backend, model_spec=SPEC, kernel=kernel)
    return run_record(events), events, backend


async def test_right_answer_with_one_call(tmp_path, canned_kernel):
    record, events, backend = await run(tmp_path, [code_turn("6 * 7"), answer_turn("42")], canned_kernel([ok("42")]))
    assert (record["correct"], record["answer"], record["reason"]) == (True, "42", "answer")
    assert (record["tcn"], record["erroneous"], record["turns"], record["tool_ignored"]) == (1, 0, 2, False)
    # WTN is the final working context counted with the model's own tokenizer
    assert record["wtn"] == backend.count_tokens(working_context(events).text) > 0
    assert record["generated_tokens"] == sum(e.tokens for e in events if isinstance(e, ev.TurnEnded))
    assert record["unnecessary_calls"] == 1  # print(6 * 7): literal arithmetic, the rule judge's "unnecessary"
    assert record["trajectory"] == str(tmp_path / "run.jsonl") and Path(record["trajectory"]).exists()
    # the TIM monitor's paper reading (section 2 sets no call count): one call whose output is the
    # answer, with no derivation around it, is two indicators and flags
    assert record["tim_flag"] is True and record["tim_guard_flag"] is None


async def test_tool_ignored_when_the_output_was_right_and_the_answer_is_not(tmp_path, canned_kernel):
    record, *_ = await run(tmp_path, [code_turn("6 * 7"), answer_turn("41")], canned_kernel([ok("42")]))
    assert (record["correct"], record["tool_ignored"]) == (False, True)
    record, *_ = await run(tmp_path, [code_turn("6 * 6"), answer_turn("36")], canned_kernel([ok("36")]))
    assert (record["correct"], record["tool_ignored"]) == (False, False)  # the tool was wrong too


async def test_stuck_resampled_and_attc_decisions(tmp_path, canned_kernel):
    code = "Let me compute.\n```python\nx = compute()\nprint(x)\n```\n```output\n"
    record, *_ = await run(
        tmp_path,
        [code] * 6 + [answer_turn("42")],
        canned_kernel([ERROR] * 6),
        guards=("prunetir", "attc"),
        run={"max_tool_calls": 8},
    )
    assert (record["tcn"], record["erroneous"]) == (6, 6)
    assert (record["stuck"], record["resampled"], record["suspended"]) == (1, 1, 0)
    # ATTC speaks after every call except the one PruneTIR resampled away (its round ends there)
    assert (record["attc_trust"], record["attc_rethink"]) == (5, 0)
    record, *_ = await run(
        tmp_path, [code_turn("6 * 7"), answer_turn("42")], canned_kernel([ok("42")]), guards=("attc",), logprob=-0.5
    )
    assert (record["attc_trust"], record["attc_rethink"]) == (0, 1)


async def test_suspension_counted(tmp_path, canned_kernel):
    code = "Let me compute.\n```python\nx = compute()\nprint(x)\n```\n```output\n"
    record, *_ = await run(
        tmp_path,
        [code] * 8 + [answer_turn("42")],
        canned_kernel([ERROR] * 8),
        guards=("prunetir",),
        run={"max_tool_calls": 12},
    )
    assert (record["stuck"], record["resampled"], record["suspended"]) == (2, 2, 1)


async def test_necessity_tim_and_gate(tmp_path, canned_kernel):
    turns = [code_turn("6 * 7"), "Let's verify numerically.\n" + code_turn("7 * 6"), answer_turn("42")]
    record, *_ = await run(
        tmp_path,
        turns,
        canned_kernel([ok("42"), ok("42")]),
        guards=("necessity", "tim", "gstep"),
        guard_settings={"gstep": {"weights": "off"}},
    )
    assert (record["necessity_flags"], record["necessity_skipped"], record["unnecessary_calls"]) == (2, 0, 2)
    assert record["tim_flag"] is True and record["tim_guard_flag"] is True
    assert record["tim_categories"] == ["numerical/empirical checking"]
    assert record["gate"] == {"gate off": 1} and record["gate_continues"] == "gate off (calibration: never continue)"


async def test_tim_monitor_without_the_guard_flags_a_copied_answer(tmp_path, canned_kernel):
    turns = [code_turn("6 * 7"), code_turn("42"), "\\boxed{42}"]
    record, *_ = await run(tmp_path, turns, canned_kernel([ok("42"), ok("42")]))
    assert record["tim_flag"] is True and record["tim_categories"] == [] and record["tim_guard_flag"] is None
