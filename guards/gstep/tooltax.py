"""The tool-use-tax protocol's analysis ("Are Tools All We Need?", arXiv 2605.00136, sections 2.3-2.4
and 3.3-3.5), folded from an eval's records: the seven conditions' accuracies, the Gap and its
decomposition (Δsty, Δfrc, Δcmp) with the oracle probes (Δoracle, Δcontext), the sample-level
attribution (Genuine / Δsty- / Δfrc- / Δcmp-), the A-F failure taxonomy of each failed tool
trajectory, capability overlap and G-STEP's gap closure (Cls.).

Every quantity is computed per *scope*: on the semantic-distractor variants when the eval has them
(pooled over the types, as the paper's Table 2 averages "across all noisy variants", and per type),
on the questions as written otherwise; the report names the scope. The definitions, what is our
reading where the paper's copy is silent, and the paper's figures shown beside ours:
docs/papers/tool-use-tax.md#the-tool-use-tax-protocol.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from guards.gstep.conditions import LABELS as CONDITION_LABELS
from guards.gstep.distractors import DISTRACTOR_PREFIX
from guards.gstep.guard import GATE_OFF
from tuiagent.core.steps import run_pieces
from tuiagent.eval.datasets import numbers_in
from tuiagent.eval.results import run_events
from tuiagent.eval.stats import N_BOOT, bootstrap_mean, paired_bootstrap, percentile_ci, right, rounded
from tuiagent.eval.stats import wilson as stats_wilson
from tuiagent.protocol import RunPiece

# The paper's abbreviations of the distractor types (section 2.1) for ours (guards.gstep.distractors.DISTRACTORS).
TYPE_NAMES = {"thematic": "TB", "paraphrase": "SP", "parallel": "PED", "hedged": "HU"}
CHAIN = ("cot", "fcstyle", "noop", "full")  # the degradation chain, Eq. (1)
TOOL_CONDITIONS = ("noop", "full", "oracle", "evidence", "max1")
# [ours] one symptom per failed trajectory ("the dominant symptom", section 2.4), the first that holds
DOMINANCE = ("E", "B", "D", "C", "A", "F")
TAXONOMY = {
    "A": "Under-computation",
    "B": "Tool-execution error",
    "C": "Evidence drift",
    "D": "Integration failure",
    "E": "No successful output",
    "F": "Planning mismatch",
}
EVIDENCE_F1_DRIFT = 0.5  # [paper] Type C: Evidence-F1 < 0.5 (section 2.4)

# [paper] figures the paper gives in its text for GSM8K-Sem-Distractor, per model (percent; Gap in pp,
# Full - CoT). Table 1/3.3: Gap; 3.3: OracleCalc vs Full for Qwen3-4B; Table 4 (3.4 and I.7): Proto.,
# Δfrc-, Δsty- shares of Agent-Full errors; Table 6: overlap; Table 7 (3.5, I.7): held-out Gap and Cls.
PAPER_GSM8K: dict[str, dict[str, float]] = {
    "gap": {"Qwen3-4B": -33.36, "Qwen3-32B": -15.64, "GPT-4.1-mini": -14.12},
    "delta_oracle": {"Qwen3-4B": 89.20 - 52.08},
    "acc_full": {"Qwen3-4B": 52.08},
    "acc_oracle": {"Qwen3-4B": 89.20},
    "proto": {"Qwen3-4B": 79.4, "Qwen3-32B": 75.8, "GPT-4.1-mini": 69.7},
    "genuine": {"Qwen3-4B": 100 - 79.4, "Qwen3-32B": 100 - 75.8, "GPT-4.1-mini": 100 - 69.7},
    "frc": {"Qwen3-4B": 58.7, "Qwen3-32B": 45.5, "GPT-4.1-mini": 44.6},
    "sty": {"Qwen3-4B": 11.4, "Qwen3-32B": 24.9},
    "overlap": {"Qwen3-4B": 89.6, "Qwen3-32B": 94.0, "GPT-4.1-mini": 95.4},
    "cls": {"Qwen3-4B": 75.75, "Qwen3-32B": 23.21},
    "cls_gap": {"Qwen3-4B": -32.00},
}

Key = tuple[str, str, int]  # (problem id, variant, seed)


def wilson(k: int, n: int) -> list[float | None]:
    """The 95% Wilson score interval of a proportion k/n, rounded ([None, None] when n is 0)."""
    low, high = stats_wilson(k, n)
    return [rounded(low), rounded(high)]


def share(k: int, n: int) -> dict[str, Any]:
    return {"count": k, "of": n, "share": rounded(k / n) if n else None, "ci": wilson(k, n)}


# -- scopes ----------------------------------------------------------------------------------------


def scopes(records: Iterable[dict[str, Any]]) -> tuple[str, dict[str, Callable[[dict[str, Any]], bool]]]:
    """("distractors" or "clean", {scope name: which records it holds}): the pooled distractor
    variants and each type when the eval has any, else the questions as written."""
    kinds = sorted(
        {
            str(r["variant"])[len(DISTRACTOR_PREFIX) :]
            for r in records
            if str(r.get("variant") or "").startswith(DISTRACTOR_PREFIX)
        }
    )
    if not kinds:
        return "clean", {"clean": lambda r: not r.get("variant")}
    out: dict[str, Callable[[dict[str, Any]], bool]] = {
        "pooled": lambda r: str(r.get("variant") or "").startswith(DISTRACTOR_PREFIX)
    }
    for kind in kinds:
        out[TYPE_NAMES.get(kind, kind)] = _is_variant(DISTRACTOR_PREFIX + kind)
    return "distractors", out


def _is_variant(variant: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: r.get("variant") == variant


def by_key(records: Iterable[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {(str(r["problem_id"]), str(r.get("variant") or ""), int(r.get("seed", 0))): r for r in records}


def per_unit(runs: dict[Key, dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Mean correctness of each unit (problem, variant) over its seeds."""
    sums: dict[tuple[str, str], list[float]] = {}
    for (pid, variant, _), r in runs.items():
        sums.setdefault((pid, variant), []).append(right(r))
    return {u: sum(v) / len(v) for u, v in sums.items()}


# -- the metrics -----------------------------------------------------------------------------------


def accuracy(runs: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    units = per_unit(runs)
    mean, lo, hi = bootstrap_mean(list(units.values())) if units else (math.nan,) * 3
    return {"accuracy": rounded(mean), "ci": [rounded(lo), rounded(hi)], "units": len(units), "runs": len(runs)}


def delta(
    a: dict[Key, dict[str, Any]], b: dict[Key, dict[str, Any]], units: set[tuple[str, str]] | None = None
) -> dict[str, Any]:
    """Acc(a) - Acc(b) on the units both have (or ``units``), with a paired bootstrap 95% CI."""
    ua, ub = per_unit(a), per_unit(b)
    common = sorted((set(ua) & set(ub)) if units is None else units)
    mean, lo, hi = paired_bootstrap([ua[u] - ub[u] for u in common])
    return {"value": rounded(mean), "ci": [rounded(lo), rounded(hi)], "units": len(common)}


def decomposition(runs: dict[str, dict[Key, dict[str, Any]]]) -> dict[str, Any]:
    """Gap = Acc(Full) - Acc(CoT); Δsty = FCStyle - CoT, Δfrc = NoopTool - FCStyle, Δcmp = Full - NoopTool
    (on the units all four have, so they sum to ``chain_gap``, the Gap there); Δoracle = OracleCalc -
    Full, Δcontext = OracleEvid - Full (section 2.3); and ours, Full - Max1Turn: what the turns after
    the first add (the paper's Max1Turn probe names no Δ)."""
    out: dict[str, Any] = {}
    if "full" in runs and "cot" in runs:
        out["gap"] = delta(runs["full"], runs["cot"])
    if all(c in runs for c in CHAIN):
        units = set.intersection(*(set(per_unit(runs[c])) for c in CHAIN))
        out["sty"] = delta(runs["fcstyle"], runs["cot"], units)
        out["frc"] = delta(runs["noop"], runs["fcstyle"], units)
        out["cmp"] = delta(runs["full"], runs["noop"], units)
        out["chain_gap"] = delta(runs["full"], runs["cot"], units)
    for name, cond in (("oracle", "oracle"), ("context", "evidence")):
        if cond in runs and "full" in runs:
            out[name] = delta(runs[cond], runs["full"])
    if "max1" in runs and "full" in runs:  # [ours] what the turns after the first FC turn add (section 2.2)
        out["turns"] = delta(runs["full"], runs["max1"])
    return out


def attribution(runs: dict[str, dict[Key, dict[str, Any]]]) -> dict[str, Any] | None:
    """Each wrong Agent-Full run at its earliest failure point on the chain (section 2.4): Genuine
    (wrong under CoT already), Δsty- (first wrong in FCStyle), Δfrc- (first in NoopTool), Δcmp- (right
    up to NoopTool, wrong only in Full); shares of N_w with Wilson CIs, and each run's class."""
    if not all(c in runs for c in CHAIN):
        return None
    keys = sorted(set.intersection(*(set(runs[c]) for c in CHAIN)))
    wrong = [k for k in keys if not right(runs["full"][k])]
    classes = {k: source(*(bool(right(runs[c][k])) for c in CHAIN[:3])) for k in wrong}
    n = len(wrong)
    counts = {c: sum(v == c for v in classes.values()) for c in ("genuine", "sty", "frc", "cmp")}
    out = {
        "n_w": n,
        "paired_runs": len(keys),
        **{c: share(k, n) for c, k in counts.items()},
        "proto": share(n - counts["genuine"], n),
    }
    out["classes"] = {"|".join(map(str, k)): v for k, v in classes.items()}
    return out


def source(cot: bool, fcstyle: bool, noop: bool) -> str:
    """Where a wrong Agent-Full run first went wrong, from its correctness under the earlier conditions."""
    if not cot:
        return "genuine"
    if not fcstyle:
        return "sty"
    return "frc" if not noop else "cmp"


def overlap(runs: dict[str, dict[Key, dict[str, Any]]]) -> dict[str, Any] | None:
    """Capability overlap (Table 6): of the tool-benefited runs (Full right, NoopTool wrong), the share
    CoT also solves."""
    if not all(c in runs for c in ("full", "noop", "cot")):
        return None
    keys = set(runs["full"]) & set(runs["noop"]) & set(runs["cot"])
    benefited = [k for k in keys if right(runs["full"][k]) and not right(runs["noop"][k])]
    return share(sum(bool(right(runs["cot"][k])) for k in benefited), len(benefited))


def gap_closure(
    setting: dict[Key, dict[str, Any]],
    full: dict[Key, dict[str, Any]],
    cot: dict[Key, dict[str, Any]],
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> dict[str, Any]:
    """Cls. (Table 7): the fraction of the Full-to-CoT gap a setting recovers, (Acc(s) - Acc(Full)) /
    (Acc(CoT) - Acc(Full)), on the units all three have; a paired bootstrap 95% CI over units (scipy's,
    through ``stats.percentile_ci``; resamples whose gap is 0 left out). None when CoT does not beat Full
    (no gap to close)."""
    us, uf, uc = per_unit(setting), per_unit(full), per_unit(cot)
    common = sorted(set(us) & set(uf) & set(uc))
    arr = np.array([[us[u], uf[u], uc[u]] for u in common], dtype=float).reshape(-1, 3)
    out: dict[str, Any] = {
        "units": len(common),
        "accuracy": None,
        "full": None,
        "cot": None,
        "delta_vs_full": None,
        "cls": None,
        "cls_ci": [None, None],
    }
    if not common:
        return out
    s, f, c = arr.mean(axis=0)
    out.update(accuracy=rounded(s), full=rounded(f), cot=rounded(c), delta_vs_full=delta(setting, full, set(common)))
    if c - f <= 0:
        return out
    out["cls"] = rounded((s - f) / (c - f))

    def ratio(acc_s: np.ndarray, acc_f: np.ndarray, acc_c: np.ndarray, axis: int = -1) -> Any:
        gain, gap = acc_s.mean(axis=axis) - acc_f.mean(axis=axis), acc_c.mean(axis=axis) - acc_f.mean(axis=axis)
        return np.where(gap != 0, gain / np.where(gap != 0, gap, 1), np.nan)  # no gap: nan, left out

    lo, hi = (
        percentile_ci(tuple(arr.T), ratio, paired=True, n_boot=n_boot, seed=seed)
        if len(common) > 1
        else ((s - f) / (c - f),) * 2  # one unit: its ratio (stats module docstring)
    )
    out["cls_ci"] = [rounded(lo), rounded(hi)]
    return out


# -- the A-F taxonomy ------------------------------------------------------------------------------

_ARITHMETIC = re.compile(r"[-+*/%]")


@dataclass(frozen=True)
class Judged:
    """What the judge (``--judge``) said about the taxonomy's judged parts, looked up by their inputs
    (eval.judging asks, the report looks up): the gold steps of a reference without GSM8K's
    annotations, and whether a Type F run's plan is coherent but wrong. None: not judged."""

    steps: Callable[[str], Any] = field(default=lambda reference: None)
    plan: Callable[[dict[str, str]], Any] = field(default=lambda inputs: None)


NOT_JUDGED = Judged()


def gold_steps(reference: str, judged: Judged = NOT_JUDGED) -> int | None:
    """The gold computation's steps: GSM8K's calculator annotations (``<<48/2=24>>``) in the worked
    answer [ours], else the judge's count; None without either (Type A is then not determined)."""
    n = reference.count("<<")
    if n or not reference.strip():
        return n or None
    value = judged.steps(reference)
    return value if isinstance(value, int) else None


def plan_inputs(record: dict[str, Any], pieces: Sequence[RunPiece]) -> dict[str, str]:
    """The plan-mismatch judge's inputs: the question the run was given, the reference, the run as
    the model wrote it (its turns, the code inside them, and the outputs it got back)."""
    solution = "\n".join(
        p.text if p.kind == "turn" else f"```output\n{p.text.rstrip()}\n```"
        for p in pieces
        if p.kind in ("turn", "output")
    )
    return {
        "question": str(record.get("question") or ""),
        "reference": str(record.get("reference") or ""),
        "solution": solution,
    }


def tool_steps(code: str) -> int:
    """The computations of one successful cell: its lines that compute (an arithmetic operator), comments
    and imports aside [ours]; a cell that computes nothing counts one (it ran)."""
    lines = [ln.split("#")[0].strip() for ln in code.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("import ", "from "))]
    return max(1, sum(bool(_ARITHMETIC.search(ln)) for ln in lines))


def evidence_f1(used_text: str, question: str, clean_question: str, reference: str) -> float | None:
    """Evidence-F1 over the question's quantities [ours, for GSM8K, whose evidence is numbers]: the gold
    evidence is the clean question's numbers the reference solution uses (all of them without a
    reference); the evidence used is the numbers of the question as given that the run's own text
    and code contain. None when the question has no number."""
    gold = set(numbers_in(clean_question))
    if reference:
        gold &= set(numbers_in(reference)) or gold
    if not gold:
        return None
    given = set(numbers_in(question))
    used = given & set(numbers_in(used_text))
    hits = len(used & gold)
    if not used or not hits:
        return 0.0
    precision, recall = hits / len(used), hits / len(gold)
    return 2 * precision * recall / (precision + recall)


def used_text(pieces: Sequence[RunPiece]) -> str:
    """What the model wrote in a run (its turns and code), where the evidence it used shows."""
    return "\n".join(p.text for p in pieces if p.kind in ("turn", "code"))


def mean_evidence_f1(
    runs: dict[Key, dict[str, Any]], load: Callable[[dict[str, Any]], Sequence[RunPiece] | None]
) -> dict[str, Any]:
    """A condition's mean Evidence-F1 over its runs (Table 2 reports it beside accuracy), and how many
    runs it is over (those with a trajectory and a question with numbers)."""
    values = []
    for r in runs.values():
        pieces = load(r)
        question = str(r.get("question") or "")
        f1 = (
            None
            if pieces is None
            else evidence_f1(
                used_text(pieces), question, str(r.get("clean_question") or question), str(r.get("reference") or "")
            )
        )
        if f1 is not None:
            values.append(f1)
    return {"mean": rounded(sum(values) / len(values)) if values else None, "runs": len(values)}


def holds_gold(text: str, gold: str) -> bool:
    """Whether a tool output shows the gold answer (one of its numbers equals it)."""
    try:
        target = float(gold.replace(",", ""))
    except ValueError:
        return gold.strip() != "" and gold.strip() in text
    return any(
        math.isclose(float(n), target, rel_tol=1e-9, abs_tol=1e-9) for n in numbers_in(text) if n.count(".") <= 1
    )


def symptoms(
    pieces: Sequence[RunPiece],
    *,
    gold: str,
    question: str,
    clean_question: str = "",
    reference: str = "",
    judged: Judged = NOT_JUDGED,
) -> dict[str, Any]:
    """The A-F symptoms of one failed tool trajectory (section 2.4) and the dominant one. B, D, E are read
    off the trajectory exactly; C from Evidence-F1 (``evidence_f1``), A from the gold steps
    (``gold_steps``) against the successful cells' computations; F by elimination: a wrong answer with
    working tools, adequate evidence and enough computation, i.e. a coherent but wrong plan [ours]."""
    code_of: list[str] = []
    outputs: list[tuple[str, str, bool]] = []  # (code, output, error)
    for p in pieces:
        if p.kind == "code" and p.executed:
            code_of.append(p.text)
        elif p.kind == "output":
            outputs.append((code_of[-1] if code_of else "", p.text, p.error))
    good = [(c, o) for c, o, err in outputs if not err and o.strip()]
    f1 = evidence_f1(used_text(pieces), question, clean_question or question, reference)
    steps = gold_steps(reference, judged)
    flags = {
        "B": any(err for _, _, err in outputs),
        "E": not good,
        "D": bool(good) and holds_gold(good[-1][1], gold),
        "C": f1 is not None and f1 < EVIDENCE_F1_DRIFT,
        "A": steps is not None and sum(tool_steps(c) for c, _ in good) < steps,
    }
    flags["F"] = not any(flags.values())
    dominant = next(t for t in DOMINANCE if flags[t])
    return {"flags": flags, "dominant": dominant, "evidence_f1": rounded(f1), "gold_steps": steps}


def run_symptoms(record: dict[str, Any], pieces: Sequence[RunPiece], judged: Judged) -> dict[str, Any]:
    """``symptoms`` of one run's record: its gold, question (and the clean one) and reference."""
    return symptoms(
        pieces,
        gold=str(record.get("gold", "")),
        question=str(record.get("question") or ""),
        clean_question=str(record.get("clean_question") or ""),
        reference=str(record.get("reference") or ""),
        judged=judged,
    )


def load_pieces(record: dict[str, Any]) -> tuple[RunPiece, ...] | None:
    events = run_events(record)
    return None if events is None else run_pieces(events)


def taxonomy(
    runs: dict[Key, dict[str, Any]],
    load: Callable[[dict[str, Any]], Sequence[RunPiece] | None] = load_pieces,
    judged: Judged = NOT_JUDGED,
    judge_plans: bool = False,
) -> dict[str, Any]:
    """The A-F symptoms of a tool condition's failed runs: each type's share (a run may show several),
    the dominant type's counts and each run's dominant type; with ``judge_plans``, what the judge
    said of the Type F runs' plans. Each record gives the question the run was given, a variant's
    clean question and the reference solution."""
    per_run: dict[Key, str] = {}
    flags = {t: 0 for t in TAXONOMY}
    f1s: list[float] = []
    missing = 0
    plans = {"coherent_wrong": 0, "not": 0, "unparseable": 0, "not_judged": 0}
    for key, r in sorted(runs.items()):
        if right(r):
            continue
        pieces = load(r)
        if pieces is None:
            missing += 1
            continue
        s = run_symptoms(r, pieces, judged)
        per_run[key] = s["dominant"]
        if judge_plans and s["dominant"] == "F":
            value = judged.plan(plan_inputs(r, pieces))
            plans[{True: "coherent_wrong", False: "not", None: "not_judged"}.get(value, "unparseable")] += 1
        for t, on in s["flags"].items():
            flags[t] += on
        if s["evidence_f1"] is not None:
            f1s.append(s["evidence_f1"])
    n = len(per_run)
    return {
        "failed": n,
        "no_trajectory": missing,
        "any": {t: share(k, n) for t, k in flags.items()},
        "dominant": {t: share(sum(v == t for v in per_run.values()), n) for t in TAXONOMY},
        "evidence_f1": rounded(sum(f1s) / len(f1s)) if f1s else None,
        "f_plans": plans if judge_plans else None,
        "runs": {"|".join(map(str, k)): v for k, v in per_run.items()},
    }


def crosstab(types: dict[str, str], classes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Table 5: for each dominant A-F type of the wrong Agent-Full runs, the row shares of their
    attribution sources."""
    out = {}
    for t in TAXONOMY:
        keys = [k for k, v in types.items() if v == t and k in classes]
        out[t] = {
            "n": len(keys),
            **{c: share(sum(classes[k] == c for k in keys), len(keys)) for c in ("genuine", "sty", "frc", "cmp")},
        }
    return out


# -- the whole section -----------------------------------------------------------------------------


def condition_settings(names: list[str], conditions: dict[str, str | None]) -> dict[str, str]:
    """Each condition's setting: the one named after it, else the first whose condition it is."""
    out = {}
    for c in CONDITION_LABELS:
        named = [n for n in names if n == c]
        found = named[0] if named else next((n for n in names if conditions.get(n) == c), None)
        if found is not None:
            out[c] = found
    return out


def chain_tool(which: dict[str, str], tools: Mapping[str, str]) -> str:
    """The tool the conditions with the tool prompt offered (Agent-Full, NoTool-FCStyle and
    Agent-NoopTool among them): "python", "calculator", or "mixed" when they differ."""
    offered = {tools.get(s, "python") for c, s in which.items() if c != "cot"}
    return offered.pop() if len(offered) == 1 else "mixed"


def gstep_settings(names: list[str], guards: dict[str, list[str]]) -> list[str]:
    """The settings with G-STEP on (its guard, or all), whose gap closure Table 7 reports."""
    return [n for n in names if {"gstep", "all"} & set(guards.get(n) or [])]


def reported(
    records: list[dict[str, Any]], names: list[str], conditions: dict[str, str | None], guards: dict[str, list[str]]
) -> bool:
    """Whether a report has the tool-use-tax section: for the degradation chain whole, for distractor
    variants, or for a G-STEP setting's gap closure [ours]. An eval with Agent-Full and NoTool-CoT
    alone (the TIM protocol, the cue probe) would show their gap, which its accuracy table already
    does, among tables of conditions not run."""
    which = set(condition_settings(names, conditions))
    if set(CHAIN) <= which:
        return True
    return {"full", "cot"} <= which and (scopes(records)[0] == "distractors" or bool(gstep_settings(names, guards)))


def tooltax(
    records: list[dict[str, Any]],
    names: list[str],
    conditions: dict[str, str | None],
    guards: dict[str, list[str]] | None = None,
    load: Callable[[dict[str, Any]], Sequence[RunPiece] | None] = load_pieces,
    judged: Judged = NOT_JUDGED,
    tools: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """The tool-use-tax section of one dataset (its records), or None without Agent-Full and NoTool-CoT;
    ``judged``: the judge's answers for the taxonomy (eval.judging.taxonomy_judged); ``tools``: each
    setting's ``tool`` run key (absent: "python")."""
    which = condition_settings(names, conditions)
    if "full" not in which or "cot" not in which:
        return None
    load = memo(load)
    gsteps = gstep_settings(names, guards or {})
    kind, chosen = scopes(records)
    out: dict[str, Any] = {
        "scope": kind,
        "tool": chain_tool(which, tools or {}),
        "settings": {CONDITION_LABELS[c]: s for c, s in which.items()},
        "missing": [CONDITION_LABELS[c] for c in CONDITION_LABELS if c not in which],
        "scopes": {},
    }
    for scope, keep in chosen.items():
        mine = [r for r in records if keep(r)]
        runs = {c: by_key(r for r in mine if r["setting"] == s) for c, s in which.items()}
        runs = {c: v for c, v in runs.items() if v}
        section: dict[str, Any] = {
            "accuracy": {CONDITION_LABELS[c]: accuracy(v) for c, v in runs.items()},
            "deltas": decomposition(runs),
            "attribution": attribution(runs),
            "overlap": overlap(runs),
            "gstep": {},
        }
        for g in gsteps:
            grecs = by_key(r for r in mine if r["setting"] == g)
            if grecs and "full" in runs and "cot" in runs:
                section["gstep"][g] = gap_closure(grecs, runs["full"], runs["cot"])
                # the gate was off in every run (a calibration that found no tau to help): say so beside its Cls.
                section["gstep"][g]["gate_off"] = all(r.get("gate_continues") == GATE_OFF for r in grecs.values())
        closures = [v["cls"] for v in section["gstep"].values() if v["cls"] is not None]
        section["best_cls"] = max(closures) if closures else None
        if scope in ("pooled", "clean"):  # what reads trajectories: once, on the main scope
            section["evidence_f1"] = {CONDITION_LABELS[c]: mean_evidence_f1(v, load) for c, v in runs.items()}
            section["taxonomy"] = {
                CONDITION_LABELS[c]: taxonomy(runs[c], load, judged, judge_plans=c == "full")
                for c in TOOL_CONDITIONS
                if c in runs
            }
            full_tax = section["taxonomy"].get(CONDITION_LABELS["full"])
            if full_tax and section["attribution"]:
                section["crosstab"] = crosstab(full_tax["runs"], section["attribution"]["classes"])
        out["scopes"][scope] = section
    return out


def memo(
    load: Callable[[dict[str, Any]], Sequence[RunPiece] | None],
) -> Callable[[dict[str, Any]], Sequence[RunPiece] | None]:
    """``load`` reading each run's trajectory once."""
    seen: dict[str, Sequence[RunPiece] | None] = {}

    def cached(record: dict[str, Any]) -> Sequence[RunPiece] | None:
        key = str(record.get("key") or record.get("trajectory") or id(record))
        if key not in seen:
            seen[key] = load(record)
        return seen[key]

    return cached
