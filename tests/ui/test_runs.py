"""The open-run list reads the runs directory cheaply; whatever else lies there must not break it."""

from __future__ import annotations

import json
import shutil

from tuiagent.core import events as ev
from tuiagent.runs import recent_runs


def test_recent_runs_lists_trajectories_and_skips_other_files(ui, tmp_path):
    shutil.copy(ui.DATA / "plain.jsonl", tmp_path / "plain.jsonl")
    (tmp_path / "list.jsonl").write_text("[1]\n")
    (tmp_path / "binary.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    (tmp_path / "folder.jsonl").mkdir()
    finished = ev.RunFinished(
        reason="answer",
        answer="a\u2028b",
        correct=None,
        tool_calls=0,
        erroneous_calls=0,
        generated_tokens=1,
        context_tokens=1,
        wall_s=0.1,
    )
    header = json.dumps({"schema": ev.SCHEMA, "version": ev.SCHEMA_VERSION})
    # a hand-edited second line, and an answer with a character that str.splitlines takes for a line end
    (tmp_path / "odd.jsonl").write_text(
        f"{header}\n[2]\n{json.dumps(ev.to_dict(finished), ensure_ascii=False)}\n", encoding="utf-8"
    )
    runs = {r.path.name: r for r in recent_runs(tmp_path)}
    assert set(runs) == {"plain.jsonl", "odd.jsonl"}
    assert (runs["odd.jsonl"].answer, runs["odd.jsonl"].reason, runs["odd.jsonl"].problem) == ("a\u2028b", "answer", "")
    assert runs["plain.jsonl"].reason == "answer"
