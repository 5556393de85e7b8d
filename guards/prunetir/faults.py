"""PruneTIR read off injected errors (``tuiagent eval --inject error,timeout``; eval.faults_report)
[ours: the paper injects nothing]: STP and STPR counts on the injected against the clean runs, the
stuck curve (``tuiagent.eval.traces``, its second finding) of the injected against the clean runs, and
the tokens saved: the mean paired difference of the working context (WTN) of the baseline setting's
injected run minus this setting's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tuiagent.eval.faults_report import pair_key
from tuiagent.eval.protocols import FaultRow, InjectedRuns, Table, cell
from tuiagent.eval.stats import paired_bootstrap, rounded
from tuiagent.eval.traces import record_trace, stuck_curve

ERROR_KINDS = ("error", "timeout")  # the faults its error analysis reads
STUCK_SHOWN = 3  # [ours] the stuck curve's first turns in the table (the plot has them all)
PAPER_STUCK = "falls with k (its second finding; no injection)"


def on_errors(runs: InjectedRuns) -> dict[str, Any] | None:
    """STP, STPR, the stuck curves and the tokens saved against the baseline setting's injected runs."""
    if runs.kind not in ERROR_KINDS:
        return None
    inj = [i for i, _ in runs.pairs]
    clean = [c for _, c in runs.pairs]
    traces_inj = [t for t in (record_trace(r) for r in inj) if t is not None]
    traces_clean = [t for t in (record_trace(r) for r in clean) if t is not None]
    saved = None
    if runs.baseline is not None:
        diffs = [
            float(runs.baseline[pair_key(r)].get("wtn") or 0) - float(r.get("wtn") or 0)
            for r in inj
            if pair_key(r) in runs.baseline
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


def errors_tables(rows: Sequence[FaultRow], dataset: str) -> list[Table]:
    body = []
    for s, label, row in rows:
        if not (p := row.get("prunetir")):
            continue
        curve = [
            f"{cell(x['p'])} ({x['resolved']}/{x['at_risk']}; {cell(x['ci'])}) vs {cell(y['p'])}"
            for x, y in zip(p["stuck_injected"]["curve"], p["stuck_clean"]["curve"], strict=True)
        ][:STUCK_SHOWN]
        saved = p["tokens_saved"]
        body.append(
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
    if not body:
        return []
    return [
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
            body,
        )
    ]


def figure_rows(row: FaultRow) -> list[list[str]]:
    s, label, r = row
    if not (p := r.get("prunetir")):
        return []
    return [["PruneTIR: P(resolved at k=1 | open)", f"{s} {label}", cell(p["stuck_injected"]["curve"][0]["p"])]]


def stuck_panel(rows: Sequence[FaultRow]) -> Callable[[Any], None] | None:
    """The stuck curve of the injected errors against the clean runs, on a matplotlib axis."""
    curves = [(f"{s} {label}", row["prunetir"]) for s, label, row in rows if row.get("prunetir")]
    if not curves:
        return None

    def draw(ax: Any) -> None:
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

    return draw
