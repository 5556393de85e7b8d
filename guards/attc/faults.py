"""ATTC read off injected faults (``tuiagent eval --inject``; eval.faults_report) [ours: the paper
injects nothing]:

- **as a detector**: ATTC's decision and confidence at the corrupted call against those at the same
  call of the paired clean runs: the rethink rates (Wilson intervals) and the AUROC of 1 - confidence
  for "this output was corrupted" (Mann-Whitney; bootstrap interval). ATTC's confidence is the code
  block's (arXiv 2604.08281), read before the output: it cannot see a fault in the output, so chance
  (0.5) is what the paper's rule predicts.
- **beside its Figure 3** (a right tool output ignored, judged there): with the fault known, a wrong
  output adopted and a wrong output overridden (the core's ``adopted`` and ``recovered``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.stats

from tuiagent.eval.faults_report import count_cell, rate
from tuiagent.eval.protocols import FaultRow, InjectedRuns, Table, cell
from tuiagent.eval.stats import percentile_ci, rounded

PAPER_TOOL_IGNORED = ">= 15% of errors (Figure 3; judged, no injection)"


def _auroc(pos: np.ndarray, neg: np.ndarray, axis: int = -1) -> Any:
    u = scipy.stats.mannwhitneyu(pos, neg, alternative="two-sided", method="asymptotic", axis=axis).statistic
    return u / (pos.shape[axis] * neg.shape[axis])


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """P(score of a positive > score of a negative) + half the ties: scipy's Mann-Whitney U over n+ n-
    (scikit-learn's roc_auc_score gives the same); None without both classes."""
    if not positives or not negatives:
        return None
    return float(_auroc(np.asarray(positives, dtype=float), np.asarray(negatives, dtype=float)))


def auroc_ci(
    positives: Sequence[float], negatives: Sequence[float], *, seed: int = 0
) -> tuple[float | None, float | None]:
    """The percentile bootstrap interval of ``auroc``, each class resampled on its own
    (``stats.percentile_ci``, scipy's bootstrap; each sorted first, so the order runs ended in does not
    matter); (None, None) with fewer than two values in a class."""
    if len(positives) < 2 or len(negatives) < 2:
        return None, None
    pos, neg = np.sort(np.asarray(positives, dtype=float)), np.sort(np.asarray(negatives, dtype=float))
    low, high = percentile_ci((pos, neg), _auroc, seed=seed)
    return float(low), float(high)


def _at_call(record: dict[str, Any], call: int | None) -> dict[str, Any] | None:
    return next((v for v in record.get("tool_verdicts") or [] if v["guard"] == "attc" and v["call"] == call), None)


def detector(runs: InjectedRuns) -> dict[str, Any] | None:
    """ATTC's verdicts at the corrupted call against the same call of the clean run (module docstring)."""
    corrupted, clean = [], []
    for inj, base in runs.pairs:
        info = inj.get("injection") or {}
        if not info.get("applied"):
            continue
        a = _at_call(inj, info.get("call"))
        if a is not None:
            corrupted.append(a)
        b = _at_call(base, info.get("call"))
        if b is not None:
            clean.append(b)
    if not corrupted and not clean:
        return None
    pos = [1.0 - float(v["confidence"]) for v in corrupted if isinstance(v.get("confidence"), (int, float))]
    neg = [1.0 - float(v["confidence"]) for v in clean if isinstance(v.get("confidence"), (int, float))]
    lo, hi = auroc_ci(pos, neg)
    return {
        "rethink_corrupted": rate(sum(v.get("decision") == "rethink" for v in corrupted), len(corrupted)),
        "rethink_clean": rate(sum(v.get("decision") == "rethink" for v in clean), len(clean)),
        "auroc": rounded(auroc(pos, neg)),
        "auroc_ci": [rounded(lo), rounded(hi)],
        "n_corrupted": len(pos),
        "n_clean": len(neg),
    }


def detector_tables(rows: Sequence[FaultRow], dataset: str) -> list[Table]:
    body = [
        [
            s,
            label,
            count_cell(a["rethink_corrupted"]),
            count_cell(a["rethink_clean"]),
            f"{cell(a['auroc'])} ({cell(a['auroc_ci'])})",
            f"{a['n_corrupted']}/{a['n_clean']}",
        ]
        for s, label, row in rows
        if (a := row.get("attc"))
    ]
    if not body:
        return []
    return [
        (
            f"{dataset}: ATTC as a detector of corrupted outputs (rethink at the corrupted call vs the same call of the "
            "clean run; AUROC of 1 - confidence, bootstrap 95% CI; the confidence is the code block's, read before "
            "the output)",
            ["setting", "fault", "rethink corrupted", "rethink clean", "AUROC (95% CI)", "n corrupted/clean"],
            body,
        )
    ]


def figure_rows(row: FaultRow) -> list[list[str]]:
    s, label, r = row
    return [
        ["ATTC: a wrong output adopted", f"{s} {label}", count_cell(r["adopted"])],
        ["ATTC: a wrong output overridden (recovered)", f"{s} {label}", count_cell(r["recovered"])],
    ]
