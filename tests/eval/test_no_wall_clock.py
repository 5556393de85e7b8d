"""An eval's runs have no wall clock unless asked (issue 38): a slow run ends by the model, the
budget in force enters each setting's fingerprint, and an eval made under the old 600 s default
says how to go on with it. The real-model side (records equal at 1 and 4 in flight, none cut by
the clock) is in test_batched_eval.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import load
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.report import summary_from_store
from tuiagent.eval.results import ResultsError, ResultStore
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}


def slow_right(job):
    i = number_in(job.problem.question)
    return [code_turn(f"{i} + {i}"), answer_turn(str(2 * i))]


def config(tmp_path: Path, data: Path, **kw) -> EvalConfig:
    return EvalConfig(
        datasets=[str(data)], settings=resolve_settings(["none"]), out=tmp_path / "out", model="scripted", **kw
    )


async def run(cfg: EvalConfig) -> dict:
    # 0.1 s a token, about 30 tokens a run: about 3 s, past a 1 s budget on any machine
    await run_eval(cfg, backend_factory=Factory(slow_right, delay_s=0.1), kernels=KERNELS, log=lambda m: None)
    return ResultStore(cfg.out).records


async def test_without_max_time_a_slow_run_ends_by_the_model(tmp_path, dataset):
    records = await run(config(tmp_path, dataset(1)))
    (record,) = records.values()
    assert (record["reason"], record["correct"]) == ("answer", True)
    started = load(Path(record["trajectory"])).events[0]
    assert started.settings["max_wall_s"] is None


async def test_max_time_still_cuts_and_the_report_names_it(tmp_path, dataset):
    records = await run(config(tmp_path, dataset(1), base=RunSpec(run={"max_wall_s": 1.0})))
    (record,) = records.values()
    assert record["reason"] == "time_budget"
    assert summary_from_store(tmp_path / "out")["time_cut"] == [record["key"]]


async def test_the_budget_in_force_is_part_of_the_fingerprint(tmp_path, dataset):
    data = dataset(1)
    await run(config(tmp_path, data))
    with pytest.raises(ResultsError, match="defined differently"):
        await run(config(tmp_path, data, base=RunSpec(run={"max_wall_s": 300.0})))


async def test_an_eval_made_under_the_old_600_s_default_says_how_to_go_on(tmp_path, dataset):
    data = dataset(1)
    old = config(tmp_path, data, base=RunSpec(run={"max_wall_s": 600.0}))
    await run(old)  # 600 s hashes as a base without the key: what evals before 2026-12-05 wrote
    with pytest.raises(ResultsError, match="pass --max-time 600"):
        await run(config(tmp_path, data))
    records = await run(old)  # and with --max-time 600 it resumes: nothing runs again
    assert len(records) == 1
