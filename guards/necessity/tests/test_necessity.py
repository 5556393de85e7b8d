"""Necessity on golden scripted trajectories: rule and model judges, flag and enforce modes."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from guards.base import SettingsError
from guards.chain import GuardChain
from guards.necessity.arithmetic import stated_numbers
from guards.necessity.guard import SKIP_TEXT, Necessity, arithmetic_judge, read_paper_reply, read_reply
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.backends.templates import render_named
from tuiagent.config.loader import load_models
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.core.run_spec import RunSpec
from tuiagent.errors import ConfigError
from tuiagent.protocol import FLAG, SKIP, JudgeReply, RunPiece, RunRecord, RunView, Token, TokenLP, VerdictRecord
from tuiagent.runner import JudgeModels, RunInput, run_problem

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


@pytest.mark.parametrize(
    "code, necessary",
    [
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
        # [paper] section 4.1: "Tool calls used purely for convenience (e.g., trivial arithmetic,
        # formatting) are unnecessary": a short loop over a literal range, and formatting a known number
        ("s = 0\nfor i in range(1, 5):\n    s += i\nprint(s)", False),
        ("print(sum(range(1, 5)))", False),
        ("print(sum(k * k for k in range(1, 4)))", False),
        ("x = 6 * 7\nprint('{} apples'.format(x))", False),
        ("x = 6 * 7\nprint(f'{x:,.2f} dollars')", False),
        ("print([k for k in range(9) if k % 2])", True),  # a condition: not judged
        ("for i in range(10 ** 9):\n    pass", True),  # a long loop is work
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
    ],
)
def test_arithmetic_judge(code, necessary):
    got, p, reason = arithmetic_judge(code)
    assert got is necessary and p == (0.0 if necessary else 1.0) and reason


@pytest.mark.parametrize(
    "code, words",
    [
        ("print(123456 * 789)", "needed: 123456 * 789 is a long multiplication (6 x 3 digits)"),
        ("print(2 ** 20)", "needed: 2 ** 20 = 1048576 is a large power (7 digits)"),
        ("print(1 + 2 + 3 + 4 + 5 + 6)", "needed: a sum of 6 terms (> 5)"),
        ("print(6 * 7)", "trivial: small arithmetic a competent model does in its head"),
        ("print(x)", "not judged (counted as necessary): line 1: uses 'x' from an earlier cell"),
    ],
)
def test_arithmetic_judge_says_why(code, words):
    assert arithmetic_judge(code)[2] == words


def test_arithmetic_judge_limits_are_settings():
    relaxed = Necessity.Settings(max_digit_products=20, max_result_digits=8, max_terms=6)
    assert arithmetic_judge("print(123456 * 789)", relaxed)[0] is False
    assert arithmetic_judge("print(2 ** 20)", relaxed)[0] is False
    assert arithmetic_judge("print(1 + 2 + 3 + 4 + 5 + 6)", relaxed)[0] is False
    assert arithmetic_judge("print(37 * 43)", Necessity.Settings(max_digit_products=3))[0] is True
    assert (
        arithmetic_judge("print(1 + 2 * 3 - 4 / 2)", Necessity.Settings(max_operations=3))[2]
        == "needed: more than 3 arithmetic operations"
    )


async def test_flag_mode_runs_the_code_anyway(canned_kernel):
    _, kernel, events, (v,) = await run([code_turn(TRIVIAL), ANSWER], {}, canned_kernel)
    assert kernel.calls == [TRIVIAL]
    assert (v.hook, v.action) == ("on_code", FLAG)
    assert {k: v.data[k] for k in ("necessary", "p_unnecessary", "judge", "mode", "skipped")} == {
        "necessary": False,
        "p_unnecessary": 1.0,
        "judge": "arithmetic",
        "mode": "flag",
        "skipped": False,
    }
    # the verdict comes before the kernel result
    kinds = [type(e).__name__ for e in events if isinstance(e, (ev.CodeBlock, ev.GuardVerdict, ev.ToolResult))]
    assert kinds == ["CodeBlock", "GuardVerdict", "ToolResult"]


async def test_necessary_code_is_flagged_necessary(canned_kernel):
    _, kernel, _, (v,) = await run([code_turn(SYMPY), ANSWER], {"necessity": {"mode": "enforce"}}, canned_kernel)
    assert kernel.calls == [SYMPY] and v.action == FLAG
    assert v.data["necessary"] is True and v.data["p_unnecessary"] == 0.0 and "calls sympy.symbols" in v.data["reason"]


async def test_enforce_mode_skips_unnecessary_code(canned_kernel):
    backend, kernel, events, (v,) = await run(
        [code_turn(TRIVIAL), ANSWER], {"necessity": {"mode": "enforce"}}, canned_kernel
    )
    assert kernel.calls == []
    assert v.action == SKIP and v.text == SKIP_TEXT and v.data["skipped"] is True
    (result,) = [e for e in events if isinstance(e, ev.ToolResult)]
    assert result.executed is False and result.shown == SKIP_TEXT
    assert backend.prompts[1].endswith(f"```output\n{SKIP_TEXT}\n```\n")
    assert events[-1].tool_calls == 0 and events[-1].answer == "42"


async def test_model_judge_probability_from_first_token(canned_kernel):
    judge_reply = [Token("UNNECESSARY", -0.1)]
    backend, kernel, _, (v,) = await run(
        [code_turn(TRIVIAL), judge_reply, ANSWER],
        {"necessity": {"judge": "model", "judge_prompt": "ours"}},
        canned_kernel,
    )
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
    _, kernel, _, (v,) = await run(
        [code_turn(TRIVIAL), judge_reply, ANSWER],
        {"necessity": {"judge": "model", "judge_prompt": "ours", "mode": "enforce"}},
        canned_kernel,
    )
    assert v.action == FLAG and v.data["necessary"] is True
    assert v.data["p_unnecessary"] == pytest.approx(1 - math.exp(-0.2))
    assert kernel.calls == [TRIVIAL]


@pytest.mark.parametrize(
    "text, lp, p",
    [
        ("UNNECESSARY", -0.1, math.exp(-0.1)),
        (" un", -0.7, math.exp(-0.7)),
        ("NECESSARY", -0.05, 1 - math.exp(-0.05)),
        ("Unnecessary", None, 1.0),
        ("necessary", None, 0.0),
        ("Maybe", -0.1, None),
    ],
)
def test_read_reply(text, lp, p):
    got = read_reply(text, lp)
    assert got == (p if p is None else pytest.approx(p))


def view_with(judge) -> RunView:
    return RunView(
        problem=PROBLEM,
        mode="tool",
        turn=1,
        turn_text="",
        turn_tokens=(),
        calls=(),
        segments=(),
        max_tool_calls=4,
        tools_suspended=False,
        judge=judge,
    )


async def test_model_judge_falls_back_to_rule():
    guard = Necessity(Necessity.Settings(judge="model"))

    async def broken(question, max_tokens=3, model=None):
        raise RuntimeError("no model")

    async def rambling(question, max_tokens=3, model=None):
        return JudgeReply("Well", (TokenLP("Well", -0.1),))

    for judge, why in [(None, "no model judge"), (broken, "RuntimeError: no model"), (rambling, "unreadable")]:
        v = await guard.on_code(TRIVIAL, view_with(judge))
        assert v.data["judge"] == "arithmetic" and why in v.data["fallback"] and v.data["p_unnecessary"] == 1.0


def test_bad_settings():
    with pytest.raises(SettingsError, match="necessity.mode must be one of"):
        GuardChain({"necessity": {"mode": "block"}}, {"necessity"})
    with pytest.raises(SettingsError, match=r"necessity\.threshold = 1\.5 is out of range"):
        GuardChain({"necessity": {"threshold": 1.5}}, {"necessity"})


# -- the paper's judge, the judge model, the arithmetic heuristic ---------------------------------

# Appendix A.3 of arXiv 2609.16268, "Tool necessity judge", copied here from the paper's text.
PAPER_JUDGE = (
    "You are judging whether THIS tool call is NECESSARY to solve the original question correctly. A tool "
    "call is NECESSARY only if a competent model cannot answer the question correctly without using this "
    "tool (at some point). Convenience uses (trivial arithmetic, formatting, double-checking) are NOT "
    "necessary. Do NOT judge whether the tool input looks reasonable by itself. Judge necessity for the "
    "question. Question: {question} Tool called: {tool_type} Tool input: {tool_content} Return ONLY JSON: "
    '{{"tool_necessary": true, "reason": "1-2 sentences"}}'
)
WORD_PROBLEM = "A shop sells 6 boxes of 7 pens. How many pens does it sell?"
JUDGE_SAYS = {
    "tokens": [
        ['{"tool_necessary": ', -0.3],
        ["false", -0.2],
        [', "reason": "6 times 7 is trivial arithmetic."}', -0.01],
    ]
}
SOLVER_TURNS = ["Let me compute.\n```python\nprint(6 * 7)\n```\n```output\n", "So the shop sells \\boxed{42} pens."]


@pytest.fixture
async def jupyter(tmp_path):
    from kernels.jupyter import JupyterKernel

    async with JupyterKernel(images_dir=tmp_path / "images") as k:
        yield k


def models_file(tmp_path, judge_script) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(
        f"""
[models.solver]
backend = "scripted"
chat_template = "chatml"
[models.solver.source]
kind = "script"
path = ""

[models.judge]
backend = "scripted"
chat_template = "chatml"
[models.judge.source]
kind = "script"
path = {json.dumps(str(judge_script))}
""",
        encoding="utf-8",
    )
    return path


async def solve(tmp_path, jupyter, solver: ScriptedBackend, settings: dict, judges: JudgeModels | None = None):
    """One run of WORD_PROBLEM through run_problem, the real loop and the real kernel; its events."""
    models = models_file(tmp_path, tmp_path / "judge.jsonl")
    given = RunInput(WORD_PROBLEM, gold="42", model="solver", models_file=models, out=tmp_path / "runs")
    events: list = []
    await run_problem(
        RunSpec(guards=("necessity",), guard_settings={"necessity": settings}),
        given,
        events.append,
        backend=solver,
        model_spec=load_models(models).get("solver"),
        kernel=jupyter,
        judge_models=judges,
    )
    return events


def asked(question: str, code: str) -> str:
    return render_named(
        "chatml",
        [{"role": "user", "content": PAPER_JUDGE.format(question=question, tool_type="python", tool_content=code)}],
    )


async def test_model_judge_asks_the_papers_prompt_verbatim(tmp_path, jupyter):
    solver = ScriptedBackend(
        [
            split_tokens(SOLVER_TURNS[0], -0.01),
            [Token(t, lp) for t, lp in JUDGE_SAYS["tokens"]],
            split_tokens(SOLVER_TURNS[1], -0.01),
        ],
        model_id="solver",
    )
    events = await solve(tmp_path, jupyter, solver, {"judge": "model"})
    (v,) = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "necessity"]
    # the model under test was asked, in a fresh chat, the paper's prompt for the question, the tool and its input
    assert solver.prompts[1] == asked(WORD_PROBLEM, "print(6 * 7)")
    assert v.data["judge"] == "model" and v.data["prompt"] == "paper" and v.data["judge_model"] == "solver"
    assert v.data["necessary"] is False and v.data["p_unnecessary"] == pytest.approx(math.exp(-0.2))
    assert v.data["logprob"] == -0.2 and v.data["reason"] == "6 times 7 is trivial arithmetic."
    (result,) = [e for e in events if isinstance(e, ev.ToolResult)]
    assert result.shown == "42" and events[-1].correct is True  # flag mode: the real kernel ran it


async def test_model_judge_runs_on_the_named_judge_model(tmp_path, jupyter):
    (tmp_path / "judge.jsonl").write_text(json.dumps(JUDGE_SAYS) + "\n", encoding="utf-8")
    solver = ScriptedBackend([split_tokens(t, -0.01) for t in SOLVER_TURNS], model_id="solver")
    judges = JudgeModels(tmp_path / "models.toml")
    try:
        events = await solve(tmp_path, jupyter, solver, {"judge": "model", "judge_model": "judge"}, judges)
        judge = judges.opened["judge"]
        assert isinstance(judge, ScriptedBackend) and judge.prompts == [asked(WORD_PROBLEM, "print(6 * 7)")]
    finally:
        await judges.aclose()
    (v,) = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "necessity"]
    assert v.data["judge_model"] == "judge" and v.data["necessary"] is False
    # the model under test was never asked: its second turn continues its own context
    assert len(solver.prompts) == 2 and solver.prompts[1].startswith(solver.prompts[0])
    assert [e for e in events if isinstance(e, ev.ToolResult)][0].shown == "42"
    assert "(model: judge)" in Necessity.display(v.record()).lines[0][-1].text


async def test_unknown_judge_model_is_rejected_at_start(tmp_path, jupyter):
    solver = ScriptedBackend([split_tokens(t, -0.01) for t in SOLVER_TURNS], model_id="solver")
    with pytest.raises(ConfigError, match="unknown model 'nosuch'") as e:
        await solve(tmp_path, jupyter, solver, {"judge": "model", "judge_model": "nosuch"})
    assert e.value.key == "necessity.judge_model" and "known models" in str(e.value)
    assert solver.prompts == []  # rejected before the model under test was asked anything


async def test_a_judge_that_fails_falls_back_visibly(tmp_path, jupyter):
    solver = ScriptedBackend([split_tokens(t, -0.01) for t in SOLVER_TURNS], model_id="solver")

    def broken(spec):
        raise RuntimeError("the judge would not load")

    events = await solve(
        tmp_path,
        jupyter,
        solver,
        {"judge": "model", "judge_model": "judge"},
        JudgeModels(tmp_path / "models.toml", opener=broken),
    )
    (v,) = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "necessity"]
    assert v.data["judge"] == "arithmetic" and "the judge would not load" in v.data["fallback"]


@pytest.mark.parametrize(
    "tokens, necessary, p, reason",
    [
        ([('{"tool_necessary": ', -0.3), ("false", -0.2), ("}", -0.1)], False, math.exp(-0.2), ""),
        (
            [("```json\n{", -0.1), ('"tool_necessary": true', -0.4), (', "reason": "a \\"loop\\""}', -0.1)],
            True,
            1 - math.exp(-0.4),
            'a "loop"',
        ),
        ([('{"tool_necessary": false, "reason": "easy"}', None)], False, 1.0, "easy"),
    ],
)
def test_read_paper_reply(tokens, necessary, p, reason):
    reply = JudgeReply("".join(t for t, _ in tokens), tuple(TokenLP(t, lp) for t, lp in tokens))
    got_necessary, got_p, _, got_reason = read_paper_reply(reply)
    assert (got_necessary, got_reason) == (necessary, reason) and got_p == pytest.approx(p)


def test_read_paper_reply_without_a_verdict():
    assert read_paper_reply(JudgeReply('{"reason": "the tool', (TokenLP('{"reason": "the tool', -0.1),))) is None


def test_arithmetic_heuristic_is_named_and_described_as_such():
    fields = {f.name: f for f in dataclasses.fields(Necessity.Settings)}
    assert Necessity.Settings().judge == "arithmetic" and fields["judge"].metadata["tag"] == "default"
    doc = fields["judge"].metadata["doc"]
    assert "heuristic of arithmetic difficulty" in doc and "not the paper's judgement" in doc
    assert fields["judge_prompt"].metadata["tag"] == "paper" and Necessity.Settings().judge_prompt == "paper"
    assert Necessity.Settings().judge_model == ""  # the model under test
    assert all(f.metadata["tag"] in ("paper", "default") for f in fields.values())


async def test_earlier_name_rule_still_loads_and_runs_the_heuristic(canned_kernel):
    _, _, _, (v,) = await run([code_turn(TRIVIAL), ANSWER], {"necessity": {"judge": "rule"}}, canned_kernel)
    assert v.data["judge"] == "arithmetic" and v.data["necessary"] is False
    assert "(arithmetic)" in Necessity.display(v.record()).lines[0][-1].text
    old = VerdictRecord("necessity", "on_code", FLAG, data={"necessary": True, "p_unnecessary": 0.0, "judge": "rule"})
    assert "(rule)" in Necessity.display(old).lines[0][-1].text  # an earlier trajectory reads as it was


@pytest.mark.parametrize(
    "question, code, necessary, words",
    [
        (
            "A floor is 123 by 456 tiles, 56088 in all. How many rows?",
            "print(123 * 456)",
            False,
            "trivial: only recomputes numbers the question states (123 * 456 = 56088); the rest is small arithmetic",
        ),
        (
            "A floor is 123 by 456 tiles. How many in all?",
            "print(123 * 456)",
            True,
            "needed: 123 * 456 is a long multiplication (3 x 3 digits)",
        ),
        (
            "Six numbers add up to 1,236: 100, 200, 300, 400, 111 and 125.",
            "print(100 + 200 + 300 + 400 + 111 + 125)",
            False,
            "trivial: only recomputes numbers the question states (the sum of 6 terms = 1236); the rest is small arithmetic",
        ),
        (
            "It costs $1,048,576.",
            "print(2 ** 20)",
            False,
            "trivial: only recomputes numbers the question states (2 ** 20 = 1048576); the rest is small arithmetic",
        ),
        ("What is 6 times 7?", "print(6 * 7)", False, "trivial: small arithmetic a competent model does in its head"),
    ],
)
def test_arithmetic_heuristic_reads_the_question(question, code, necessary, words):
    assert arithmetic_judge(code, question=question) == (necessary, 0.0 if necessary else 1.0, words)


def test_stated_numbers():
    assert stated_numbers("$1,200 for 3.5 hours at a 25% discount, 2,50 and 7.") == {
        Fraction(1200),
        Fraction(7, 2),
        Fraction(25),
        Fraction(1, 4),
        Fraction(2),
        Fraction(50),
        Fraction(7),
    }


def test_unnecessary_calls_metric_reads_the_question():
    piece = RunPiece(kind="code", text="print(123 * 456)", executed=True)
    run = RunRecord((piece,), (), "56088", None, None, problem="Is 56088 = 123 x 456?")
    assert Necessity.metrics(run)["unnecessary_calls"] == 1
    assert Necessity.metrics(RunRecord((piece,), (), None, None, None))["unnecessary_calls"] == 0


async def test_a_short_loop_is_flagged_unnecessary_through_the_loop(canned_kernel):
    # [paper] section 4.1: convenience uses (trivial arithmetic, formatting) are unnecessary; the
    # earlier heuristic said "not judged (counted as necessary)" for any loop
    loop = "total = 0\nfor k in range(1, 5):\n    total += k\nprint(f'{total} in all')"
    _, kernel, _, (v,) = await run([code_turn(loop), ANSWER], {}, canned_kernel)
    assert kernel.calls == [loop] and v.data["necessary"] is False and v.data["reason"].startswith("trivial")
