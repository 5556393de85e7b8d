"""The paper profile (issue 42): one switch, the preset `paper` or `--faithful` on solve, fork and
eval, puts every guard that is on under its paper's (or reference code's) reading wherever tuiagent
has a choice; `guards --explain` and the eval report list the choices of ours still in force."""

from __future__ import annotations

import json
from pathlib import Path

from guards.chain import available, guard_class, ours_in_force, paper_settings
from tests.test_cli import tuiagent
from tuiagent.core.run_spec import RunSpec
from tuiagent.presets import faithful, load_presets


def started_settings(trajectory: Path) -> dict[str, dict]:
    """Each guard's settings as the run switched it on."""
    events = [json.loads(line) for line in trajectory.read_text(encoding="utf-8").splitlines()]
    return {e["guard"]: e["settings"] for e in events if e.get("type") == "GuardToggled" and e["enabled"]}


def test_every_paper_reading_names_real_settings_and_the_preset_sets_them_all():
    for name in available():
        cls = guard_class(name)
        fields = set(cls.Settings.__dataclass_fields__)
        assert set(cls.paper_reading) <= fields, name
    paper = load_presets()["paper"]
    assert paper.spec.guards == ("all",) and paper.spec.guard_settings == paper_settings(available())


def test_faithful_touches_only_the_guards_on_and_what_you_set_wins():
    spec = faithful(RunSpec(guards=("attc",), guard_settings={"attc": {"threshold": 0.9}}))
    assert set(spec.guard_settings) == {"attc"}
    assert spec.guard_settings["attc"] == {**guard_class("attc").paper_reading, "threshold": 0.9}
    assert faithful(RunSpec(guards=())).guard_settings == {}
    assert set(faithful(RunSpec(), inherited=("prunetir",)).guard_settings) == {"prunetir"}  # a fork's parent's


def test_solve_faithful_runs_each_guard_under_its_papers_reading(write_script, tmp_path):
    script = write_script("Compute.\n```python\nprint(6 * 7)\n```\n```output", "So \\boxed{42}.")
    done = tuiagent(
        "solve", "What is 6*7?", "-m", "scripted", "--script", str(script), "-g", "attc", "-g", "prunetir",
        "--faithful", "--out", str(tmp_path / "runs"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = started_settings(next((tmp_path / "runs").glob("*.jsonl")))
    assert {k: settings["attc"][k] for k in ("block", "tokens", "threshold")} == {
        "block": "first",
        "tokens": "start",
        "threshold": 0.97,
    }
    assert settings["prunetir"]["stpr_keeps_reasoning"] is True

    parent = next((tmp_path / "runs").glob("*.jsonl"))
    forked = tuiagent("fork", str(parent), "--step", "1", "--faithful", "-m", "scripted", "--script", str(script),
                      "--out", str(tmp_path / "forks"))  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert started_settings(next((tmp_path / "forks").glob("*.jsonl")))["attc"]["block"] == "first"


def test_guards_explain_lists_the_choices_of_ours_and_faithful_removes_the_papers():
    ours = tuiagent("guards", "--explain", "--preset", "all")
    paper = tuiagent("guards", "--explain", "--preset", "all", "--faithful")
    assert ours.returncode == paper.returncode == 0, ours.stderr + paper.stderr
    assert "attc.block = 'last'" in ours.stdout and "prunetir.stpr_keeps_reasoning = False" in ours.stdout
    assert "attc.block" not in paper.stdout and "stpr_keeps_reasoning" not in paper.stdout
    assert "prunetir.turn_limit = 3  [ours]" in paper.stdout  # no paper value: ours either way
    assert "no guard is on" in tuiagent("guards", "--explain", "--preset", "none").stdout


def test_ours_in_force_says_where_a_value_is_not_the_papers():
    settings = guard_class("attc").Settings(threshold=0.91)
    found = {key: doc for key, _, doc in ours_in_force("attc", settings)}
    assert found["threshold"].startswith("not the paper's reading (0.97)") and "block" in found


def test_eval_faithful_is_another_setting_and_the_report_names_the_readings(write_script, tmp_path):
    script = write_script("Compute.\n```python\nprint(6 * 7)\n```\n```output", "So \\boxed{42}.")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "question": "What is 6*7?", "answer": "42"}) + "\n")
    out = tmp_path / "ev"
    done = tuiagent("eval", str(data), "-m", "scripted", "--script", str(script), "-c", "attc", "--faithful",
                    "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "eval.json").read_text())
    assert [s["name"] for s in manifest["settings"]] == ["attc (faithful)"]
    assert "## Readings" in (out / "summary.md").read_text()
