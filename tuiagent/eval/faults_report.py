"""Injected faults as an eval protocol (``tuiagent eval --inject``; docs/evaluating.md, "Injected
faults"): the variants that carry a fault, what each run's record keeps of it, and the report's
section, each injected run paired with the clean run of the same problem, setting and seed.

Definitions ([ours] unless a paper is named):

- **applied**: the fault reached the model (a wrong-number fault on an output without a number is
  recorded and not applied; a run that never made the call it aims at has none).
- **adopted**: the final answer equals the value only the corrupted output supports (the changed
  number of a wrong-number fault; a stale output's last number when the real output has no such
  number); runs whose fault supports no value are out of its denominator.
- **recovered**: a run with an applied fault that ended right: it re-ran (a later executed call
  whose output is the kernel's), recomputed or contradicted the output; ``reran`` counts the first.
- **ATTC as a detector**: ATTC's decision and confidence at the corrupted call against those at the
  same call of the paired clean runs: the rethink rates (Wilson intervals) and the AUROC of
  1 - confidence for "this output was corrupted" (Mann-Whitney; bootstrap interval). ATTC's
  confidence is the code block's (arXiv 2604.08281), read before the output: it cannot see a fault
  in the output, so chance (0.5) is what the paper's rule predicts.
- **PruneTIR on injected errors** (error, timeout): STP and STPR counts, the stuck curve
  (``tuiagent.eval.traces``) of the injected against the clean runs, and the tokens saved: the mean
  paired difference of the working context (WTN) of the baseline setting's injected run minus this
  setting's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.stats

from tuiagent.core import events as ev
from tuiagent.core.faults import KINDS, FaultPlan, fault_seed
from tuiagent.core.verify import is_correct
from tuiagent.eval.datasets import Problem, with_variant
from tuiagent.eval.protocols import DatasetData, EvalProtocol, Table, cell
from tuiagent.eval.stats import mcnemar_exact, paired_bootstrap, percentile_ci, right, rounded, wilson
from tuiagent.eval.traces import record_trace, stuck_curve

if TYPE_CHECKING:
    from tuiagent.eval.harness import EvalConfig
    from tuiagent.presets import Preset

INJECT_PREFIX = "inject:"
ERROR_KINDS = ("error", "timeout")  # the faults PruneTIR's error analysis reads
STUCK_SHOWN = 3  # [ours] the stuck curve's first turns in the table (the plot has them all)
GUARD_FLAGS = (("gate_continues", "G-STEP continues"), ("necessity_flags", "necessity flags"), ("tim_flag", "TIM flag"))
PAPER_ATTC_TOOL_IGNORED = ">= 15% of errors (Figure 3; judged, no injection)"
PAPER_PRUNETIR_STUCK = "falls with k (its second finding; no injection)"


# -- variants and requests ---------------------------------------------------------------------------


def fault_variants(
    problems: Sequence[Problem], kinds: Sequence[str], at: int = 1, broken: bool = False
) -> list[Problem]:
    """Each problem once per kind, its question unchanged, the plan in its variant name and meta."""
    out = []
    for p in problems:
        for kind in kinds:
            plan = FaultPlan(kind, at=at, broken=broken)
            out.append(with_variant(p, INJECT_PREFIX + plan.label, p.question, inject=plan.record()))
    return out


def is_injected(problem: Problem) -> bool:
    return problem.variant.startswith(INJECT_PREFIX)


def job_plan(problem: Problem, seed: int) -> FaultPlan | None:
    """The fault of a problem's run under seed ``seed``: the same under every setting (the pairing),
    drawn from the dataset, the problem id, the seed and the kind."""
    spec = problem.meta.get("inject")
    if not is_injected(problem) or not isinstance(spec, dict):
        return None
    kind = str(spec["kind"])
    return FaultPlan(
        kind,
        at=int(spec.get("at", 1)),
        broken=bool(spec.get("broken")),
        seed=fault_seed(problem.dataset, problem.id, seed, kind),
    )


# -- what a run's record keeps ------------------------------------------------------------------------


def injection_of(events: Sequence[ev.Event]) -> dict[str, Any] | None:
    """The run's injected faults, for its record: the plan, the first injected call, whether it was
    applied, the value it supports, every call it hit and whether the run re-ran after it."""
    hits = [e for e in events if isinstance(e, ev.Intervention) and e.target == "output" and e.fault]
    if not hits:
        return None
    first = hits[0]
    hit_calls = {e.call for e in hits}
    later = [
        e
        for e in events
        if isinstance(e, ev.ToolResult) and e.executed and e.call is not None and e.call > (first.call or 0)
    ]
    return {
        "kind": first.fault,
        "by": first.by,
        "plan": first.detail.get("plan"),
        "call": first.call,
        "applied": bool(first.detail.get("applied", True)),
        "supports": first.detail.get("supports"),
        "calls": sorted(c for c in hit_calls if c is not None),
        "reran": any(e.call not in hit_calls for e in later),
        "detail": {k: v for k, v in first.detail.items() if k not in ("plan", "supports")},
    }


def tool_verdicts(events: Iterable[ev.Event]) -> list[dict[str, Any]]:
    """Every guard's verdict on each tool output (hook on_tool_result): its call, guard, action and the
    scalar numbers of its data (ATTC's decision and confidence among them)."""
    out: list[dict[str, Any]] = []
    call: int | None = None
    for e in events:
        if isinstance(e, ev.ToolResult):
            call = e.call
        elif isinstance(e, ev.GuardVerdict) and e.hook == "on_tool_result":
            data = {k: v for k, v in (e.data or {}).items() if isinstance(v, (int, float, str, bool)) or v is None}
            out.append({"call": call, "guard": e.guard, "action": e.action, **data})
    return out


# -- the section ---------------------------------------------------------------------------------------


def _pair_key(r: dict[str, Any]) -> tuple[str, int]:
    return str(r["problem_id"]), int(r.get("seed", 0))


def adopted(record: dict[str, Any]) -> bool | None:
    """Whether the run's final answer is the value only its corrupted output supports (None: no such value)."""
    inj = record.get("injection") or {}
    supports = inj.get("supports")
    if not inj.get("applied") or supports is None:
        return None
    answer = record.get("answer")
    return answer is not None and bool(is_correct(str(supports), str(answer)))


def recovered(record: dict[str, Any]) -> bool | None:
    """Whether a run with an applied fault ended right (None: no fault reached the model)."""
    inj = record.get("injection") or {}
    if not inj.get("applied"):
        return None
    return record.get("correct") is True


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


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": rounded(k / n) if n else None, "ci": [rounded(lo), rounded(hi)]}


def _at_call(record: dict[str, Any], guard: str, call: int | None) -> dict[str, Any] | None:
    return next((v for v in record.get("tool_verdicts") or [] if v["guard"] == guard and v["call"] == call), None)


def attc_detector(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any] | None:
    """ATTC's verdicts at the corrupted call against the same call of the clean run (module docstring)."""
    corrupted, clean = [], []
    for inj, base in pairs:
        info = inj.get("injection") or {}
        if not info.get("applied"):
            continue
        a = _at_call(inj, "attc", info.get("call"))
        if a is not None:
            corrupted.append(a)
        b = _at_call(base, "attc", info.get("call"))
        if b is not None:
            clean.append(b)
    if not corrupted and not clean:
        return None
    pos = [1.0 - float(v["confidence"]) for v in corrupted if isinstance(v.get("confidence"), (int, float))]
    neg = [1.0 - float(v["confidence"]) for v in clean if isinstance(v.get("confidence"), (int, float))]
    lo, hi = auroc_ci(pos, neg)
    return {
        "rethink_corrupted": _rate(sum(v.get("decision") == "rethink" for v in corrupted), len(corrupted)),
        "rethink_clean": _rate(sum(v.get("decision") == "rethink" for v in clean), len(clean)),
        "auroc": rounded(auroc(pos, neg)),
        "auroc_ci": [rounded(lo), rounded(hi)],
        "n_corrupted": len(pos),
        "n_clean": len(neg),
    }


def _flags(records: Sequence[dict[str, Any]], key: str) -> int | float | None:
    """The total of a count (or a yes/no) over ``records``: a whole number prints as one."""
    values = [float(r[key]) for r in records if isinstance(r.get(key), (int, float)) and not isinstance(r[key], str)]
    total = float(sum(values))
    return (int(total) if total.is_integer() else total) if values else None


def prunetir_on_errors(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]], baseline_runs: dict[tuple[str, int], dict[str, Any]] | None
) -> dict[str, Any]:
    """STP, STPR, the stuck curves and the tokens saved against the baseline setting's injected runs."""
    inj = [i for i, _ in pairs]
    clean = [c for _, c in pairs]
    traces_inj = [t for t in (record_trace(r) for r in inj) if t is not None]
    traces_clean = [t for t in (record_trace(r) for r in clean) if t is not None]
    saved = None
    if baseline_runs is not None:
        diffs = [
            float(baseline_runs[_pair_key(r)].get("wtn") or 0) - float(r.get("wtn") or 0)
            for r in inj
            if _pair_key(r) in baseline_runs
        ]
        if diffs:
            mean, lo, hi = paired_bootstrap(diffs)
            saved = {"mean": rounded(mean), "ci": [rounded(lo), rounded(hi)], "pairs": len(diffs)}
    return {
        "stp": [sum(int(r.get("stp") or 0) for r in inj), sum(int(r.get("stp") or 0) for r in clean)],
        "stpr": [sum(int(r.get("resampled") or 0) for r in inj), sum(int(r.get("resampled") or 0) for r in clean)],
        "stuck_injected": stuck_curve(traces_inj),
        "stuck_clean": stuck_curve(traces_clean),
        "tokens_saved": saved,
    }


def kind_row(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]],
    kind: str,
    baseline_runs: dict[tuple[str, int], dict[str, Any]] | None,
) -> dict[str, Any]:
    """One setting and fault: accuracy against the clean runs, adopted, recovered, the guards."""
    inj = [i for i, _ in pairs]
    clean = [c for _, c in pairs]
    diffs = [right(i) - right(c) for i, c in pairs]
    mean, lo, hi = paired_bootstrap(diffs)
    b = sum(right(c) > right(i) for i, c in pairs)
    c_ = sum(right(i) > right(c) for i, c in pairs)
    adopt = [a for a in (adopted(r) for r in inj) if a is not None]
    recover = [(r, x) for r in inj for x in [recovered(r)] if x is not None]
    applied = sum(bool((r.get("injection") or {}).get("applied")) for r in inj)
    row: dict[str, Any] = {
        "pairs": len(pairs),
        "applied": applied,
        "clean_accuracy": rounded(sum(map(right, clean)) / len(clean)) if clean else None,
        "accuracy": rounded(sum(map(right, inj)) / len(inj)) if inj else None,
        "delta": rounded(mean),
        "delta_ci": [rounded(lo), rounded(hi)],
        "p_mcnemar": rounded(mcnemar_exact(b, c_)),
        "adopted": _rate(sum(adopt), len(adopt)),
        "recovered": _rate(sum(x for _, x in recover), len(recover)),
        "reran": sum(bool(x and (r.get("injection") or {}).get("reran")) for r, x in recover),
        "attc": attc_detector(pairs),
        "flags": {key: [_flags(inj, key), _flags(clean, key)] for key, _ in GUARD_FLAGS},
    }
    if kind in ERROR_KINDS:
        row["prunetir"] = prunetir_on_errors(pairs, baseline_runs)
    return row


def faults_section(
    records: Sequence[dict[str, Any]], settings: Sequence[str], baseline: str | None
) -> dict[str, Any] | None:
    """Per setting and injected variant (``inject:KIND``), its runs paired with the clean runs of the
    same problem, setting and seed; None when no run was injected."""
    variants = sorted({str(r["variant"]) for r in records if str(r.get("variant") or "").startswith(INJECT_PREFIX)})
    if not variants:
        return None
    out: dict[str, Any] = {}
    for s in settings:
        rs = [r for r in records if r["setting"] == s]
        clean = {_pair_key(r): r for r in rs if not r.get("variant")}
        row: dict[str, Any] = {}
        for v in variants:
            pairs = [(r, clean[_pair_key(r)]) for r in rs if r.get("variant") == v and _pair_key(r) in clean]
            if not pairs:
                continue
            label = v[len(INJECT_PREFIX) :]
            kind = label.split("@")[0].split("+")[0]
            base = (
                {_pair_key(r): r for r in records if r["setting"] == baseline and r.get("variant") == v}
                if baseline is not None and baseline != s
                else None
            )
            row[label] = kind_row(pairs, kind, base)
        if row:
            out[s] = row
    return out or None


# -- tables and the plot -------------------------------------------------------------------------------

Cell = Any


def _kr(r: dict[str, Any], cell: Cell) -> str:
    return f"{r['k']}/{r['n']} ({cell(r['rate'])}; {cell(r['ci'])})" if r["n"] else "–"


def faults_tables(section: dict[str, Any], dataset: str, cell: Cell) -> list[Table]:
    """(title, header, rows) of the section, in the report's cell format ``cell``."""
    acc, attc, prune, flags = [], [], [], []
    for s, kinds in section.items():
        for label, r in kinds.items():
            acc.append(
                [
                    s,
                    label,
                    str(r["pairs"]),
                    str(r["applied"]),
                    cell(r["clean_accuracy"]),
                    cell(r["accuracy"]),
                    f"{cell(r['delta'])} ({cell(r['delta_ci'])})",
                    cell(r["p_mcnemar"]),
                    _kr(r["adopted"], cell),
                    _kr(r["recovered"], cell) + f", re-ran {r['reran']}",
                ]
            )
            if r.get("attc"):
                a = r["attc"]
                attc.append(
                    [
                        s,
                        label,
                        _kr(a["rethink_corrupted"], cell),
                        _kr(a["rethink_clean"], cell),
                        f"{cell(a['auroc'])} ({cell(a['auroc_ci'])})",
                        f"{a['n_corrupted']}/{a['n_clean']}",
                    ]
                )
            if r.get("prunetir"):
                p = r["prunetir"]
                curve = [
                    f"{cell(x['p'])} ({x['resolved']}/{x['at_risk']}; {cell(x['ci'])}) vs {cell(y['p'])}"
                    for x, y in zip(p["stuck_injected"]["curve"], p["stuck_clean"]["curve"], strict=True)
                ][:STUCK_SHOWN]
                saved = p["tokens_saved"]
                prune.append(
                    [
                        s,
                        label,
                        f"{p['stp'][0]} / {p['stp'][1]}",
                        f"{p['stpr'][0]} / {p['stpr'][1]}",
                        f"{p['stuck_injected']['episodes']} / {p['stuck_clean']['episodes']}",
                        *curve,
                        f"{cell(saved['mean'])} ({cell(saved['ci'])})" if saved else "–",
                    ]
                )
            flags.append([s, label, *(f"{cell(r['flags'][k][0])} / {cell(r['flags'][k][1])}" for k, _ in GUARD_FLAGS)])
    tables: list[Table] = [
        (
            f"{dataset}: injected faults (paired with the clean runs; Δ = injected - clean, bootstrap 95% CI; adopted: the "
            "answer is the value only the corrupted output supports; recovered: a fault reached the model and the run "
            "ended right; k/n (rate; Wilson 95% CI))",
            [
                "setting",
                "fault",
                "pairs",
                "applied",
                "clean",
                "injected",
                "Δ (95% CI)",
                "McNemar p",
                "adopted",
                "recovered",
            ],
            acc,
        )
    ]
    if attc:
        tables.append(
            (
                f"{dataset}: ATTC as a detector of corrupted outputs (rethink at the corrupted call vs the same call of the "
                "clean run; AUROC of 1 - confidence, bootstrap 95% CI; the confidence is the code block's, read before "
                "the output)",
                ["setting", "fault", "rethink corrupted", "rethink clean", "AUROC (95% CI)", "n corrupted/clean"],
                attc,
            )
        )
    if prune:
        tables.append(
            (
                f"{dataset}: PruneTIR on injected errors (injected / clean; P(resolved at turn k | open), Wilson 95% CI, "
                "injected vs clean; tokens saved: the baseline's WTN - this setting's, paired)",
                [
                    "setting",
                    "fault",
                    "STP",
                    "STPR",
                    "episodes",
                    *(f"k={k}" for k in range(1, STUCK_SHOWN + 1)),
                    "tokens saved",
                ],
                prune,
            )
        )
    tables.append(
        (
            f"{dataset}: guards' flags on injected / clean runs (totals)",
            ["setting", "fault", *(name for _, name in GUARD_FLAGS)],
            flags,
        )
    )
    tables.append(paper_table(section, dataset, cell))
    return tables


def paper_table(section: dict[str, Any], dataset: str, cell: Cell) -> Table:
    """The papers' figures beside ours: ATTC's tool-ignored and wrong-output analyses (Figure 3), read
    here with the fault known instead of judged, and PruneTIR's stuck curve."""
    rows = [["ATTC Fig. 3: a right output ignored", "paper", PAPER_ATTC_TOOL_IGNORED]]
    rows.append(["PruneTIR: P(resolved at k | open)", "paper", PAPER_PRUNETIR_STUCK])
    for s, kinds in section.items():
        for label, r in kinds.items():
            rows.append(["ATTC: a wrong output adopted", f"{s} {label}", _kr(r["adopted"], cell)])
            rows.append(["ATTC: a wrong output overridden (recovered)", f"{s} {label}", _kr(r["recovered"], cell)])
            if r.get("prunetir"):
                first = r["prunetir"]["stuck_injected"]["curve"][0]
                rows.append(["PruneTIR: P(resolved at k=1 | open)", f"{s} {label}", cell(first["p"])])
    return (f"{dataset}: the papers' figures beside the injected runs", ["figure", "source", "value"], rows)


def plot_faults(section: dict[str, Any], dataset: str, directory: Path, plt: Any) -> Path | None:
    """Side by side: accuracy clean vs injected per setting and fault, adopted and recovered; and the stuck
    curve of the injected errors against the clean runs (``plt``: matplotlib.pyplot, Agg)."""
    rows = [(f"{s}\n{label}", r) for s, kinds in section.items() for label, r in kinds.items()]
    if not rows:
        return None
    curves = [
        (f"{s} {label}", r["prunetir"])
        for s, kinds in section.items()
        for label, r in kinds.items()
        if r.get("prunetir")
    ]
    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(11 if curves else 6, 3.8), squeeze=False)
    ax = axes[0][0]
    x = np.arange(len(rows))
    width = 0.2
    for i, (name, values) in enumerate(
        (
            ("clean", [r["clean_accuracy"] or 0 for _, r in rows]),
            ("injected", [r["accuracy"] or 0 for _, r in rows]),
            ("adopted", [r["adopted"]["rate"] or 0 for _, r in rows]),
            ("recovered", [r["recovered"]["rate"] or 0 for _, r in rows]),
        )
    ):
        ax.bar(x + (i - 1.5) * width, values, width, label=name)
    ax.set_xticks(x, [label for label, _ in rows], fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_title(f"{dataset}: injected faults (ours)")
    ax.legend(fontsize=7)
    if curves:
        ax = axes[0][1]
        for name, p in curves:
            for which, style in (("stuck_injected", "-o"), ("stuck_clean", "--x")):
                points = [c for c in p[which]["curve"] if c["at_risk"]]
                if points:
                    ax.plot([c["k"] for c in points], [c["p"] for c in points], style, label=f"{name} {which[6:]}")
        ax.set_ylim(0, 1)
        ax.set_xlabel("k: turns after the erroneous call")
        ax.set_ylabel("P(resolved at turn k | open)")
        ax.set_title("PruneTIR's stuck curve, injected vs clean")
        ax.legend(fontsize=6)
    fig.tight_layout()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"faults-{dataset}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["INJECT_PREFIX", "KINDS", "faults_section", "faults_tables", "fault_variants", "injection_of"]


class InjectedFaults(EvalProtocol):
    """``--inject``: each injected run beside its clean pair (ours; no paper defines this protocol)."""

    name = "faults"
    title = "Injected tool faults (ours): accuracy, adopted, recovered, and each guard's answer beside the clean runs"
    order = 60
    made_by = "--inject KIND[,KIND...] (--inject-at N, --broken-tool)"

    def variants(self, problems: list[Problem], cfg: EvalConfig) -> list[Problem]:
        return fault_variants(problems, cfg.inject, cfg.inject_at, cfg.broken_tool) if cfg.inject else []

    def skips(self, problem: Problem, setting: Preset) -> bool:
        # a fault is in a tool output: a no-tool setting's injected run would be its clean run again
        return is_injected(problem) and setting.spec.mode != "tool"

    def sections(self, data: DatasetData) -> dict[str, Any]:
        return {"faults": faults_section(data.records, data.eval.settings, data.eval.baseline)}

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        section = summary["datasets"][dataset].get("faults")
        return faults_tables(section, dataset, cell) if section else []

    def plots(self, summary: dict[str, Any], dataset: str, directory: Path, plt: Any) -> list[Path]:
        section = summary["datasets"][dataset].get("faults")
        path = plot_faults(section, dataset, directory, plt) if section else None
        return [path] if path else []
