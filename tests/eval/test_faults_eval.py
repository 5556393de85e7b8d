"""Fault injection as an eval protocol (eval --inject; tuiagent.eval.faults_report): the same fault
under every setting, recorded; the report's figures on hand-made records with hand-computed values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.cli import app
from tuiagent.core import events as ev
from tuiagent.core.trajectory import load
from tuiagent.eval import faults_report as fr
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.report import summary_from_store, to_markdown
from tuiagent.eval.results import ResultStore
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}


def solve_right(job):
    i = number_in(job.problem.question)
    return [code_turn(f"{i} + {i}"), answer_turn(str(2 * i))]


async def test_the_same_fault_under_every_setting_recorded_and_resumed(tmp_path, dataset):
    cfg = EvalConfig(
        datasets=[str(dataset(3))],
        settings=resolve_settings(["none", "attc", "cot"]),
        out=tmp_path / "out",
        model="scripted",
        inject=["wrong-number", "error"],
    )
    factory = Factory(lambda job: solve_right(job) if job.setting.spec.mode == "tool" else [answer_turn("2")])
    outcome = await run_eval(cfg, backend_factory=factory, kernels=KERNELS, log=lambda m: None)
    # 3 problems x (clean under 3 settings + 2 faults under the 2 tool settings: cot has no tool output)
    assert (outcome.total, outcome.ran, outcome.failed) == (3 * (3 + 2 * 2), 21, 0)
    store = ResultStore(cfg.out)
    assert "tiny/2~inject:wrong-number/attc/0" in store.records and "tiny/2~inject:error/none/0" in store.records
    assert not any(k.endswith("/cot/0") and "inject" in k for k in store.records)
    plans = {}
    for setting in ("none", "attc"):
        record = store.records[f"tiny/2~inject:wrong-number/{setting}/0"]
        inj = record["injection"]
        assert (inj["kind"], inj["call"], inj["applied"], inj["by"]) == ("wrong-number", 1, True, "protocol")
        plans[setting] = inj["plan"]
        events = load(Path(record["trajectory"])).events
        inter = next(e for e in events if isinstance(e, ev.Intervention))
        assert inter.replaced == "4" and inter.replacement == inj["detail"]["new"] == inj["supports"]
        assert next(e for e in events if isinstance(e, ev.ToolResult)).shown == inter.replacement
    assert plans["none"] == plans["attc"] and plans["none"]["seed"] != 0  # paired: one fault per problem and seed
    assert store.records["tiny/2/none/0"]["injection"] is None
    assert store.records["tiny/3~inject:error/attc/0"]["injection"]["detail"]["exception"] == "ZeroDivisionError"
    assert store.manifest()["inject"] == {"kinds": ["wrong-number", "error"], "at": 1, "broken": False}
    # resumed: nothing runs again; the clean run is shared by the faults
    again = await run_eval(cfg, backend_factory=factory, kernels=KERNELS, log=lambda m: None)
    assert (again.ran, again.already_done) == (0, 21)
    summary = summary_from_store(cfg.out)
    section = summary["datasets"]["tiny"]["faults"]
    assert set(section) == {"none", "attc"} and set(section["attc"]) == {"wrong-number", "error"}
    row = section["attc"]["wrong-number"]
    assert (row["pairs"], row["applied"], row["clean_accuracy"], row["accuracy"]) == (3, 3, 1.0, 1.0)
    assert row["recovered"]["k"] == 3 and row["adopted"]["k"] == 0
    assert summary["datasets"]["tiny"]["settings"]["attc"]["runs"] == 3  # the main table: clean runs only
    assert "injected faults (paired with the clean runs" in to_markdown(summary)


def _record(pid: str, variant: str, correct: bool, answer: str, **extra) -> dict:
    return {
        "key": f"d/{pid}{'~' + variant if variant else ''}/attc/0",
        "dataset": "d",
        "problem_id": pid,
        "variant": variant,
        "setting": "attc",
        "seed": 0,
        "correct": correct,
        "answer": answer,
        "injection": None,
        "tool_verdicts": [],
        **extra,
    }


def _attc(confidence: float, decision: str) -> list[dict]:
    return [{"call": 1, "guard": "attc", "action": "inject", "decision": decision, "confidence": confidence}]


def hand_made() -> list[dict]:
    """Four problems under ATTC, clean and with a wrong number at call 1.

    clean:    p1 right, p2 right, p3 right, p4 wrong
    injected: p1 answers the corrupted value (adopted), p2 re-ran and ended right (recovered),
              p3 wrong another way, p4's output had no number (not applied)."""
    v = "inject:wrong-number"

    def inj(applied: bool, supports: str | None, reran: bool = False) -> dict:
        return {"kind": "wrong-number", "call": 1, "applied": applied, "supports": supports, "reran": reran}

    return [
        _record("p1", "", True, "72", tool_verdicts=_attc(0.90, "rethink")),
        _record("p2", "", True, "8", tool_verdicts=_attc(0.96, "trust")),
        _record("p3", "", True, "5", tool_verdicts=_attc(0.80, "rethink")),
        _record("p4", "", False, "1"),
        _record("p1", v, False, "79", injection=inj(True, "79"), tool_verdicts=_attc(0.90, "rethink")),
        _record("p2", v, True, "8", injection=inj(True, "10", reran=True), tool_verdicts=_attc(0.97, "trust")),
        _record("p3", v, False, "6", injection=inj(True, "4"), tool_verdicts=_attc(0.85, "rethink")),
        _record("p4", v, False, "1", injection=inj(False, None)),
    ]


def test_report_figures_on_hand_made_records():
    section = fr.faults_section(hand_made(), ["attc"], "attc")
    row = section["attc"]["wrong-number"]
    assert (row["pairs"], row["applied"], row["clean_accuracy"], row["accuracy"]) == (4, 3, 0.75, 0.25)
    assert row["delta"] == -0.5  # (-1 + 0 - 1 + 0) / 4
    assert row["p_mcnemar"] == 0.5  # b = 2, c = 0: 2 * P(Bin(2, 1/2) <= 0)
    assert (row["adopted"]["k"], row["adopted"]["n"]) == (1, 3)  # p1 of p1-p3 (p4: no value supported)
    assert (row["recovered"]["k"], row["recovered"]["n"], row["reran"]) == (1, 3, 1)  # p2
    attc = row["attc"]
    # scores 1 - confidence: corrupted (p1-p3) .10 .03 .15; clean .10 .04 .20 (p4 not applied: out)
    # pairs won: .10 -> .5 + 1 + 0, .03 -> 0, .15 -> 1 + 1 + 0: 3.5 of 9
    assert attc["auroc"] == round(3.5 / 9, 4)
    assert (attc["rethink_corrupted"]["k"], attc["rethink_corrupted"]["n"]) == (2, 3)
    assert (attc["rethink_clean"]["k"], attc["rethink_clean"]["n"]) == (2, 3)
    assert attc["auroc_ci"][0] <= attc["auroc"] <= attc["auroc_ci"][1]


def test_prunetir_on_injected_errors_reuses_the_stuck_curve():
    v = "inject:error"
    inj = {"kind": "error", "call": 1, "applied": True, "supports": None, "reran": True}
    records = [
        _record("p1", "", True, "2", turn_trace="o.", stp=0, resampled=0, wtn=100),
        _record("p1", v, True, "2", injection=inj, turn_trace="eo.", stp=1, resampled=0, wtn=90),
        _record("p2", "", True, "4", turn_trace="o.", stp=0, resampled=0, wtn=100),
        _record("p2", v, False, "3", injection=inj, turn_trace="ee.", stp=0, resampled=1, wtn=150),
    ]
    p = fr.faults_section(records, ["attc"], None)["attc"]["error"]["prunetir"]
    assert p["stp"] == [1, 0] and p["stpr"] == [1, 0]
    curve = p["stuck_injected"]["curve"]
    assert (curve[0]["at_risk"], curve[0]["resolved"]) == (2, 1)  # k=1: p1 resolved, p2 failed again
    assert p["stuck_clean"]["episodes"] == 0 and p["tokens_saved"] is None  # this setting is the baseline


def test_eval_cli_unknown_kind_exit_2(tmp_path, dataset):
    args = ["eval", str(dataset(1)), "-m", "scripted", "--inject", "wrong-number,bogus", "-o", str(tmp_path / "o")]
    out = subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: unknown fault kind 'bogus'; use wrong-number, error, empty, timeout, stale"


def test_eval_cli_inject_runs_and_reports(tmp_path, dataset, write_script):
    script = write_script(code_turn("1 + 1"), answer_turn("2"))
    out = tmp_path / "o"
    args = ["eval", str(dataset(1)), "-m", "scripted", "--script", str(script), "-o", str(out), "-f", "md"]
    result = CliRunner().invoke(app, [*args, "--inject", "wrong-number", "-c", "none", "-c", "attc", "-q"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in records) == [
        "tiny/1/attc/0",
        "tiny/1/none/0",
        "tiny/1~inject:wrong-number/attc/0",
        "tiny/1~inject:wrong-number/none/0",
    ]
    injected = [r for r in records if r["variant"]]
    assert [r["injection"]["detail"]["new"] for r in injected] == ["1", "1"]  # 2 -> 1 under both settings
    assert "injected faults" in (out / "summary.md").read_text()
