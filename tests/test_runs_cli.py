"""`tuiagent runs`: the saved-runs index from the shell."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from typer.testing import CliRunner

from tuiagent.runs_cli import runs_app

DATA = Path(__file__).parent / "ui" / "data"


def test_list_filter_show(tmp_path):
    runs = Path(os.environ["TUIAGENT_DATA_DIR"]) / "runs"
    runs.mkdir(parents=True)
    shutil.copy(DATA / "plain.jsonl", runs / "plain.jsonl")
    shutil.copy(DATA / "guarded.jsonl", runs / "guarded.jsonl")
    (runs / "bad.jsonl").write_text("[1]\n")
    r = CliRunner()
    out = r.invoke(runs_app, ["list", "--json"])
    assert out.exit_code == 0, out.output
    ids = {json.loads(line)["id"] for line in out.stdout.splitlines()}
    assert ids == {"plain", "guarded"}
    assert "skipped" in out.stderr
    out = r.invoke(runs_app, ["list", "-q", "squares", "--json"])
    assert "plain" in [json.loads(line)["id"] for line in out.stdout.splitlines()]
    assert r.invoke(runs_app, ["show", "pla"]).exit_code == 0
    assert r.invoke(runs_app, ["show", "nosuch"]).exit_code == 2


def test_list_shows_math_as_it_reads_and_raw_math_as_written():
    from tuiagent.core import events as ev
    from tuiagent.core.trajectory import Recorder

    runs = Path(os.environ["TUIAGENT_DATA_DIR"]) / "runs"
    with Recorder(runs / "halves.jsonl") as rec:
        rec.write(ev.RunStarted("r1", r"Halve \(3 \times 17\) apples", "m", "scripted", "tool", "", {}, {}))
        rec.write(ev.RunFinished("answer", r"\frac{51}{2}", None, 0, 0, 9, 9, 0.5))
    r = CliRunner()
    shown = r.invoke(runs_app, ["list"]).stdout
    assert "⁵¹⁄₂" in shown and "Halve 3 × 17 apples" in shown and "\\frac" not in shown
    raw = r.invoke(runs_app, ["list", "--raw-math"]).stdout
    assert r"\frac{51}{2}" in raw and r"\(3 \times 17\)" in raw
    assert json.loads(r.invoke(runs_app, ["list", "--json"]).stdout)["answer"] == r"\frac{51}{2}"  # data as written


def test_the_guards_on_at_start_are_read_past_the_sandbox_notice(tmp_path):
    from tuiagent.core import events as ev
    from tuiagent.core.trajectory import Recorder
    from tuiagent.runs import run_info

    with Recorder(tmp_path / "run.jsonl") as rec:
        rec.write(ev.RunStarted("r1", "2+2", "m", "scripted", "tool", "", {}, {}))
        rec.write(ev.Notice(level="info", message="kernel sandbox: strict"))
        for guard in ("necessity", "tim"):
            rec.write(ev.GuardToggled(guard=guard, enabled=True, settings={}, reason="on at start"))
    info = run_info(tmp_path / "run.jsonl")
    assert info is not None and info.guards == "necessity+tim"


def test_runs_with_interventions_are_marked_and_filtered():
    from tuiagent.core import events as ev
    from tuiagent.core.trajectory import Recorder

    runs = Path(os.environ["TUIAGENT_DATA_DIR"]) / "runs"
    for name, interventions in [
        ("plain", []),
        ("edited", [("output", None), ("text", None)]),
        ("faulty", [("output", "empty")]),
    ]:
        with Recorder(runs / f"{name}.jsonl") as rec:
            rec.write(ev.RunStarted(name, "2+2", "m", "scripted", "tool", "", {}, {}))
            for target, fault in interventions:
                rec.write(
                    ev.Intervention(target=target, by="person", turn=1, replaced="4", replacement="5", fault=fault)
                )
            rec.write(ev.RunFinished("answer", "4", None, 1, 0, 9, 9, 0.5))
    r = CliRunner()
    listed = {
        json.loads(line)["id"]: json.loads(line) for line in r.invoke(runs_app, ["list", "--json"]).stdout.splitlines()
    }
    assert {k: v["interventions"] for k, v in listed.items()} == {
        "plain": [],
        "edited": ["output", "text"],
        "faulty": ["fault:output"],
    }
    only = r.invoke(runs_app, ["list", "--interventions"]).stdout.splitlines()[1:]  # under the header
    assert len(only) == 2 and any("output+text" in line for line in only) and not any("plain" in line for line in only)


def test_list_has_a_header_the_whole_model_name_and_no_grade_for_a_cancelled_run():
    from tuiagent.core import events as ev
    from tuiagent.core.trajectory import Recorder

    runs = Path(os.environ["TUIAGENT_DATA_DIR"]) / "runs"
    model = "qwen2.5-coder-1.5b"
    with Recorder(runs / "stopped.jsonl") as rec:
        rec.write(ev.RunStarted("r1", "What is 6 times 7?", model, "llama", "tool", "", {}, {}, gold="42"))
        rec.write(ev.RunFinished("cancelled", None, False, 0, 0, 3, 9, 0.5))
    with Recorder(runs / "missed.jsonl") as rec:
        rec.write(ev.RunStarted("r2", "What is 6 times 8?", model, "llama", "tool", "", {}, {}, gold="48"))
        rec.write(ev.RunFinished("answer", "47", False, 0, 0, 3, 9, 0.5))
    r = CliRunner()
    lines = r.invoke(runs_app, ["list"]).stdout.splitlines()
    assert lines[0].split() == ["when", "id", "model", "guards", "answer", "graded", "edited", "problem"]
    stopped = next(line for line in lines if "stopped" in line)
    assert model in stopped and "cancelled" in stopped and "wrong" not in stopped
    assert stopped.split()[-6] == "-"  # graded: a cancelled run is not
    assert "wrong" in next(line for line in lines if "missed" in line)
    assert [json.loads(x)["id"] for x in r.invoke(runs_app, ["list", "--wrong", "--json"]).stdout.splitlines()] == [
        "missed"
    ]
    assert "when" not in r.invoke(runs_app, ["list", "-q", "nothing-matches"]).stdout  # no header without rows


def test_a_forks_guards_are_those_on_at_its_fork_point(tmp_path):
    """A fork's file starts with its copy of the parent's steps (the parent's guards among them), then
    the fork mark and its own: the list shows the fork's own, once each, however long the copy (it read
    24 lines and joined both sets: "attc+gstep+necessity+necessity+prunetir+tim+tim" in the walk of issue 39),
    as the compare screen reads them (core.compare.guards_label)."""
    from tuiagent.core import events as ev
    from tuiagent.core.compare import guards_label
    from tuiagent.core.fork import FORK_MARK
    from tuiagent.core.trajectory import Recorder, load
    from tuiagent.runs import run_info

    parent = {"run_id": "20261206-000000-abcdef", "trajectory": "p.jsonl", "step": 2}
    with Recorder(tmp_path / "fork.jsonl") as rec:
        rec.write(ev.RunStarted("f1", "2+2", "m", "scripted", "tool", "", {}, {}, parent=parent))
        rec.write(ev.Notice(level="info", message="kernel sandbox: strict"))
        for guard in ("necessity", "tim"):  # the parent's, copied
            rec.write(ev.GuardToggled(guard=guard, enabled=True, settings={}, reason="on at start"))
        for turn in (1, 2):
            rec.write(ev.TurnStarted(turn=turn, context_tokens=100))
            for _ in range(20):
                rec.write(ev.TokenDelta(turn=turn, text="x", logprob=-0.1))
        rec.write(ev.Notice(level="info", message=f"{FORK_MARK} 20261206-000000-abcdef after step 2"))
        for guard in ("tim", "attc"):
            rec.write(ev.GuardToggled(guard=guard, enabled=True, settings={}, reason="on at start"))
        rec.write(ev.TurnStarted(turn=3, context_tokens=150))
    info = run_info(tmp_path / "fork.jsonl")
    assert info is not None and info.guards == "attc+tim" == guards_label(load(tmp_path / "fork.jsonl").events)
