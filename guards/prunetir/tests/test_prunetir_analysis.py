"""PruneTIR's analyses on hand-made runs whose right values are worked out by hand: erroneous calls by
outcome, the stuck curve (from turn traces and from a real scripted run's events), the ablation rows."""

from __future__ import annotations

import statistics

import pytest

from guards.prunetir.analysis import ablation_label, errors_by_outcome
from guards.prunetir.guard import PruneTIR, PruneTIRSettings
from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.protocols import settings_of
from tuiagent.eval.report import setting_row, summarize, summary_from_store, to_markdown, write_reports
from tuiagent.eval.results import ResultStore
from tuiagent.eval.stats import wilson
from tuiagent.eval.traces import episodes, record_trace, stuck_curve, turn_trace
from tuiagent.presets import parse_config, resolve_settings


def rec(setting: str, pid: int, correct: bool, *, erroneous: int = 0, tcn: int = 1, trace: str = "", **extra) -> dict:
    return {
        "key": f"d/{pid}/{setting}/0",
        "dataset": "d",
        "problem_id": str(pid),
        "variant": "",
        "setting": setting,
        "seed": 0,
        "model": "m",
        "correct": correct,
        "answer": "1",
        "reason": "answer",
        "tcn": tcn,
        "erroneous": erroneous,
        "wtn": 100,
        "generated_tokens": 50,
        "wall_s": 1.0,
        "turn_trace": trace,
        **extra,
    }


def test_the_trace_of_a_runs_events():
    events = [
        ev.RunStarted(
            run_id="r", problem="p", model_id="m", backend="b", mode="tool", prompt="", sampling={}, settings={}
        )
    ]
    for turn, error in ((1, True), (2, False), (3, None)):
        events.append(ev.TurnStarted(turn=turn, context_tokens=0))
        if error is not None:
            events.append(ev.ToolResult(call=turn, shown="", error=error, timed_out=False, duration_s=0, outputs=[]))
    events.append(ev.ContextPruned(guard="prunetir", truncate_to=1))
    events.append(ev.TurnStarted(turn=4, context_tokens=0))
    events.append(ev.ToolResult(call=4, shown="", error=False, timed_out=True, duration_s=0, outputs=[]))
    events.append(ev.TurnStarted(turn=5, context_tokens=0))
    events.append(
        ev.ToolResult(call=5, shown="", error=False, timed_out=False, duration_s=0, outputs=[], executed=False)
    )  # skipped while the tool is suspended: no executed call
    assert turn_trace(events) == "eo.|e."


def test_episodes_open_at_an_error_and_close_at_a_success_a_cut_or_the_end():
    assert episodes("oeoo") == [("o", "resolved")]
    assert episodes("eeeo") == [("eeo", "resolved")]  # the errors after e0 are failed attempts, not episodes
    assert episodes("ee|eo") == [("e", "cut"), ("o", "resolved")]
    assert episodes("e.e") == [(".e", "ended")]
    assert episodes("") == episodes("ooo") == []


def test_the_stuck_curve_by_hand():
    traces = ["eo", "eeo", "eeeo", "ee.", "e|", "eo."]
    # attempts: "o", "eo", "eeo", "e.", "" (cut at once), "o"
    result = stuck_curve(traces, k_max=4)
    curve = {p["k"]: p for p in result["curve"]}
    assert (curve[1]["at_risk"], curve[1]["resolved"]) == (5, 2)  # o, eo, eeo, e., o: 2 resolved at once
    assert (curve[2]["at_risk"], curve[2]["resolved"]) == (3, 1)  # eo, eeo, e.
    assert (curve[3]["at_risk"], curve[3]["resolved"]) == (1, 1)  # eeo
    assert curve[4] == {"k": 4, "at_risk": 0, "resolved": 0, "p": None, "ci": [None, None], "resolved_by_k": None}
    # by turn k: 1 - (1 - 2/5), 1 - (3/5)(2/3), then every open episode resolved
    assert [curve[k]["resolved_by_k"] for k in (1, 2, 3)] == [0.4, 0.6, 1.0]
    assert curve[1]["p"] == 0.4
    low, high = wilson(2, 5)
    assert curve[1]["ci"] == [round(low, 4), round(high, 4)] and low < 0.4 < high
    assert (result["episodes"], result["resolved"], result["cut"], result["ended"]) == (6, 4, 1, 1)
    assert stuck_curve(["eeeeeo"], k_max=2)["later"] == 1


def test_wilson_against_the_formula():
    low, high = wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)  # the textbook 95% Wilson bound for 0/10
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)


def test_erroneous_calls_in_correct_and_incorrect_runs():
    records = [
        rec("s", 1, True, erroneous=0, tcn=2),
        rec("s", 2, True, erroneous=1, tcn=4),
        rec("s", 3, False, erroneous=3, tcn=4),
        rec("s", 4, False, erroneous=1, tcn=1),
        rec("s", 5, False, erroneous=0, tcn=0),
        rec("s", 6, None, erroneous=5, tcn=5),
    ]  # no verdict: out
    out = errors_by_outcome(records)
    count, share = out["count"], out["share"]
    assert (count["correct"]["runs"], count["correct"]["mean"], count["correct"]["median"]) == (2, 0.5, 0.5)
    assert (count["incorrect"]["runs"], count["incorrect"]["median"]) == (3, 1.0)
    assert count["incorrect"]["mean"] == pytest.approx(4 / 3, abs=1e-4)
    assert count["delta"] == pytest.approx(4 / 3 - 0.5, abs=1e-4)
    lo, hi = count["delta_ci"]
    assert lo <= count["delta"] <= hi
    # shares over runs with a call: correct 0/2, 1/4; incorrect 3/4, 1/1 (the run without a call is out)
    assert (share["correct"]["runs"], share["correct"]["mean"]) == (2, 0.125)
    assert (share["incorrect"]["runs"], share["incorrect"]["mean"]) == (2, 0.875)
    assert share["incorrect"]["median"] == statistics.median([0.75, 1.0])
    by = out["accuracy_by_errors"]  # 0 errors: runs 1 (right), 5 (wrong); 1: 2 (right), 4 (wrong); 3+: 3 (wrong)
    assert {b: (c["runs"], c["accuracy"]) for b, c in by.items()} == {
        "0": (2, 0.5),
        "1": (2, 0.5),
        "2": (0, None),
        "3+": (1, 0.0),
    }


def spec(text: str) -> dict:
    return parse_config(text).describe()


def test_the_ablation_rows_are_named_as_the_paper_names_them():
    assert ablation_label(spec("none")) == "Base"
    assert ablation_label(spec("prunetir")) == "PruneTIR"
    assert ablation_label(spec("prunetir:prunetir.stp=false")) == "w/o STP"
    assert ablation_label(spec("prunetir:prunetir.stpr=off,prunetir.rtts=false")) == "w/o STPR+RTTS"
    assert ablation_label(spec("prunetir:prunetir.turn_limit=2")) == "PruneTIR (turn_limit=2)"
    assert ablation_label(spec("attc")) is None and ablation_label(spec("cot")) is None
    assert ablation_label(spec("noop")) is None  # another kernel is not the base


def test_the_protocol_gives_the_base_prunetirs_own_budget():
    settings = resolve_settings([], added=settings_of("prunetir-ablation"))
    assert [ablation_label(s.describe()) for s in settings] == ["Base", "PruneTIR", "w/o STP", "w/o STPR", "w/o RTTS"]
    assert settings[0].spec.run["max_tool_calls"] == PruneTIR.run_budget(PruneTIRSettings())["max_tool_calls"]


def test_the_ablation_table_takes_deltas_against_full_prunetir():
    names = ["none", "prunetir", "prunetir:prunetir.stp=false"]
    right = {"none": {1, 2}, "prunetir": {1, 2, 3, 4}, "prunetir:prunetir.stp=false": {1, 2, 3}}
    records = [
        rec(s, pid, pid in right[s], erroneous=1, tcn=2 + (s == "none"), trace="eo")
        for s in names
        for pid in range(1, 6)
    ]
    summary = summarize(records, settings=names, specs={s: spec(s) for s in names})
    rows = {r["variant"]: r for r in summary["datasets"]["d"]["prunetir"]["ablation"]}
    assert list(rows) == ["Base", "PruneTIR", "w/o STP"]
    assert (rows["PruneTIR"]["accuracy"], rows["PruneTIR"]["delta_vs_full"]) == (0.8, None)
    assert rows["w/o STP"]["delta_vs_full"] == pytest.approx(-0.2) and rows["Base"]["delta_vs_full"] == pytest.approx(
        -0.4
    )
    assert (
        rows["Base"]["tcn"] == 3.0 and rows["Base"]["paper"]["pass@1"] == "62.1%" and rows["w/o STP"]["paper"] is None
    )
    expected = setting_row(
        [r for r in records if r["setting"] == "none"], [r for r in records if r["setting"] == "prunetir"]
    )
    assert rows["Base"]["p_mcnemar"] == expected["p_mcnemar"]
    markdown = to_markdown(summary)
    assert "PruneTIR ablation" in markdown and "| w/o STP | prunetir:prunetir.stp=false |" in markdown
    assert "PruneTIR finding 1" in markdown and "stuck analysis" in markdown


def test_without_an_ablated_setting_there_is_no_ablation_table():
    records = [rec(s, 1, True, trace="eo") for s in ("none", "prunetir")]
    section = summarize(records, specs={s: spec(s) for s in ("none", "prunetir")})["datasets"]["d"]["prunetir"]
    assert section["ablation"] is None and set(section["stuck"]) == {"none", "prunetir"}


def test_a_record_with_neither_a_trace_nor_a_trajectory_has_no_trace(tmp_path):
    record = rec("s", 1, True, trajectory=str(tmp_path / "gone.jsonl"))
    del record["turn_trace"]
    assert record_trace(record) is None  # counted as "without a trace", never as a run without errors


ERR_THEN_FIX = "Let me compute.\n```python\nprint(1/0)\n```\n```output\n"


def err_then_fix(job):
    """Problem 1: two errors, then a fix; problem 2: one error then a fix; both then answer right."""
    i = number_in(job.problem.question)
    return [ERR_THEN_FIX] * (3 - i) + [code_turn(f"{i} + {i}"), answer_turn(str(2 * i))]


async def test_an_eval_records_traces_and_reports_the_stuck_curve_and_its_plot(tmp_path, dataset):
    cfg = EvalConfig(
        datasets=[str(dataset(2))],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        base=RunSpec(run={"max_tool_calls": 9}),
    )
    await run_eval(
        cfg,
        backend_factory=Factory(err_then_fix),
        kernels={"jupyter": lambda gold=None: CalcKernel()},
        log=lambda m: None,
    )
    summary = summary_from_store(cfg.out)
    stored = {r["problem_id"]: r for r in ResultStore(cfg.out).records.values()}
    assert stored["1"]["turn_trace"] == "eeo." and stored["2"]["turn_trace"] == "eo."
    traced = dict(stored["1"])
    del traced["turn_trace"]
    assert record_trace(traced) == "eeo."  # the same, folded from the run's trajectory
    stuck = summary["datasets"]["tiny"]["prunetir"]["stuck"]["none"]
    curve = {p["k"]: p for p in stuck["curve"]}
    assert (curve[1]["at_risk"], curve[1]["resolved"], curve[2]["at_risk"], curve[2]["resolved"]) == (2, 1, 1, 1)
    written, messages = write_reports(summary, cfg.out, ["png"])
    assert cfg.out / "plots" / "prunetir-stuck-tiny.png" in written and not messages
