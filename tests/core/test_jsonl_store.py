"""The append-only JSONL files (results, generations, records): an appender whose file is replaced
under it goes on in the new file instead of writing into the unlinked one."""

from __future__ import annotations

import json
import os
import shutil

from tuiagent.core.jsonl_store import JsonlAppender, read_jsonl


def test_an_appender_follows_its_file_when_it_is_replaced(tmp_path):
    """What `git stash` then `git stash pop` did to a tracked results.jsonl mid-eval: the path gets a
    new file with the old lines; every record appended after that was lost with the unlinked one."""
    path = tmp_path / "results.jsonl"
    with JsonlAppender(path, key="key") as out:
        out.append({"key": "a"})
        copy = tmp_path / "copy.jsonl"
        shutil.copy(path, copy)
        os.replace(copy, path)  # a new file at the path, the same lines
        out.append({"key": "b"})
        path.unlink()  # gone: the next record starts the file again
        out.append({"key": "c"})
        out.append({"key": "d"})
    records, skipped = read_jsonl(path, key="key")
    assert [r["key"] for r in records] == ["c", "d"] and skipped == 0


def test_the_replaced_file_keeps_what_was_appended_before_and_after(tmp_path):
    path = tmp_path / "results.jsonl"
    with JsonlAppender(path, key="key") as out:
        out.append({"key": "a"})
        copy = tmp_path / "copy.jsonl"
        shutil.copy(path, copy)
        os.replace(copy, path)
        out.append({"key": "b"})
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["a", "b"]
