"""The append-only JSONL store behind the eval's results, the training records and the reused
generations: what a kill leaves, characters str.splitlines would split at, and the files shipped in
the repository (they load whole and resume)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tuiagent.core.jsonl_store import JsonlStore
from tuiagent.eval.results import ResultStore
from tuiagent.training.gstep import open_records

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    [*REPO.glob("data/gstep/*.jsonl"), *REPO.glob("data/calibration/*.jsonl"), *REPO.glob("evals/*/results.jsonl")]
)


def test_a_line_cut_short_by_a_kill_is_skipped_and_the_next_append_starts_a_new_line(tmp_path):
    path = tmp_path / "r.jsonl"
    with JsonlStore(path, key="qid") as store:
        store.append({"qid": 0})
    with path.open("a") as f:
        f.write('{"qid": 1, "trunc')  # what a kill in mid-write leaves
    again = JsonlStore(path, key="qid")
    assert [r["qid"] for r in again.records] == [0] and again.skipped_lines == 1
    with again:
        again.append({"qid": 2})
    assert [r["qid"] for r in JsonlStore(path).records] == [0, 2]


def test_a_record_holding_line_separators_reads_back_whole(tmp_path):
    text = (
        "a\u2028b\x85c\u2029d"  # str.splitlines splits at each; json.dumps(ensure_ascii=False) leaves them as they are
    )
    with JsonlStore(tmp_path / "r.jsonl", key="qid") as store:
        store.append({"qid": 0, "text": text})
    again = JsonlStore(tmp_path / "r.jsonl", key="qid")
    assert again.latest[0]["text"] == text and again.skipped_lines == 0


def test_the_latest_record_of_a_key_wins_and_every_record_is_kept_in_order(tmp_path):
    with JsonlStore(tmp_path / "r.jsonl", key="k") as store:
        for k, v in (("a", 1), ("b", 2), ("a", 3)):
            store.append({"k": k, "v": v})
    again = JsonlStore(tmp_path / "r.jsonl", key="k")
    assert {k: r["v"] for k, r in again.latest.items()} == {"a": 3, "b": 2}
    assert [r["v"] for r in again.records] == [1, 2, 3]


def test_records_without_their_key_are_refused_on_writing_and_skipped_on_reading(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"k": "a"}\n{"other": 1}\n[1, 2]\n\xff\n', encoding="latin-1")
    store = JsonlStore(path, key="k")
    assert list(store.latest) == ["a"] and store.skipped_lines == 3
    with pytest.raises(ValueError, match="'k' field"):
        store.append({"other": 2})


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_the_shipped_files_load_every_line(path):
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    store = JsonlStore(path)
    assert store.records == lines and store.skipped_lines == 0


def test_the_shipped_eval_results_resume(tmp_path):
    assert any(p.name == "results.jsonl" for p in SHIPPED)
    for path in (p for p in SHIPPED if p.name == "results.jsonl"):
        copy = tmp_path / path.parent.name
        shutil.copytree(path.parent, copy, ignore=shutil.ignore_patterns("runs"))
        keys = [json.loads(line)["key"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        with ResultStore(copy) as store:
            assert all(store.done(k) for k in keys) and not store.done("new/1/none/0")
            store.append({"key": "new/1/none/0", "model": "m"})
        assert set(ResultStore(copy).records) == {*keys, "new/1/none/0"}


def test_the_shipped_training_records_resume(tmp_path):
    for path in (p for p in SHIPPED if p.name != "results.jsonl"):
        model = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])["model"]
        copy = tmp_path / path.parent.name / path.name
        copy.parent.mkdir()
        shutil.copy(path, copy)
        qids = {json.loads(line)["qid"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
        with open_records(copy, model, "a gate") as store:
            assert set(store.latest) == qids
            store.append({"qid": -1, "model": model})
        assert set(open_records(copy, model, "a gate").latest) == {*qids, -1}


def test_the_reused_generations_after_a_kill_keep_the_next_one(tmp_path):
    """The memo wrote its next line onto a line cut short by a kill, losing both; it now starts a new line."""
    from tuiagent.eval.reuse import GENERATIONS, Generated, GenerationMemo

    one = Generated((("4", -0.5), ("\u2028", None)), (19, 20), "eos", 0.25)
    memo = GenerationMemo(tmp_path)
    memo.put("a", one)
    memo.close()
    with (tmp_path / GENERATIONS).open("a") as f:
        f.write('{"key": "b", "tok')
    resumed = GenerationMemo(tmp_path)
    assert len(resumed) == 1 and resumed.get("a") == one
    resumed.put("c", one)
    resumed.close()
    again = GenerationMemo(tmp_path)
    assert len(again) == 2 and again.get("c") == one
