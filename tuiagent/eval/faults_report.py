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
- **each guard's reading**: a paper's protocol reads its own guard off the pairs (its hooks
  ``read_faults``, ``fault_tables``, ``fault_flags``, ``fault_figure``, ``fault_figure_rows`` and
  ``fault_panel``; ATTC as a detector in guards/attc/faults.py, PruneTIR on injected errors in
  guards/prunetir/faults.py); this module names no guard.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuiagent.core import events as ev
from tuiagent.core.faults import KINDS, FaultPlan, fault_seed
from tuiagent.core.verify import is_correct
from tuiagent.eval.datasets import Problem, with_variant
from tuiagent.eval.protocols import DatasetData, EvalProtocol, FaultRow, InjectedRuns, Table, cell, installed
from tuiagent.eval.stats import mcnemar_exact, paired_bootstrap, right, rounded, wilson

if TYPE_CHECKING:
    from tuiagent.eval.harness import EvalConfig
    from tuiagent.presets import Preset

INJECT_PREFIX = "inject:"


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


def pair_key(r: dict[str, Any]) -> tuple[str, int]:
    """What pairs a run with its clean twin and the baseline's injected run: (problem id, seed)."""
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


def rate(k: int, n: int) -> dict[str, Any]:
    """k of n with its rate and Wilson 95% interval (the section's counts; a paper's reading uses it too)."""
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": rounded(k / n) if n else None, "ci": [rounded(lo), rounded(hi)]}


def _guard_flags() -> list[tuple[str, str]]:
    """(record key, column) of every installed guard's flags, in report order."""
    return [flag for p in installed() for flag in p.fault_flags]


def _flags(records: Sequence[dict[str, Any]], key: str) -> int | float | None:
    """The total of a count (or a yes/no) over ``records``: a whole number prints as one."""
    values = [float(r[key]) for r in records if isinstance(r.get(key), (int, float)) and not isinstance(r[key], str)]
    total = float(sum(values))
    return (int(total) if total.is_integer() else total) if values else None


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
        "adopted": rate(sum(adopt), len(adopt)),
        "recovered": rate(sum(x for _, x in recover), len(recover)),
        "reran": sum(bool(x and (r.get("injection") or {}).get("reran")) for r, x in recover),
        "flags": {key: [_flags(inj, key), _flags(clean, key)] for key, _ in _guard_flags()},
    }
    runs = InjectedRuns(kind, pairs, baseline_runs)
    for p in installed():
        reading = p.read_faults(runs)
        if reading is not None:
            row[p.name] = reading
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
        clean = {pair_key(r): r for r in rs if not r.get("variant")}
        row: dict[str, Any] = {}
        for v in variants:
            pairs = [(r, clean[pair_key(r)]) for r in rs if r.get("variant") == v and pair_key(r) in clean]
            if not pairs:
                continue
            label = v[len(INJECT_PREFIX) :]
            kind = label.split("@")[0].split("+")[0]
            base = (
                {pair_key(r): r for r in records if r["setting"] == baseline and r.get("variant") == v}
                if baseline is not None and baseline != s
                else None
            )
            row[label] = kind_row(pairs, kind, base)
        if row:
            out[s] = row
    return out or None


# -- tables and the plot -------------------------------------------------------------------------------


def count_cell(r: dict[str, Any]) -> str:
    """A ``rate`` as the report prints it: k/n (rate; interval)."""
    return f"{r['k']}/{r['n']} ({cell(r['rate'])}; {cell(r['ci'])})" if r["n"] else "–"


def _rows(section: dict[str, Any]) -> list[FaultRow]:
    return [(s, label, r) for s, kinds in section.items() for label, r in kinds.items()]


def faults_tables(section: dict[str, Any], dataset: str) -> list[Table]:
    """(title, header, rows) of the section: accuracy, adopted and recovered, then each paper's tables
    and flags, then the papers' figures beside the injected runs."""
    rows = _rows(section)
    acc = [
        [
            s,
            label,
            str(r["pairs"]),
            str(r["applied"]),
            cell(r["clean_accuracy"]),
            cell(r["accuracy"]),
            f"{cell(r['delta'])} ({cell(r['delta_ci'])})",
            cell(r["p_mcnemar"]),
            count_cell(r["adopted"]),
            count_cell(r["recovered"]) + f", re-ran {r['reran']}",
        ]
        for s, label, r in rows
    ]
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
    protocols = installed()
    for p in protocols:
        tables.extend(p.fault_tables(rows, dataset))
    keys = _guard_flags()
    flags = [
        [s, label, *(f"{cell(r['flags'][k][0])} / {cell(r['flags'][k][1])}" for k, _ in keys)] for s, label, r in rows
    ]
    tables.append(
        (
            f"{dataset}: guards' flags on injected / clean runs (totals)",
            ["setting", "fault", *(n for _, n in keys)],
            flags,
        )
    )
    figures = [[figure, "paper", value] for p in protocols if p.fault_figure for figure, value in [p.fault_figure]]
    figures += [line for row in rows for p in protocols for line in p.fault_figure_rows(row)]
    tables.append((f"{dataset}: the papers' figures beside the injected runs", ["figure", "source", "value"], figures))
    return tables


def plot_faults(section: dict[str, Any], dataset: str, directory: Path, plt: Any) -> Path | None:
    """Side by side: accuracy clean vs injected per setting and fault, adopted and recovered; and each
    paper's panel beside it (PruneTIR's stuck curve of the injected errors) (``plt``: matplotlib.pyplot, Agg)."""
    rows = _rows(section)
    if not rows:
        return None
    panels = [draw for p in installed() if (draw := p.fault_panel(rows)) is not None]
    wide = 1 + len(panels)
    fig, axes = plt.subplots(1, wide, figsize=(6 + 5 * len(panels), 3.8), squeeze=False)
    ax = axes[0][0]
    x = np.arange(len(rows))
    width = 0.2
    for i, (name, values) in enumerate(
        (
            ("clean", [r["clean_accuracy"] or 0 for _, _, r in rows]),
            ("injected", [r["accuracy"] or 0 for _, _, r in rows]),
            ("adopted", [r["adopted"]["rate"] or 0 for _, _, r in rows]),
            ("recovered", [r["recovered"]["rate"] or 0 for _, _, r in rows]),
        )
    ):
        ax.bar(x + (i - 1.5) * width, values, width, label=name)
    ax.set_xticks(x, [f"{s}\n{label}" for s, label, _ in rows], fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_title(f"{dataset}: injected faults (ours)")
    ax.legend(fontsize=7)
    for draw, panel in zip(panels, axes[0][1:], strict=True):
        draw(panel)
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
        return faults_tables(section, dataset) if section else []

    def plots(self, summary: dict[str, Any], dataset: str, directory: Path, plt: Any) -> list[Path]:
        section = summary["datasets"][dataset].get("faults")
        path = plot_faults(section, dataset, directory, plt) if section else None
        return [path] if path else []
