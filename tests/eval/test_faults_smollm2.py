"""`tuiagent eval --inject` end to end on the real SmolLM2-135M in real kernels: the clean run and the
injected ones under two settings, each injected run recording its fault, the report's section written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends.conftest import smollm2_path  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

QUESTION = {"question": "What is 17 times 23? Use Python.", "answer": "17 * 23 = 391\n#### 391"}


def test_eval_inject_on_smollm2(tmp_path: Path, smollm2_path):  # noqa: F811 - the fixture
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps(QUESTION) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tuiagent", "eval", str(data), "--model", "smollm2-135m", "--inject"]
    cmd += ["wrong-number,timeout", "-c", "none", "-c", "attc+prunetir", "--max-tokens", "80"]
    cmd += ["--max-tool-calls", "3", "--out", str(out), "-f", "md", "-f", "json", "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2 * (1 + 2)
    injected = [r for r in records if r["variant"]]
    assert all(r["variant"].startswith("inject:") for r in injected)
    for r in injected:  # a fault is recorded wherever the model made the call it aims at
        assert r["injection"] is None or r["injection"]["kind"] == r["variant"].removeprefix("inject:")
    by_variant: dict[str, list] = {}
    for r in injected:
        by_variant.setdefault(r["variant"], []).append((r["injection"] or {}).get("plan"))
    for plans in by_variant.values():  # the same fault under both settings
        assert plans[0] == plans[1] or None in plans
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    section = summary["datasets"]["one"]["faults"]
    assert set(section) == {"none", "attc+prunetir"}
    assert set(section["none"]) == {"wrong-number", "timeout"}
    assert "injected faults (paired with the clean runs" in (out / "summary.md").read_text(encoding="utf-8")
