"""Necessity on golden scripted trajectories: rule and model judges, flag and enforce modes."""

from __future__ import annotations

import math

import pytest

from guards.base import SettingsError
from guards.chain import GuardChain
from guards.necessity import SKIP_TEXT, Necessity, read_reply, rule_judge
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.protocol import FLAG, SKIP, RunView, Token, TokenLP

PROBLEM = "What is 6 times 7?"
TRIVIAL = "print(6 * 7)"
SYMPY = "x = sympy.symbols('x')\nprint(sympy.solve(x**2 - 5*x + 6, x))"
ANSWER = split_tokens("So the answer is \\boxed{42}.", -0.1)


def code_turn(code: str) -> list[Token]:
    return split_tokens(f"Let me compute.\n```python\n{code}\n```\n```output\n", -0.01)


async def run(turns, configs, canned_kernel, results=()):
    backend = ScriptedBackend(turns)
    kernel = canned_kernel(list(results) or [CellResult(outputs=(Output("stdout", "42\n"),))])
    events = [e async for e in Agent(backend, kernel, guards=GuardChain(configs, {"necessity"})).stream(PROBLEM)]
    verdicts = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "necessity"]
    return backend, kernel, events, verdicts


@pytest.mark.parametrize("code, necessary", [
    ("print(6 * 7)", False),
    ("75 / 6", False),
    ("x = 75 / 6\ny = -x + 2 ** 3\nprint(round(y, 2), abs(int(x)))", False),
    ("a, b = 3, 4\nprint(f'{a * b:.2f}')", False),
    ("print('The answer is 42')", False),
    ("total = 0.5\ntotal += 0.25\nprint(float(total))", False),
    ("", False),
    (SYMPY, True),
    ("import math\nprint(math.ceil(75 / 6))", False),  # syntax that is not bare arithmetic, yet trivial
    ("import sympy as sp\nprint(48 / 2 + 48)", False),  # an import is no work
    ("print(math.sqrt(144) + 48 // 5 % 3)", False),
    ("print(37 * 43)", False),  # 2 x 2 digits
    ("print(5000 * 0.035 * 3)", False),  # 1 x 2, then 3 x 1 significant digits
    ("print(10 ** 9, 2 ** 10, 1 / 3 + 1 / 6)", False),
    ("print(12 + 15 + 8 + 20 + 3)", False),  # five terms
    ("s = 0\nfor i in range(1, 101):\n    s += i\nprint(s)", True),
    ("print(sum(range(101)))", True),
    ("print(x)", True),  # a value from an earlier cell
    ("\n".join(f"a{i} = {i}" for i in range(9)) + "\nprint(a1 * a2 + a8)", False),  # many statements, little work
    ("x = 2\n" + "\n".join("x = x * 2 + 1" for _ in range(6)), True),  # 12 operations: a long chain
    ("print(6 *", True),  # does not parse
    # needed although it is only arithmetic on literals
    ("print(123456 * 789)", True),  # long multiplication
    ("print(123 * 456)", True),  # 3 x 3 digits
    ("print(2 ** 20)", True),  # large power
    ("print(1.05 ** 10)", True),  # compound interest
    ("print(12 + 15 + 8 + 20 + 3 + 9)", True),  # many-term sum
    ("print(sum([1, 2, 3, 4, 5, 6]))", True),
    ("total = 0\ntotal += 1234567\nprint(total)", True),  # a long number
    ("print(355 / 113)", True),  # long division
    ("print(math.sqrt(2))", True),
    ("print(math.factorial(10))", True),
    ("print(math.pi * 5 ** 2)", True),
])
def test_rule_judge(code, necessary):
    got, p, reason = rule_judge(code)
    assert got is necessary and p == (0.0 if necessary else 1.0) and reason


@pytest.mark.parametrize("code, words", [
    ("print(123456 * 789)", "needed: 123456 * 789 is a long multiplication (6 x 3 digits)"),
    ("print(2 ** 20)", "needed: 2 ** 20 = 1048576 is a large power (7 digits)"),
    ("print(1 + 2 + 3 + 4 + 5 + 6)", "needed: a sum of 6 terms (> 5)"),
    ("print(6 * 7)", "trivial: small arithmetic a competent model does in its head"),
    ("print(x)", "not judged (counted as necessary): line 1: uses 'x' from an earlier cell"),
])
def test_rule_judge_says_why(code, words):
    assert rule_judge(code)[2] == words


def test_rule_judge_limits_are_settings():
    relaxed = Necessity.Settings(max_digit_products=20, max_result_digits=8, max_terms=6)
    assert rule_judge("print(123456 * 789)", relaxed)[0] is False
    assert rule_judge("print(2 ** 20)", relaxed)[0] is False
    assert rule_judge("print(1 + 2 + 3 + 4 + 5 + 6)", relaxed)[0] is False
    assert rule_judge("print(37 * 43)", Necessity.Settings(max_digit_products=3))[0] is True
    assert rule_judge("print(1 + 2 * 3 - 4 / 2)", Necessity.Settings(max_operations=3))[2] == \
        "needed: more than 3 arithmetic operations"


async def test_flag_mode_runs_the_code_anyway(canned_kernel):
    _, kernel, events, (v,) = await run([code_turn(TRIVIAL), ANSWER], {}, canned_kernel)
    assert kernel.calls == [TRIVIAL]
    assert (v.hook, v.action) == ("on_code", FLAG)
    assert {k: v.data[k] for k in ("necessary", "p_unnecessary", "judge", "mode", "skipped")} == {
        "necessary": False, "p_unnecessary": 1.0, "judge": "rule", "mode": "flag", "skipped": False}
    # the verdict comes before the kernel result
    kinds = [type(e).__name__ for e in events if isinstance(e, (ev.CodeBlock, ev.GuardVerdict, ev.ToolResult))]
    assert kinds == ["CodeBlock", "GuardVerdict", "ToolResult"]


async def test_necessary_code_is_flagged_necessary(canned_kernel):
    _, kernel, _, (v,) = await run([code_turn(SYMPY), ANSWER], {"necessity": {"mode": "enforce"}}, canned_kernel)
    assert kernel.calls == [SYMPY] and v.action == FLAG
    assert v.data["necessary"] is True and v.data["p_unnecessary"] == 0.0 and "calls sympy.symbols" in v.data["reason"]


async def test_enforce_mode_skips_unnecessary_code(canned_kernel):
    backend, kernel, events, (v,) = await run([code_turn(TRIVIAL), ANSWER], {"necessity": {"mode": "enforce"}},
                                              canned_kernel)
    assert kernel.calls == []
    assert v.action == SKIP and v.text == SKIP_TEXT and v.data["skipped"] is True
    (result,) = [e for e in events if isinstance(e, ev.ToolResult)]
    assert result.executed is False and result.shown == SKIP_TEXT
    assert backend.prompts[1].endswith(f"```output\n{SKIP_TEXT}\n```\n")
    assert events[-1].tool_calls == 0 and events[-1].answer == "42"


async def test_model_judge_probability_from_first_token(canned_kernel):
    judge_reply = [Token("UNNECESSARY", -0.1)]
    backend, kernel, _, (v,) = await run([code_turn(TRIVIAL), judge_reply, ANSWER],
                                         {"necessity": {"judge": "model"}}, canned_kernel)
    assert v.data["judge"] == "model" and v.data["necessary"] is False
    assert v.data["p_unnecessary"] == pytest.approx(math.exp(-0.1))
    assert kernel.calls == [TRIVIAL]  # flag mode
    # the judge got a fresh chat with the problem, the tool type and the code
    question = backend.prompts[1]
    assert question.startswith("<|im_start|>user\n") and PROBLEM in question and TRIVIAL in question
    assert "Python interpreter" in question and "NECESSARY or UNNECESSARY" in question
    # and the run went on from the working context, not from the judge's chat
    assert backend.prompts[2].startswith(backend.prompts[0]) and backend.prompts[2].endswith("```output\n42\n```\n")


async def test_model_judge_necessary_below_threshold_runs(canned_kernel):
    judge_reply = [Token("NECESS", -0.2), Token("ARY", -0.01)]
    _, kernel, _, (v,) = await run([code_turn(TRIVIAL), judge_reply, ANSWER],
                                   {"necessity": {"judge": "model", "mode": "enforce"}}, canned_kernel)
    assert v.action == FLAG and v.data["necessary"] is True
    assert v.data["p_unnecessary"] == pytest.approx(1 - math.exp(-0.2))
    assert kernel.calls == [TRIVIAL]


@pytest.mark.parametrize("text, lp, p", [
    ("UNNECESSARY", -0.1, math.exp(-0.1)),
    (" un", -0.7, math.exp(-0.7)),
    ("NECESSARY", -0.05, 1 - math.exp(-0.05)),
    ("Unnecessary", None, 1.0),
    ("necessary", None, 0.0),
    ("Maybe", -0.1, None),
])
def test_read_reply(text, lp, p):
    got = read_reply(text, lp)
    assert got == (p if p is None else pytest.approx(p))


def view_with(judge) -> RunView:
    return RunView(problem=PROBLEM, mode="tool", turn=1, turn_text="", turn_tokens=(), calls=(), segments=(),
                   max_tool_calls=4, tools_suspended=False, judge=judge)


async def test_model_judge_falls_back_to_rule():
    guard = Necessity(Necessity.Settings(judge="model"))

    async def broken(question, max_tokens=3):
        raise RuntimeError("no model")

    async def rambling(question, max_tokens=3):
        return TokenLP("Well", -0.1)

    for judge, why in [(None, "no model judge"), (broken, "RuntimeError: no model"), (rambling, "unreadable")]:
        v = await guard.on_code(TRIVIAL, view_with(judge))
        assert v.data["judge"] == "rule" and why in v.data["fallback"] and v.data["p_unnecessary"] == 1.0


def test_bad_settings():
    with pytest.raises(SettingsError, match="necessity.mode must be one of"):
        GuardChain({"necessity": {"mode": "block"}}, {"necessity"})
    with pytest.raises(SettingsError, match=r"necessity\.threshold = 1\.5 is out of range"):
        GuardChain({"necessity": {"threshold": 1.5}}, {"necessity"})
