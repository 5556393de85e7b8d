"""Injected tool faults (tuiagent.core.faults): the rules on exact text, and the loop applying a plan
with a real Jupyter kernel, driven by the scripted backend."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from guards.chain import GuardChain
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.cli import app
from tuiagent.core import events as ev
from tuiagent.core import faults
from tuiagent.core.faults import FaultInjector, FaultPlan, corrupt, fault_seed, parse_kinds
from tuiagent.core.loop import Agent
from tuiagent.core.trajectory import load
from tuiagent.protocol import RunSettings

# -- the rules, on exact text ------------------------------------------------------------------------


def test_seed_is_stable_and_not_pythons_hash():
    assert fault_seed("gsm8k", "7", 0, "error") == fault_seed("gsm8k", "7", 0, "error")
    assert fault_seed("gsm8k", "7", 0, "error") != fault_seed("gsm8k", "7", 1, "error")
    # sha256("gsm8k\x1f7\x1f0\x1ferror")[:8], fixed for every machine and interpreter
    assert fault_seed("a") == int.from_bytes(bytes.fromhex("ca978112ca1bbdca"), "big")


@pytest.mark.parametrize(
    ("shown", "seed", "out", "supports"),
    [
        ("total = 72", 0, "total = 79", "79"),  # factor 0.1 (seed % 4 == 0), up (bit 8 clear): 72 + 7.2 -> 79
        ("total = 72", 1 + 256, "total = 58", "58"),  # 0.2, down: 72 - 14.4 -> 58 (rounded)
        ("3 apples, 5 pears", 3, "3 apples, 8 pears", "8"),  # the last number: 5 * 1.5 -> 7.5 -> 8
        ("1", 256, "2", "2"),  # down would reach zero: up instead, at least one unit
        ("x = 2.50", 2, "x = 3.12", "3.12"),  # 2.5 * 1.25 = 3.125 to its two decimals
        ("cost 1,200 dollars", 0, "cost 1,320 dollars", "1320"),  # thousands kept as printed
        ("-40", 0, "-36", "-36"),  # up: -40 + 4, the same sign
    ],
)
def test_wrong_number_rule(shown, seed, out, supports):
    fault = corrupt("wrong-number", code="", shown=shown, previous=None, seed=seed)
    assert (fault.text, fault.supports) == (out, supports)
    assert fault.detail["applied"] and "[ours]" in fault.detail["rule"]


def test_wrong_number_without_a_number_is_not_applied():
    fault = corrupt("wrong-number", code="", shown="done", previous=None, seed=5)
    assert fault.text == "done" and fault.supports is None and fault.detail["applied"] is False


def test_error_names_a_line_of_the_code_as_ipython_prints_it():
    code = "total = sum(i**2 for i in range(1, 101))\nprint(total)"
    fault = corrupt("error", code=code, shown="338350", previous=None, seed=0, call=2)
    assert fault.text == (
        "---------------------------------------------------------------------------\n"
        "NameError                                 Traceback (most recent call last)\n"
        "Cell In[2], line 2\n"
        "      1 total = sum(i**2 for i in range(1, 101))\n"
        "----> 2 print(total)\n"
        "\n"
        "NameError: name 'total' is not defined"
    )
    assert fault.error and fault.error_name == "NameError" and fault.detail["line"] == 2


def test_error_without_a_name_read_is_a_zero_division():
    fault = corrupt("error", code="print(7 / 2)", shown="3.5", previous=None, seed=0)
    assert fault.error_name == "ZeroDivisionError" and fault.text.endswith("ZeroDivisionError: division by zero")


def test_empty_timeout_and_stale():
    assert corrupt("empty", code="", shown="42", previous=None, seed=0).text == ""
    timeout = corrupt("timeout", code="", shown="42", previous=None, seed=0, timeout_s=30)
    assert timeout.text == "Execution timed out after 30 s and was interrupted; variables from earlier cells are kept."
    assert timeout.timed_out and timeout.error
    stale = corrupt("stale", code="", shown="42", previous="6", seed=0)
    assert (stale.text, stale.supports) == ("6", "6")
    first = corrupt("stale", code="", shown="42", previous=None, seed=0)
    assert first.text == "" and first.supports is None and first.detail["previous"] is False


def test_unknown_kind_is_a_user_error_with_exit_2():
    assert parse_kinds("wrong-number, error") == ["wrong-number", "error"]
    with pytest.raises(faults.FaultKindError, match="unknown fault kind 'nope'") as caught:
        parse_kinds("error,nope")
    assert caught.value.exit_code == 2


def test_injector_plan_broken_tool_and_armed():
    inj = FaultInjector(FaultPlan("wrong-number", at=2, broken=True, seed=0))
    args = {"run_id": "r", "previous": None, "timeout_s": 30.0}
    assert inj.fault(call=1, code="print(1)", shown="1", **args) is None
    plan, first = inj.fault(call=2, code="print(72)", shown="72", **args)
    assert first.text == "79" and plan.label == "wrong-number@2+broken"
    assert inj.fault(call=3, code="print(5)", shown="5", **args) is None
    _, again = inj.fault(call=4, code="print(72)\n", shown="72", **args)
    assert again.text == "79" and again.detail["repeat"]
    inj.arm("empty")
    plan, armed = inj.fault(call=5, code="print(5)", shown="5", **args)
    assert armed.text == "" and plan.by == "person" and inj.pending is None


# -- the loop, with a real kernel --------------------------------------------------------------------


def turn(code: str, prose: str = "Let me compute.") -> list:
    return split_tokens(f"{prose}\n```python\n{code}\n```\n```output", -0.01)


async def run(kernel, *turns, plan: FaultPlan, guards: GuardChain | None = None) -> list[ev.Event]:
    backend = ScriptedBackend([*turns, split_tokens("Done: \\boxed{79}", -0.01)])
    agent = Agent(backend, kernel, faults=FaultInjector(plan), guards=guards, settings=RunSettings())
    return [e async for e in agent.stream("problem", gold="72")]


async def test_the_loop_injects_records_and_shows_guards_the_corrupted_output(kernel):
    guards = GuardChain({"attc": {}}, {"attc"})
    events = await run(kernel, turn("x = 8 * 9\nprint(x)"), plan=FaultPlan("wrong-number", seed=0), guards=guards)
    kinds = [type(e).__name__ for e in events]
    i = kinds.index("Intervention")
    assert kinds[i + 1] == "ToolResult"  # right before the output it replaces
    inter, result = events[i], events[i + 1]
    assert (inter.target, inter.by, inter.fault, inter.call) == ("output", "protocol", "wrong-number", 1)
    assert (inter.replaced, inter.replacement) == ("72", "79")
    assert inter.detail["plan"] == {"kind": "wrong-number", "at": 1, "broken": False, "seed": 0, "by": "protocol"}
    assert result.shown == "79" and not result.error
    appended = next(e for e in events if isinstance(e, ev.ContextAppended) and e.source == "tool")
    assert "79" in appended.text and "72" not in appended.text  # what the model reads
    attc = next(e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "attc")
    assert attc.hook == "on_tool_result"
    assert events[-1].answer == "79" and events[-1].correct is False


async def test_the_loop_error_and_timeout_faults_carry_the_kernel_flags(kernel):
    events = await run(kernel, turn("y = 3\nprint(y)"), turn("print(y + 1)"), plan=FaultPlan("error", at=2))
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    assert results[0].shown == "3" and results[1].error and results[1].error_name == "NameError"
    assert results[1].shown.endswith("NameError: name 'y' is not defined")
    assert events[-1].erroneous_calls == 1
    events = await run(kernel, turn("print(1)"), plan=FaultPlan("timeout"))
    result = next(e for e in events if isinstance(e, ev.ToolResult))
    assert result.timed_out and result.error and "timed out after 5 s" in result.shown  # the default limit
    assert result.duration_s == 5.0
    assert next(e for e in events if isinstance(e, ev.Intervention)).replaced == "1"


def test_solve_inject_records_the_intervention(write_script, tmp_path):
    script = write_script("Six sevens.\n```python\nprint(6 * 7)\n```\n```output", "So \\boxed{46}.")
    out = tmp_path / "run.jsonl"
    args = ["solve", "6*7?", "-m", "scripted", "--script", str(script), "--out", str(out), "--preset", "none"]
    result = CliRunner().invoke(app, [*args, "--inject", "wrong-number", "--gold", "42"])
    assert result.exit_code == 0, result.output
    assert "[injected by protocol] wrong-number at call 1: 42 -> " in result.output
    assert "injected: wrong-number" in result.output
    events = load(out).events
    inter = next(e for e in events if isinstance(e, ev.Intervention))
    assert inter.replaced == "42" and inter.fault == "wrong-number" and inter.detail["plan"]["at"] == 1
    # the trajectory's JSON keeps the event as written
    assert any(json.loads(line).get("type") == "Intervention" for line in out.read_text().splitlines())


def test_solve_unknown_kind_is_one_line_and_exit_2(write_script):
    script = write_script("\\boxed{3}")
    args = ["solve", "x", "-m", "scripted", "--script", str(script), "--inject", "nope"]
    out = subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: unknown fault kind 'nope'; use wrong-number, error, empty, timeout, stale"
