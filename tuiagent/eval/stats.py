"""Statistics through scipy.stats: exact McNemar (a binomial test on the discordant pairs), percentile
bootstrap intervals (one sample, paired, two independent samples), Wilson intervals; tool-call bins.

Each figure and the scipy call behind it (docs/evaluating.md, "Statistics"):

- ``mcnemar_exact``: ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``, two-sided.
- ``wilson``: ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``.
- ``paired_bootstrap``, ``bootstrap_mean``, ``bootstrap_diff`` (and the cluster, ratio and AUROC
  bootstraps elsewhere, through ``percentile_ci``): ``scipy.stats.bootstrap(method="percentile")``,
  ``N_BOOT`` resamples, ``rng=numpy.random.default_rng(seed)`` with seed 0 unless a caller says
  otherwise, so a report's intervals are the same on every run and machine.

Percentile, not scipy's default BCa: BCa is undefined (nan, with a warning) when the bootstrap
distribution is degenerate, which per-problem accuracies often make it (every difference 0, every
problem right), and the percentile interval is what the reports have always given: scipy draws the
same index rows (``rng.integers(0, n, (N_BOOT, n))``) that the hand-written bootstrap drew, so the
intervals did not move.

Edge cases, decided here rather than left to scipy (whose bootstrap needs two values per sample):
no values -> nan; one value -> the value itself as its interval (a one-value sample has nothing to
resample); all values equal -> [value, value] (the percentile interval of a constant distribution);
resamples on which a statistic is undefined (nan: a ratio with a zero gap, an AUROC with one class)
are left out of the percentiles, and the interval is nan only when every resample is.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.stats

N_BOOT = 2000  # [ours] bootstrap resamples
LEVEL = 0.95  # [ours] interval level
TOOL_BINS = ((0, 3), (4, 7), (8, 11), (12, None))
NAN3 = (math.nan, math.nan, math.nan)


def bin_label(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else f"{lo}-{hi}"


def tool_bin(calls: int) -> str:
    for lo, hi in TOOL_BINS:
        if calls >= lo and (hi is None or calls <= hi):
            return bin_label(lo, hi)
    return bin_label(*TOOL_BINS[0])


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: ``b`` and ``c`` are the discordant pair counts (baseline right /
    other wrong, and the reverse), tested as ``b`` successes of ``b + c`` at 1/2 (``binomtest``); 1.0
    without a discordant pair (no evidence either way; binomtest needs n >= 1)."""
    return 1.0 if b + c == 0 else float(scipy.stats.binomtest(b, b + c, 0.5).pvalue)


def percentile_ci(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., Any],
    *,
    paired: bool = False,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``statistic(*samples, axis=-1)`` (``scipy.stats.bootstrap``,
    seeded); every sample needs two values or more. Resamples where the statistic is nan are left
    out (module docstring); (nan, nan) when all are."""
    with warnings.catch_warnings():
        # scipy warns when an interval end is nan; the nan resamples are dealt with below
        warnings.simplefilter("ignore", scipy.stats.DegenerateDataWarning)
        res = scipy.stats.bootstrap(
            tuple(samples),
            statistic,
            n_resamples=n_boot,
            paired=paired,
            confidence_level=level,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    low, high = res.confidence_interval
    if math.isnan(low) or math.isnan(high):
        kept = res.bootstrap_distribution[~np.isnan(res.bootstrap_distribution)]
        if not kept.size:
            return math.nan, math.nan
        low, high = scipy.stats.quantile(kept, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def _mean(x: np.ndarray, axis: int = -1) -> Any:
    return np.mean(x, axis=axis)


def paired_bootstrap(
    diffs: Sequence[float], *, n_boot: int = N_BOOT, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-unit paired differences with a percentile bootstrap CI. Resampling
    the differences is scipy's ``paired=True`` on the two sides (the same index rows, the same interval;
    tests/eval/test_stats_scipy.py). The values are sorted first, so the interval depends on the sample,
    not on the order its runs ended in (two settings with the same outcomes get the same interval)."""
    d = np.sort(np.asarray(diffs, dtype=float))
    if d.size == 0:
        return NAN3
    mean = float(d.mean())
    if d.size == 1:
        return mean, mean, mean
    low, high = percentile_ci((d,), _mean, n_boot=n_boot, level=1 - alpha, seed=seed)
    return mean, low, high


def bootstrap_mean(
    values: Sequence[float], *, n_boot: int = N_BOOT, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high) of one sample, e.g. per-problem accuracies."""
    return paired_bootstrap(values, n_boot=n_boot, alpha=alpha, seed=seed)


def bootstrap_diff(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = N_BOOT, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high) of two independent samples, each resampled on its own (percentile CI;
    each sorted first, as in ``paired_bootstrap``). A side with one value is held at it (module
    docstring): the interval is then the other side's alone."""
    x, y = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    if x.size == 0 or y.size == 0:
        return NAN3
    diff = float(x.mean() - y.mean())
    level = 1 - alpha
    if x.size == 1 and y.size == 1:
        return diff, diff, diff
    if y.size == 1:
        low, high = percentile_ci((x,), lambda s, axis=-1: s.mean(axis) - y[0], n_boot=n_boot, level=level, seed=seed)
    elif x.size == 1:
        low, high = percentile_ci((y,), lambda s, axis=-1: x[0] - s.mean(axis), n_boot=n_boot, level=level, seed=seed)
    else:
        low, high = percentile_ci(
            (x, y), lambda s, t, axis=-1: s.mean(axis) - t.mean(axis), n_boot=n_boot, level=level, seed=seed
        )
    return diff, low, high


def rounded(value: float | None, digits: int = 4) -> float | None:
    """``value`` rounded for a report; None for a missing or NaN value."""
    return None if value is None or math.isnan(value) else round(float(value), digits)


def right(record: dict[str, Any]) -> float:
    """1.0 for a run whose answer is right, else 0.0 (wrong or unknown)."""
    return 1.0 if record.get("correct") is True else 0.0


def wilson(successes: int, n: int, *, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a proportion (``binomtest(...).proportion_ci(method="wilson")``, 95% by
    default); (nan, nan) when n is 0."""
    if n == 0:
        return math.nan, math.nan
    ci = scipy.stats.binomtest(successes, n).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)
