"""`tuiagent eval` as a person runs it: real processes, a real Jupyter kernel pool, resumption, report forms."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.eval.helpers import answer_turn, code_turn
from tuiagent.core.trajectory import load
from tuiagent.eval.results import ResultStore


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=180)


def test_demo_eval_runs_resumes_and_reports(write_script, tmp_path):
    script = write_script(code_turn("150 + 3"), answer_turn("153"))
    out = tmp_path / "eval"
    args = [
        "eval",
        "demo",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--limit",
        "2",
        "-c",
        "none",
        "-c",
        "cot",
        "-c",
        "noop",
        "--concurrency",
        "2",
        "--out",
        str(out),
        "-q",
        "-f",
        "md",
        "-f",
        "csv",
        "-f",
        "json",
    ]
    first = tuiagent(*args)
    assert first.returncode == 0, first.stderr
    assert "6 run(s) planned, 0 already done: 6 to run" in first.stderr
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in lines) == sorted(
        f"demo/{pid}/{s}/0" for pid in ("bakery", "books") for s in ("none", "cot", "noop")
    )
    bakery = next(r for r in lines if r["key"] == "demo/bakery/none/0")
    assert (bakery["correct"], bakery["tcn"], bakery["erroneous"]) == (True, 1, 0)
    trajectory = [json.loads(x) for x in open(out / bakery["trajectory"])]  # relative to the eval directory
    assert next(e for e in trajectory if e.get("type") == "ToolResult")["shown"] == "153"  # a real kernel ran it
    assert {p.name for p in out.iterdir()} >= {
        "results.jsonl",
        "eval.json",
        "summary.md",
        "summary.csv",
        "summary.json",
        "runs",
    }

    again = tuiagent(*args)
    assert again.returncode == 0, again.stderr
    assert "6 already done: 0 to run" in again.stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 6  # nothing recomputed

    report = tuiagent(
        "eval", "demo", "-m", "scripted", "--out", str(out), "--report-only", "-f", "table", "--baseline", "cot"
    )
    assert report.returncode == 0, report.stderr
    assert "Pass@1" in report.stdout and "cot (base)" in report.stdout and "noop" in report.stdout


def test_a_bad_setting_exits_2_before_any_run(tmp_path):
    bad = tuiagent("eval", "demo", "-m", "scripted", "-c", "attc:attc.threshold=7", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "attc.threshold" in bad.stderr
    assert not (tmp_path / "x").exists()
    unknown = tuiagent("eval", "demo", "-m", "scripted", "--protocol", "nope", "--out", str(tmp_path / "x"))
    assert (
        unknown.returncode == 2
        and "unknown protocol 'nope'" in unknown.stderr
        and "cues, distractors, prunetir-ablation, tim, tooltax" in unknown.stderr
    )
    assert not (tmp_path / "x").exists()


def test_set_lays_a_run_value_under_every_setting_and_a_guard_value_is_refused(write_script, tmp_path):
    script = write_script(code_turn("75 / 6"), code_turn("75 // 6"), answer_turn("13"))
    out = tmp_path / "eval"
    args = ["eval", "demo", "-m", "scripted", "--script", str(script), "--limit", "1", "-c", "none", "-c", "attc"]
    done = tuiagent(*args, "--set", "max_tool_calls=1", "--set", "tool=calculator", "--out", str(out))
    assert done.returncode == 0, done.stderr
    records = ResultStore(out).records.values()
    assert len(records) == 2 and {r["tcn"] for r in records} == {1}  # the second call is over the budget
    manifest = json.loads((out / "eval.json").read_text())
    assert manifest["run"]["max_tool_calls"] == 1 and manifest["run"]["tool"] == "calculator"
    for r in records:
        started = load(Path(r["trajectory"])).events[0]
        assert started.settings["tool"] == "calculator" and "A calculator evaluates it" in started.prompt
    refused = tuiagent(*args, "--set", "attc.threshold=0.9", "--out", str(tmp_path / "x"))
    assert refused.returncode != 0 and "Traceback" not in refused.stderr and "belongs to a setting" in refused.stderr
    bad = tuiagent(*args, "--set", "tool=abacus", "--out", str(tmp_path / "y"))
    assert bad.returncode != 0 and "tool must be one of python, calculator" in bad.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_judge_json_without_a_judge_is_a_clear_error_before_any_run(tmp_path):
    bad = tuiagent("eval", "demo", "-m", "scripted", "--judge-json", "--out", str(tmp_path / "x"))
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "pass --judge MODEL" in bad.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("held", [False, True], ids=["free", "judge-json"])
def test_the_cue_probe_with_a_judge_end_to_end(write_script, tmp_path, held):
    script = write_script(code_turn("150 + 3"), answer_turn("153"))
    judge = write_script({"text": '{"tool_necessary": false, "reason": "easy"}'}, name="judge.jsonl")
    models = tmp_path / "models.toml"
    models.write_text(
        f'[models.judge]\nbackend = "scripted"\n[models.judge.source]\nkind = "script"\n'
        f"path = {json.dumps(str(judge))}\n",
        encoding="utf-8",
    )
    out = tmp_path / "eval"
    done = tuiagent(
        "eval",
        "demo",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--models",
        str(models),
        "--limit",
        "2",
        "--protocol",
        "cues:cue=cell",
        "--judge",
        "judge",
        *(["--judge-json"] if held else []),
        "-c",
        "none",
        "--out",
        str(out),
        "-q",
        "-f",
        "md",
    )
    assert done.returncode == 0, done.stderr
    assert "8 run(s) planned" in done.stderr and "judge judge: 4 call(s) judged" in done.stderr  # N and Y of 2 problems
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "tool not needed (Definition 1): items the no-tool run solves" in summary
    name = "judge+json" if held else "judge"  # replies held to the schema are judgements of their own
    assert f"judge {name}: 4 judgement(s) (necessity: 4 judged, 3 unparseable)" in summary  # its script ran out

    unknown = tuiagent(
        "eval",
        "demo",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--protocol",
        "cues",
        "--judge",
        "nosuch",
        "--out",
        str(tmp_path / "x"),
    )
    assert unknown.returncode == 2 and "unknown model 'nosuch'" in unknown.stderr and "Traceback" not in unknown.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["sigterm", "ctrl-c"])
def test_a_stopped_eval_records_its_session_and_says_how_to_go_on(write_script, tmp_path, sig, code):
    models = tmp_path / "slow.toml"
    models.write_text(
        '[models.scripted-slow]\nbackend = "scripted"\nchat_template = "raw"\n'
        '[models.scripted-slow.source]\nkind = "script"\npath = ""\n[models.scripted-slow.options]\ndelay_s = 0.05\n',
        encoding="utf-8",
    )
    script, out = write_script("word " * 400), tmp_path / "out"  # 20 s a run
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuiagent", "eval", "demo", "--limit", "2", "-c", "none", "--models", str(models)]
        + ["-m", "scripted-slow", "--script", str(script), "--out", str(out), "-q"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(out.glob("runs/*/*/*.jsonl")) and time.monotonic() < deadline:  # a run is in flight
            time.sleep(0.05)
        assert any(out.glob("runs/*/*/*.jsonl")), "no run started within 60 s"
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code
    finally:
        proc.kill()
    said = proc.stderr.read()
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in said and "run the same command again" in said
    assert ResultStore(out).manifest()["sessions"][-1]["interrupted"] is True


def test_the_eta_comes_from_the_mean_pace_once_a_run_has_finished():
    from tuiagent.eval.cli import eta

    assert eta(0, 6, 95.0) == "-:--:--"  # no run finished yet
    assert eta(1, 6, 90.0) == "0:07:30"  # one run of 90 s: five more
    assert eta(5, 6, 548.0) == "0:01:49"
    assert eta(6, 6, 600.0) == "0:00:00"


def test_the_report_leaves_out_tables_with_no_data_in_one_line(write_script, tmp_path):
    script = write_script(code_turn("150 + 3"), answer_turn("153"))
    args = ["eval", "demo", "-m", "scripted", "--script", str(script), "--limit", "2", "-c", "none"]
    done = tuiagent(*args, "--out", str(tmp_path / "eval"), "-f", "table")
    assert done.returncode == 0, done.stderr
    titles = [line for line in done.stdout.splitlines() if line.startswith("demo: ")]
    assert titles[0].startswith("demo: accuracy") and len(titles) == 4, titles  # 3 tables, then the line
    assert titles[-1].startswith("demo: no data for PruneTIR finding 1;") and "error episodes" in titles[-1]
