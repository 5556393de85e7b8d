"""pass@k (the unbiased estimator) and maj@k (exact over k-subsets), checked against values computed by hand."""

from __future__ import annotations

import csv
import io
import math

import pytest

from tuiagent.eval.estimators import answer_groups, estimators, ks_for, maj_at_k, pass_at_k, verify_equivalent
from tuiagent.eval.report import summarize, to_csv, to_markdown


def same(a: str, b: str) -> bool:
    return a == b


def test_pass_at_k_by_hand_and_against_the_binomials():
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # k = 1: c / n
    assert pass_at_k(4, 3, 2) == 1.0  # n - c = 1 < k: every pair holds a right run
    assert pass_at_k(4, 0, 4) == 0.0
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_answers_group_by_the_projects_equivalence():
    # '1/2' and '0.5' vote together (math-verify); '3' alone; None does not vote
    none, groups = answer_groups(["1/2", "0.5", "3", None], [True, True, False, False], verify_equivalent)
    assert (none, groups) == (1, [(2, True), (1, False)])


def test_maj_at_k_by_hand():
    # runs a='1/2' (right), b='0.5' (right, same group as a), '3' (wrong), one without an answer
    none, groups = 1, [(2, True), (1, False)]
    assert maj_at_k(none, groups, 1) == pytest.approx(2 / 4)  # a single run: right when it is a or b
    # the 6 pairs: {a,b} 1, {a,3} tie 1/2, {b,3} 1/2, {a,N} 1, {b,N} 1, {3,N} 0 -> 4/6
    assert maj_at_k(none, groups, 2) == pytest.approx(4 / 6)
    # the 4 triples: {a,b,3} 1, {a,b,N} 1, {a,3,N} 1/2, {b,3,N} 1/2 -> 3/4
    assert maj_at_k(none, groups, 3) == pytest.approx(3 / 4)
    assert maj_at_k(none, groups, 4) == 1.0  # 2 votes against 1
    assert maj_at_k(3, [], 2) == 0.0  # nobody answered: wrong
    # a wrong answer with 3 votes outvotes the right one with 2 when all 5 vote; k=1 is c/n
    assert maj_at_k(0, [(2, True), (3, False)], 5) == 0.0
    assert maj_at_k(0, [(2, True), (3, False)], 1) == pytest.approx(2 / 5)


def test_ks_and_estimators_over_problems():
    assert ks_for(1) == [1] and ks_for(3) == [1, 2, 3] and ks_for(16) == [1, 2, 4, 8, 16] and ks_for(12)[-2:] == [8, 12]
    p1 = [
        {"answer": a, "correct": ok, "seed": s}
        for s, (a, ok) in enumerate([("x", True), ("x", True), ("y", False), (None, False)])
    ]
    p2 = [{"answer": "7", "correct": False, "seed": s} for s in range(4)]
    est = estimators([p1, p2], same)
    assert list(est) == ["pass@1", "pass@2", "pass@3", "pass@4", "maj@1", "maj@2", "maj@3", "maj@4"]
    assert est["pass@1"]["value"] == 0.25  # (2/4 + 0) / 2
    assert est["pass@2"]["value"] == round(5 / 12, 4)  # (5/6 + 0) / 2
    assert est["maj@2"]["value"] == round(1 / 3, 4)  # (4/6 + 0) / 2, as in test_maj_at_k_by_hand
    assert est["maj@4"]["value"] == 0.5 and est["pass@4"]["problems"] == 2
    low, high = est["pass@2"]["ci"]
    assert 0 <= low <= 5 / 12 <= high <= 5 / 6 + 1e-9
    assert estimators([p1[:1], p2[:1]], same) == {}  # one seed: no columns
    # a problem with fewer runs than k stays out of that k's column
    assert estimators([p1, p2[:2]], same)["pass@4"]["problems"] == 1


def rec(pid: int, seed: int, correct: bool, answer: str | None) -> dict:
    return {
        "key": f"d/{pid}/a/{seed}",
        "dataset": "d",
        "problem_id": str(pid),
        "variant": "",
        "setting": "a",
        "seed": seed,
        "model": "m",
        "correct": correct,
        "answer": answer,
        "reason": "answer",
        "tcn": 0,
        "erroneous": 0,
        "wtn": 1,
        "generated_tokens": 1,
        "wall_s": 1.0,
    }


def test_summary_columns_only_with_seeds():
    one = summarize([rec(1, 0, True, "1"), rec(2, 0, False, "2")])
    assert "estimators" not in one["datasets"]["d"]["settings"]["a"] and "maj@k over seeds" not in to_markdown(one)
    assert "pass@1" not in to_csv(one)
    # problem 1: right, right; problem 2: wrong '2' then right '1/2' (n=2, c=1)
    rs = [rec(1, 0, True, "1"), rec(1, 1, True, "1"), rec(2, 0, False, "2"), rec(2, 1, True, "1/2")]
    summary = summarize(rs)
    est = summary["datasets"]["d"]["settings"]["a"]["estimators"]
    # pass@2: (1 + (1 - C(1,2)/C(2,2) = 1)) / 2 = 1; maj@2 problem 2 ties 1-1 -> 1/2, so (1 + 1/2) / 2
    assert est["pass@2"]["value"] == 1.0 and est["maj@2"]["value"] == 0.75 and est["pass@1"]["value"] == 0.75
    md = to_markdown(summary)
    assert "pass@k (unbiased) and maj@k" in md and "| pass@1 | pass@2 | maj@1 | maj@2 |" in md
    row = next(csv.DictReader(io.StringIO(to_csv(summary))))
    assert (row["pass@2"], row["maj@2"], row["maj@2_low"] != "") == ("1.0", "0.75", True)
