"""Summaries and their forms (terminal, Markdown, CSV, JSON, PNG), and the statistics behind them."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from fractions import Fraction

import pytest

from tuiagent.eval.report import print_terminal, summarize, to_csv, to_markdown, write_reports
from tuiagent.eval.stats import bootstrap_diff, mcnemar_exact, paired_bootstrap, tool_bin


def rec(setting: str, pid: int, correct: bool, *, seed: int = 0, tcn: int = 1, **extra) -> dict:
    return {
        "key": f"d/{pid}/{setting}/{seed}",
        "dataset": "d",
        "problem_id": str(pid),
        "variant": "",
        "setting": setting,
        "seed": seed,
        "model": "m",
        "correct": correct,
        "answer": "1",
        "reason": "answer",
        "tcn": tcn,
        "erroneous": 0,
        "wtn": 100,
        "generated_tokens": 50,
        "wall_s": 1.0,
        **extra,
    }


def records() -> list[dict]:
    out = []
    for pid in range(10):
        out.append(rec("base", pid, pid < 4, tcn=pid))  # 4/10 right, tool calls 0..9
        out.append(rec("attc", pid, pid < 9, tcn=2, attc_trust=1, tool_ignored=pid == 9))  # 9/10 right
    return out


def test_mcnemar_exact_matches_the_binomial():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 1024)
    assert 0 < mcnemar_exact(400, 600) < 1e-9  # large n stays finite
    for b, c in [(2, 11), (7, 5), (0, 20), (30, 45)]:  # against the binomial tail summed exactly
        n = b + c
        tail = Fraction(sum(math.comb(n, i) for i in range(min(b, c) + 1)), 2**n)
        assert mcnemar_exact(b, c) == pytest.approx(min(1.0, float(2 * tail)))


def test_bootstrap_and_bins():
    mean, low, high = paired_bootstrap([1, 0, 1, 1, 0, 1, 1, 1])
    assert mean == 0.75 and 0.3 < low <= mean <= high <= 1.0
    assert paired_bootstrap([1, 0, 1]) == paired_bootstrap([1, 0, 1])  # seeded
    outcomes = [1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1]  # the same runs, ended in another order: the same interval
    assert paired_bootstrap(outcomes) == paired_bootstrap(outcomes[::-1]) == paired_bootstrap(sorted(outcomes))
    assert bootstrap_diff(outcomes, [0, 1, 0]) == bootstrap_diff(outcomes[::-1], [1, 0, 0])
    assert [tool_bin(n) for n in (0, 3, 4, 7, 8, 11, 12, 40)] == [
        "0-3",
        "0-3",
        "4-7",
        "4-7",
        "8-11",
        "8-11",
        "12+",
        "12+",
    ]


def test_summary_rows_paired_differences_and_bins():
    summary = summarize(records(), settings=["base", "attc"], baseline="base")
    rows = summary["datasets"]["d"]["settings"]
    assert rows["base"]["accuracy"] == 0.4 and "delta" not in rows["base"]
    attc = rows["attc"]
    assert (attc["accuracy"], attc["delta"], attc["mcnemar_b"], attc["mcnemar_c"]) == (0.9, 0.5, 0, 5)
    assert attc["p_mcnemar"] == pytest.approx(2 / 32, abs=1e-4)
    assert attc["delta_ci"][0] > 0 and attc["delta_ci"][1] <= 1.0
    assert (attc["tcn"], attc["attc_trust"], attc["tool_ignored"], attc["tool_call_rate"]) == (2.0, 10, 1, 1.0)
    bins = summary["datasets"]["d"]["tool_bins"]["base"]
    assert bins["0-3"] == {"runs": 4, "accuracy": 1.0} and bins["4-7"] == {"runs": 4, "accuracy": 0.0}
    assert bins["8-11"]["runs"] == 2 and bins["12+"] == {"runs": 0, "accuracy": None}


def test_seeds_average_into_pass_at_1_and_pair_by_seed():
    rs = [rec("a", 1, True, seed=0), rec("a", 1, False, seed=1), rec("b", 1, True, seed=0), rec("b", 1, True, seed=1)]
    rows = summarize(rs, baseline="a")["datasets"]["d"]["settings"]
    assert rows["a"]["accuracy"] == 0.5 and rows["a"]["problems"] == 1 and rows["a"]["runs"] == 2
    assert (rows["b"]["delta"], rows["b"]["mcnemar_b"], rows["b"]["mcnemar_c"]) == (0.5, 0, 1)


def test_forms(tmp_path, capsys):
    summary = summarize(records(), settings=["base", "attc"], baseline="base")
    md = to_markdown(summary)
    assert "## d" in md and "| base (base) |" in md and "| attc | 10 | 10 | 0.900 |" in md
    assert "accuracy by tool calls" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(summary))))
    assert [r["setting"] for r in rows] == ["base", "attc"] and rows[1]["delta"] == "0.5"
    assert rows[1]["mcnemar_c"] == "5" and rows[0]["acc_tcn_4-7"] == "0.0" and rows[0]["is_baseline"] == "True"
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200)
    print_terminal(summary, console)
    text = console.file.getvalue()
    assert "Pass@1" in text and "attc" in text and "McNemar p" in text and "TIM flags" in text
    written, messages = write_reports(summary, tmp_path, ["md", "csv", "json"])
    assert sorted(p.name for p in written) == ["summary.csv", "summary.json", "summary.md"] and messages == []
    assert json.loads((tmp_path / "summary.json").read_text())["datasets"]["d"]["settings"]["attc"]["accuracy"] == 0.9


def test_runs_cut_by_the_wall_clock_are_named_as_load_dependent():
    rs = records()
    rs[3] = {**rs[3], "reason": "time_budget", "answer": None, "correct": False}
    summary = summarize(rs, settings=["base", "attc"], baseline="base")
    assert summary["time_cut"] == [rs[3]["key"]]
    md = to_markdown(summary)
    assert "## Runs cut by the wall-time budget" in md and f"- {rs[3]['key']}" in md and "machine's load" in md
    assert "wall-time budget" not in to_markdown(summarize(records(), baseline="base"))
    from rich.console import Console

    console = Console(file=io.StringIO(), width=300)
    print_terminal(summary, console)
    assert "1 run(s) ended at the wall-time budget" in console.file.getvalue()


def test_png_plots_or_a_message(tmp_path, monkeypatch):
    summary = summarize(records(), settings=["base", "attc"], baseline="base")
    if "matplotlib" in sys.modules or _has_matplotlib():
        written, messages = write_reports(summary, tmp_path / "a", ["png"])
        assert sorted(p.name for p in written) == ["accuracy-d.png", "tool-bins-d.png"]
        assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    written, messages = write_reports(summary, tmp_path / "b", ["png"])
    assert written == [] and messages == ["plots skipped: matplotlib is not installed (pip install 'tuiagent[eval]')"]


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
