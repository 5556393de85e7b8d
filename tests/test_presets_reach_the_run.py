"""A preset's run budgets and sampling reach the run unchanged from every command-line front end
(``solve --preset``, ``eval -c``, ``fork --preset``); the app's front ends (``tuiagent --preset``,
a compare column, a fork in the app) are checked in tests/ui/test_presets_in_the_app.py. Each run's
``RunStarted`` is read back from its trajectory: what the run actually used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.eval.helpers import answer_turn, code_turn
from tuiagent.presets import user_presets_file

RUN = {"max_tool_calls": 6, "max_tokens": 700, "exec_timeout_s": 2.5, "output_chars": 300, "max_wall_s": 120.0}
SAMPLING = {"temperature": 0.3, "top_p": 0.9, "top_k": 20, "repeat_penalty": 1.05}
BUDGETED = f"""
[presets.budgeted]
description = "a preset that sets every budget and sampling value, and a guard setting"
guards = ["tim"]
run = {{ {", ".join(f"{k} = {v}" for k, v in RUN.items())} }}
sampling = {{ {", ".join(f"{k} = {v}" for k, v in SAMPLING.items())} }}
[presets.budgeted.guard_settings.tim]
flag_at = 3
"""


def write_budgeted_preset() -> None:
    path = user_presets_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BUDGETED, encoding="utf-8")


def assert_the_preset_reached(events: list[dict[str, Any]], *, guards: bool = True) -> None:
    """The run's recorded settings and sampling are the preset's, its budgets the user's (no guard
    raised them), and its guard is on with its setting."""
    started = events[0]
    assert started["type"] == "RunStarted"
    assert {k: started["settings"][k] for k in RUN} == RUN
    assert set(RUN) <= set(started["settings"]["explicit"]) and started["settings"]["raised"] == []
    assert {k: started["sampling"][k] for k in SAMPLING} == SAMPLING
    if guards:
        on = [(e["guard"], e["settings"]["flag_at"]) for e in events if e["type"] == "GuardToggled" and e["enabled"]]
        assert on == [("tim", 3)]


def tuiagent(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=180, cwd=cwd
    )


def read(path: Path) -> list[dict[str, Any]]:
    """A trajectory's events as JSON objects (after its header line)."""
    return [e for e in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if "type" in e]


def test_solve_preset(write_script, tmp_path):
    write_budgeted_preset()
    script = write_script("\\boxed{3}")
    done = tuiagent(
        "solve",
        "1+2",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--out",
        str(tmp_path / "run.jsonl"),
        "--preset",
        "budgeted",
    )
    assert done.returncode == 0, done.stderr
    assert_the_preset_reached(read(tmp_path / "run.jsonl"))


def test_solve_options_given_win_and_options_not_given_keep_the_presets(write_script, tmp_path):
    write_budgeted_preset()
    script = write_script("\\boxed{3}")
    done = tuiagent(
        "solve",
        "1+2",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--out",
        str(tmp_path / "run.jsonl"),
        "--preset",
        "budgeted",
        "--max-tool-calls",
        "2",
        "--set",
        "top_k=5",
        "--temperature",
        "0.6",
        "--set",
        "turn_max_tokens=64",
    )
    assert done.returncode == 0, done.stderr
    started = read(tmp_path / "run.jsonl")[0]
    assert (started["settings"]["max_tool_calls"], started["settings"]["max_tokens"]) == (2, RUN["max_tokens"])
    assert (started["sampling"]["top_k"], started["sampling"]["temperature"], started["sampling"]["top_p"]) == (
        5,
        0.6,
        SAMPLING["top_p"],
    )
    assert (started["sampling"]["max_tokens"], started["settings"]["max_tokens"]) == (64, RUN["max_tokens"])


def test_eval_config(write_script, tmp_path):
    write_budgeted_preset()
    script = write_script(code_turn("150 + 3"), answer_turn("153"))
    out = tmp_path / "eval"
    done = tuiagent(
        "eval",
        "demo",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--limit",
        "1",
        "-c",
        "budgeted",
        "--out",
        str(out),
        "-q",
        "-f",
        "json",
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "results.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert_the_preset_reached(read(out / record["trajectory"]))  # relative to the eval directory


def test_fork_preset(write_script, tmp_path):
    write_budgeted_preset()
    parent = write_script("Let me compute.\n```python\nx = 6\n```\n```output", "So \\boxed{6}.", name="p.jsonl")
    done = tuiagent(
        "solve",
        "What is 6 times 7?",
        "-m",
        "scripted",
        "--script",
        str(parent),
        "-g",
        "attc",
        "--out",
        str(tmp_path / "parent.jsonl"),
        "--sandbox",
        "off",
    )
    assert done.returncode == 0, done.stderr
    child = write_script("Let me compute.\n```python\nprint(x * 7)\n```\n```output", "So \\boxed{42}.", name="f.jsonl")
    forked = tuiagent(
        "fork",
        str(tmp_path / "parent.jsonl"),
        "--step",
        "1",
        "-m",
        "scripted",
        "--script",
        str(child),
        "--preset",
        "budgeted",
        "--out",
        str(tmp_path / "fork.jsonl"),
        "--sandbox",
        "off",
    )
    assert forked.returncode == 0, forked.stderr
    events = read(tmp_path / "fork.jsonl")
    assert_the_preset_reached(events, guards=False)  # the parent's steps replay its guards first
    own = [e for e in events if e["type"] == "GuardToggled" and e.get("reason") == "on at start"]
    assert [(e["guard"], e["enabled"]) for e in own][-1:] == [("tim", True)] and own[-1]["settings"]["flag_at"] == 3


def test_budget_options_restate_no_default():
    """solve's, fork's and eval's budget and sampling options default to None (not given), and their
    help reads the defaults from RunSettings: a changed default shows in --help and a preset's value
    is never overridden by a restated one."""
    import inspect

    from tuiagent.cli import fork, solve
    from tuiagent.core.run_spec import DEFAULTS
    from tuiagent.eval.cli import eval_command

    options = ("max_tool_calls", "max_tokens", "max_time", "timeout", "output_chars", "temperature", "seed")
    for command in (solve, fork, eval_command):
        params = inspect.signature(command).parameters
        assert all(params[name].default is None for name in options if name in params), command.__name__
    help_text = tuiagent("solve", "--help").stdout
    assert f"(default {DEFAULTS.max_tool_calls})" in help_text and f"(default {DEFAULTS.max_tokens};" in help_text
