"""``eval --shard I/N`` and merging shard directories: which problems a shard holds, what its
directory records, and a merge that equals the unsharded eval or says why it cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.errors import UserError
from tuiagent.eval.datasets import Problem
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.merge import merge_shards
from tuiagent.eval.report import summary_from_store
from tuiagent.eval.results import MANIFEST, ResultsError, ResultStore
from tuiagent.eval.shards import parse_shard, shard_of
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}
# what a run's record says about the run itself (not when or how fast it ran)
REPORTED = ("accuracy", "acc_ci", "runs", "problems", "tool_call_rate", "delta", "delta_ci", "p_mcnemar")
SAME_RUN = ("answer", "correct", "reason", "tcn", "generated_tokens", "turns", "setting_fp", "question_hash")


def solve(job):
    i = number_in(job.problem.question)
    return [code_turn(f"{i} + {i}"), answer_turn(str(2 * i if i % 3 else i))]  # every third one wrong


async def _eval(out: Path, data: Path, shard=None, configs=("none", "attc")) -> Path:
    cfg = EvalConfig(
        datasets=[str(data)], settings=resolve_settings(list(configs)), out=out, model="scripted", shard=shard
    )
    outcome = await run_eval(cfg, backend_factory=Factory(solve), kernels=KERNELS, log=lambda m: None)
    assert outcome.failed == 0
    return out


def test_parse_shard():
    assert parse_shard("2/4") == (2, 4) and parse_shard(" 1 / 1 ") == (1, 1)
    for bad in ("0/2", "3/2", "1/0", "1", "a/b", "-1/2"):
        with pytest.raises(UserError, match="--shard"):
            parse_shard(bad)


def test_shards_partition_the_problem_list_in_order():
    problems = [Problem("d", str(i), f"q{i}", "1") for i in range(10)]
    slices = [shard_of(problems, (i, 3)) for i in (1, 2, 3)]
    assert [[p.id for p in s] for s in slices] == [["0", "3", "6", "9"], ["1", "4", "7"], ["2", "5", "8"]]
    assert sorted(p.id for s in slices for p in s) == sorted(p.id for p in problems)


async def test_merged_shards_equal_the_unsharded_eval(tmp_path, dataset):
    data = dataset(5)
    whole = await _eval(tmp_path / "whole", data)
    shards = [await _eval(tmp_path / f"s{i}", data, (i, 2)) for i in (1, 2)]
    manifest = ResultStore(shards[1]).manifest()
    assert manifest["shard"]["index"] == 2 and manifest["shard"]["problems"] == ["tiny/2", "tiny/4"]
    assert merge_shards(shards, tmp_path / "merged") == []
    merged, unsharded = ResultStore(tmp_path / "merged").records, ResultStore(whole).records
    assert sorted(merged) == sorted(unsharded) and len(merged) == 10
    for key, record in unsharded.items():
        assert {k: merged[key][k] for k in SAME_RUN} == {k: record[k] for k in SAME_RUN}
    got, want = summary_from_store(tmp_path / "merged"), summary_from_store(whole)
    for name in ("none", "attc"):
        ours, theirs = got["datasets"]["tiny"]["settings"][name], want["datasets"]["tiny"]["settings"][name]
        assert {k: ours.get(k) for k in REPORTED} == {k: theirs.get(k) for k in REPORTED}
        assert (ours["accuracy"], ours["runs"]) == (0.8, 5)


async def test_a_merge_refuses_mixed_evals_and_says_what_is_missing(tmp_path, dataset):
    data = dataset(4)
    one, two = [await _eval(tmp_path / f"s{i}", data, (i, 2)) for i in (1, 2)]
    with pytest.raises(ResultsError, match=r"shard\(s\) 2/2 missing"):
        merge_shards([one], tmp_path / "m")
    with pytest.raises(ResultsError, match="given twice"):
        merge_shards([one, one], tmp_path / "m")
    with pytest.raises(ResultsError, match="one of the shards"):
        merge_shards([one, two], one)
    other = await _eval(tmp_path / "other", data, (2, 2), configs=("none", "prunetir"))
    with pytest.raises(ResultsError, match="settings differ"):
        merge_shards([one, other], tmp_path / "m")
    path = two / MANIFEST
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "model": "another"}))
    with pytest.raises(ResultsError, match="model differ"):
        merge_shards([one, two], tmp_path / "m")
    path.write_text(json.dumps({**manifest, "cues": ["cell"]}))  # a key the cue probe's protocol names
    with pytest.raises(ResultsError, match="cues differ"):
        merge_shards([one, two], tmp_path / "m")
    tally = {"judge": "j", "judged": 2, "changed": 1, "unparseable": 0}
    path.write_text(json.dumps({**manifest, "distractor_validity": tally}))  # the tool-use tax's: summed
    merge_shards([one, two], tmp_path / "summed")
    assert json.loads((tmp_path / "summed" / MANIFEST).read_text())["distractor_validity"] == tally
    path.write_text(json.dumps(manifest))
    lines = (two / "results.jsonl").read_text().splitlines()
    kept = [line for line in lines if '"problem_id": "4"' not in line]  # a shard with a problem not run yet
    (two / "results.jsonl").write_text("\n".join(kept) + "\n")
    assert len(ResultStore(two).records) == 2
    assert merge_shards([one, two], tmp_path / "m") == [f"shard 2/2 ({two}): 1 problem(s) with no run: tiny/4"]
    with pytest.raises(ResultsError, match="not a shard"):
        merge_shards([one, await _eval(tmp_path / "whole", data)], tmp_path / "m2")


async def test_a_directory_keeps_to_its_shard(tmp_path, dataset):
    data = dataset(4)
    out = await _eval(tmp_path / "s1", data, (1, 2))
    with pytest.raises(UserError, match="holds the runs of shard 1/2, not of shard 2/2"):
        await _eval(out, data, (2, 2))
    with pytest.raises(UserError, match="shard 5/5 has no problems"):
        await _eval(tmp_path / "s5", data, (5, 5))


async def test_report_only_merges_directories_from_the_cli(tmp_path, dataset):
    from tuiagent.cli import app

    data = dataset(4)
    dirs = [str(await _eval(tmp_path / f"s{i}", data, (i, 2))) for i in (1, 2)]
    runner = CliRunner()
    result = runner.invoke(app, ["eval", *dirs, "--report-only", "-q", "-f", "json"])
    assert result.exit_code != 0 and "needs --out" in str(result.output) + str(result.exception)
    merged = tmp_path / "merged"
    result = runner.invoke(app, ["eval", *dirs, "--report-only", "-q", "-f", "json", "--out", str(merged)])
    assert result.exit_code == 0, result.output
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["datasets"]["tiny"]["settings"]["none"]["runs"] == 4
