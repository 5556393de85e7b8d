"""The tool-use-tax conditions on scripted runs with known outcomes (the cue probe: test_cue_probe.py)."""

from __future__ import annotations

from pathlib import Path

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, expr_turn, number_in
from tuiagent.core import events as ev
from tuiagent.core import prompts
from tuiagent.core.trajectory import load
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.protocols import settings_of
from tuiagent.eval.report import summary_from_store, to_markdown
from tuiagent.eval.results import ResultStore
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}

# problem i -> right under (Full, Noop, CoT, FCStyle)
OUTCOMES = {
    1: (True, False, True, True),
    2: (True, False, False, False),
    3: (True, True, True, False),
    4: (False, False, False, False),
}


def tooltax_turns(job, code_turn=code_turn):
    i = number_in(job.problem.question)
    full, noop, cot, fcstyle = OUTCOMES[i]
    right, wrong = str(2 * i), str(2 * i + 1)
    condition = job.setting.spec.condition
    if condition == "cot":
        return [answer_turn(right if cot else wrong)]
    if condition == "fcstyle":  # writes code in the tool format and its own output: nothing runs it
        return [code_turn(f"{i} + {i}") + f"{right}\n```\n" + answer_turn(right if fcstyle else wrong)]
    if condition == "noop":
        return [code_turn(f"{i} + {i}"), answer_turn(right if noop else wrong)]
    if condition == "max1":  # wants two calls, gets one
        return [code_turn(f"{i} + {i}"), code_turn(f"{i} * 2"), answer_turn(right)]
    return [code_turn(f"{i} + {i}"), answer_turn(right if full else wrong)]  # full, oracle, evidence


async def test_the_seven_tool_use_tax_conditions(tmp_path, dataset):
    cfg = EvalConfig(
        datasets=[str(dataset(4))],
        settings=resolve_settings([], added=settings_of("tooltax")),
        out=tmp_path / "out",
        model="scripted",
    )
    logs: list[str] = []
    outcome = await run_eval(cfg, backend_factory=Factory(tooltax_turns), kernels=KERNELS, log=logs.append)
    assert outcome.ran == 28
    assert any("without --protocol distractors its section is computed on the questions as written" in m for m in logs)
    records = ResultStore(cfg.out).records

    def events(key):
        return load(Path(records[key]["trajectory"])).events

    def tool_outputs(key):
        return [e.shown for e in events(key) if isinstance(e, ev.ToolResult)]

    assert tool_outputs("tiny/2/noop/0") == ["Done."]  # the no-op stub, nothing executed
    assert tool_outputs("tiny/3/oracle/0") == ["6"]  # the gold answer
    assert tool_outputs("tiny/3/full/0") == ["6"]  # really computed (by the test kernel)
    assert records["tiny/1/cot/0"]["tcn"] == 0 and events("tiny/1/cot/0")[0].mode == "cot"
    fcstyle = events("tiny/1/fcstyle/0")
    assert fcstyle[0].mode == "fcstyle" and prompts.TOOL_SYSTEM.splitlines()[0] in fcstyle[0].prompt
    assert prompts.COT_SYSTEM not in fcstyle[0].prompt and tool_outputs("tiny/1/fcstyle/0") == []
    assert records["tiny/1/fcstyle/0"]["tcn"] == 0 and records["tiny/1/fcstyle/0"]["answer"] == "2"
    max1 = events("tiny/1/max1/0")
    assert records["tiny/1/max1/0"]["tcn"] == 1 and [e.executed for e in max1 if isinstance(e, ev.ToolResult)] == [
        True,
        False,
    ]
    assert events("tiny/1/evidence/0")[0].problem == "What is 1 plus 1?"  # no distractor: as written

    tax = summary_from_store(cfg.out)["datasets"]["tiny"]["tooltax"]
    assert tax["scope"] == "clean" and tax["missing"] == [] and list(tax["scopes"]) == ["clean"]
    assert tax["tool"] == "python"  # the report says so, and that the paper's GSM8K agent had a calculator
    clean = tax["scopes"]["clean"]
    acc = {k: v["accuracy"] for k, v in clean["accuracy"].items()}
    assert acc == {
        "NoTool-CoT": 0.5,
        "NoTool-FCStyle": 0.25,
        "Agent-NoopTool": 0.25,
        "Agent-Full": 0.75,
        "Agent-OracleCalc": 0.75,
        "Agent-OracleEvidence": 0.75,
        "Agent-Max1Turn": 1.0,
    }
    d = clean["deltas"]
    assert (d["gap"]["value"], d["sty"]["value"], d["frc"]["value"], d["cmp"]["value"]) == (0.25, -0.25, 0.0, 0.5)
    assert d["turns"]["value"] == -0.25  # Full 0.75 against Max1Turn 1.0
    # tool-benefited (Full right, Noop wrong): problems 1 and 2; CoT solves 1 of them
    assert (clean["overlap"]["of"], clean["overlap"]["count"], clean["overlap"]["share"]) == (2, 1, 0.5)
    # the one wrong Full run (problem 4) is wrong under CoT already
    assert clean["attribution"]["n_w"] == 1 and clean["attribution"]["genuine"]["count"] == 1


async def test_the_conditions_with_a_calculator_as_the_tool(tmp_path, dataset):
    """The paper's GSM8K agent is "equipped only with a calculator" (arXiv 2605.00136, section 3.1):
    protocol tooltax-calculator offers one in every condition with the tool prompt, the real
    calculator computes, and the report says which tool the chain used."""
    cfg = EvalConfig(
        datasets=[str(dataset(4))],
        settings=resolve_settings([], added=settings_of("tooltax-calculator")),
        out=tmp_path / "out",
        model="scripted",
    )
    factory = Factory(lambda job: tooltax_turns(job, code_turn=expr_turn))
    outcome = await run_eval(cfg, backend_factory=factory, kernels=KERNELS, log=lambda m: None)
    assert outcome.ran == 28
    records = ResultStore(cfg.out).records

    def events(key):
        return load(Path(records[key]["trajectory"])).events

    full = events("tiny/3/full:tool=calculator/0")
    assert "A calculator evaluates it" in full[0].prompt and "Jupyter" not in full[0].prompt
    assert full[0].settings["tool"] == "calculator"
    assert [e.shown for e in full if isinstance(e, ev.ToolResult)] == ["6"]  # "3 + 3", by the calculator
    assert "A calculator evaluates it" in events("tiny/1/fcstyle:tool=calculator/0")[0].prompt
    noop = events("tiny/2/noop:tool=calculator/0")
    assert "A calculator" in noop[0].prompt and [e.shown for e in noop if isinstance(e, ev.ToolResult)] == ["Done."]
    assert events("tiny/1/cot/0")[0].prompt.count("calculator") == 0

    summary = summary_from_store(cfg.out)
    tax = summary["datasets"]["tiny"]["tooltax"]
    assert tax["tool"] == "calculator" and tax["missing"] == []
    assert tax["scopes"]["clean"]["accuracy"]["Agent-Full"]["accuracy"] == 0.75  # as with Python: same turns
    assert "the tool: a calculator, one arithmetic expression a call" in to_markdown(summary)


async def test_a_python_block_the_calculator_cannot_take_is_an_error_the_model_reads(tmp_path, dataset):
    def turns(job):
        return [code_turn("math.ceil(75 / 6)"), expr_turn("75 / 6"), answer_turn("13")]

    cfg = EvalConfig(
        datasets=[str(dataset(1))],
        settings=resolve_settings(["full:tool=calculator"]),
        out=tmp_path / "out",
        model="scripted",
    )
    await run_eval(cfg, backend_factory=Factory(turns), kernels=KERNELS, log=lambda m: None)
    (record,) = ResultStore(cfg.out).records.values()
    results = [e for e in load(Path(record["trajectory"])).events if isinstance(e, ev.ToolResult)]
    assert [r.error for r in results] == [True, False] and results[1].shown == "12.5"
    assert results[0].shown.startswith("NotArithmetic: the calculator takes one arithmetic expression")
    assert record["tcn"] == 2 and record["answer"] == "13"
