"""Budgets that hold: the run's wall time bounds a cell that is still running, and budgets no run
can keep are refused on the command line with a clear message."""

from __future__ import annotations

import time

import pytest

from tests.test_cli import tuiagent
from tuiagent.protocol import RunSettings


def test_the_wall_time_budget_holds_while_a_cell_runs(write_script, tmp_path):
    script = write_script("Loop.\n```python\nwhile True: pass\n```\n```output", "\\boxed{1}")
    started = time.monotonic()
    out = tuiagent(
        "solve",
        "p",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--max-time",
        "3",
        "--timeout",
        "20",
        "--json",
        "--out",
        str(tmp_path),
    )
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert took < 15, f"took {took:.1f} s"  # 3 s of budget, an interrupt, a process start
    assert '"timed out' in out.stdout or 'timed_out": true' in out.stdout


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--timeout", "inf"),
        ("--max-time", "inf"),
        ("--timeout", "nan"),
        ("--max-time", "1e300"),
        ("--max-tool-calls", "-1"),
    ],
)
def test_absurd_budgets_are_refused_clearly(option, value):
    out = tuiagent("solve", "p", "-m", "scripted", option, value)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "Invalid value" in out.stderr


@pytest.mark.parametrize("field", ["exec_timeout_s", "max_wall_s"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1, 10**9])
def test_run_settings_reject_non_finite_or_absurd_seconds(field, value):
    with pytest.raises(ValueError, match=field):
        RunSettings(**{field: value})


def test_a_zero_cell_timeout_is_refused_and_a_zero_wall_budget_is_a_run_that_ends_at_once():
    with pytest.raises(ValueError, match="exec_timeout_s"):
        RunSettings(exec_timeout_s=0)
    assert RunSettings(max_wall_s=0).max_wall_s == 0
