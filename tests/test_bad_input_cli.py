"""Bad input found by the second hostile round (issue 40 item 5): each is one clear line and exit
code 2 through the real CLI, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.test_cli import tuiagent


def test_the_oracle_kernel_without_a_gold_answer(tmp_path):
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": "So \\boxed{4}.", "logprob": -0.1}) + "\n")
    out = tuiagent("solve", "What is 2 + 2?", "--preset", "oracle", "-m", "scripted", "--script", str(script))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "oracle kernel prints the run's gold answer" in out.stderr and "--gold" in out.stderr


@pytest.mark.parametrize(
    "manifest",
    ['{"model": 5, "settings": "x"', "[1, 2]", "\xff\xfe garbage"],
    ids=["cut short", "not an object", "not text"],
)
def test_a_damaged_eval_manifest_on_report_only_and_on_resume(tmp_path, manifest):
    results = tmp_path / "ev"
    results.mkdir()
    (results / "eval.json").write_bytes(manifest.encode("latin-1"))
    (results / "results.jsonl").write_text("")
    report = tuiagent("eval", str(results), "--report-only")
    assert report.returncode == 2 and "Traceback" not in report.stderr, report.stderr
    assert "eval.json" in report.stderr and "fix:" in report.stderr
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    resume = tuiagent("eval", str(data), "-m", "scripted", "--out", str(results))
    assert resume.returncode == 2 and "Traceback" not in resume.stderr, resume.stderr
    assert "eval.json" in resume.stderr


def test_a_script_without_the_scripted_model_is_refused(tmp_path):
    """--script only means something to the scripted model: with another it was ignored in silence."""
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": "So \\boxed{4}.", "logprob": -0.1}) + "\n")
    out = tuiagent("solve", "What is 2 + 2?", "--script", str(script), "-m", "smollm2-135m")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--script replays turns on the scripted model" in out.stderr and "--model scripted" in out.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_preset_or_setting_that_is_not_a_finite_number(tmp_path, value):
    """nan passed every range check and ran (temperature = nan); inf in an int setting overflowed."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "presets.toml").write_text(f"[presets.odd]\nguards = []\n[presets.odd.sampling]\ntemperature = {value}\n")
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": "So \\boxed{4}.", "logprob": -0.1}) + "\n")
    by_preset = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuiagent",
            "solve",
            "2 + 2?",
            "--preset",
            "odd",
            "-m",
            "scripted",
            "--script",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TUIAGENT_CONFIG_DIR": str(config)},
    )
    by_set = tuiagent("solve", "2 + 2?", "-m", "scripted", "--script", str(script), "--set", f"top_k={value}")
    for out in (by_preset, by_set):
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert "must be a finite number" in out.stderr or "must be a number" in out.stderr, out.stderr
