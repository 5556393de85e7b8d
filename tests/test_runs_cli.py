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
