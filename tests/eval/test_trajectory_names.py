"""Eval trajectory file names: one file per run key, even for long ids that share a prefix; the
names older versions gave keep loading and resuming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.core.trajectory import load
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.results import MAX_NAME, ResultsError, ResultStore, legacy_safe_name, safe_name
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}
PREFIX = "competition/" + "x" * 130  # over MAX_NAME: the old names were cut to the same 120 characters


def solve_right(job):
    i = number_in(job.problem.question)
    return [code_turn(f"{i} + {i}"), answer_turn(str(2 * i))]


def long_ids(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "long.jsonl"
    rows = [{"id": f"{PREFIX}/{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(tmp_path: Path, data: Path) -> EvalConfig:
    return EvalConfig(datasets=[str(data)], settings=resolve_settings(["none"]), out=tmp_path / "out", model="scripted")


def test_safe_names_keep_a_hash_of_the_whole_text_and_the_old_names_that_fit():
    a, b = safe_name(PREFIX + "/1"), safe_name(PREFIX + "/2")
    assert a != b and len(a) == len(b) == MAX_NAME
    assert legacy_safe_name(PREFIX + "/1") == legacy_safe_name(PREFIX + "/2")  # the collision that was
    for text in ("gsm8k", "17", "a b/c", "y" * 120, "é" * 50):  # names that fit: as older versions gave them
        assert safe_name(text) == legacy_safe_name(text)


async def test_long_ids_sharing_a_prefix_get_a_trajectory_each(tmp_path):
    cfg = config(tmp_path, long_ids(tmp_path, 3))
    outcome = await run_eval(cfg, backend_factory=Factory(solve_right), kernels=KERNELS, log=lambda m: None)
    assert (outcome.ran, outcome.failed) == (3, 0)
    records = ResultStore(cfg.out).records.values()
    files = {r["trajectory"] for r in records}
    assert len(files) == 3
    for r in records:  # each file holds its own run
        assert load(Path(r["trajectory"])).events[0].gold == r["gold"]


async def test_a_stored_eval_with_the_old_names_resumes_and_its_files_are_not_overwritten(tmp_path):
    data = long_ids(tmp_path, 2)
    cfg = config(tmp_path, data)
    await run_eval(cfg, backend_factory=Factory(solve_right), kernels=KERNELS, log=lambda m: None)
    store_file = cfg.out / "results.jsonl"
    # rewrite it as an older version left it: run 0's trajectory under the old (cut) name, run 1 not run yet
    first = json.loads(store_file.read_text().splitlines()[0])
    old = Path("runs/long/none") / f"{legacy_safe_name(first['problem_id'])}-s0.jsonl"
    (cfg.out / first["trajectory"]).rename(cfg.out / old)
    store_file.write_text(json.dumps({**first, "trajectory": old.as_posix()}) + "\n")
    factory = Factory(solve_right)
    outcome = await run_eval(cfg, backend_factory=factory, kernels=KERNELS, log=lambda m: None)
    assert (outcome.already_done, outcome.ran, outcome.failed) == (1, 1, 0)
    records = ResultStore(cfg.out).records
    assert Path(records[first["key"]]["trajectory"]) == (cfg.out / old).resolve()  # still read from the old name
    assert all(load(Path(r["trajectory"])).events[0].gold == r["gold"] for r in records.values())


def test_a_run_whose_file_belongs_to_another_key_is_refused(tmp_path):
    store = ResultStore(tmp_path / "out")
    store.append({"key": "d/a/none/0", "trajectory": str(tmp_path / "out/runs/d/none/a-s0.jsonl")})
    with pytest.raises(ResultsError, match="runs d/a/none/0 and d/b/none/0 would share the trajectory file"):
        store.check_trajectories({"d/b/none/0": tmp_path / "out/runs/d/none/a-s0.jsonl"})
    with pytest.raises(ResultsError, match="would share"):  # two planned runs alike
        store.check_trajectories({"d/c/none/0": tmp_path / "x.jsonl", "d/e/none/0": tmp_path / "x.jsonl"})
    store.check_trajectories({"d/a/none/0": tmp_path / "out/runs/d/none/a-s0.jsonl"})  # its own: fine
