"""``tuiagent eval --protocol tim``: the reasoning metrics of "From Proof to Program" (TIM, arXiv
2511.10899) on the no-tool (Base) and tool (TaLM) runs of each problem, and the section 6.1 prompt
mitigation as a third setting (``--protocol tim``; the plug-in is ``guards.tim.protocol.TIMProtocol``).

The paper's metrics, each on correct final answers only (section 3.2.1) and by its tool-call bins
(section 5.2): Win Rate (a pairwise judge, Appendix A.2, asked in both orders), Miss Rate
(|missing steps| / |gold steps| against the reference solution, Appendix A.3), the error types
(Appendix A.4) with their shift Δ = TaLM − Base (Figure 4), and the code complexity of the tool
runs (lines per code block, cyclomatic complexity by radon) with its Pearson correlation with the
Miss Rate (section 5.3). PRM accuracy needs the paper's process reward model, which tuiagent does
not have: it is reported as not computed. The judge asks after the runs (``judge_tim``), cached;
the report (``tim_section`` here; its tables and plots in ``guards.tim.protocol``) only reads the cache. docs/papers/tim.md
("The TIM protocol").
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.stats

from guards.tim.prompts import ERROR_TYPES
from tuiagent.backends.base import ContextOverflow
from tuiagent.core.judge import Judge, pair_winner
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt, prompt
from tuiagent.core.judge_store import JudgementStore
from tuiagent.core.steps import run_pieces
from tuiagent.eval.judging import judged
from tuiagent.eval.results import question_of, run_events
from tuiagent.eval.stats import N_BOOT, TOOL_BINS, bin_label, percentile_ci, tool_bin

WIN, MISS, ERRORS = prompt("win_rate"), prompt("miss_rate"), prompt("error_types")
# [paper] Table 3's variant names for the protocol's three settings; another setting shows by its name.
LABELS = {"cot": "Base", "full": "TaLM", "tim-prompt": "TaLM + Prompting"}
ERROR_NAMES = {
    "logic": "Logic",
    "assumption": "Assumption",
    "creativity": "Creativity",
    "algebra_arithmetic": "Algebra/Arithmetic",
    "none_of_the_above": "None of the above",
}
# [paper] Table 2 (GPT-4.1 and the average of its seven models) and Table 3 (GPT-4.1 + Prompting), in %:
# Final Acc., Miss Rate, Win Rate, PRM Acc.; the judge was GPT-5, the PRM Qwen2.5-Math-7B-PRM800K.
PAPER = {
    "Base": {"GPT-4.1": (24.6, 48.1, 54.4, 88.6), "average of 7": (37.6, 45.9, 52.4, 76.7)},
    "TaLM": {"GPT-4.1": (27.0, 49.9, 45.6, 85.9), "average of 7": (43.3, 48.8, 47.6, 71.1)},
    "TaLM + Prompting": {"GPT-4.1": (25.1, 49.4, 52.7, 82.9)},
}
# [paper] section 5.3: Pearson r with the Miss Rate over the seven TaLMs, none significant at p < 0.05.
PAPER_CORRELATION = {"loc": "-0.09 to 0.22", "cc": "-0.03 to 0.26"}
# [paper] section 5.5 (Figure 5): share of problems on which each TaLM invoked the Code Interpreter, in %.
PAPER_TOOL_USE = {"GPT-4.1": 25.9, "GPT-4.1-mini": 16.4, "Gemini-2.0-Flash": 14.3, "GPT-5": 73.7, "Claude-Opus-4": 99.8}
HIGH_RISK = 10  # [paper] section 5.6: "the top-10 samples per model ranked by Miss Rate"
PERMUTATIONS = 10_000  # [ours] the permutation test's draws (p to about ±0.005 near 0.05)
NO_PRM = (
    "PRM accuracy is not computed: the paper scores steps with a process reward model "
    "(Qwen2.5-Math-7B-PRM800K), which tuiagent does not have"
)


@dataclass(frozen=True)
class Solution:
    """A run as the judge reads it: the question, the solution text (the model's turns with their code
    and each executed output in an ```output block), and the executed code cells."""

    question: str
    text: str
    codes: tuple[str, ...]


def solution(record: dict[str, Any]) -> Solution | None:
    """The run's solution from its trajectory; None without one."""
    events = run_events(record)
    if events is None:
        return None
    question = question_of(events)
    parts, pieces = [], run_pieces(events)
    for piece in pieces:
        if piece.kind == "turn":
            parts.append(piece.text.rstrip().removesuffix("```output").rstrip())  # the stop's opening fence
        elif piece.kind == "output":
            parts.append(f"```output\n{piece.text.strip()}\n```")
    codes = tuple(p.text for p in pieces if p.kind == "code" and p.executed)
    return Solution(question, "\n".join(parts).strip(), codes)


# -- which runs go together ------------------------------------------------------------------------


def roles(settings: list[str], modes: dict[str, str]) -> tuple[str | None, list[str]]:
    """(the Base setting: the first no-tool one, the TaLM settings: every tool one), in the eval's order."""
    base = next((s for s in settings if modes.get(s) == "cot"), None)
    return base, [s for s in settings if modes.get(s, "tool") == "tool"]


def _unit(r: dict[str, Any]) -> tuple[str, str, int]:
    return r["dataset"], r["problem_id"], r["seed"]


def _clean(records: list[dict[str, Any]], setting: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    return {_unit(r): r for r in records if r["setting"] == setting and not r.get("variant")}


def pairs(records: list[dict[str, Any]], base: str, tool: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Base run, TaLM run) of each problem and seed both settings ran, in a stable order."""
    b, t = _clean(records, base), _clean(records, tool)
    return [(b[k], t[k]) for k in sorted(set(b) & set(t))]


def _right(r: dict[str, Any]) -> bool:
    return r.get("correct") is True


# -- the judge's inputs, asked (judge_tim) and read back (tim_section) from the same functions -------


def win_inputs(base: Solution, tool: Solution) -> list[dict[str, str]]:
    """The two orders of a Win Rate comparison: the TaLM solution as A, then as B (``Judge.pairwise``)."""
    return [
        {"problem": base.question, "a": tool.text, "b": base.text},
        {"problem": base.question, "a": base.text, "b": tool.text},
    ]


def miss_inputs(run: Solution, reference: str) -> dict[str, str]:
    return {"problem": run.question, "solution": run.text, "gold": reference}


def error_inputs(run: Solution) -> dict[str, str]:
    return {"problem": run.question, "solution": run.text}


@dataclass
class Plan:
    """Every judgement one dataset's TIM metrics need, in the order they are asked."""

    wins: list[tuple[str, dict[str, Any], dict[str, Any]]]  # (tool setting, Base run, TaLM run), both right
    misses: list[dict[str, Any]]  # right runs with a reference solution
    errors: list[dict[str, Any]]  # the runs of the pairs, each once


def plan(records: list[dict[str, Any]], base: str, tools: list[str]) -> Plan:
    wins = [(t, b, r) for t in tools for b, r in pairs(records, base, t) if _right(b) and _right(r)]
    misses = [r for s in [base, *tools] for r in _clean(records, s).values() if _right(r) and r.get("reference")]
    errors = list({r["key"]: r for _, b, t in wins for r in (b, t)}.values())
    return Plan(wins, sorted(misses, key=lambda r: r["key"]), errors)


def _problem(record: dict[str, Any]) -> tuple[str, str]:
    return str(record["problem_id"]), str(record.get("variant") or "")


async def judge_tim(
    judge: Judge, records: list[dict[str, Any]], settings: list[str], modes: dict[str, str], log: Callable[[str], None]
) -> int:
    """Ask ``judge`` every judgement of the TIM metrics not yet in its cache; how many were asked."""
    base, tools = roles(settings, modes)
    if base is None or not tools:
        return 0
    before = judge.cost.calls
    sols: dict[str, Solution | None] = {}
    too_long = 0

    def sol(r: dict[str, Any]) -> Solution | None:
        if r["key"] not in sols:
            sols[r["key"]] = solution(r)
        return sols[r["key"]]

    async def ask(p: JudgePrompt, inputs: dict[str, str]) -> None:
        nonlocal too_long
        try:
            await judge.judgement(p, inputs)
        except ContextOverflow:  # not cached: a judge with a larger context asks it later
            too_long += 1

    questions: list[tuple[JudgePrompt, dict[str, str]]] = []
    for dataset in sorted({r["dataset"] for r in records}):
        todo = plan([r for r in records if r["dataset"] == dataset], base, tools)
        # problem by problem, so that a pass stopped early (a slow local judge) has every metric on
        # the problems it reached rather than one metric on all of them
        for problem in sorted({_problem(r) for r in [*todo.misses, *todo.errors]}):
            for _, b, t in (w for w in todo.wins if _problem(w[1]) == problem):
                sb, st = sol(b), sol(t)
                questions += [(WIN, inputs) for inputs in (win_inputs(sb, st) if sb and st else [])]
            for r in (r for r in todo.misses if _problem(r) == problem):
                if s := sol(r):
                    questions.append((MISS, miss_inputs(s, r["reference"])))
            for r in (r for r in todo.errors if _problem(r) == problem):
                if s := sol(r):
                    questions.append((ERRORS, error_inputs(s)))
    await asyncio.gather(*(ask(p, inputs) for p, inputs in questions))  # the judge's concurrency, in this order
    asked = judge.cost.calls - before
    if asked:
        log(f"judge {judge.model_id}: {asked} TIM judgement(s) asked")
    if too_long:
        log(
            f"judge {judge.model_id}: {too_long} TIM question(s) did not fit its context and were not asked (left "
            "out of the figures; raise its context_size in models.toml, or use a judge with a longer context)"
        )
    return asked


# -- metrics ---------------------------------------------------------------------------------------


def win_share(orders: tuple[Any, Any]) -> float | None:
    """The TaLM run's share of one comparison (straight order: TaLM as A): 1 when both orders prefer it,
    0 when both prefer Base, 0.5 when each prefers the same position (position bias); None when an
    order is unparseable or not asked."""
    if None in orders:
        return None
    return {"first": 1.0, "second": 0.0, "inconsistent": 0.5}.get(pair_winner(orders))


def miss_rate(value: Any) -> float | None:
    """|missing steps| / |gold steps| of a parsed Miss Rate reply (section 3.2.3)."""
    return value["missing_steps"] / value["gold_steps"] if isinstance(value, dict) else None


def pearson(x: list[float], y: list[float], *, permutations: int = PERMUTATIONS, seed: int = 0) -> dict[str, Any]:
    """Pearson r (section 5.3 uses Pearson) with its Fisher-z 95% interval (n > 3) and a two-sided
    permutation p ([ours], in place of the t-test): ``scipy.stats.pearsonr`` with a
    ``PermutationMethod`` of ``permutations`` shuffles of y (exact over all n! orders when there are
    no more than that), seeded, and the result's ``confidence_interval()``. scipy's two-sided p
    doubles the smaller one-sided p. None where r is undefined (n < 3, a constant side)."""
    n = len(x)
    out: dict[str, Any] = {"n": n, "r": None, "ci": [None, None], "p": None}
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if n < 3 or a.std() == 0 or b.std() == 0:
        return out
    # batch: 1000 shuffles x n at a time (the shuffles the hand-written test drew, in its order)
    method = scipy.stats.PermutationMethod(n_resamples=permutations, batch=1000, rng=np.random.default_rng(seed))
    res = scipy.stats.pearsonr(a, b, method=method)
    r = float(res.statistic)
    out.update(r=round(r, 4), p=round(float(res.pvalue), 4))
    if n > 3 and abs(r) < 1:
        ci = res.confidence_interval(confidence_level=0.95)
        out["ci"] = [round(float(ci.low), 4), round(float(ci.high), 4)]
    return out


def complexity(codes: tuple[str, ...]) -> dict[str, Any] | None:
    """Lines of code (non-blank lines per code block, section 5.3's "average number of lines per code
    block") and cyclomatic complexity per block (radon's ``total_complexity`` of the cell: 1 + its
    decision points, those in its functions and classes included; the per-block mean is ours) of a
    run's executed cells; blocks radon cannot parse are counted and left out. None without a parsed
    block."""
    from radon.raw import analyze
    from radon.visitors import ComplexityVisitor

    lines, cc, unparsed = [], [], 0
    for code in codes:
        try:
            raw = analyze(code)
            cc.append(ComplexityVisitor.from_code(code).total_complexity)
        except (SyntaxError, ValueError, TypeError, RecursionError):
            unparsed += 1
            continue
        lines.append(raw.loc - raw.blank)
    if not lines:
        return None
    return {"blocks": len(lines), "unparsed": unparsed, "loc": sum(lines) / len(lines), "cc": sum(cc) / len(cc)}


Points = list[tuple[str, float]]  # (problem id, value): a run's or a pair's number and its problem


def cluster_bootstrap(
    points: Points, *, n_boot: int = N_BOOT, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the values with a percentile bootstrap CI over problems, each drawn
    problem bringing all its values (its seeds move together): scipy's paired bootstrap of the problems'
    sums and counts (``stats.percentile_ci``). With one value per problem it is ``stats.bootstrap_mean``
    draw for draw."""
    totals: dict[str, list[float]] = {}
    for p, v in points:
        total = totals.setdefault(p, [0.0, 0.0])
        total[0] += v
        total[1] += 1
    # problems in the order of their mean (as stats.paired_bootstrap sorts), not of their runs' ending
    ordered = sorted(totals.values(), key=lambda t: (t[0] / t[1], t[1]))
    sums, counts = np.array([t[0] for t in ordered]), np.array([t[1] for t in ordered])
    mean = float(sums.sum() / counts.sum())
    if len(ordered) == 1:
        return mean, mean, mean
    low, high = percentile_ci(
        (sums, counts),
        lambda s, c, axis=-1: s.sum(axis=axis) / c.sum(axis=axis),
        paired=True,
        n_boot=n_boot,
        level=1 - alpha,
        seed=seed,
    )
    return mean, low, high


def _mean(points: Points) -> dict[str, Any]:
    """A mean with its 95% bootstrap interval over problems, and n (values)."""
    if not points:
        return {"value": None, "ci": [None, None], "n": 0}
    mean, lo, hi = cluster_bootstrap(points)
    return {"value": round(mean, 4), "ci": [round(lo, 4), round(hi, 4)], "n": len(points)}


Lookup = Callable[[str, dict[str, str]], Any]


def tim_section(
    records: list[dict[str, Any]],
    settings: list[str],
    modes: dict[str, str],
    lookup: Lookup | None,
    judge: str | None = None,
) -> dict[str, Any] | None:
    """One dataset's TIM protocol (plain data for summary.json); None without a Base and a TaLM setting.
    ``lookup(prompt id, inputs)``: the judge's cached value (None: not asked); None without --judge."""
    base, tools = roles(settings, modes)
    if base is None or not tools:
        return None
    ask: Lookup = lookup or (lambda _pid, _inputs: None)
    todo = plan(records, base, tools)
    sols = {r["key"]: solution(r) for r in records if r["setting"] in (base, *tools) and not r.get("variant")}
    miss: dict[str, float | None] = {}
    unparseable = {"win_rate": 0, "miss_rate": 0, "error_types": 0}
    not_judged = dict(unparseable)  # not asked yet, or too long for the judge's context
    for r in todo.misses:
        s = sols.get(r["key"])
        value = ask(MISS.id, miss_inputs(s, r["reference"])) if s else None
        unparseable["miss_rate"] += value == UNPARSEABLE
        not_judged["miss_rate"] += value is None
        miss[r["key"]] = miss_rate(value)
    errors: dict[str, dict[str, bool] | None] = {}
    for r in todo.errors:
        s = sols.get(r["key"])
        value = ask(ERRORS.id, error_inputs(s)) if s else None
        unparseable["error_types"] += value == UNPARSEABLE
        not_judged["error_types"] += value is None
        errors[r["key"]] = value if isinstance(value, dict) else None
    shares: dict[tuple[str, str], float | None] = {}
    for t, b, r in todo.wins:
        sb, st = sols.get(b["key"]), sols.get(r["key"])
        orders = tuple(ask(WIN.id, i) for i in win_inputs(sb, st)) if sb and st else (None, None)
        unparseable["win_rate"] += UNPARSEABLE in orders
        not_judged["win_rate"] += UNPARSEABLE not in orders and None in orders
        shares[(t, r["key"])] = win_share((orders[0], orders[1]))

    section: dict[str, Any] = {
        "judge": judge,
        "base": base,
        "tools": tools,
        "labels": {s: LABELS.get(s, s) for s in [base, *tools]},
        "unparseable": unparseable,
        "not_judged": not_judged,
        "prm": NO_PRM,
        "pairing": {},
        "table": {},
        "bins": {},
        "errors": {},
        "complexity": {},
        "correlation": {},
        "monitor": {},
        "tool_use": {},
        "high_risk": {},
    }
    base_runs = list(_clean(records, base).values())
    section["table"][base] = _row(base_runs, miss, None)
    for t in tools:
        ps = pairs(records, base, t)
        right = [(b, r) for b, r in ps if _right(b) and _right(r)]
        judged = [(r["problem_id"], w) for _, r in right if (w := shares.get((t, r["key"]))) is not None]
        votes = [w for _, w in judged]
        section["pairing"][t] = {
            "pairs": len(ps),
            "both_right": len(right),
            "base_only": sum(_right(b) and not _right(r) for b, r in ps),
            "tool_only": sum(_right(r) and not _right(b) for b, r in ps),
            "neither": sum(not (_right(b) or _right(r)) for b, r in ps),
            "judged": len(judged),
            "consistent_tool": votes.count(1.0),
            "consistent_base": votes.count(0.0),
            "inconsistent": votes.count(0.5),
            # [ours] the Miss Rates paired on the same problems, beside the paper's unpaired averages
            "miss_delta": _mean(
                [
                    (b["problem_id"], mt - mb)
                    for b, r in right
                    if (mb := miss.get(b["key"])) is not None and (mt := miss.get(r["key"])) is not None
                ]
            ),
        }
        section["table"][t] = _row([r for _, r in ps], miss, judged)
        section["tool_use"][t] = _mean([(r["problem_id"], float(int(r.get("tcn") or 0) > 0)) for _, r in ps])
        if t == tools[0]:  # the Base row's Win Rate is against the plain TaLM, as in Tables 2 and 3
            section["table"][base]["win_rate"] = _mean([(p, 1 - w) for p, w in judged])
        section["bins"][t] = _bins([r for _, r in ps], right, shares, miss, sols, t)
        section["errors"][t] = _error_shift(right, errors)
        section["complexity"][t] = _complexity_row([r for _, r in ps if _right(r)], sols)
        section["correlation"][t] = _correlation([r for _, r in ps if _right(r)], miss, sols)
        section["monitor"][t] = _monitor([r for _, r in right], shares, miss, t)
        section["high_risk"][t] = _high_risk([r for _, r in right], shares, miss, t)
    section["runs"] = [
        _run_row(r, miss, errors, shares, sols) for s in [base, *tools] for r in _clean(records, s).values()
    ]
    return section


def _monitor(
    runs: list[dict[str, Any]], shares: dict[tuple[str, str], float | None], miss: dict[str, float | None], tool: str
) -> dict[str, Any]:
    """tuiagent's own myopia monitor (``tim_flag``, [ours]) against the judged metrics, on the TaLM runs
    of the pairs both right: does a flag go with a higher Miss Rate and more Base wins?"""
    out = {}
    for name, flagged in (("flagged", True), ("not_flagged", False)):
        rs = [r for r in runs if bool(r.get("tim_flag")) is flagged]
        out[name] = {
            "runs": len(rs),
            "miss_rate": _mean(_misses(rs, miss)),
            "base_win_rate": _mean(
                [(r["problem_id"], 1 - w) for r in rs if (w := shares.get((tool, r["key"]))) is not None]
            ),
        }
    return out


def _high_risk(
    runs: list[dict[str, Any]], shares: dict[tuple[str, str], float | None], miss: dict[str, float | None], tool: str
) -> list[dict[str, Any]]:
    """Section 5.6's high-risk solutions for a manual audit: right, Base wins the comparison in both
    orders, the top HIGH_RISK by Miss Rate (the paper also asks for a PRM flag, which tuiagent lacks)."""
    lost = [r for r in runs if shares.get((tool, r["key"])) == 0.0]
    lost.sort(key=lambda r: (miss.get(r["key"]) is None, -(miss.get(r["key"]) or 0.0), r["key"]))
    return [
        {
            "key": r["key"],
            "miss_rate": miss.get(r["key"]),
            "tool_calls": int(r.get("tcn") or 0),
            "tim_flag": r.get("tim_flag"),
            "trajectory": r.get("trajectory"),
        }
        for r in lost[:HIGH_RISK]
    ]


def _run_row(
    r: dict[str, Any],
    miss: dict[str, float | None],
    errors: dict[str, dict[str, bool] | None],
    shares: dict[tuple[str, str], float | None],
    sols: dict[str, Solution | None],
) -> dict[str, Any]:
    """One run's TIM numbers (tim-runs.csv): None where the metric does not apply or was not judged."""
    s = sols.get(r["key"])
    code = complexity(s.codes) if s else None
    said = errors.get(r["key"])
    return {
        "dataset": r["dataset"],
        "problem_id": r["problem_id"],
        "seed": r["seed"],
        "setting": r["setting"],
        "correct": _right(r),
        "tool_calls": int(r.get("tcn") or 0),
        "bin": tool_bin(int(r.get("tcn") or 0)),
        "win_share": shares.get((r["setting"], r["key"])),
        "miss_rate": miss.get(r["key"]),
        **{k: None if said is None else said[k] for k in ERROR_NAMES},
        "code_blocks": code["blocks"] if code else 0,
        "loc": code["loc"] if code else None,
        "cc": code["cc"] if code else None,
    }


def runs_csv(sections: dict[str, Any]) -> str:
    """Every run's TIM numbers, one row a run (``win_share``: the TaLM run's share of its comparison)."""
    rows = [row for section in sections.values() for row in section["runs"]]
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buf.getvalue()


def tim_sections(
    records: list[dict[str, Any]],
    settings: list[str],
    modes: dict[str, str],
    store: JudgementStore | None,
    judge: str | None,
) -> dict[str, Any]:
    """``tim_section`` of each dataset, reading ``judge``'s judgements from ``store`` (None: no judge)."""
    lookup: Lookup | None = None
    if store is not None and judge is not None:
        lookup = lambda pid, inputs: judged(store, judge, prompt(pid), inputs)  # noqa: E731
    out = {}
    for dataset in sorted({r["dataset"] for r in records}):
        section = tim_section([r for r in records if r["dataset"] == dataset], settings, modes, lookup, judge)
        if section is not None:
            out[dataset] = section
    return out


def _misses(runs: list[dict[str, Any]], miss: dict[str, float | None]) -> Points:
    return [(r["problem_id"], v) for r in runs if (v := miss.get(r["key"])) is not None]


def _row(runs: list[dict[str, Any]], miss: dict[str, float | None], shares: Points | None) -> dict[str, Any]:
    """Table 2's row of one setting: Final Acc. over its runs, Miss Rate over its right ones, Win Rate."""
    return {
        "final_acc": _mean([(r["problem_id"], float(_right(r))) for r in runs]),
        "miss_rate": _mean(_misses(runs, miss)),
        "win_rate": _mean(shares or []),
        "prm_acc": None,
        "right": sum(map(_right, runs)),
        "right_with_reference": sum(_right(r) and bool(r.get("reference")) for r in runs),
    }


def _bins(
    runs: list[dict[str, Any]],
    right: list[tuple[dict[str, Any], dict[str, Any]]],
    shares: dict[tuple[str, str], float | None],
    miss: dict[str, float | None],
    sols: dict[str, Solution | None],
    tool: str,
) -> dict[str, Any]:
    """Figure 2 by the TaLM run's executed tool calls: Base's Win Rate over it, its Miss Rate, its code."""
    out = {}
    for lo, hi in TOOL_BINS:
        label = bin_label(lo, hi)
        inside = [r for r in runs if tool_bin(int(r.get("tcn") or 0)) == label and _right(r)]
        won = [
            (r["problem_id"], 1 - s)
            for _, r in right
            if tool_bin(int(r.get("tcn") or 0)) == label and (s := shares.get((tool, r["key"]))) is not None
        ]
        out[label] = {
            "runs_right": len(inside),
            "base_win_rate": _mean(won),
            "miss_rate": _mean(_misses(inside, miss)),
            **_complexity_row(inside, sols),
        }
    return out


def _error_shift(
    right: list[tuple[dict[str, Any], dict[str, Any]]], errors: dict[str, dict[str, bool] | None]
) -> dict[str, Any]:
    """Figure 4: each error type's rate in Base and TaLM on the pairs both judged, and Δ = TaLM − Base."""
    both = [
        (b["problem_id"], eb, et) for b, t in right if (eb := errors.get(b["key"])) and (et := errors.get(t["key"]))
    ]
    out: dict[str, Any] = {"pairs": len(both)}
    for kind in (*ERROR_TYPES, "none_of_the_above"):
        out[kind] = {
            "base": _mean([(p, float(eb[kind])) for p, eb, _ in both]),
            "tool": _mean([(p, float(et[kind])) for p, _, et in both]),
            "delta": _mean([(p, float(et[kind]) - float(eb[kind])) for p, eb, et in both]),
        }
    return out


def _complexity_row(runs: list[dict[str, Any]], sols: dict[str, Solution | None]) -> dict[str, Any]:
    measured = [(r["problem_id"], c) for r in runs if (s := sols.get(r["key"])) and (c := complexity(s.codes))]
    return {
        "loc": _mean([(p, c["loc"]) for p, c in measured]),
        "cc": _mean([(p, c["cc"]) for p, c in measured]),
        "runs_with_code": len(measured),
        "unparsed_blocks": sum(c["unparsed"] for _, c in measured),
    }


def _correlation(
    runs: list[dict[str, Any]], miss: dict[str, float | None], sols: dict[str, Solution | None]
) -> dict[str, Any]:
    """Figure 3: Pearson r of lines of code and of cyclomatic complexity with the Miss Rate, over right runs."""
    points = [
        (c, m)
        for r in runs
        if (m := miss.get(r["key"])) is not None and (s := sols.get(r["key"])) and (c := complexity(s.codes))
    ]
    return {k: pearson([c[k] for c, _ in points], [m for _, m in points]) for k in ("loc", "cc")}
