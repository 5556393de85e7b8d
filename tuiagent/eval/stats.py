"""Statistics without scipy: exact McNemar, paired and unpaired bootstrap, Wilson intervals, tool-call bins."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

TOOL_BINS = ((0, 3), (4, 7), (8, 11), (12, None))


def bin_label(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else f"{lo}-{hi}"


def tool_bin(calls: int) -> str:
    for lo, hi in TOOL_BINS:
        if calls >= lo and (hi is None or calls <= hi):
            return bin_label(lo, hi)
    return bin_label(*TOOL_BINS[0])


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: ``b`` and ``c`` are the discordant pair counts
    (baseline right / other wrong, and the reverse); p = P(|X - n/2| >= |b - n/2|), X ~ Bin(n, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    # sum of C(n, i) for i <= k, over 2^n, in log space for large n
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(k + 1)]
    top = max(logs)
    tail = math.exp(top) * sum(math.exp(v - top) for v in logs)
    return min(1.0, 2.0 * tail)


def paired_bootstrap(
    diffs: Sequence[float], *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-unit paired differences with a percentile bootstrap CI. The
    values are sorted first, so the interval depends on the sample, not on the order its runs ended in
    (two settings with the same outcomes get the same interval)."""
    d = np.sort(np.asarray(diffs, dtype=float))
    if d.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(d.mean())
    if d.size == 1:
        return mean, mean, mean
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return mean, float(low), float(high)


def bootstrap_mean(
    values: Sequence[float], *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high) of one sample, e.g. per-problem accuracies."""
    return paired_bootstrap(values, n_boot=n_boot, alpha=alpha, seed=seed)


def bootstrap_diff(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high) of two independent samples, each resampled on its own (percentile CI;
    each sorted first, as in ``paired_bootstrap``)."""
    x, y = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    if x.size == 0 or y.size == 0:
        return float("nan"), float("nan"), float("nan")
    diff = float(x.mean() - y.mean())
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1) - y[
        rng.integers(0, y.size, size=(n_boot, y.size))
    ].mean(axis=1)
    low, high = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return diff, float(low), float(high)


def rounded(value: float | None, digits: int = 4) -> float | None:
    """``value`` rounded for a report; None for a missing or NaN value."""
    return None if value is None or math.isnan(value) else round(float(value), digits)


def right(record: dict[str, Any]) -> float:
    """1.0 for a run whose answer is right, else 0.0 (wrong or unknown)."""
    return 1.0 if record.get("correct") is True else 0.0


def wilson(successes: int, n: int, *, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% with the default z); (nan, nan) when n is 0."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
