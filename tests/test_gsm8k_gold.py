"""One GSM8K gold parser (tuiagent.parsing.gsm8k_gold) read by the eval's dataset loader and the
training collections alike, on the cases where their two parsers used to differ."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tuiagent.eval.datasets import DatasetError, load_jsonl
from tuiagent.parsing import gsm8k_gold
from tuiagent.training.records import read_questions

CASES = [  # (the answer's last line, the gold)
    ("#### 72", "72"),
    ("#### 1,203", "1203"),
    ("#### -5", "-5"),
    ("#### 0.5", "0.5"),
    ("#### 72.", "72"),  # training read '72.', which no answer '72' matched
    ("####  1,000,000 ", "1000000"),
]


@pytest.mark.parametrize(("last", "gold"), CASES)
def test_the_number_after_the_last_marker(last, gold):
    assert gsm8k_gold(f"work #### not this\n<<1+1=2>>2\n{last}") == gold


@pytest.mark.parametrize("answer", ["no marker", "####", "#### .", "####   "])
def test_no_number_is_no_gold(answer):
    assert gsm8k_gold(answer) is None


def test_eval_and_training_read_the_same_golds(tmp_path):
    data = tmp_path / "gsm.jsonl"
    data.write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": f"so\n{last}"}) + "\n" for i, (last, _) in enumerate(CASES)),
        encoding="utf-8",
    )
    expected = [gold for _, gold in CASES]
    assert [p.gold for p in load_jsonl(data)] == expected
    assert [gold for _, _, gold in read_questions(data, 0, len(CASES))] == expected


def test_a_line_without_a_gold_is_refused_by_both_with_its_line(tmp_path):
    data = tmp_path / "gsm.jsonl"
    data.write_text(
        json.dumps({"question": "q0", "answer": "#### 1"})
        + "\n"
        + json.dumps({"question": "q1", "answer": "so ####"})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(DatasetError, match="gsm.jsonl:2"):
        load_jsonl(data)
    with pytest.raises(ValueError, match="gsm.jsonl:2"):  # training read an empty gold: every answer wrong
        read_questions(data, 0, 2)


def test_every_gold_of_the_shared_gsm8k_file_is_a_number():
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k_train.jsonl"
    if not data.exists():
        pytest.skip(f"{data} is not beside the checkout")
    golds = [gsm8k_gold(json.loads(line)["answer"]) for line in data.open(encoding="utf-8")]
    assert len(golds) > 7000
    assert all(g is not None and re.fullmatch(r"-?\d+(\.\d+)?", g) for g in golds)
