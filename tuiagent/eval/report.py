"""The summary of an eval, folded from its results records, and its four forms: a terminal table,
Markdown, CSV and JSON, plus PNG plots when matplotlib is installed (``pip install 'tuiagent[eval]'``).

Per dataset (on the questions as written; variants have their own sections):

- one row per setting: Pass@1 (averaged over seeds) with a bootstrap CI over problems, the paired
  difference against the baseline (bootstrap CI over problems; exact McNemar p over problem x seed
  pairs), and per-run means/totals of the tool and guard numbers;
- final-answer accuracy by the TIM paper's tool-call bins (0-3, 4-7, 8-11, 12+; the paper bins its
  reasoning metrics, not accuracy: those are the TIM protocol's, below);
- the tool-use-tax protocol when its conditions are present (``guards.gstep.tooltax``, in the paper's
  layout by ``guards.gstep.tooltax_tables``): on the distractor variants when there are any, else clean;
- distractors: accuracy per distractor type beside the clean accuracy on the same problems;
- cue probe: tool-call rate with the cue (Y) and without (N), Delta Tool Y-N, per cue, over all items and
  on the items where the tool is not needed (Definition 1; ``guards.necessity.cue_probe``);
- PruneTIR's analyses: erroneous calls in correct vs incorrect runs, the stuck curve, the ablation
  (``guards.prunetir.analysis``); ATTC's judged audits (``--protocol attc-audit``, ``guards.attc.audit``);
- the TIM protocol (``--protocol tim``; ``guards.tim.metrics``): Win Rate, Miss Rate, error types and
  code complexity in the paper's layout, beside its published figures;
- the judge (``--judge``): its model and what its judgements cost.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guards.chain import available, presenter
from tuiagent.core.judge import judge_model
from tuiagent.eval.estimators import estimators
from tuiagent.eval.protocols import DatasetData, EvalData, Table, cell, installed, ran_protocols
from tuiagent.eval.readings import readings_lines, setting_readings
from tuiagent.eval.stats import (
    TOOL_BINS,
    bin_label,
    bootstrap_mean,
    mcnemar_exact,
    paired_bootstrap,
    right,
    rounded,
    tool_bin,
)

if TYPE_CHECKING:
    from tuiagent.core.judge_store import JudgementStore

MEANS = ("tcn", "erroneous", "wtn", "generated_tokens", "wall_s")
LOOP_TOTALS = (("resampled", "resampled"), ("suspended", "suspended"), ("reused_turns", "reused turns"))


def guard_totals() -> tuple[tuple[str, str], ...]:
    """(metric, header) of every installed guard's summary numbers, in the guards' order."""
    return tuple(
        col for name in sorted(available(), key=lambda n: (presenter(n).order, n)) for col in presenter(name).summary
    )


def totals() -> tuple[str, ...]:
    """The numbers summed over a setting's runs: the loop's, then each installed guard's."""
    return tuple(k for k, _ in LOOP_TOTALS + guard_totals())


def _diff(a: float | None, b: float | None) -> float | None:
    """``a - b`` rounded, or None when either is missing."""
    return None if a is None or b is None else rounded(a - b)


def _by(records: Iterable[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        out[tuple(r.get(k) for k in keys)].append(r)
    return out


def _unit(r: dict[str, Any]) -> str:
    return f"{r['problem_id']}~{r['variant']}" if r.get("variant") else str(r["problem_id"])


def _per_unit(records: list[dict[str, Any]]) -> dict[str, float]:
    """Mean correctness per problem (unit) over its seeds."""
    groups = _by(records, "problem_id", "variant")
    return {_unit(rs[0]): sum(map(right, rs)) / len(rs) for rs in groups.values()}


def _pairs(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(a correct, b correct) for each (unit, seed) both have."""
    index = {(_unit(r), r["seed"]): r for r in b}
    return [(right(r), right(index[(_unit(r), r["seed"])])) for r in a if (_unit(r), r["seed"]) in index]


def _mean_value(record: dict[str, Any], key: str) -> float:
    """A run's number; its wall time counts its reused turns (eval.reuse) at what generating them took,
    so settings' costs compare whether or not their turns were generated first by another setting."""
    value = float(record[key])
    return value + float(record.get("reused_s") or 0) if key == "wall_s" else value


def accuracy(records: list[dict[str, Any]]) -> float | None:
    return sum(map(right, records)) / len(records) if records else None


def setting_row(records: list[dict[str, Any]], base: list[dict[str, Any]] | None) -> dict[str, Any]:
    units = _per_unit(records)
    acc, lo, hi = bootstrap_mean(list(units.values())) if units else (float("nan"),) * 3
    row: dict[str, Any] = {
        "runs": len(records),
        "problems": len(units),
        "accuracy": rounded(accuracy(records)),
        "acc_ci": [rounded(lo), rounded(hi)],
        "tool_call_rate": rounded(sum(r.get("tcn", 0) > 0 for r in records) / len(records)) if records else None,
        "errors": sum(r.get("reason") == "error" for r in records),
        "no_answer": sum(r.get("answer") is None for r in records),
    }
    for key in MEANS:
        values = [_mean_value(r, key) for r in records if isinstance(r.get(key), (int, float))]
        row[key] = rounded(sum(values) / len(values), 2) if values else None
    for key in totals():
        row[key] = total(records, key)
    est = estimators(list(_by(records, "problem_id", "variant").values()))
    if est:  # only with more than one seed
        row["estimators"] = est
    if base is not None:
        base_units = _per_unit(base)
        common = sorted(set(units) & set(base_units))
        diff, dlo, dhi = paired_bootstrap([units[u] - base_units[u] for u in common])
        pairs = _pairs(records, base)
        b = sum(1 for x, y in pairs if y and not x)  # baseline right, this wrong
        c = sum(1 for x, y in pairs if x and not y)  # this right, baseline wrong
        row.update(
            {
                "delta": rounded(diff),
                "delta_ci": [rounded(dlo), rounded(dhi)],
                "paired_problems": len(common),
                "mcnemar_b": b,
                "mcnemar_c": c,
                "p_mcnemar": rounded(mcnemar_exact(b, c)),
            }
        )
    return row


def total(records: list[dict[str, Any]], key: str) -> int | str:
    """A guard number summed over runs. A guard may give a state in words instead of a count (G-STEP:
    "gate off ..."): the setting shows those words when its runs give that one state and no count."""
    states = {r[key] for r in records if isinstance(r.get(key), str)}
    count = int(
        sum(
            bool(r.get(key)) if key == "tim_flag" else (r.get(key) or 0)
            for r in records
            if not isinstance(r.get(key), str)
        )
    )
    return states.pop() if len(states) == 1 and not count else count


def tool_bins(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for lo, hi in TOOL_BINS:
        label = bin_label(lo, hi)
        rs = [r for r in records if tool_bin(int(r.get("tcn") or 0)) == label]
        out[label] = {"runs": len(rs), "accuracy": rounded(accuracy(rs))}
    return out


def summarize(
    records: Iterable[dict[str, Any]],
    *,
    settings: list[str] | None = None,
    baseline: str | None = None,
    conditions: dict[str, str | None] | None = None,
    model: str | None = None,
    invalid_variants: list[dict[str, Any]] | None = None,
    modes: dict[str, str] | None = None,
    specs: dict[str, dict[str, Any]] | None = None,
    guards: dict[str, list[str]] | None = None,
    manifest: dict[str, Any] | None = None,
    judgements: JudgementStore | None = None,
    judge: dict[str, Any] | None = None,
    other_judges: Iterable[dict[str, Any]] = (),
    protocols: Iterable[str] = (),
) -> dict[str, Any]:
    """The whole summary as plain data (what summary.json holds): the accuracy and tool tables, and
    each installed protocol's sections (``eval.protocols``). ``modes``: each setting's mode (the cue
    probe's no-tool setting); ``specs``: each setting as the manifest describes it; ``guards``: each
    setting's guards; ``manifest``: the directory's (what each protocol recorded there);
    ``judgements``: the directory's cached judgements, read by ``judge`` and a protocol's own judges
    (``other_judges``, each with what it cost); ``protocols``: the ``--protocol`` values the eval ran with."""
    # [ours] a variant left out names itself; those left out before they did were distractors, by kind
    left_out = {
        (v["dataset"], str(v["id"]), v.get("variant") or f"distractor:{v['kind']}") for v in invalid_variants or []
    }
    # a variant left out after it ran (a judge added on resuming) is not reported
    records = [r for r in records if (r["dataset"], str(r["problem_id"]), r.get("variant")) not in left_out]
    names = list(settings or [])
    for r in records:
        if r["setting"] not in names:
            names.append(r["setting"])
    present = {r["setting"] for r in records}
    names = [n for n in names if n in present]
    baseline = baseline if baseline in present else (names[0] if names else None)
    data = EvalData(
        records=records,
        settings=names,
        baseline=baseline,
        conditions=conditions or {},
        modes=modes or {},
        guards=guards or {},
        specs=specs or {},
        judgements=judgements,
        judge=judge["judge"] if judge else None,
        protocols=frozenset(protocols),
        manifest=manifest or {},
    )
    datasets: dict[str, Any] = {}
    for dataset in sorted({r["dataset"] for r in records}):
        rs = [r for r in records if r["dataset"] == dataset]
        clean = {s: [r for r in rs if r["setting"] == s and not r.get("variant")] for s in names}
        clean = {s: v for s, v in clean.items() if v}
        base = clean.get(baseline) if baseline is not None else None
        datasets[dataset] = {
            "settings": {s: setting_row(v, None if s == baseline else base) for s, v in clean.items()},
            "tool_bins": {s: tool_bins(v) for s, v in clean.items()},
        }
        view = DatasetData(name=dataset, eval=data, records=rs, clean=clean, row=setting_row)
        for protocol in installed():
            datasets[dataset] |= protocol.sections(view)
    return {
        "model": model or next((r.get("model") for r in records), None),
        "baseline": baseline,
        "settings": names,
        "runs": len(records),
        "datasets": datasets,
        "invalid_variants": invalid_variants or [],
        "time_cut": sorted(r["key"] for r in records if r.get("reason") == "time_budget"),
        "judge": judge,
        "other_judges": list(other_judges),
    }


# -- forms ------------------------------------------------------------------------------------------

ACC_COLUMNS = (
    ("setting", "setting"),
    ("runs", "runs"),
    ("problems", "problems"),
    ("accuracy", "Pass@1"),
    ("acc_ci", "95% CI"),
    ("delta", "Δ vs base"),
    ("delta_ci", "Δ 95% CI"),
    ("p_mcnemar", "McNemar p"),
    ("tool_call_rate", "tool rate"),
    ("no_answer", "no answer"),
    ("errors", "errors"),
)


def tool_columns() -> tuple[tuple[str, str], ...]:
    return (
        ("setting", "setting"),
        ("tcn", "TCN"),
        ("erroneous", "err"),
        ("wtn", "WTN"),
        ("generated_tokens", "gen tok"),
        ("wall_s", "wall s"),
        *LOOP_TOTALS,
        *guard_totals(),
    )


def main_columns() -> tuple[tuple[str, str], ...]:
    return ACC_COLUMNS + tool_columns()[1:]


def main_rows(
    summary: dict[str, Any], dataset: str, columns: tuple[tuple[str, str], ...] | None = None
) -> list[list[str]]:
    rows = []
    base = summary["baseline"]
    for name, row in summary["datasets"][dataset]["settings"].items():
        cells = []
        for key, _ in columns or main_columns():
            if key == "setting":
                cells.append(name + (" (base)" if name == base else ""))
            else:
                cells.append(cell(row.get(key)))
        rows.append(cells)
    return rows


def _main_tables(summary: dict[str, Any], dataset: str) -> list[Table]:
    return [
        (
            f"{dataset}: accuracy ({summary['model']}, baseline {summary['baseline']})",
            [h for _, h in ACC_COLUMNS],
            main_rows(summary, dataset, ACC_COLUMNS),
        ),
        (
            f"{dataset}: tool and guard numbers (TCN, err, WTN, gen tok, wall s: per-run means; the rest: totals)",
            [h for _, h in tool_columns()],
            main_rows(summary, dataset, tool_columns()),
        ),
    ]


def _section_tables(summary: dict[str, Any], dataset: str) -> list[Table]:
    """(title, header, rows) of the smaller tables of one dataset."""
    d = summary["datasets"][dataset]
    tables = []
    bins = [bin_label(lo, hi) for lo, hi in TOOL_BINS]
    tables.append(
        (
            f"{dataset}: final-answer accuracy by tool calls (runs in bin; the TIM paper's bins, ours for accuracy)",
            ["setting", *bins],
            [[s, *(f"{cell(v[b]['accuracy'])} ({v[b]['runs']})" for b in bins)] for s, v in d["tool_bins"].items()],
        )
    )
    est_keys = _estimator_keys(d)
    if est_keys:
        tables.append(
            (
                f"{dataset}: pass@k (unbiased) and maj@k over seeds (95% bootstrap CI over problems)",
                ["setting", *est_keys],
                [
                    [s, *(f"{cell(e[k]['value'])} ({cell(e[k]['ci'])})" if k in e else "–" for k in est_keys)]
                    for s, row in d["settings"].items()
                    for e in [row.get("estimators", {})]
                ],
            )
        )
    for protocol in installed():
        tables += protocol.tables(summary, dataset)
    return tables


def report_tables(summary: dict[str, Any], dataset: str) -> tuple[list[Table], list[str]]:
    """The tables of one dataset that have rows, and the short titles of those without (left out)."""
    tables = _main_tables(summary, dataset) + _section_tables(summary, dataset)
    empty = [title.split(" (")[0].split(", ")[0] for title, _, rows in tables if not rows]
    return [t for t in tables if t[2]], empty


def empty_line(titles: list[str]) -> str:
    """One line for the tables left out for want of data (``titles`` as report_tables gives them)."""
    dataset = titles[0].split(": ")[0]
    return f"{dataset}: no data for " + "; ".join(t.split(": ", 1)[-1] for t in titles)


def _estimator_keys(d: dict[str, Any]) -> list[str]:
    """The pass@k / maj@k columns of a dataset, in the order its settings give them."""
    keys: list[str] = []
    for row in d["settings"].values():
        keys += [k for k in row.get("estimators", {}) if k not in keys]
    return keys


def to_markdown(summary: dict[str, Any]) -> str:
    def table(header: list[str], rows: list[list[str]]) -> str:
        esc = [[c.replace("|", "\\|") for c in r] for r in [header, *rows]]
        lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
        return "\n".join(lines)

    out = [
        f"# Eval: {summary['model']}",
        "",
        f"{summary['runs']} runs; baseline `{summary['baseline']}`. Accuracy is Pass@1 averaged over seeds, with a "
        "bootstrap 95% CI over problems; Δ is the paired difference against the baseline (bootstrap CI over "
        "problems, exact McNemar p over problem×seed pairs). TCN, err, WTN, gen tok and wall s are per-run "
        "means; the other counts are totals. A reused turn is one an identical earlier generation supplied "
        "(same engine, prompt and history: bit-identical by construction); wall s counts it at the time "
        "generating it took. With more than one seed, pass@k is the unbiased estimator (Chen et al. 2021) and "
        "maj@k the exact expected majority-vote accuracy over k-subsets of a problem's seeds.",
        "",
    ]
    for dataset in summary["datasets"]:
        out += [f"## {dataset}", ""]
        tables, empty = report_tables(summary, dataset)
        for title, header, rows in tables:
            out += [f"### {title}", "", table(header, rows), ""]
        out += [empty_line(empty), ""] if empty else []
        notes = protocol_notes(summary, dataset)
        out += [f"- {line}" for line in notes] + [""] if notes else []
    if summary.get("readings"):
        out += [
            "## Readings",
            "",
            "Choices of ours in force per setting (`tuiagent guards --explain`; "
            "`--faithful` sets each paper's reading where it has one):",
            "",
        ]
        out += [f"- {line}" for line in readings_lines(summary["readings"])] + [""]
    if judges(summary):
        out += ["## Judge", "", *(judge_line(j) for j in judges(summary)), ""]
    if summary.get("time_cut"):
        out += ["## Runs cut by the wall-time budget", "", time_cut_line(summary["time_cut"]), ""]
        out += [f"- {key}" for key in summary["time_cut"]] + [""]
    if summary["invalid_variants"]:
        out += ["## Distractor variants left out", ""]
        out += [f"- {v['dataset']}/{v['id']} {v['kind']}: {v['why']}" for v in summary["invalid_variants"]]
        out.append("")
    return "\n".join(out)


def protocol_notes(summary: dict[str, Any], dataset: str) -> list[str]:
    """The lines the protocols put under a dataset's tables."""
    return [line for protocol in installed() for line in protocol.notes(summary, dataset)]


def time_cut_line(keys: list[str]) -> str:
    """Why runs ended by the wall clock are not exact figures: where the clock stops them depends on
    the machine's load (other runs in flight, other jobs), not only on the model and the settings."""
    return (
        f"{len(keys)} run(s) ended at the wall-time budget (--max-time): where the clock cut them depends on "
        "the machine's load, so they can end elsewhere on a rerun, unlike every other run; without --max-time "
        "(an eval's default: no wall clock) they end by the model, the tokens or the tool calls."
    )


def judges(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The eval's judge and each other model a protocol judged the runs with (ATTC's audits with
    --report-only, say), once each."""
    out: list[dict[str, Any]] = []
    for j in [summary.get("judge"), *summary.get("other_judges", [])]:
        if j and j["judge"] not in {k["judge"] for k in out}:
            out.append(j)
    return out


def judge_line(judge: dict[str, Any]) -> str:
    """The judge and what it cost, in one line (with the warning when it is the model under test)."""
    prompts = (
        "; ".join(f"{p}: {c['judged']} judged, {c['unparseable']} unparseable" for p, c in judge["prompts"].items())
        or "nothing judged yet"
    )
    line = (
        f"judge {judge['judge']}: {judge['judgements']} judgement(s) ({prompts}); {judge['prompt_tokens']} "
        f"prompt + {judge['generated_tokens']} generated tokens, {judge['seconds']} s"
    )
    if judge_model(judge["judge"])[1]:
        line += " (--judge-json: its replies to the prompts that ask for JSON held to the format they print)"
    return f"{judge['warning']}\n{line}" if judge.get("warning") else line


def to_csv(summary: dict[str, Any]) -> str:
    """One row per dataset x setting with every number of the main table (CI bounds in their own columns)."""
    keys = [k for k, _ in main_columns() if k != "setting"]
    header = ["dataset", "setting", "is_baseline"]
    for k in keys:
        header += [f"{k}_low", f"{k}_high"] if k in ("acc_ci", "delta_ci") else [k]
    header += ["paired_problems", "mcnemar_b", "mcnemar_c"]
    header += [f"acc_tcn_{bin_label(lo, hi)}" for lo, hi in TOOL_BINS]
    est_keys: list[str] = []
    for d in summary["datasets"].values():
        est_keys += [k for k in _estimator_keys(d) if k not in est_keys]
    header += [f"{k}{part}" for k in est_keys for part in ("", "_low", "_high")]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for dataset, d in summary["datasets"].items():
        for name, row in d["settings"].items():
            cells: list[Any] = [dataset, name, name == summary["baseline"]]
            for k in keys:
                value = row.get(k)
                cells += (list(value) if value else [None, None]) if k in ("acc_ci", "delta_ci") else [value]
            cells += [row.get(k) for k in ("paired_problems", "mcnemar_b", "mcnemar_c")]
            cells += [d["tool_bins"][name][bin_label(lo, hi)]["accuracy"] for lo, hi in TOOL_BINS]
            est = row.get("estimators", {})
            cells += [
                v for k in est_keys for v in ([est[k]["value"], *est[k]["ci"]] if k in est else [None, None, None])
            ]
            writer.writerow(["" if c is None else c for c in cells])
    return buf.getvalue()


def print_terminal(summary: dict[str, Any], console: Any = None) -> None:
    from rich.table import Table

    from tuiagent.safetext import terminal_console

    console = console or terminal_console(highlight=False)
    for dataset in summary["datasets"]:
        tables, empty = report_tables(summary, dataset)
        for title, header, rows in tables:
            t = Table(title=title, title_justify="left")
            for i, h in enumerate(header):
                t.add_column(h, overflow="fold", no_wrap=i == 0, justify="left" if i == 0 else "right")
            for r in rows:
                t.add_row(*r)
            console.print(t)
        if empty:
            console.print(empty_line(empty))
        for line in protocol_notes(summary, dataset):
            console.print(line)
    for j in judges(summary):
        console.print(judge_line(j))
    if summary.get("time_cut"):
        console.print(time_cut_line(summary["time_cut"]))
    if summary["invalid_variants"]:
        console.print(f"{len(summary['invalid_variants'])} variant(s) left out (see summary.md)")


def plot(summary: dict[str, Any], directory: Path) -> list[Path] | str:
    """PNG plots per dataset (accuracy with CI and Δ; accuracy by tool-call bins; PruneTIR's stuck
    curve; ATTC's audits when judged); a message instead when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plots skipped: matplotlib is not installed (pip install 'tuiagent[eval]')"
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for dataset, d in summary["datasets"].items():
        names = list(d["settings"])
        acc = [d["settings"][n]["accuracy"] or 0.0 for n in names]
        ci = [d["settings"][n]["acc_ci"] for n in names]
        err = [
            [max(a - (c[0] if c[0] is not None else a), 0) for a, c in zip(acc, ci, strict=True)],
            [max((c[1] if c[1] is not None else a) - a, 0) for a, c in zip(acc, ci, strict=True)],
        ]
        fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(names) + 2), 3.6))
        ax.bar(range(len(names)), acc, yerr=err, capsize=4, color="#4C78A8")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_ylim(0, 1)
        ax.set_ylabel("Pass@1")
        ax.set_title(f"{dataset}: accuracy per setting (95% bootstrap CI)")
        fig.tight_layout()
        path = directory / f"accuracy-{dataset}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

        bins = [bin_label(lo, hi) for lo, hi in TOOL_BINS]
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for n in names:
            values = [d["tool_bins"][n][b]["accuracy"] for b in bins]
            ax.plot(bins, [math.nan if v is None else v for v in values], marker="o", label=n)
        ax.set_ylim(0, 1)
        ax.set_xlabel("tool calls in the run")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{dataset}: final-answer accuracy by tool-call bin (ours)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = directory / f"tool-bins-{dataset}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
        for protocol in installed():
            written += protocol.plots(summary, dataset, directory, plt)
    return written


def write_reports(
    summary: dict[str, Any], directory: Path, formats: Iterable[str] = ("md", "csv", "json", "png")
) -> tuple[list[Path], list[str]]:
    """Write the chosen forms into ``directory``; (files written, messages)."""
    directory.mkdir(parents=True, exist_ok=True)
    formats = set(formats)
    written, messages = [], []
    if "md" in formats:
        (directory / "summary.md").write_text(to_markdown(summary), encoding="utf-8")
        written.append(directory / "summary.md")
    if "csv" in formats:
        (directory / "summary.csv").write_text(to_csv(summary), encoding="utf-8")
        written.append(directory / "summary.csv")
        for protocol in installed():
            for name, text in protocol.files(summary).items():
                (directory / name).write_text(text, encoding="utf-8")
                written.append(directory / name)
    if "json" in formats:
        (directory / "summary.json").write_text(
            json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        written.append(directory / "summary.json")
    if "png" in formats:
        result = plot(summary, directory / "plots")
        if isinstance(result, str):
            messages.append(result)
        else:
            written += result
    return written, messages


def summary_from_store(directory: Path, *, baseline: str | None = None) -> dict[str, Any]:
    """The summary of the results in an eval directory, with the settings order and conditions of its manifest."""
    from tuiagent.core.judge_store import JudgementStore
    from tuiagent.eval.judging import judge_summary
    from tuiagent.eval.results import ResultStore

    store = ResultStore(directory)
    manifest = store.manifest() or {}
    settings = manifest.get("settings", [])
    model = str(manifest.get("model"))
    judge_id = manifest.get("judge")
    others = [str(manifest[k]) for p in installed() for k in p.judge_keys if manifest.get(k)]
    judgements = JudgementStore(directory) if judge_id or others else None
    summary = summarize(
        store.records.values(),
        settings=[s["name"] for s in settings],
        baseline=baseline or manifest.get("baseline"),
        conditions={s["name"]: s.get("condition") for s in settings},
        model=manifest.get("model"),
        invalid_variants=manifest.get("invalid_variants"),
        modes={s["name"]: str(s.get("run", {}).get("mode", "tool")) for s in settings},
        guards={s["name"]: list(s.get("guards") or []) for s in settings},
        manifest=manifest,
        specs={s["name"]: s for s in settings},
        judgements=judgements,
        judge=judge_summary(judgements, judge_id, model) if judgements is not None and judge_id else None,
        other_judges=[judge_summary(judgements, j, model) for j in others] if judgements is not None else [],
        protocols=ran_protocols(manifest),
    )
    summary["readings"] = setting_readings(settings, manifest.get("model"))
    return summary
