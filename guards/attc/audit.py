"""ATTC's audits of whole runs by a judge (``tuiagent eval --judge MODEL --protocol attc-audit``), as the
authors' reference code does them (00Dreamer00/ATTC, ``case_analysis/``; the paper's section 2):

- **conflict** (section 2.1, Figure 2; ``donot_believe_tools.py``): does a tool output contradict the
  model's reasoning before the code, and if so, whom does the model believe? 0 no code or no
  conflict, 1 conflict and the model keeps its own reasoning, 2 conflict and it follows the tool.
  Asked of every run, the correct and the incorrect ones counted apart (the paper's figure is the
  incorrect ones).
- **tool ignored** (section 2.2, Figure 3; ``overconfident.py``): in an incorrect run, was a tool
  output right (answer and thinking), given the question, the gold answer and the reference
  solution? 0 no (normal), 1 yes: the tool was right and ignored, 2 no Python code.
- **tool wrong** (section 2.2's other side, "the tool should not be trusted blindly";
  ``false_tool_in_true_cases.py``; no figure in our copy): in a correct run with a call, was any tool
  output wrong? 0 all right, 1 one or more wrong.

The judge reads the run's whole response: every generated turn with the outputs and notes appended
after it, text that PruneTIR later pruned included. A run without an executed call is not asked
[ours]: the first two prompts fix its class (conflict 0, tool ignored 2), and it counts in their
denominators as the reference's would; the third says nothing of it, so it is left out there. Only the questions as written are audited (no variants) [ours]. The cheap
flag ``tool_ignored`` (guards.tim.monitor.gold_output_ignored: the last successful output equals the
gold answer) is shown beside the judged figure: it misses every right intermediate result that is
not the final answer, so it undercounts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guards.attc import faults
from tuiagent.core import events as ev
from tuiagent.core.judge import JudgeModels
from tuiagent.core.judge_prompts import UNPARSEABLE, prompt
from tuiagent.core.judge_store import JudgementStore
from tuiagent.errors import UserError
from tuiagent.eval.judging import Item, judge_eval, judged
from tuiagent.eval.protocols import (
    DatasetData,
    EvalProtocol,
    FaultRow,
    InjectedRuns,
    JudgePass,
    StoredPass,
    Switch,
    Table,
    cell,
)
from tuiagent.eval.results import has_trajectory, question_of, run_events
from tuiagent.eval.stats import wilson

if TYPE_CHECKING:
    from tuiagent.eval.harness import EvalConfig

CONFLICT = prompt("attc_conflict")
IGNORED = prompt("attc_tool_ignored")
WRONG = prompt("attc_tool_wrong")
AUDITS = {p.id: p for p in (CONFLICT, IGNORED, WRONG)}
# what the prompts prescribe for a run without code (the tool-wrong one says nothing: not asked, not counted)
NO_CALL = {CONFLICT.id: 0, IGNORED.id: 2}
# [paper] section 2 (shared/papers/003): the open TIR models it audits (not named per bar in our copy;
# the reference scripts ran SimpleTIR-7B on MATH500 and ToRL-7B on OlympiadBench).
PAPER = {
    "conflict": "40-60% of error cases (Figure 2)",
    "believe_self": "over half of the conflicts (Figure 2)",
    "tool_ignored": ">= 15% of errors in every model x dataset (Figure 3; 4 models, 4 datasets)",
}
PAPER_MODELS = "open TIR models (ToRL, SimpleTIR, ... on Qwen2.5-7B/32B and Qwen3-4B)"


def whole_response(events: Iterable[ev.Event]) -> str:
    """The run as one response: generated turns and what was appended after each, in order."""
    return "".join(e.text for e in events if isinstance(e, (ev.TurnEnded, ev.ContextAppended)))


def audit_inputs(record: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    """Per prompt id, the inputs this run is asked with (tool ignored: incorrect runs; tool wrong:
    correct ones); {} for a run without an executed call, None without a trajectory."""
    if not has_trajectory(record):
        return None
    if not record.get("tcn"):
        return {}
    events = run_events(record) or []
    response = whole_response(events)
    question = question_of(events)
    case = {
        "idx": record["problem_id"],
        "question": question,
        "solution": record.get("reference") or "",
        "answer": record.get("gold") or "",
        "code": response,
        "pred": record.get("answer") or "",
    }
    which = IGNORED if record.get("correct") is False else WRONG
    return {CONFLICT.id: {"response": response}, which.id: {"case": json.dumps(case, ensure_ascii=False, indent=2)}}


def audited(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs the audit reads: those of the questions as written with a verdict (a CoT run has no call)."""
    return [r for r in records if not r.get("variant") and r.get("correct") is not None]


def audit_items(records: Iterable[dict[str, Any]]) -> Iterator[Item]:
    """The questions to ask: each audited run's prompts (runs without a call need none)."""
    for record in audited(records):
        for pid, inputs in (audit_inputs(record) or {}).items():
            yield AUDITS[pid], inputs


async def audit_eval(
    judge_id: str,
    models_file: Path | None,
    directory: Path,
    records: Iterable[dict[str, Any]],
    log: Callable[[str], None],
    *,
    models: JudgeModels | None = None,
    concurrency: int = 1,
) -> None:
    """The audit's judging pass over an eval's runs (cached, resumable: ``eval.judging``; ``models``:
    a judge model already open, shared with other passes; else one opened with ``concurrency``)."""
    await judge_eval(
        judge_id,
        models_file,
        directory,
        audit_items(list(records)),
        log,
        "ATTC audit question(s)",
        models=models,
        concurrency=concurrency,
    )


async def audit_directory(
    directory: Path, judge_id: str, models_file: Path | None, log: Callable[[str], None], concurrency: int = 1
) -> None:
    """``--report-only --protocol attc-audit``: audit the runs an eval directory already holds, and say so in
    its manifest (the report reads the audit's judge from there)."""
    from tuiagent.eval.judging import check_judge
    from tuiagent.eval.results import ResultStore

    store = ResultStore(directory)
    manifest = store.manifest() or {}
    check_judge(judge_id, str(manifest.get("model")), models_file, log)
    await audit_eval(judge_id, models_file, store.dir, store.records.values(), log, concurrency=concurrency)
    store.write_manifest(manifest | {"attc_audit": judge_id, "judge": manifest.get("judge") or judge_id})


def audit_values(records: Iterable[dict[str, Any]], store: JudgementStore, judge: str) -> dict[str, dict[str, Any]]:
    """Per run key, the class each prompt gave (a run without a call: the class its prompt fixes;
    None: not judged, a run whose trajectory is gone included; UNPARSEABLE)."""
    out: dict[str, dict[str, Any]] = {}
    for record in audited(records):
        inputs = audit_inputs(record)
        if inputs is None:
            out[record["key"]] = dict.fromkeys(AUDITS)
            continue
        if not inputs:
            out[record["key"]] = {CONFLICT.id: NO_CALL[CONFLICT.id]}
            if record.get("correct") is False:
                out[record["key"]][IGNORED.id] = NO_CALL[IGNORED.id]
            continue
        out[record["key"]] = {pid: judged(store, judge, AUDITS[pid], i) for pid, i in inputs.items()}
    return out


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(k, n)
    return {
        "k": k,
        "n": n,
        "rate": round(k / n, 4) if n else None,
        "ci": [round(lo, 4), round(hi, 4)] if n else [None, None],
    }


def _classes(values: list[Any]) -> dict[str, int]:
    return {
        "0": values.count(0),
        "1": values.count(1),
        "2": values.count(2),
        "unparseable": values.count(UNPARSEABLE),
        "not judged": values.count(None),
    }


def attc_section(clean: dict[str, list[dict[str, Any]]], values: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Per setting: the conflict rate among incorrect and correct runs and whom the model believed in
    the incorrect runs' conflicts; the tool-ignored rate among incorrect runs, the reference's
    overconfident ratio (ignored + no tool) and the cheap flag beside it; the share of correct runs
    with a call in which a tool output was wrong. Rates are over the runs
    with a class (unparseable and unjudged runs are counted, not in the denominator); Wilson CIs."""
    out: dict[str, Any] = {}
    for s, rs in clean.items():
        mine = [r for r in audited(rs) if r["key"] in values]
        if not mine or not any(r.get("tcn") for r in mine):
            continue
        row: dict[str, Any] = {}
        for side, correct in (("incorrect", False), ("correct", True)):
            v = [values[r["key"]].get(CONFLICT.id) for r in mine if r["correct"] is correct]
            c = _classes(v)
            n = c["0"] + c["1"] + c["2"]
            row[f"conflict_{side}"] = {
                "runs": len(v),
                "classes": c,
                "conflict": _rate(c["1"] + c["2"], n),
                "believe_self": _rate(c["1"], c["1"] + c["2"]),
            }
        wrong = [r for r in mine if r["correct"] is False]
        v = [values[r["key"]].get(IGNORED.id) for r in wrong]
        c = _classes(v)
        n = c["0"] + c["1"] + c["2"]
        flagged = [r for r in wrong if r.get("tool_ignored")]
        row["tool_ignored"] = {
            "runs": len(v),
            "classes": c,
            "tool_ignored": _rate(c["1"], n),
            "overconfident": _rate(c["1"] + c["2"], n),
            "cheap_flag": _rate(len(flagged), len(wrong)),
            "flag_and_judge": sum(values[r["key"]].get(IGNORED.id) == 1 for r in flagged),
        }
        v = [values[r["key"]].get(WRONG.id) for r in mine if r["correct"] is True and r.get("tcn")]
        c = _classes(v)
        row["tool_wrong"] = {"runs": len(v), "classes": c, "tool_wrong": _rate(c["1"], c["0"] + c["1"])}
        out[s] = row
    return out or None


# -- tables and the plot -----------------------------------------------------------------------------

Cell = Callable[[Any], str]


def _pct(rate: dict[str, Any], cell: Cell) -> str:
    return f"{cell(rate['rate'])} ({rate['k']}/{rate['n']}; {cell(rate['ci'])})"


def attc_tables(section: dict[str, Any], dataset: str, judge: str | None, cell: Cell) -> list[Table]:
    """(title, header, rows): Figure 2's conflict table and Figure 3's tool-ignored table, the paper's
    figure in the last row of each."""
    by = f"judge {judge}" if judge else "judge"
    rows = []
    for s, row in section.items():
        for side in ("incorrect", "correct"):
            c = row[f"conflict_{side}"]
            rows.append(
                [
                    s,
                    side,
                    str(c["runs"]),
                    _pct(c["conflict"], cell),
                    _pct(c["believe_self"], cell),
                    str(c["classes"]["2"]),
                    f"{c['classes']['unparseable']} / {c['classes']['not judged']}",
                ]
            )
    rows.append(["paper", "incorrect", "32000+ cases", PAPER["conflict"], PAPER["believe_self"], "", ""])
    tables = [
        (
            f"{dataset}: ATTC Figure 2, reasoning-tool conflict ({by}; reference prompt donot_believe_tools.py; "
            f"rate (k/n; 95% Wilson CI); paper: {PAPER_MODELS})",
            [
                "setting",
                "outcome",
                "runs",
                "conflict rate",
                "believes own reasoning (of conflicts)",
                "believes the tool",
                "unparseable / not judged",
            ],
            rows,
        )
    ]
    rows = []
    for s, row in section.items():
        t = row["tool_ignored"]
        rows.append(
            [
                s,
                str(t["runs"]),
                _pct(t["tool_ignored"], cell),
                str(t["classes"]["2"]),
                _pct(t["overconfident"], cell),
                _pct(t["cheap_flag"], cell),
                str(t["flag_and_judge"]),
                f"{t['classes']['unparseable']} / {t['classes']['not judged']}",
            ]
        )
    rows.append(["paper", "", PAPER["tool_ignored"], "", "", "", "", ""])
    tables.append(
        (
            f'{dataset}: ATTC Figure 3, "tool ignored" among incorrect runs ({by}; reference prompt '
            f"overconfident.py: a tool output was right and the answer is wrong; paper: {PAPER_MODELS})",
            [
                "setting",
                "incorrect runs",
                "tool ignored (judge)",
                "no code",
                "overconfident (ignored + no code)",
                "cheap flag (last output = gold)",
                "flagged, judge agrees",
                "unparseable / not judged",
            ],
            rows,
        )
    )
    tables.append(
        (
            f"{dataset}: ATTC section 2.2, a wrong tool output in correct runs ({by}; reference prompt "
            "false_tool_in_true_cases.py; no figure in our copy)",
            ["setting", "correct runs with a call", "a tool output wrong", "unparseable / not judged"],
            [
                [
                    s,
                    str(row["tool_wrong"]["runs"]),
                    _pct(row["tool_wrong"]["tool_wrong"], cell),
                    f"{row['tool_wrong']['classes']['unparseable']} / {row['tool_wrong']['classes']['not judged']}",
                ]
                for s, row in section.items()
            ],
        )
    )
    return tables


def plot_attc(section: dict[str, Any], dataset: str, directory: Path, plt: Any) -> Path:
    """Figure 2's stacked bars (incorrect runs: no conflict, believes itself, believes the tool) and
    Figure 3's tool-ignored share, per setting (``plt``: matplotlib.pyplot, Agg)."""
    names = list(section)
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(7.0, 1.6 * len(names) + 4), 3.8))
    bottom = [0.0] * len(names)
    for cls, label, colour in (
        ("1", "conflict, believes itself", "#E45756"),
        ("2", "conflict, believes the tool", "#4C78A8"),
        ("0", "no conflict", "#BAB0AC"),
    ):
        share = []
        for s in names:
            c = section[s]["conflict_incorrect"]["classes"]
            n = c["0"] + c["1"] + c["2"]
            share.append(c[cls] / n if n else 0.0)
        left.bar(range(len(names)), share, bottom=bottom, label=label, color=colour)
        bottom = [b + x for b, x in zip(bottom, share, strict=True)]
    left.set_xticks(range(len(names)), names, rotation=30, ha="right")
    left.set_ylim(0, 1)
    left.set_ylabel("share of incorrect runs")
    left.set_title("reasoning-tool conflict (Fig. 2)", fontsize=9)
    left.legend(fontsize=6)
    rates = [section[s]["tool_ignored"]["tool_ignored"] for s in names]
    ys = [r["rate"] or 0.0 for r in rates]
    err = [
        [y - (r["ci"][0] if r["ci"][0] is not None else y) for y, r in zip(ys, rates, strict=True)],
        [(r["ci"][1] if r["ci"][1] is not None else y) - y for y, r in zip(ys, rates, strict=True)],
    ]
    right.bar(range(len(names)), ys, yerr=err, capsize=4, color="#F58518")
    right.axhline(0.15, linestyle="--", color="grey", linewidth=1, label="paper: >= 15% in every model x dataset")
    right.set_xticks(range(len(names)), names, rotation=30, ha="right")
    right.set_ylim(0, 1)
    right.set_ylabel("tool ignored / incorrect runs")
    right.set_title("tool ignored (Fig. 3; 95% Wilson CI)", fontsize=9)
    right.legend(fontsize=6)
    fig.suptitle(f"{dataset}: ATTC audits", fontsize=10)
    fig.tight_layout()
    path = directory / f"attc-audit-{dataset}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


NEEDS_JUDGE = "--protocol attc-audit needs a judge: pass --judge MODEL (a models.toml id)"


class ATTCAudits(EvalProtocol):
    """ATTC's judged audits of whole runs (``--protocol attc-audit``, with ``--judge``)."""

    name = "attc"
    title = "ATTC (arXiv 2604.08281, reference 00Dreamer00/ATTC): judged conflict, tool-ignored, wrong-output audits"
    order = 40
    judge_use = "ATTC's audits of whole runs (--protocol attc-audit)"
    judge_keys = ("attc_audit",)
    fault_figure = ("ATTC Fig. 3: a right output ignored", faults.PAPER_TOOL_IGNORED)
    switches = {
        "attc-audit": Switch(
            "with --judge: the judge reads each run whole, as ATTC's reference code does, for its reasoning-tool "
            "conflict (Figure 2), in wrong runs a right tool output ignored (Figure 3), in right runs a wrong tool "
            "output; with --report-only it audits the runs already there"
        )
    }

    def configure(self, value: str, given: Mapping[str, str]) -> dict[str, Any]:
        return {"audit": True}

    def check(self, cfg: EvalConfig) -> None:
        if self.judges(cfg) and not cfg.judge:
            raise UserError(NEEDS_JUDGE)

    def manifest(self, cfg: EvalConfig, previous: Mapping[str, Any]) -> dict[str, Any]:
        return {"attc_audit": cfg.judge if self.judges(cfg) else previous.get("attc_audit")}

    async def stored(self, pass_: StoredPass) -> None:
        if not pass_.options.get("audit"):
            return
        if not pass_.judge:
            raise UserError(NEEDS_JUDGE)
        await audit_directory(pass_.directory, pass_.judge, pass_.models_file, pass_.log, pass_.concurrency)

    def sections(self, data: DatasetData) -> dict[str, Any]:
        e = data.eval
        judge = e.manifest.get("attc_audit")
        if e.judgements is None or not judge:
            return {"attc_audit": None}
        section = attc_section(data.clean, audit_values(data.records, e.judgements, str(judge)))
        return {"attc_audit": section, "attc_audit_judge": judge}

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        section = summary["datasets"][dataset].get("attc_audit")
        judge = summary["datasets"][dataset].get("attc_audit_judge")
        return attc_tables(section, dataset, judge, cell) if section else []

    def plots(self, summary: dict[str, Any], dataset: str, directory: Path, plt: Any) -> list[Path]:
        section = summary["datasets"][dataset].get("attc_audit")
        return [plot_attc(section, dataset, directory, plt)] if section else []

    def judges(self, cfg: EvalConfig) -> bool:
        return bool(self.options(cfg).get("audit"))

    async def judge(self, pass_: JudgePass) -> None:
        cfg, store = pass_.cfg, pass_.store
        if self.judges(cfg):
            await audit_eval(
                cfg.judge or "", cfg.models_file, store.dir, store.records.values(), pass_.log, models=pass_.models
            )

    def read_faults(self, runs: InjectedRuns) -> dict[str, Any] | None:
        return faults.detector(runs)

    def fault_tables(self, rows: Sequence[FaultRow], dataset: str) -> list[Table]:
        return faults.detector_tables(rows, dataset)

    def fault_figure_rows(self, row: FaultRow) -> list[list[str]]:
        return faults.figure_rows(row)
