"""pass@k and maj@k over an eval's seeds, per problem and averaged over problems, with bootstrap intervals.

- pass@k: the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
  Code"): with n runs of a problem of which c are right, pass@k = 1 - C(n-c, k) / C(n, k), the
  chance that a k-subset of the n runs holds at least one right run; computed stably as
  1 - prod_{i=n-c+1}^{n} (1 - k/i).
- maj@k: the exact expectation, over all k-subsets of a problem's n runs, that the majority answer
  of the subset is right. Answers vote together when the project's own answer check
  (``tuiagent.core.verify.is_correct``, math-verify) finds them equal, so '1/2' and '0.5' are one
  vote. A run without an answer does not vote; a subset with no answer at all counts as wrong.
  A tie between answer groups counts as right with the fraction of the tied groups that are right
  (the expectation of breaking the tie uniformly at random). A group is right when its first run
  (in seed order) was judged right.

Both are averaged over problems; a problem enters the k column only when it has at least k runs.
The interval is the bootstrap over problems that Pass@1 uses (``stats.bootstrap_mean``, seed 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tuiagent.eval.stats import bootstrap_mean, rounded

Equivalent = Callable[[str, str], bool]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``n`` runs, ``c`` of them right (1 <= k <= n)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def verify_equivalent(a: str, b: str) -> bool:
    """The project's answer equivalence (math-verify); a timed-out check counts as different."""
    from tuiagent.core.verify import is_correct

    return a.strip() == b.strip() or is_correct(a, b) is True


def answer_groups(
    answers: Sequence[str | None], correct: Sequence[bool], equivalent: Equivalent = verify_equivalent
) -> tuple[int, list[tuple[int, bool]]]:
    """(runs without an answer, [(size, right) per answer group]): each answer joins the first group
    whose first answer it is equivalent to; the group is right when its first run was right."""
    reps: list[str] = []
    groups: list[list[Any]] = []  # [size, right]
    none = 0
    for answer, ok in zip(answers, correct, strict=True):
        if answer is None:
            none += 1
            continue
        for rep, group in zip(reps, groups, strict=True):
            if equivalent(rep, answer):
                group[0] += 1
                break
        else:
            reps.append(answer)
            groups.append([1, bool(ok)])
    return none, [(int(s), bool(r)) for s, r in groups]


def maj_at_k(none: int, groups: Sequence[tuple[int, bool]], k: int) -> float:
    """Exact expected majority-vote accuracy of a k-subset of one problem's runs: ``none`` runs
    without an answer and answer groups of (size, right). Sums over the multivariate hypergeometric
    counts (x_0 from the non-voting runs, x_j from group j), weight prod C(m_j, x_j) / C(n, k)."""
    n = none + sum(s for s, _ in groups)
    if not 1 <= k <= n:
        raise ValueError(f"maj@k needs 1 <= k <= n (n={n}, k={k})")
    sizes = [none, *(s for s, _ in groups)]
    right = [False, *(r for _, r in groups)]
    total = 0.0

    def walk(j: int, left: int, weight: int, counts: list[int]) -> None:
        nonlocal total
        if j == len(sizes):
            if left:
                return
            votes = counts[1:]
            top = max(votes, default=0)
            if top == 0:
                return  # nobody answered: wrong
            tied = [i for i, v in enumerate(votes, start=1) if v == top]
            total += weight * sum(right[i] for i in tied) / len(tied)
            return
        rest = sum(sizes[j + 1 :])
        for x in range(max(0, left - rest), min(sizes[j], left) + 1):
            walk(j + 1, left - x, weight * math.comb(sizes[j], x), [*counts, x])

    walk(0, k, 1, [])
    return total / math.comb(n, k)


def ks_for(seeds: int) -> list[int]:
    """The k columns for ``seeds`` runs per problem: 1..seeds up to 8, else 1, 2, 4, ... and seeds."""
    if seeds <= 8:
        return list(range(1, seeds + 1))
    out, k = [], 1
    while k < seeds:
        out.append(k)
        k *= 2
    return [*out, seeds]


def estimators(
    problems: Sequence[Sequence[dict[str, Any]]], equivalent: Equivalent = verify_equivalent
) -> dict[str, dict[str, Any]]:
    """{"pass@k": {"value", "ci", "problems"}, "maj@k": ...} for every k of ``ks_for`` the most runs
    per problem; ``problems`` holds each problem's run records ("answer", "correct", "seed").
    Empty when no problem has more than one run."""
    seeds = max((len(rs) for rs in problems), default=0)
    if seeds <= 1:
        return {}
    prepared = []
    for rs in problems:
        rs = sorted(rs, key=lambda r: r.get("seed", 0))
        ok = [r.get("correct") is True for r in rs]
        none, groups = answer_groups([r.get("answer") for r in rs], ok, equivalent)
        prepared.append((len(rs), sum(ok), none, groups))
    out: dict[str, dict[str, Any]] = {}
    for k in ks_for(seeds):
        usable = [p for p in prepared if p[0] >= k]
        for name, values in (
            ("pass", [pass_at_k(n, c, k) for n, c, _, _ in usable]),
            ("maj", [maj_at_k(none, groups, k) for _, _, none, groups in usable]),
        ):
            mean, lo, hi = bootstrap_mean(values)
            out[f"{name}@{k}"] = {"value": rounded(mean), "ci": [rounded(lo), rounded(hi)], "problems": len(values)}
    return dict(sorted(out.items(), key=lambda kv: (kv[0].split("@")[0] != "pass", int(kv[0].split("@")[1]))))
