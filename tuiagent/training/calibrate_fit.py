"""The fits the calibrators share (``tuiagent.training.calibrators``), in numpy and scipy.stats:
separation (AUROC as scipy's Mann-Whitney U, with a percentile bootstrap interval over questions)
and a threshold for a score. No model, no I/O; tests feed them synthetic data.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.stats
from numpy.typing import ArrayLike

RARE = 0.05  # [ours] "rarely intervenes": the guard acts on at most this share of training blocks
LEVEL = 0.95  # [ours] bootstrap interval level
N_BOOT = 2000  # [ours] bootstrap resamples
MIN_QUESTIONS = 10  # [ours] fewer questions on either side is too little to call a separation


def auroc(scores: ArrayLike, positive: ArrayLike) -> float:
    """P(score of a random positive > score of a random negative), ties counting one half: the
    Mann-Whitney U of the positives over n_pos * n_neg, U from scipy's average ranks
    (``scipy.stats.rankdata``; what ``scipy.stats.mannwhitneyu`` returns as its statistic, at a tenth of
    its cost, which the 2000 bootstrap resamples pay); nan without both classes."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(positive, dtype=bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    u = scipy.stats.rankdata(s)[y].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def bootstrap_auroc(
    scores: ArrayLike,
    positive: ArrayLike,
    groups: ArrayLike,
    *,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """A percentile interval for the AUROC, resampling whole questions (``groups``) with replacement,
    since the blocks of one run share its label and are not independent: ``scipy.stats.bootstrap``
    over the question ids, seeded. Resamples with one class only (AUROC undefined) are left out;
    (nan, nan) when every resample has one class. One question: every resample is that question, so
    the interval is its AUROC alone (scipy's bootstrap needs two)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(positive, dtype=bool)
    g = np.asarray(groups)
    ids = np.unique(g)
    if len(ids) < 2:
        a = auroc(s, y)
        return a, a
    # A resample is a count per question, and its AUROC a ratio of two quadratic forms in the counts:
    # wins[q, r] = pairs (a positive of q, a negative of r) the positive wins (ties one half), so every
    # resample is scored at once, the same U as ``auroc`` of the concatenated blocks.
    which = np.searchsorted(ids, g)
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    beats = (s[pos, None] > s[None, neg]) + 0.5 * (s[pos, None] == s[None, neg])
    in_pos = np.eye(len(ids))[which[pos]]  # (positives, questions) one-hot
    in_neg = np.eye(len(ids))[which[neg]]
    wins = in_pos.T @ beats @ in_neg
    n_pos, n_neg = in_pos.sum(axis=0), in_neg.sum(axis=0)

    def resampled(draw: np.ndarray, axis: int = -1) -> np.ndarray:
        draw = np.moveaxis(draw, axis, -1)
        rows = draw.reshape(-1, draw.shape[-1])
        offsets = np.arange(len(rows))[:, None] * len(ids)
        counts = np.bincount((rows + offsets).ravel(), minlength=len(rows) * len(ids)).reshape(len(rows), len(ids))
        pairs = (counts @ n_pos) * (counts @ n_neg)
        u = ((counts @ wins) * counts).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(pairs > 0, u / pairs, np.nan).reshape(draw.shape[:-1])

    with warnings.catch_warnings():
        # scipy warns when an interval end is nan: the one-class resamples, left out below
        warnings.simplefilter("ignore", scipy.stats.DegenerateDataWarning)
        res = scipy.stats.bootstrap(
            (np.arange(len(ids)),),
            resampled,
            vectorized=True,
            n_resamples=n_boot,
            confidence_level=level,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    values = res.bootstrap_distribution[~np.isnan(res.bootstrap_distribution)]
    if not values.size:
        return float("nan"), float("nan")
    lo, hi = scipy.stats.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Separation:
    """How well a score separates two groups, and the threshold chosen from it.

    ``act``: "below" (the guard acts when score < threshold: ATTC's rethink) or "above" (it acts
    when score >= threshold: necessity's skip). ``auroc`` is oriented so that 1.0 means the score
    separates in the direction the guard assumes (ATTC: higher confidence in right runs)."""

    auroc: float
    interval: tuple[float, float]
    separated: bool
    threshold: float
    act: Literal["below", "above"]
    action_rate: float  # share of the fitted blocks the guard acts on at this threshold
    n: int
    n_positive: int
    groups: int

    def acts(self, scores: ArrayLike) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64)
        return s < self.threshold if self.act == "below" else s >= self.threshold


def fit_separation(
    scores: ArrayLike,
    positive: ArrayLike,
    groups: ArrayLike,
    *,
    act: Literal["below", "above"],
    rare: float = RARE,
    default: float | None = None,
    seed: int = 0,
) -> Separation:
    """Fit a threshold for a guard that acts on low (``act="below"``) or high scores.

    ``positive``: the blocks where acting is wrong (ATTC: blocks of right runs, which a rethink
    would only disturb; necessity: blocks of questions the model gets wrong without the tool,
    which a skip would harm). Separated when each side has blocks from at least MIN_QUESTIONS questions and
    the bootstrap interval of the AUROC (positives scoring higher for "below", lower for "above")
    lies above 0.5; then the threshold maximises Youden's J
    (share of negatives acted on minus share of positives acted on), at a midpoint between two
    observed scores. Otherwise "no separation": the threshold is the ``rare`` quantile from the
    side the guard acts on, so it acts on about that share of blocks, and never on more than at
    the guard's uncalibrated ``default`` threshold.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(positive, dtype=bool)
    oriented = s if act == "below" else -s
    a = auroc(oriented, y)
    lo, hi = bootstrap_auroc(oriented, y, groups, seed=seed)
    g = np.asarray(groups)
    enough = min(len(set(g[y].tolist())), len(set(g[~y].tolist()))) >= MIN_QUESTIONS
    separated = bool(enough and not np.isnan(lo) and lo > 0.5)
    if separated:
        values = np.unique(s)
        cuts = np.concatenate([[values[0] - 1e-9], (values[:-1] + values[1:]) / 2, [values[-1] + 1e-9]])
        best, threshold = -np.inf, float(cuts[0])
        for c in cuts:
            acting = s < c if act == "below" else s >= c
            j = acting[~y].mean() - acting[y].mean()
            if j > best:
                best, threshold = j, float(c)
    elif act == "below":
        threshold = float(np.quantile(s, rare, method="lower")) if len(s) else 0.0
    else:
        threshold = float(np.quantile(s, 1 - rare, method="higher")) + 1e-9 if len(s) else 1.0
    if not separated and default is not None:
        threshold = min(threshold, default) if act == "below" else max(threshold, default)
    threshold = float(min(max(threshold, 1e-6), 1.0))
    acting = s < threshold if act == "below" else s >= threshold
    return Separation(
        auroc=a,
        interval=(lo, hi),
        separated=separated,
        threshold=threshold,
        act=act,
        action_rate=float(acting.mean()) if len(s) else 0.0,
        n=len(s),
        n_positive=int(y.sum()),
        groups=len(set(np.asarray(groups).tolist())),
    )


def balanced_accuracy(acts: np.ndarray, positive: ArrayLike) -> float:
    """Mean of (share of negatives acted on) and (share of positives left alone); nan without both."""
    y = np.asarray(positive, dtype=bool)
    if not y.any() or y.all():
        return float("nan")
    return float((acts[~y].mean() + (1 - acts[y].mean())) / 2)
