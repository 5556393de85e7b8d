"""`tuiagent calibrate` as a person runs it: fit what is collected, refuse to mix records without
--resume, and (slow) the real path with SmolLM2 on one question."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuiagent.config.calibration import load_calibration


def tuiagent(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=timeout)


def write_data(path: Path, n: int) -> Path:
    path.write_text(
        "".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n" for i in range(n))
    )
    return path


def test_fit_only_writes_the_file_and_report(tmp_path, synthetic_records):
    records = tmp_path / "r.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records(model="scripted")))
    data = write_data(tmp_path / "d.jsonl", 3)
    out = tuiagent(
        "calibrate",
        "scripted",
        "--data",
        str(data),
        "--n",
        "0",
        "--records",
        str(records),
        "--out-dir",
        str(tmp_path / "cal"),
    )
    assert out.returncode == 0, out.stderr
    assert "No separation" in out.stdout and "wrote" in out.stdout
    loaded = load_calibration(tmp_path / "cal" / "scripted.toml")
    assert loaded.meta["heldout_questions"] == 12 and "attc" in loaded.guards
    assert (tmp_path / "cal" / "scripted.md").is_file()
    refused = tuiagent("calibrate", "scripted", "--data", str(data), "--n", "2", "--records", str(records))
    assert refused.returncode == 1 and "--resume" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("damage", ["a field", "the question id"])
def test_a_damaged_record_is_named_not_a_traceback(tmp_path, synthetic_records, damage):
    rows = synthetic_records(model="scripted")
    if damage == "a field":
        del rows[3]["tool"]["correct"]
    else:
        del rows[3]["qid"]
    records = tmp_path / "r.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = write_data(tmp_path / "d.jsonl", 3)
    cal = tmp_path / "cal"
    out = tuiagent(
        "calibrate", "scripted", "--data", str(data), "--n", "0", "--records", str(records), "--out-dir", str(cal)
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"a record in {records} lacks what the fits read (KeyError" in out.stderr
    assert not cal.exists() or not any(cal.iterdir())  # nothing written


@pytest.mark.slow
def test_smollm2_collects_one_question_and_fits(tmp_path):
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import install_state

    if install_state(load_models().get("smollm2-135m")) not in ("ready", "assembled-on-first-use"):
        pytest.skip("SmolLM2 is not installed")
    data = write_data(tmp_path / "d.jsonl", 3)
    records = tmp_path / "r.jsonl"
    args = (
        "calibrate",
        "smollm2-135m",
        "--data",
        str(data),
        "--start",
        "1",
        "--n",
        "1",
        "--records",
        str(records),
        "--out-dir",
        str(tmp_path / "cal"),
        "--threads",
        "1",
    )
    out = tuiagent(*args)
    assert out.returncode == 0, out.stderr[-2000:]
    (record,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["v"] == 2 and record["qid"] == 1 and "blocks" in record["tool"] and "cot" in record
    assert load_calibration(tmp_path / "cal" / "smollm2-135m.toml").meta["model"] == "smollm2-135m"
    again = tuiagent(*args, "--resume")  # nothing left to run: it only fits again
    assert again.returncode == 0 and "0 to run" in again.stdout
