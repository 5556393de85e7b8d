"""The TIM protocol's report (``guards.tim.metrics``'s section): its tables in the paper's layout and
names beside the paper's published figures, the notes under them, and the plots; and the protocol's
plug-in (its settings, its section and its judging pass)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guards.tim.metrics import (
    ERROR_NAMES,
    HIGH_RISK,
    NO_PRM,
    PAPER,
    PAPER_CORRELATION,
    PAPER_TOOL_USE,
    judge_tim,
    runs_csv,
    tim_section,
)
from tuiagent.core.judge_prompts import prompt
from tuiagent.eval.judging import judged, with_judge
from tuiagent.eval.protocols import DatasetData, EvalProtocol, JudgePass, Table
from tuiagent.eval.stats import TOOL_BINS, bin_label

if TYPE_CHECKING:
    from tuiagent.eval.harness import EvalConfig


def _pct(m: dict[str, Any]) -> str:
    """A rate in % as the paper prints it, with its interval and n."""
    if m["value"] is None:
        return f"– (n={m['n']})"
    lo, hi = m["ci"]
    return f"{100 * m['value']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] (n={m['n']})"


def _num(m: dict[str, Any]) -> str:
    if m["value"] is None:
        return f"– (n={m['n']})"
    lo, hi = m["ci"]
    return f"{m['value']:.2f} [{lo:.2f}, {hi:.2f}] (n={m['n']})"


def tim_tables(section: dict[str, Any], dataset: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the protocol in the paper's layout and names."""
    labels, base = section["labels"], section["base"]
    tables = []
    paper_cols = [f"paper {m}: Final Acc. / Miss / Win / PRM" for m in ("GPT-4.1", "average of 7")]
    rows = []
    for s, row in section["table"].items():
        paper = PAPER.get(labels[s], {})
        rows.append(
            [
                labels[s],
                s,
                _pct(row["final_acc"]),
                _pct(row["miss_rate"]),
                _pct(row["win_rate"]),
                "not computed",
                *(" / ".join(f"{v:.1f}" for v in paper[m]) if m in paper else "–" for m in ("GPT-4.1", "average of 7")),
            ]
        )
    tables.append(
        (
            f"{dataset}: TIM, Tables 2 and 3 layout (%, 95% bootstrap CI over problems; Miss and Win Rate "
            f"on right answers; Base's Win Rate is against {section['tools'][0]})",
            ["Variant", "setting", "Final Acc. (↑)", "Miss Rate (↓)", "Win Rate (↑)", "PRM Acc. (↑)", *paper_cols],
            rows,
        )
    )
    tables.append(
        (
            f"{dataset}: TIM pairing (Base {base} against each TaLM setting; Win Rate counts both orders)",
            [
                "setting",
                "pairs",
                "both right",
                "Base only",
                "TaLM only",
                "neither",
                "judged",
                "TaLM wins both orders",
                "Base wins both orders",
                "orders disagree",
                "Δ Miss Rate (TaLM − Base), paired",
            ],
            [
                [
                    s,
                    *(
                        str(p[k])
                        for k in (
                            "pairs",
                            "both_right",
                            "base_only",
                            "tool_only",
                            "neither",
                            "judged",
                            "consistent_tool",
                            "consistent_base",
                            "inconsistent",
                        )
                    ),
                    _pct(p["miss_delta"]),
                ]
                for s, p in section["pairing"].items()
            ],
        )
    )
    bins = [bin_label(lo, hi) for lo, hi in TOOL_BINS]
    tables.append(
        (
            f"{dataset}: TIM Figure 2, reasoning behavior vs. tool usage (bins of the TaLM run's tool calls; "
            "right answers; the paper's figure prints no values in this copy)",
            ["setting", "metric", *bins],
            [
                [s, name, *(fmt(section["bins"][s][b][key]) for b in bins)]
                for s in section["tools"]
                for name, key, fmt in (
                    ("Win Rate (Base over TaLM)", "base_win_rate", _pct),
                    ("Miss Rate", "miss_rate", _pct),
                    ("lines per code block", "loc", _num),
                    ("cyclomatic complexity per block", "cc", _num),
                )
            ],
        )
    )
    tables.append(
        (
            f"{dataset}: TIM Figure 4, error types on pairs both right (rate %, Δ = TaLM − Base, paired "
            "bootstrap CI over problems)",
            ["setting", "error type", "Base", "TaLM", "Δ"],
            [
                [s, ERROR_NAMES[k], _pct(e[k]["base"]), _pct(e[k]["tool"]), _pct(e[k]["delta"])]
                for s, e in section["errors"].items()
                for k in ERROR_NAMES
            ],
        )
    )
    tables.append(
        (
            f"{dataset}: TIM Figure 3, code complexity vs. Miss Rate (Pearson r over right TaLM runs, "
            "Fisher-z 95% CI, permutation p)",
            ["setting", "metric", "mean per run", "Pearson r", "95% CI", "p", "n", "paper: r over 7 TaLMs"],
            [
                [s, name, _num(section["complexity"][s][k]), *_corr(section["correlation"][s][k]), PAPER_CORRELATION[k]]
                for s in section["tools"]
                for name, k in (("Line of Code", "loc"), ("Cyclomatic Complexity", "cc"))
            ],
        )
    )
    tables.append(
        (
            f"{dataset}: TIM Figure 5, Code Interpreter invocation rate (share of runs with an executed call, %)",
            ["setting", "invocation rate", *(f"paper {m}" for m in PAPER_TOOL_USE)],
            [[s, _pct(m), *(f"{v:.1f}" for v in PAPER_TOOL_USE.values())] for s, m in section["tool_use"].items()],
        )
    )
    tables.append(
        (
            f"{dataset}: tuiagent's TIM monitor (ours, rule-based) against the judged metrics (TaLM runs of "
            "pairs both right)",
            ["setting", "monitor", "runs", "Miss Rate", "Win Rate (Base over TaLM)"],
            [
                [
                    s,
                    name.replace("_", " "),
                    str(m[name]["runs"]),
                    _pct(m[name]["miss_rate"]),
                    _pct(m[name]["base_win_rate"]),
                ]
                for s, m in section["monitor"].items()
                for name in ("flagged", "not_flagged")
            ],
        )
    )
    risky = [
        [
            s,
            h["key"],
            "–" if h["miss_rate"] is None else f"{100 * h['miss_rate']:.1f}",
            str(h["tool_calls"]),
            {True: "yes", False: "no"}.get(h["tim_flag"], "–"),
            str(h["trajectory"] or "–"),
        ]
        for s, hs in section["high_risk"].items()
        for h in hs
    ]
    if risky:
        tables.append(
            (
                f"{dataset}: high-risk solutions for a manual audit (section 5.6: right, Base wins both orders, "
                f"top {HIGH_RISK} by Miss Rate; without the paper's PRM filter; `tuiagent replay FILE`)",
                ["setting", "run", "Miss Rate", "tool calls", "monitor flag", "trajectory"],
                risky,
            )
        )
    return tables


def _corr(c: dict[str, Any]) -> list[str]:
    if c["r"] is None:
        return ["–", "–", "–", str(c["n"])]
    ci = "–" if c["ci"][0] is None else f"{c['ci'][0]:.2f} … {c['ci'][1]:.2f}"
    return [f"{c['r']:.2f}", ci, f"{c['p']:.3f}", str(c["n"])]


def tim_notes(section: dict[str, Any]) -> list[str]:
    """What the tables rest on, in sentences: the judge (or that one is needed), unparseable replies, PRM."""
    u = section["unparseable"]
    if section["judge"] is None:
        judge = (
            "Win Rate, Miss Rate and the error types need a judge: run again with --judge MODEL (the runs are "
            "kept; only the judgements are asked)."
        )
    else:
        judge = (
            f"Judge {section['judge']}: left out of the figures for an unparseable reply: Win Rate "
            f"{u['win_rate']} comparison(s), Miss Rate {u['miss_rate']} run(s), error types {u['error_types']} "
            "run(s). A judge much weaker than the paper's GPT-5 makes these figures noisy; read them with "
            "their n and intervals."
        )
        n = section["not_judged"]
        if any(n.values()):
            judge += (
                f" Not judged (asked in a later pass, or too long for the judge's context: the eval's log "
                f"says): Win Rate {n['win_rate']} comparison(s), Miss Rate {n['miss_rate']} run(s), error "
                f"types {n['error_types']} run(s)."
            )
    rows = section["table"].values()
    right, with_ref = sum(r["right"] for r in rows), sum(r["right_with_reference"] for r in rows)
    reference = (
        f"Miss Rate needs the dataset's reference solutions: {with_ref} of the {right} right runs have one."
        if with_ref < right
        else ""
    )
    return [
        judge,
        *([reference] if reference else []),
        NO_PRM + ".",
        "Paper figures: Tables 2 and 3, GPT-4.1 and the average of its seven models, on PyMath (competition "
        "problems) with GPT-5 as judge; they are not the same problems or model.",
    ]


def _bars(means: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float]]:
    """Values in % and their interval's distances below and above (NaN and 0 where there is no value)."""
    values = [math.nan if m["value"] is None else 100 * m["value"] for m in means]
    low = [0.0 if m["value"] is None else 100 * (m["value"] - m["ci"][0]) for m in means]
    high = [0.0 if m["value"] is None else 100 * (m["ci"][1] - m["value"]) for m in means]
    return values, low, high


def plot_tim(section: dict[str, Any], directory: Path, dataset: str, plt: Any) -> list[Path]:
    """Figure 2 (Win Rate and Miss Rate by tool-call bin), Figure 4 (Δ error rates) and Figure 3 (the
    complexity correlations and their p, with the paper's 0.05 and 0.10 lines) of one dataset, with
    their 95% intervals."""
    bins = [bin_label(lo, hi) for lo, hi in TOOL_BINS]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, title in (
        (axes[0], "base_win_rate", "(a) Win Rate, Base over TaLM"),
        (axes[1], "miss_rate", "(b) Miss Rate"),
    ):
        for n, s in enumerate(section["tools"]):
            values, low, high = _bars([section["bins"][s][b][key] for b in bins])
            ax.errorbar(
                [i + 0.06 * n for i in range(len(bins))], values, yerr=[low, high], marker="o", capsize=3, label=s
            )
        ax.set_xticks(range(len(bins)), bins)
        ax.set_ylim(0, 100)
        ax.set_xlabel("tool calls in the TaLM run")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.suptitle(f"{dataset}: reasoning behavior vs. tool usage (TIM Figure 2; PRM not computed)", fontsize=9)
    fig.tight_layout()
    paths = [directory / f"tim-fig2-{dataset}.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    kinds = list(ERROR_NAMES)
    width = 0.8 / max(len(section["tools"]), 1)
    for n, s in enumerate(section["tools"]):
        deltas, low, high = _bars([section["errors"][s][k]["delta"] for k in kinds])
        ax.bar(
            [i + n * width for i in range(len(kinds))],
            [0 if math.isnan(d) else d for d in deltas],
            yerr=[low, high],
            capsize=3,
            width=width,
            label=s,
        )
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(kinds))],
        [ERROR_NAMES[k] for k in kinds],
        rotation=20,
        ha="right",
        fontsize=8,
    )
    ax.set_ylabel("Δ = TaLM − Base (points)")
    ax.set_title(f"{dataset}: change in reasoning error rates after tool use (TIM Figure 4)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(directory / f"tim-fig4-{dataset}.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    tools = section["tools"]
    for n, (key, name) in enumerate((("loc", "Line of Code"), ("cc", "Cyclomatic Complexity"))):
        corr = [section["correlation"][s][key] for s in tools]
        at = [i + 0.35 * n for i in range(len(tools))]
        r = [math.nan if c["r"] is None else c["r"] for c in corr]
        low = [0.0 if c["ci"][0] is None else c["r"] - c["ci"][0] for c in corr]
        high = [0.0 if c["ci"][0] is None else c["ci"][1] - c["r"] for c in corr]
        axes[0].bar(at, [0 if math.isnan(v) else v for v in r], yerr=[low, high], capsize=3, width=0.35, label=name)
        axes[1].bar(at, [math.nan if c["p"] is None else c["p"] for c in corr], width=0.35, label=name)
    for ax, title in ((axes[0], "(a) Pearson r with Miss Rate"), (axes[1], "(b) permutation p")):
        ax.set_xticks([i + 0.175 for i in range(len(tools))], tools, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0].axhline(0, color="black", linewidth=0.6)
    axes[0].set_ylim(-1, 1)
    axes[1].axhline(0.05, color="red", linewidth=0.8)
    axes[1].axhline(0.10, color="orange", linewidth=0.8)
    axes[1].set_ylim(0, 1)
    fig.suptitle(f"{dataset}: code complexity vs. Miss Rate over right TaLM runs (TIM Figure 3)", fontsize=9)
    fig.tight_layout()
    paths.append(directory / f"tim-fig3-{dataset}.png")
    fig.savefig(paths[2], dpi=110)
    plt.close(fig)
    return paths


class TIMProtocol(EvalProtocol):
    """``--protocol tim``: Base (no tool), TaLM and TaLM + Prompting, judged after the runs."""

    name = "tim"
    title = "Tool-induced myopia (arXiv 2511.10899): Win Rate, Miss Rate, error types, code complexity"
    order = 50
    fault_flags = (("tim_flag", "TIM flag"),)  # the monitor's flag on injected runs (eval --inject)
    judge_use = "the TIM metrics (--protocol tim)"
    settings = {"tim": ("cot", "full", "tim-prompt")}  # [paper] section 6.1 (presets.toml)

    def sections(self, data: DatasetData) -> dict[str, Any]:
        e = data.eval
        if "tim" not in e.protocols:
            return {"tim": None}
        store, judge = e.judgements, e.judge
        lookup = (
            (lambda pid, inputs: judged(store, judge, prompt(pid), inputs)) if store is not None and judge else None
        )
        return {"tim": tim_section(data.records, e.settings, dict(e.modes), lookup, judge)}

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        section = summary["datasets"][dataset].get("tim")
        return tim_tables(section, dataset) if section else []

    def notes(self, summary: dict[str, Any], dataset: str) -> list[str]:
        section = summary["datasets"][dataset].get("tim")
        return tim_notes(section) if section else []

    def plots(self, summary: dict[str, Any], dataset: str, directory: Path, plt: Any) -> list[Path]:
        section = summary["datasets"][dataset].get("tim")
        return plot_tim(section, directory, dataset, plt) if section else []

    def files(self, summary: dict[str, Any]) -> dict[str, str]:
        tim = {name: d["tim"] for name, d in summary["datasets"].items() if d.get("tim")}
        return {"tim-runs.csv": runs_csv(tim)} if tim else {}

    def judges(self, cfg: EvalConfig) -> bool:
        return "tim" in cfg.protocols

    async def judge(self, pass_: JudgePass) -> None:
        if "tim" not in pass_.protocols:
            return
        store = pass_.store
        names = list(pass_.described)  # every setting the directory reports, as the report reads them
        modes = {n: str(d.get("run", {}).get("mode", "tool")) for n, d in pass_.described.items()}
        await with_judge(
            pass_.cfg.judge or "",
            pass_.cfg.models_file,
            store.dir,
            lambda j: judge_tim(j, list(store.records.values()), names, modes, pass_.log),
            models=pass_.models,
        )
