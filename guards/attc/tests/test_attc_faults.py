"""ATTC read off injected faults (guards/attc/faults.py): the AUROC of its detector reading."""

from __future__ import annotations

import pytest

from guards.attc.faults import auroc, auroc_ci


def test_auroc_agrees_with_the_rank_formula_and_scikit_learn():
    pos, neg = [0.1, 0.03, 0.15], [0.1, 0.04, 0.2]
    assert auroc(pos, neg) == pytest.approx(3.5 / 9)
    sklearn = pytest.importorskip("sklearn.metrics")
    assert auroc(pos, neg) == pytest.approx(sklearn.roc_auc_score([1, 1, 1, 0, 0, 0], pos + neg))
    assert auroc([], neg) is None
    low, high = auroc_ci(pos, neg)
    assert low is not None and high is not None and low <= auroc(pos, neg) <= high
    assert auroc_ci(pos[:1], neg) == (None, None)
