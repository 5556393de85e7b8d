"""Datasets in each common shape, the demo set (answers re-derived here), and readable failures."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from tuiagent.eval.datasets import DatasetError, Fields, load_dataset, load_demo, load_jsonl, select


def write(path: Path, *rows: dict) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_gsm8k_shape(tmp_path):
    path = write(
        tmp_path / "gsm.jsonl",
        {"question": "Natalia sold 48 clips ...", "answer": "48/2 = <<48/2=24>>24\n#### 72"},
        {"question": "Big numbers?", "answer": "so\n#### 1,234"},
    )
    problems = load_jsonl(path)
    assert [(p.dataset, p.id, p.gold) for p in problems] == [("gsm", "1", "72"), ("gsm", "2", "1234")]
    assert problems[0].question == "Natalia sold 48 clips ..."
    assert [p.reference for p in problems] == ["48/2 = <<48/2=24>>24", "so"]  # the worked answer, before ####


def test_line_separators_inside_a_question_stay_in_it(tmp_path):
    """JSON written without ASCII escapes may hold U+2028, U+0085 or a form feed inside a string:
    one record a line means one a "\n" (str.splitlines would cut the record there)."""
    question = "Line one\u2028line two\u0085three\x0cfour\x1cfive: what is 2 + 2?"
    path = tmp_path / "raw.jsonl"
    rows = [{"question": question, "answer": "#### 4"}, {"question": "And 3 + 3?", "answer": "#### 6"}]
    path.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n", encoding="utf-8")
    problems = load_jsonl(path)
    assert [(p.id, p.question, p.gold) for p in problems] == [("1", question, "4"), ("2", "And 3 + 3?", "6")]


def test_math_shapes_solution_boxed_or_answer(tmp_path):
    path = write(
        tmp_path / "math.jsonl",
        {"problem": "Compute 1/2 + 1/4.", "solution": "It is $\\boxed{\\frac{3}{4}}$.", "level": "Level 2"},
        {"problem": "MATH-500 style", "solution": "long text \\boxed{5}", "answer": "5", "unique_id": "test/x/1.json"},
    )
    a, b = load_jsonl(path)
    assert (a.id, a.gold, a.meta) == ("1", "\\frac{3}{4}", {"level": "Level 2"})
    assert (b.id, b.gold) == ("test/x/1.json", "5")
    assert (a.reference, b.reference) == ("It is $\\boxed{\\frac{3}{4}}$.", "long text \\boxed{5}")


def test_pymath_shape_keeps_its_step_by_step_solution(tmp_path):
    path = write(
        tmp_path / "pymath.jsonl",
        {"problem": "Find n.", "answer": "7", "solution": "Step 1: ... so n = 7.", "id": "p1"},
        {"problem": "No solution given.", "answer": "3"},
        {"problem": "Named otherwise.", "answer": "2", "reference_solution": "By symmetry, 2."},
    )
    assert [(p.gold, p.reference) for p in load_jsonl(path)] == [
        ("7", "Step 1: ... so n = 7."),
        ("3", ""),
        ("2", "By symmetry, 2."),
    ]


def test_aime_shape_with_integer_answers_and_ids(tmp_path):
    path = write(
        tmp_path / "aime25.jsonl",
        {"problem": "Find b.", "answer": 70, "id": "0"},
        {"problem": "Find the area.", "answer": 588, "id": "1"},
    )
    assert [(p.id, p.gold, p.reference) for p in load_dataset(str(path))] == [("0", "70", ""), ("1", "588", "")]


def test_field_names_can_be_overridden(tmp_path):
    path = write(tmp_path / "custom.jsonl", {"q": "What is 2+2?", "gt": 4, "key": "a"})
    with pytest.raises(DatasetError, match="custom.jsonl:1: no question field"):
        load_jsonl(path)
    (p,) = load_jsonl(path, fields=Fields(question="q", answer="gt", id="key"))
    assert (p.id, p.question, p.gold) == ("a", "What is 2+2?", "4")


@pytest.mark.parametrize(
    "row, message",
    [
        ({"problem": "x", "solution": "no box here"}, "no gold answer"),
        ({"question": "x"}, "no gold answer"),
    ],
)
def test_bad_lines_name_the_line_and_the_fix(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "ok", "answer": "#### 1"}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DatasetError) as info:
        load_jsonl(path)
    assert f"bad.jsonl:2: {message}" in str(info.value) and "fix:" in str(info.value)


def test_duplicate_ids_and_missing_files_are_refused(tmp_path):
    path = write(
        tmp_path / "dup.jsonl", {"problem": "a", "answer": 1, "id": "7"}, {"problem": "b", "answer": 2, "id": "7"}
    )
    with pytest.raises(DatasetError, match="appears twice"):
        load_jsonl(path)
    with pytest.raises(DatasetError, match="not 'demo'"):
        load_dataset(str(tmp_path / "nope.jsonl"))


def test_hf_without_datasets_or_network_fails_clearly(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(DatasetError, match="needs the 'datasets' package and a network connection"):
        load_dataset("hf:openai/gsm8k:main:test")

    class Offline:
        @staticmethod
        def load_dataset(*a, **k):
            raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", Offline)
    with pytest.raises(DatasetError, match="cannot load hf:openai/gsm8k:main:test .*ConnectionError"):
        load_dataset("hf:openai/gsm8k:main:test")


def test_hf_rows_are_parsed_like_files(monkeypatch):
    import sys

    class Fake:
        @staticmethod
        def load_dataset(name, config, split):
            assert (name, config, split) == ("openai/gsm8k", "main", "test")
            return [{"question": "q1", "answer": "#### 3"}]

    monkeypatch.setitem(sys.modules, "datasets", Fake)
    (p,) = load_dataset("hf:openai/gsm8k:main")
    assert (p.dataset, p.id, p.gold) == ("gsm8k-main-test", "1", "3")


def test_select_limit_offset_ids(tmp_path):
    path = write(tmp_path / "s.jsonl", *({"problem": str(i), "answer": i} for i in range(6)))
    problems = load_jsonl(path)
    assert [p.id for p in select(problems, limit=2, offset=1)] == ["2", "3"]
    assert [p.id for p in select(problems, ids={"5", "1"})] == ["1", "5"]


def test_demo_set_answers_are_right():
    """Every demo answer re-derived independently here; a mix of word problems and code-friendly ones."""
    demo = {p.id: p for p in load_demo()}
    assert len(demo) == 12 and {p.meta["kind"] for p in demo.values()} == {"word", "code"}
    expected = {
        "bakery": 7 * 24 - 15,
        "books": Fraction(50) - 3 * Fraction("8.50") - Fraction("2.25"),
        "train": 80 * Fraction(5, 2) + 60 * Fraction(3, 2),
        "class-ratio": 40 * 5 // (3 + 5),
        "rectangle": 15 * (46 // 2 - 15),
        "dice": Fraction(sum(a + b == 8 for a in range(1, 7) for b in range(1, 7)), 36),
        "prime-sum": sum(sympy.primerange(100)),
        "power-mod": pow(7, 2024, 13),
        "div-3-or-5": sum(1 for n in range(1, 1000) if (n % 3 == 0 or n % 5 == 0) and n % 15),
        "coins": sum(1 for q in range(5) for d in range(11) for n in range(21) if 25 * q + 10 * d + 5 * n <= 100),
        "divisors": math.prod(e + 1 for e in sympy.factorint(7200).values()),
        "crt": next(n for n in range(1, 106) if (n % 3, n % 5, n % 7) == (2, 3, 2)),
    }
    assert set(expected) == set(demo)
    for pid, value in expected.items():
        assert Fraction(demo[pid].gold) == value, pid
