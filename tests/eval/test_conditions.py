"""The tool-use-tax conditions on scripted runs with known outcomes (the cue probe: test_cue_probe.py)."""

from __future__ import annotations

from pathlib import Path

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.report import summary_from_store
from tuiagent.eval.results import ResultStore
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}

# problem i -> right under (Full, Noop, CoT)
OUTCOMES = {1: (True, False, True), 2: (True, False, False), 3: (True, True, True), 4: (False, False, False)}


def tooltax_turns(job):
    i = number_in(job.problem.question)
    full, noop, cot = OUTCOMES[i]
    right, wrong = str(2 * i), str(2 * i + 1)
    condition = job.setting.condition
    if condition == "cot":
        return [answer_turn(right if cot else wrong)]
    if condition == "noop":
        return [code_turn(f"{i} + {i}"), answer_turn(right if noop else wrong)]
    if condition == "max1":  # wants two calls, gets one
        return [code_turn(f"{i} + {i}"), code_turn(f"{i} * 2"), answer_turn(right)]
    return [code_turn(f"{i} + {i}"), answer_turn(right if full else wrong)]  # full, oracle


async def test_tool_use_tax_conditions_gap_and_overlap(tmp_path, dataset):
    cfg = EvalConfig(datasets=[str(dataset(4))], settings=resolve_settings([], protocol="tooltax"),
                     out=tmp_path / "out", model="scripted")
    outcome = await run_eval(cfg, backend_factory=Factory(tooltax_turns), kernels=KERNELS, log=lambda m: None)
    assert outcome.ran == 20
    records = ResultStore(cfg.out).records

    def tool_outputs(key):
        return [e.shown for e in load(Path(records[key]["trajectory"])).events if isinstance(e, ev.ToolResult)]

    assert tool_outputs("tiny/2/noop/0") == ["Done."]  # the no-op stub, nothing executed
    assert tool_outputs("tiny/3/oracle/0") == ["6"]  # the gold answer
    assert tool_outputs("tiny/3/full/0") == ["6"]  # really computed (by the test kernel)
    assert records["tiny/1/cot/0"]["tcn"] == 0 and load(Path(records["tiny/1/cot/0"]["trajectory"])).events[0].mode == "cot"
    max1 = load(Path(records["tiny/1/max1/0"]["trajectory"])).events
    assert records["tiny/1/max1/0"]["tcn"] == 1 and [e.executed for e in max1 if isinstance(e, ev.ToolResult)] == [True, False]

    tax = summary_from_store(cfg.out)["datasets"]["tiny"]["tooltax"]
    assert tax["conditions"]["Agent-Full"] == {"setting": "full", "accuracy": 0.75}
    assert tax["conditions"]["NoTool-CoT"]["accuracy"] == 0.5
    assert tax["conditions"]["Agent-NoopTool"]["accuracy"] == 0.25
    assert tax["conditions"]["Agent-Max1Turn"]["accuracy"] == 1.0
    assert tax["gap"] == 0.25
    # tool-benefited (Full right, Noop wrong): problems 1 and 2; CoT solves 1 of them
    assert (tax["tool_benefited"], tax["tool_benefited_cot_solves"], tax["capability_overlap"]) == (2, 1, 0.5)


