"""Each statistic of the reports on fixed data: the same number as scipy.stats called directly, and as an
independent computation (a closed form, a published value, or the resampling done by hand); the seeds
make the intervals reproducible; the edge cases scipy leaves open are decided (docs/evaluating.md,
"Statistics")."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest
import scipy.stats

from guards.gstep.tooltax import gap_closure
from guards.tim.metrics import cluster_bootstrap, pearson
from tuiagent.eval.stats import (
    N_BOOT,
    bootstrap_diff,
    bootstrap_mean,
    mcnemar_exact,
    paired_bootstrap,
    percentile_ci,
    wilson,
)
from tuiagent.eval.traces import stuck_curve

Z = NormalDist().inv_cdf(0.975)
DIFFS = [1.0, 0.0, 0.0, -1.0, 1.0, 1.0, 0.5, 0.0, 1.0, -0.5, 0.0, 1.0, 0.25, 0.0, 1.0]  # per-problem differences


def by_hand(values: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap of a mean without scipy: N_BOOT rows of indices, their means' 2.5% and 97.5%."""
    draws = np.random.default_rng(seed).integers(0, len(values), size=(N_BOOT, len(values)))
    low, high = np.quantile(values[draws].mean(axis=1), [0.025, 0.975])
    return float(low), float(high)


# -- exact McNemar -------------------------------------------------------------------------------


def test_mcnemar_is_the_binomial_test_on_the_discordant_pairs():
    # b = 1, c = 9: two-sided P(X <= 1 or X >= 9), X ~ Bin(10, 1/2) = 2 * 11 / 1024
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024, rel=1e-12)
    assert mcnemar_exact(1, 9) == scipy.stats.binomtest(1, 10, 0.5).pvalue
    for b, c in [(0, 5), (2, 11), (7, 5), (30, 45), (120, 80)]:
        tail = Fraction(sum(math.comb(b + c, i) for i in range(min(b, c) + 1)), 2 ** (b + c))
        assert mcnemar_exact(b, c) == pytest.approx(min(1.0, float(2 * tail)), rel=1e-9)
        assert mcnemar_exact(b, c) == mcnemar_exact(c, b)  # symmetric in the two directions
    assert mcnemar_exact(4, 4) == 1.0  # as many each way
    assert mcnemar_exact(0, 0) == 1.0  # no discordant pair: binomtest needs n >= 1, we say "no evidence"


# -- Wilson --------------------------------------------------------------------------------------


def wilson_by_hand(k: int, n: int) -> tuple[float, float]:
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return centre - half, centre + half


def test_wilson_is_scipys_and_the_published_values():
    # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (score interval without correction)
    published = {
        (81, 263): (0.2553, 0.3662),
        (15, 148): (0.0624, 0.1605),
        (0, 20): (0.0, 0.1611),
        (1, 29): (0.0061, 0.1718),
    }
    for (k, n), expected in published.items():
        assert wilson(k, n) == pytest.approx(expected, abs=5e-5)
    assert wilson(8, 10) == pytest.approx((0.4902, 0.9433), abs=5e-5)  # 8/10, the textbook example
    for k, n in [(8, 10), (0, 10), (10, 10), (3, 7), (37, 40), (1, 1)]:
        ci = scipy.stats.binomtest(k, n).proportion_ci(method="wilson")
        assert wilson(k, n) == (ci.low, ci.high)
        assert wilson(k, n) == pytest.approx(wilson_by_hand(k, n), abs=1e-12)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    assert all(math.isnan(v) for v in wilson(0, 0))


# -- bootstraps ----------------------------------------------------------------------------------


def test_one_sample_bootstrap_is_scipys_and_the_hand_resampling():
    d = np.sort(np.array(DIFFS))
    mean, low, high = bootstrap_mean(DIFFS)
    assert mean == pytest.approx(np.mean(DIFFS))
    direct = scipy.stats.bootstrap(
        (d,), np.mean, n_resamples=N_BOOT, method="percentile", rng=np.random.default_rng(0)
    ).confidence_interval
    assert (low, high) == pytest.approx((direct.low, direct.high), abs=1e-12)
    assert (low, high) == pytest.approx(by_hand(d), abs=1e-12)  # the same index rows scipy draws


def test_paired_bootstrap_is_scipys_paired_bootstrap_of_the_two_sides():
    a = np.array([1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1], dtype=float)  # e.g. a setting's per-problem accuracy
    b = np.array([1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1], dtype=float)  # the baseline's on the same problems
    order = np.argsort(a - b, kind="stable")  # paired_bootstrap sorts the differences
    mean, low, high = paired_bootstrap(list(a - b))
    direct = scipy.stats.bootstrap(
        (a[order], b[order]),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        paired=True,
        n_resamples=N_BOOT,
        method="percentile",
        rng=np.random.default_rng(0),
    ).confidence_interval
    assert mean == pytest.approx(np.mean(a - b)) and (low, high) == pytest.approx((direct.low, direct.high), abs=1e-12)
    assert (low, high) == pytest.approx(by_hand(np.sort(a - b)), abs=1e-12)


def test_bootstrap_of_two_independent_samples():
    x, y = np.sort(np.array([3.0, 0.0, 1.0, 2.0, 5.0, 1.0, 0.0])), np.sort(np.array([0.0, 1.0, 0.0, 0.0, 2.0]))
    diff, low, high = bootstrap_diff(list(x), list(y))
    assert diff == pytest.approx(x.mean() - y.mean())
    direct = scipy.stats.bootstrap(
        (x, y),
        lambda s, t, axis: np.mean(s, axis=axis) - np.mean(t, axis=axis),
        n_resamples=N_BOOT,
        method="percentile",
        rng=np.random.default_rng(0),
    ).confidence_interval
    assert (low, high) == pytest.approx((direct.low, direct.high), abs=1e-12)
    rng = np.random.default_rng(0)  # by hand: x's resamples, then y's, from one generator
    boot = x[rng.integers(0, x.size, (N_BOOT, x.size))].mean(axis=1) - y[
        rng.integers(0, y.size, (N_BOOT, y.size))
    ].mean(axis=1)
    assert (low, high) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), abs=1e-12)


def test_a_seed_gives_the_same_interval_every_time():
    assert paired_bootstrap(DIFFS) == paired_bootstrap(DIFFS)
    assert bootstrap_diff(DIFFS, [0.0, 1.0, 1.0]) == bootstrap_diff(DIFFS, [0.0, 1.0, 1.0])
    assert paired_bootstrap(DIFFS, seed=7) == paired_bootstrap(DIFFS, seed=7)
    assert paired_bootstrap(DIFFS, seed=7) != paired_bootstrap(DIFFS)  # the seed is what fixes the draws
    x, y = list(np.linspace(0, 1, 30)), list(np.linspace(0, 1, 30) ** 2)
    assert pearson(x, y, permutations=500) == pearson(x, y, permutations=500)


def test_edge_cases_are_decided_not_left_to_scipy():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DegenerateDataWarning, no RuntimeWarning
        assert all(math.isnan(v) for v in paired_bootstrap([]))
        assert all(math.isnan(v) for v in bootstrap_diff([], [1.0]))
        assert paired_bootstrap([0.5]) == (0.5, 0.5, 0.5)  # one value: nothing to resample
        assert paired_bootstrap([1.0] * 9) == (1.0, 1.0, 1.0)  # all equal: a constant bootstrap distribution
        assert bootstrap_diff([1.0], [0.0]) == (1.0, 1.0, 1.0)
        # one value on a side: held at it, the interval is the other side's
        diff, low, high = bootstrap_diff([1.0], [0.0, 1.0, 0.0, 0.0])
        _, other_low, other_high = bootstrap_mean([0.0, 1.0, 0.0, 0.0])
        assert diff == 0.75 and (low, high) == pytest.approx((1 - other_high, 1 - other_low))


def test_resamples_where_a_statistic_is_undefined_are_left_out():
    x = np.array([0.0, 0.0, 0.0, 1.0])

    def inverse(s: np.ndarray, axis: int = -1) -> np.ndarray:  # 1 / mean: nan when the resample is all 0
        m = s.mean(axis=axis)
        return np.where(m > 0, 1 / np.where(m > 0, m, 1), np.nan)

    low, high = percentile_ci((x,), inverse)
    rng = np.random.default_rng(0)
    means = x[rng.integers(0, 4, (N_BOOT, 4))].mean(axis=1)
    kept = 1 / means[means > 0]
    assert 0 < kept.size < N_BOOT and (low, high) == pytest.approx(tuple(np.quantile(kept, [0.025, 0.975])))
    assert all(math.isnan(v) for v in percentile_ci((np.zeros(3),), inverse))


def test_cluster_bootstrap_resamples_problems_with_scipy():
    points = [("a", 1.0), ("a", 0.0), ("b", 1.0), ("c", 0.0), ("c", 0.0), ("c", 1.0), ("d", 1.0), ("e", 0.5)]
    mean, low, high = cluster_bootstrap(points)
    # by hand: the problems ordered by their mean, then whole problems drawn with replacement
    sums, counts = np.array([1.0, 1.0, 0.5, 1.0, 1.0]), np.array([3, 2, 1, 1, 1])  # c, a, e, b, d
    draws = np.random.default_rng(0).integers(0, 5, (N_BOOT, 5))
    expected = np.quantile(sums[draws].sum(axis=1) / counts[draws].sum(axis=1), [0.025, 0.975])
    assert mean == pytest.approx(4.5 / 8) and (low, high) == pytest.approx(tuple(expected), abs=1e-12)


def test_gap_closure_interval_is_the_paired_ratio_bootstrap():
    n = 12
    setting = {(str(i), "", 0): {"correct": i % 3 != 0} for i in range(n)}
    full = {(str(i), "", 0): {"correct": i % 2 == 0} for i in range(n)}
    cot = {(str(i), "", 0): {"correct": i % 4 != 3} for i in range(n)}
    got = gap_closure(setting, full, cot)
    units = sorted(setting)
    arr = np.array([[float(d[u]["correct"]) for d in (setting, full, cot)] for u in units])
    means = arr[np.random.default_rng(0).integers(0, n, (N_BOOT, n))].mean(axis=1)
    gaps = means[:, 2] - means[:, 1]
    ratios = (means[gaps != 0, 0] - means[gaps != 0, 1]) / gaps[gaps != 0]
    expected = [round(float(v), 4) for v in np.quantile(ratios, [0.025, 0.975])]
    assert got["cls"] == round((8 / 12 - 6 / 12) / (9 / 12 - 6 / 12), 4) and got["cls_ci"] == expected


# -- Pearson -------------------------------------------------------------------------------------


def test_pearson_r_fisher_interval_and_permutation_p_are_scipys():
    rng = np.random.default_rng(11)
    x = rng.normal(size=25)
    y = 0.4 * x + rng.normal(size=25)
    got = pearson(list(x), list(y), permutations=2000)
    res = scipy.stats.pearsonr(x, y)
    r = float(np.corrcoef(x, y)[0, 1])
    assert got["r"] == round(r, 4) == round(float(res.statistic), 4)
    z, half = math.atanh(r), Z / math.sqrt(25 - 3)  # Fisher z by hand
    assert got["ci"] == [round(math.tanh(z - half), 4), round(math.tanh(z + half), 4)]
    ci = res.confidence_interval()
    assert got["ci"] == [round(float(ci.low), 4), round(float(ci.high), 4)]
    direct = scipy.stats.permutation_test(
        (y,),
        lambda s, axis: scipy.stats.pearsonr(x, s, axis=axis).statistic,
        permutation_type="pairings",
        n_resamples=2000,
        batch=1000,
        rng=np.random.default_rng(0),
    )
    assert got["p"] == round(float(direct.pvalue), 4)


def test_pearson_permutation_p_is_exact_for_small_n():
    # evals/tim-gsm40's full/Line of Code points: 3! = 6 orders of y, 2 with r >= 0.9387 (x's tie), none
    # with r <= -0.9387; scipy's two-sided p doubles the one-sided 2/6 (counting |r| would give 2/6)
    x, y = [7.0, 17.0, 13.5], [0.0, 1.0, 1.0]
    rs = [np.corrcoef(x, [y[i] for i in p])[0, 1] for p in itertools.permutations(range(3))]
    r = np.corrcoef(x, y)[0, 1]
    greater, less = sum(v >= r - 1e-12 for v in rs) / 6, sum(v <= r + 1e-12 for v in rs) / 6
    got = pearson(x, y)
    assert (got["r"], got["ci"]) == (0.9387, [None, None])  # no Fisher interval at n = 3
    assert got["p"] == round(min(1.0, 2 * min(greater, less)), 4) == 0.6667


# -- Kaplan-Meier --------------------------------------------------------------------------------


def test_resolved_by_k_is_scipys_kaplan_meier():
    traces = ["eo", "eeo", "eeeo", "ee.", "e|", "eo.", "e..o", "e...", "eeeeo"]
    curve = stuck_curve(traces, k_max=5)["curve"]
    assert curve[4]["at_risk"] == 0 and curve[4]["resolved_by_k"] is None  # none left at k = 5: no estimate
    # episodes' attempts: o, eo, eeo, e. (ended), "" (cut), o, ..o, ... (ended), eeeo
    resolved, censored = [1, 2, 3, 1, 3, 4], [2, 0, 3]
    km = scipy.stats.ecdf(scipy.stats.CensoredData(uncensored=resolved, right=censored)).cdf
    assert [p["resolved_by_k"] for p in curve[:4]] == [round(float(km.evaluate(k)), 4) for k in range(1, 5)]
    open_share, by_hand = 1.0, []  # the product-limit estimate by hand: at risk = attempts >= k
    for k in range(1, 5):
        at_risk = sum(t >= k for t in resolved + censored)
        open_share *= 1 - sum(t == k for t in resolved) / at_risk
        by_hand.append(round(1 - open_share, 4))
    assert [p["resolved_by_k"] for p in curve[:4]] == by_hand == [0.25, 0.375, 0.6875, 1.0]
