"""PruneTIR's analyses (shared/papers/004, a technical summary of the paper) on an eval's runs.

- **Erroneous calls by outcome** (its first finding): erroneous calls per run, and their share of the
  run's calls, in correct against incorrect runs, mean (bootstrap CI) and median, with the difference
  of the means (unpaired bootstrap CI).
- **Stuck curve** (its second finding): over error episodes, P(resolved at the k-th turn after the
  error | not resolved in the k-1 turns before), k = 1..K, with Wilson intervals.
- **Ablation** (``--protocol prunetir-ablation``): full PruneTIR against each component switched off.

Definitions (docs/papers/prunetir.md, "PruneTIR's analyses"): the turn trace, its error episodes and
the stuck curve are ``tuiagent.eval.traces``' (the injected faults' report reads them too); a ``|`` in
a trace is where STPR cut the context back before a resampled turn.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from guards.prunetir import faults
from tuiagent.eval.protocols import DatasetData, EvalProtocol, FaultRow, InjectedRuns, Table, cell
from tuiagent.eval.stats import bootstrap_diff, bootstrap_mean, rounded, wilson
from tuiagent.eval.traces import STUCK_K, record_trace, stuck_curve

ERROR_BINS = (0, 1, 2, 3)  # [ours] accuracy by erroneous calls in the run: 0, 1, 2, 3 or more
COMPONENTS = ("stp", "stpr", "rtts")  # guards/prunetir/guard.py's switches [paper]
# [paper] the numbers the summary gives (Qwen3-8B on AIME24); it gives none for the ablation rows
# ("removing any of the three components resulted in lower performance").
PAPER_ROWS = {
    "Base": {"pass@1": "62.1%", "tcn": "7.7", "wtn": "11.5K"},
    "PruneTIR": {"pass@1": "72.7%", "tcn": "4.2", "wtn": "9.5K"},
}
PAPER_MODEL = "Qwen3-8B, AIME24"


def _stats(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"runs": 0, "mean": None, "ci": [None, None], "median": None}
    mean, lo, hi = bootstrap_mean(list(values))
    return {
        "runs": len(values),
        "mean": rounded(mean),
        "ci": [rounded(lo), rounded(hi)],
        "median": rounded(statistics.median(values)),
    }


def errors_by_outcome(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Erroneous calls per run and their share of the run's calls (runs with a call), in correct and
    incorrect runs, with the difference incorrect - correct of each mean; and the accuracy of the runs
    by their erroneous calls (0, 1, 2, 3+; Wilson CIs). Runs without a verdict are out."""
    out: dict[str, Any] = {}
    for measure, value in (
        ("count", lambda r: float(r.get("erroneous") or 0)),
        ("share", lambda r: float(r.get("erroneous") or 0) / r["tcn"] if r.get("tcn") else None),
    ):
        sides = {}
        for side, correct in (("correct", True), ("incorrect", False)):
            values = [v for r in records if r.get("correct") is correct for v in [value(r)] if v is not None]
            sides[side] = values
        diff, lo, hi = bootstrap_diff(sides["incorrect"], sides["correct"])
        out[measure] = {
            "correct": _stats(sides["correct"]),
            "incorrect": _stats(sides["incorrect"]),
            "delta": rounded(diff),
            "delta_ci": [rounded(lo), rounded(hi)],
        }
    out["accuracy_by_errors"] = {}
    judged = [r for r in records if r.get("correct") is not None]
    for low in ERROR_BINS:
        last = low == ERROR_BINS[-1]
        rs = [r for r in judged if (r.get("erroneous") or 0) == low or (last and (r.get("erroneous") or 0) > low)]
        right = sum(r["correct"] is True for r in rs)
        lo, hi = wilson(right, len(rs))
        out["accuracy_by_errors"][f"{low}+" if last else str(low)] = {
            "runs": len(rs),
            "accuracy": rounded(right / len(rs)) if rs else None,
            "ci": [rounded(lo), rounded(hi)],
        }
    return out


def ablation_label(spec: dict[str, Any]) -> str | None:
    """The paper's name of a setting's row: Base (no guard, tools on), PruneTIR, w/o STP / STPR / RTTS
    (more than one off: w/o STP+STPR, ...), other PruneTIR settings in brackets; None: not a row."""
    run = spec.get("run") or {}
    if run.get("mode", "tool") != "tool" or run.get("kernel", "jupyter") != "jupyter":
        return None
    guards = list(spec.get("guards") or [])
    if not guards:
        return "Base"
    if guards != ["prunetir"]:
        return None
    from guards.base import parse_settings
    from guards.chain import presenter

    guard: Any = presenter("prunetir")  # a GuardBase subclass declares its Settings
    cls = guard.Settings
    values = dict((spec.get("guard_settings") or {}).get("prunetir", {}))
    try:
        settings, default = parse_settings(cls, values, guard="prunetir"), cls()
    except ValueError:
        return None
    off = [c.upper() for c in COMPONENTS if not getattr(settings, c)]
    others = [f"{k}={values[k]}" for k in values if k not in COMPONENTS and getattr(settings, k) != getattr(default, k)]
    return ("w/o " + "+".join(off) if off else "PruneTIR") + (f" ({', '.join(others)})" if others else "")


def ablation(
    clean: dict[str, list[dict[str, Any]]],
    specs: dict[str, dict[str, Any]],
    row: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], dict[str, Any]],
) -> list[dict[str, Any]] | None:
    """The ablation table's rows (settings in order), each with its Δ against full PruneTIR by ``row``
    (the report's setting row: paired bootstrap, McNemar); None without an ablated PruneTIR setting."""
    labels = {s: label for s in clean for label in [ablation_label(specs.get(s, {}))] if label}
    if not any(label.startswith("w/o") for label in labels.values()):
        return None
    full = next((s for s, label in labels.items() if label == "PruneTIR"), None)
    rows = []
    for s, label in labels.items():
        numbers = row(clean[s], clean[full] if full is not None and s != full else None)
        rows.append(
            {
                "variant": label,
                "setting": s,
                "runs": numbers["runs"],
                "accuracy": numbers["accuracy"],
                "acc_ci": numbers["acc_ci"],
                "delta_vs_full": numbers.get("delta"),
                "delta_ci": numbers.get("delta_ci"),
                "p_mcnemar": numbers.get("p_mcnemar"),
                "tcn": numbers["tcn"],
                "erroneous": numbers["erroneous"],
                "wtn": numbers["wtn"],
                "paper": PAPER_ROWS.get(label),
            }
        )
    return rows


def prunetir_section(
    clean: dict[str, list[dict[str, Any]]],
    specs: dict[str, dict[str, Any]],
    row: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], dict[str, Any]],
) -> dict[str, Any] | None:
    """The three analyses for one dataset's runs as written (``clean``: by setting); tool settings only."""
    tool = {
        s: rs
        for s, rs in clean.items()
        if (specs.get(s, {}).get("run") or {}).get("mode", "tool") == "tool" and any(r.get("tcn") for r in rs)
    }
    if not tool:
        return None
    stuck = {}
    for s, rs in tool.items():
        traces = [record_trace(r) for r in rs]
        stuck[s] = stuck_curve(t for t in traces if t is not None) | {"runs_without_trace": traces.count(None)}
    return {
        "errors_by_outcome": {s: errors_by_outcome(rs) for s, rs in tool.items()},
        "stuck": stuck,
        "ablation": ablation(clean, specs, row),
    }


# -- tables and the plot -----------------------------------------------------------------------------

Cell = Callable[[Any], str]


def prunetir_tables(section: dict[str, Any], dataset: str, cell: Cell) -> list[Table]:
    """(title, header, rows) of the section, in the report's cell format ``cell``. Tables with nothing to
    compare have no rows (the report leaves them out): the first two when no run made an erroneous call,
    the episodes table when there was no error episode."""
    tables: list[Table] = []
    errors = section["errors_by_outcome"]
    if not any(m["count"][o]["mean"] for m in errors.values() for o in ("correct", "incorrect")):
        errors = {}
    rows = []
    for s, m in errors.items():
        for measure, name in (("count", "erroneous calls per run"), ("share", "share of the run's calls")):
            c, i = m[measure]["correct"], m[measure]["incorrect"]
            rows.append(
                [
                    s,
                    name,
                    str(c["runs"]),
                    f"{cell(c['mean'])} ({cell(c['ci'])})",
                    cell(c["median"]),
                    str(i["runs"]),
                    f"{cell(i['mean'])} ({cell(i['ci'])})",
                    cell(i["median"]),
                    f"{cell(m[measure]['delta'])} ({cell(m[measure]['delta_ci'])})",
                ]
            )
    tables.append(
        (
            f"{dataset}: PruneTIR finding 1, erroneous tool calls in correct vs incorrect runs (mean with 95% "
            "bootstrap CI, median; paper: higher mean and median in incorrect runs, no values in our copy)",
            [
                "setting",
                "measure",
                "correct n",
                "correct mean",
                "correct median",
                "incorrect n",
                "incorrect mean",
                "incorrect median",
                "Δ mean (incorrect - correct)",
            ],
            rows,
        )
    )
    bins = [f"{b}+" if b == ERROR_BINS[-1] else str(b) for b in ERROR_BINS]
    tables.append(
        (
            f"{dataset}: accuracy by erroneous calls in the run (runs; 95% Wilson CI)",
            ["setting", *bins],
            [
                [
                    s,
                    *(
                        f"{cell(c['accuracy'])} ({c['runs']}; {cell(c['ci'])})"
                        for b in bins
                        for c in [m["accuracy_by_errors"][b]]
                    ),
                ]
                for s, m in errors.items()
            ],
        )
    )
    rows = []
    for s, st in section["stuck"].items():
        for point in st["curve"]:
            if point["at_risk"]:
                rows.append(
                    [
                        s,
                        str(point["k"]),
                        str(point["at_risk"]),
                        str(point["resolved"]),
                        cell(point["p"]),
                        cell(point["ci"]),
                        cell(point["resolved_by_k"]),
                    ]
                )
    tables.append(
        (
            f"{dataset}: PruneTIR's stuck analysis, P(error resolved at the k-th turn after it | not resolved "
            "before), 95% Wilson CI (paper: models that do not fix an error within a few turns stay stuck; "
            "no values in our copy)",
            ["setting", "k", "at risk", "resolved", "P(resolve)", "95% CI", "resolved by k (Kaplan-Meier)"],
            rows,
        )
    )
    tables.append(
        (
            f"{dataset}: PruneTIR's error episodes, how they ended",
            [
                "setting",
                "episodes",
                "resolved",
                "cut (STPR)",
                "open at the run's end",
                f"open past k={STUCK_K}",
                "runs without a trace",
            ],
            [
                [s, *(str(st[k]) for k in ("episodes", "resolved", "cut", "ended", "later", "runs_without_trace"))]
                for s, st in section["stuck"].items()
                if any(x["episodes"] for x in section["stuck"].values())  # else: no rows, left out
            ],
        )
    )
    if section.get("ablation"):
        rows = []
        for r in section["ablation"]:
            paper = r["paper"] or {}
            rows.append(
                [
                    r["variant"],
                    r["setting"],
                    str(r["runs"]),
                    cell(r["accuracy"]),
                    cell(r["acc_ci"]),
                    cell(r["delta_vs_full"]),
                    cell(r["delta_ci"]),
                    cell(r["p_mcnemar"]),
                    cell(r["tcn"]),
                    cell(r["erroneous"]),
                    cell(r["wtn"]),
                    cell(paper.get("pass@1")),
                    cell(paper.get("tcn")),
                    cell(paper.get("wtn")),
                ]
            )
        tables.append(
            (
                f"{dataset}: PruneTIR ablation (Δ against full PruneTIR: paired bootstrap CI, exact McNemar "
                f"p; paper's figures: {PAPER_MODEL}, not given for the w/o rows in our copy)",
                [
                    "variant",
                    "setting",
                    "runs",
                    "Pass@1",
                    "95% CI",
                    "Δ vs PruneTIR",
                    "Δ 95% CI",
                    "McNemar p",
                    "TCN",
                    "err",
                    "WTN",
                    "paper Pass@1",
                    "paper TCN",
                    "paper WTN",
                ],
                rows,
            )
        )
    return tables


def plot_stuck(section: dict[str, Any], dataset: str, directory: Path, plt: Any) -> Path | None:
    """The stuck curve per setting with its Wilson intervals (``plt``: matplotlib.pyplot, Agg)."""
    curves = {s: [p for p in st["curve"] if p["at_risk"]] for s, st in section["stuck"].items()}
    curves = {s: c for s, c in curves.items() if c}
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for i, (s, points) in enumerate(curves.items()):
        ks = [p["k"] + (i - (len(curves) - 1) / 2) * 0.06 for p in points]  # a small offset apart
        ps = [p["p"] for p in points]
        err = [[p["p"] - p["ci"][0] for p in points], [p["ci"][1] - p["p"] for p in points]]
        ax.errorbar(ks, ps, yerr=err, marker="o", capsize=3, label=s)
    ax.set_xticks(range(1, max(p["k"] for c in curves.values() for p in c) + 1))
    ax.set_ylim(0, 1)
    ax.set_xlabel("k: turns after the erroneous call")
    ax.set_ylabel("P(resolved at turn k | open)")
    ax.set_title(f"{dataset}: PruneTIR stuck analysis (95% Wilson CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = directory / f"prunetir-stuck-{dataset}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


class PruneTIRAnalyses(EvalProtocol):
    name = "prunetir"
    title = "PruneTIR (shared/papers/004): erroneous calls by outcome, the stuck curve, the ablation"
    order = 30
    fault_figure = ("PruneTIR: P(resolved at k | open)", faults.PAPER_STUCK)
    # [ours] the ablation rows: the base with the budget PruneTIR declares with its defaults
    # (run_budget: retry_limit x (turn_limit + 1) + 1 = 9 calls), so every row has the same calls to
    # spend; the full method; each component off [paper].
    settings = {
        "prunetir-ablation": (
            "none:max_tool_calls=9",
            "prunetir",
            "prunetir:prunetir.stp=false",
            "prunetir:prunetir.stpr=false",
            "prunetir:prunetir.rtts=false",
        )
    }

    def sections(self, data: DatasetData) -> dict[str, Any]:
        return {"prunetir": prunetir_section(data.clean, dict(data.eval.specs), data.row)}

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        section = summary["datasets"][dataset].get("prunetir")
        return prunetir_tables(section, dataset, cell) if section else []

    def plots(self, summary: dict[str, Any], dataset: str, directory: Path, plt: Any) -> list[Path]:
        section = summary["datasets"][dataset].get("prunetir")
        path = plot_stuck(section, dataset, directory, plt) if section else None
        return [path] if path else []

    def read_faults(self, runs: InjectedRuns) -> dict[str, Any] | None:
        return faults.on_errors(runs)

    def fault_tables(self, rows: Sequence[FaultRow], dataset: str) -> list[Table]:
        return faults.errors_tables(rows, dataset)

    def fault_figure_rows(self, row: FaultRow) -> list[list[str]]:
        return faults.figure_rows(row)

    def fault_panel(self, rows: Sequence[FaultRow]) -> Callable[[Any], None] | None:
        return faults.stuck_panel(rows)
