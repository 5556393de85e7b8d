"""``tuiagent calibrate MODEL``: collect (resumable), fit every model-specific guard parameter on
training questions, report them on held-out ones, and write the model's calibration file.

The collection is ``calibrate_collect`` (records v2; ``--n 0`` fits what is there), the fits are
``calibrate_fit`` (ATTC and necessity thresholds by AUROC with bootstrap intervals, the G-STEP gate
and its tau by the measured effect of a continue, a learning curve, the model's ``recommended``).
G-STEP's ``tau`` is chosen on the validation half of the held-out questions and reported on the
test half, which takes part in no choice (docs/calibration.md).
Output: ``<out-dir>/<model>.toml`` (values tagged [calibration]), ``<model>.md`` (the report) and,
when the gate is used, ``<model>-gstep.npz``; name the TOML from models.toml as ``calibration``.
The command, each fit's rule and what it found for the default model: docs/calibration.md.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from guards.gstep.training import load_records
from tuiagent.training.calibrate_collect import HELDOUT_EVERY, RECORD_VERSION, collect, is_heldout
from tuiagent.training.calibrate_fit import (
    RARE,
    TOKEN_COST,
    Separation,
    TauChoice,
    auroc,
    balanced_accuracy,
    bootstrap_auroc,
    choose_tau,
    fit_separation,
    net_effect,
)

FLAG_ONLY = ("necessity", "tim")  # guards that annotate only: a run generates what `none` generates
GSTEP_MARGIN = 3  # [ours] fixed - broken on the validation questions for G-STEP to count as helping (tau
# is chosen on those same questions, so a smaller margin is within noise)
CURVE_REPEATS = 5  # [ours] random training subsets per learning-curve point
MIN_GATE_SAMPLES = 20  # [ours] early stopping holds out 10%, which needs a few samples of each label


@dataclass
class Split:
    train: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    reused: int = 0  # v1 records among train


def split_records(v2: Sequence[dict[str, Any]], v1: Sequence[dict[str, Any]] = ()) -> Split:
    """Held-out: the v2 records of held-out question ids; train: the other v2 records plus the v1
    records of questions not collected as v2 (they serve the gate only)."""
    seen = {r["qid"] for r in v2}
    extra = [r for r in v1 if r["qid"] not in seen]
    return Split(
        train=[r for r in v2 if not is_heldout(r["qid"])] + extra,
        heldout=[r for r in v2 if is_heldout(r["qid"])],
        reused=len(extra),
    )


def _blocks(records: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    return [
        (r["qid"], r, b)
        for r in records
        if r.get("v") == RECORD_VERSION
        for b in r["tool"].get("blocks", [])
        if b.get("executed")
    ]


def attc_data(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, run right, question id) per executed block with a confidence."""
    rows = [
        (b["attc"]["confidence"], bool(r["tool"]["correct"]), q)
        for q, r, b in _blocks(records)
        if b["attc"].get("confidence") is not None
    ]
    return (
        np.array([x[0] for x in rows], dtype=float),
        np.array([x[1] for x in rows], dtype=bool),
        np.array([x[2] for x in rows], dtype=int),
    )


def necessity_data(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P(unnecessary) from the model judge, the tool was needed = the CoT run is wrong, question id)
    per executed block the model judge answered (not a rule fallback)."""
    rows = [
        (b["necessity"]["model"]["p_unnecessary"], not r["cot"]["correct"], q)
        for q, r, b in _blocks(records)
        if b["necessity"].get("model", {}).get("judge") == "model"
    ]
    return (
        np.array([x[0] for x in rows], dtype=float),
        np.array([x[1] for x in rows], dtype=bool),
        np.array([x[2] for x in rows], dtype=int),
    )


@dataclass
class HeldoutSeparation:
    n: int
    groups: int
    auroc: float
    interval: tuple[float, float]
    action_rate: float
    action_rate_pos: float  # among the blocks where acting is wrong
    action_rate_neg: float
    balanced_accuracy: float


def heldout_separation(
    fit: Separation, scores: np.ndarray, positive: np.ndarray, groups: np.ndarray
) -> HeldoutSeparation:
    oriented = scores if fit.act == "below" else -scores
    acts = fit.acts(scores)
    return HeldoutSeparation(
        n=len(scores),
        groups=len(set(groups.tolist())),
        auroc=auroc(oriented, positive),
        interval=bootstrap_auroc(oriented, positive, groups) if len(scores) else (float("nan"),) * 2,
        action_rate=float(acts.mean()) if len(acts) else float("nan"),
        action_rate_pos=float(acts[positive].mean()) if positive.any() else float("nan"),
        action_rate_neg=float(acts[~positive].mean()) if (~positive).any() else float("nan"),
        balanced_accuracy=balanced_accuracy(acts, positive),
    )


def tau_part(qid: int) -> str:
    """Which half of the held-out questions a question id is in [ours]: "validation" (tau is chosen
    there) for every other held-out id (id / HELDOUT_EVERY odd), else "test" (only reported)."""
    return "validation" if (qid // HELDOUT_EVERY) % 2 else "test"


@dataclass
class GateResult:
    trained: bool
    why: str = ""
    train_samples: int = 0
    budget: int = 0  # the tool budget of the training runs: the gate's budget frame
    validation_samples: int = 0
    test_samples: int = 0
    test_auroc: float = float("nan")
    accuracy_05: float = float("nan")  # on the test samples
    majority: float = float("nan")
    choice: TauChoice | None = None  # on the validation questions
    validation: dict[str, dict[str, float]] = field(default_factory=dict)  # "always", "paper" (0.05), "chosen"
    test: dict[str, dict[str, float]] = field(default_factory=dict)  # the same taus on the test questions
    gate: tuple[Any, Any] | None = None  # (scaler, mlp) when trained


PAPER_TAU = 0.05  # [paper] G-STEP's tau, shown beside the chosen one


def gate_data(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
    from guards.gstep.features import N_FEATURES
    from guards.gstep.training import samples

    if not any(r["tool"].get("reason") == "answer" for r in records):  # no state at which the gate is asked
        return np.zeros((0, N_FEATURES)), np.zeros(0, dtype=np.int64), np.zeros(0), []
    x, y, w, _, info = samples(records)
    return x, y, w, info


def fit_gstep(
    train: Sequence[dict[str, Any]], heldout: Sequence[dict[str, Any]], *, token_cost: float = TOKEN_COST, seed: int = 0
) -> GateResult:
    """The gate on the training questions, tau on the validation held-out questions (by the measured
    continues), both reported on the test held-out questions."""
    from guards.gstep.guard import Gate
    from guards.gstep.training import fit_gate, train_budget

    budget = train_budget(train)
    x, y, w, _ = gate_data(train)
    if len(y) < MIN_GATE_SAMPLES or min(int(y.sum()), int((y == 0).sum())) < 2:
        return GateResult(False, f"too few training samples ({len(y)}, continue {int(y.sum())})", train_samples=len(y))
    measured = [r for r in heldout if "continue" in r]
    hx, hy, _, hinfo = gate_data(measured)
    part = np.array([tau_part(int(i["qid"])) for i in hinfo])
    val, test = part == "validation", part == "test"
    if not val.any() or not test.any():
        return GateResult(
            False,
            f"no held-out question with a measured continue in {'validation' if not val.any() else 'test'}",
            train_samples=len(y),
        )
    scaler, mlp = fit_gate(x, y, w, seed=seed)
    p = Gate.from_sklearn(scaler, mlp).p_continue(hx)
    by_qid = {r["qid"]: r for r in measured}
    rows = [by_qid[i["qid"]] for i in hinfo]
    delta = np.array([int(bool(r["continue"]["correct"])) - int(bool(r["tool"]["correct"])) for r in rows])
    extra = np.array([max(0, r["continue"]["generated_tokens"] - r["tool"]["generated_tokens"]) for r in rows])
    choice = choose_tau(p[val], delta[val], extra[val], token_cost=token_cost)

    def at(mask: np.ndarray) -> dict[str, dict[str, float]]:
        taus = {"always": 0.0, "paper": PAPER_TAU, **({"chosen": choice.tau} if choice.tau is not None else {})}
        return {k: net_effect(p[mask], delta[mask], extra[mask], t, token_cost) for k, t in taus.items()}

    return GateResult(
        True,
        train_samples=len(y),
        budget=budget,
        validation_samples=int(val.sum()),
        test_samples=int(test.sum()),
        test_auroc=auroc(p[test], hy[test].astype(bool)),
        accuracy_05=float(((p[test] >= 0.5).astype(int) == hy[test]).mean()),
        majority=float(max(hy[test].mean(), 1 - hy[test].mean())),
        choice=choice,
        validation=at(val),
        test=at(test),
        gate=(scaler, mlp),
    )


def _sizes(n: int) -> list[int]:
    return sorted({k for k in (10, 20, 40, 80, 160, 320) if k < 0.9 * n} | {n}) if n else []


def learning_curve(split: Split, *, seed: int = 0) -> list[dict[str, Any]]:
    """Held-out metrics against the number of training questions, the mean over random subsets:
    ATTC and necessity over the questions collected here (``pool`` "collected": only they have
    per-block data), the gate over every training question (``pool`` "all")."""
    import warnings

    from guards.gstep.guard import Gate
    from guards.gstep.training import fit_gate

    h_conf, h_right, _ = attc_data(split.heldout)
    h_p, h_need, _ = necessity_data(split.heldout)
    hx, hy, _, _ = gate_data(split.heldout)
    rng = np.random.default_rng(seed)

    def blocks(sub: list[dict[str, Any]]) -> dict[str, float]:
        out = {}
        conf, right, g = attc_data(sub)
        if len(conf) and right.any() and (~right).any():
            acts = fit_separation(conf, right, g, act="below", default=_default("attc")).acts(h_conf)
            out["attc_bacc"], out["attc_rethink"] = balanced_accuracy(acts, h_right), float(np.mean(acts))
        p, need, ng = necessity_data(sub)
        if len(p) and need.any() and (~need).any():
            acts = fit_separation(p, need, ng, act="above", default=_default("necessity")).acts(h_p)
            out["nec_bacc"] = balanced_accuracy(acts, h_need)
        return out

    def gate(sub: list[dict[str, Any]]) -> dict[str, float]:
        x, y, w, _ = gate_data(sub)
        if len(y) < MIN_GATE_SAMPLES or min(int(y.sum()), int((y == 0).sum())) < 2 or not len(hy):
            return {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                scaler, mlp = fit_gate(x, y, w, seed=seed)
            except ValueError:  # early stopping's validation split drew one label only
                return {}
        return {"gate_auroc": auroc(Gate.from_sklearn(scaler, mlp).p_continue(hx), hy.astype(bool))}

    rows: list[dict[str, Any]] = []
    collected = [r for r in split.train if r.get("v") == RECORD_VERSION]
    for pool, records, measure in (("collected", collected, blocks), ("all", list(split.train), gate)):
        for n in _sizes(len(records)):
            runs = [
                measure([records[i] for i in rng.choice(len(records), n, replace=False)])
                for _ in range(CURVE_REPEATS if n < len(records) else 1)
            ]
            row: dict[str, Any] = {"pool": pool, "train_questions": n}
            for key in sorted({k for r in runs for k in r}):
                finite = [r[key] for r in runs if key in r and not np.isnan(r[key])]
                row[key] = float(np.mean(finite)) if finite else float("nan")
            rows.append(row)
    return rows


# -- the whole calibration -----------------------------------------------------------------------


@dataclass
class Result:
    model: str
    split: Split
    attc: Separation | None
    attc_heldout: HeldoutSeparation | None
    necessity: Separation | None
    necessity_heldout: HeldoutSeparation | None
    gstep: GateResult
    curve: list[dict[str, Any]]
    recommended: list[str]
    reasons: dict[str, str]


def _default(guard: str) -> float:
    """The guard's uncalibrated threshold (its Settings default)."""
    from guards.chain import guard_class

    return float(guard_class(guard).Settings().threshold)


def fit_all(
    v2: Sequence[dict[str, Any]], v1: Sequence[dict[str, Any]] = (), *, model: str, seed: int = 0, curve: bool = True
) -> Result:
    split = split_records(v2, v1)
    conf, right, g = attc_data(split.train)
    attc = (
        fit_separation(conf, right, g, act="below", default=_default("attc"), seed=seed)
        if right.any() and (~right).any()
        else None
    )
    attc_h = heldout_separation(attc, *attc_data(split.heldout)) if attc else None
    p, need, ng = necessity_data(split.train)
    nec = (
        fit_separation(p, need, ng, act="above", default=_default("necessity"), seed=seed)
        if need.any() and (~need).any()
        else None
    )
    nec_h = heldout_separation(nec, *necessity_data(split.heldout)) if nec else None
    gate = fit_gstep(split.train, split.heldout, seed=seed)
    recommended, reasons = (
        list(FLAG_ONLY),
        {
            "necessity": "flag mode only annotates: a run generates exactly what `none` generates",
            "tim": "the monitor only flags at the end: a run generates exactly what `none` generates",
            "attc": "not measured in a run here: it appends a sentence after every executed call, so it changes "
            "every run with a tool call; off until an eval shows it does not lower accuracy",
            "prunetir": "not fitted here (it never acted on the default model under the default budget)",
        },
    )
    c = gate.choice
    if c is not None and c.tau is not None:
        row, tested = gate.validation["chosen"], gate.test["chosen"]
        on_test = f"; on the {gate.test_samples} test questions it fixed {tested['fixed']} and broke {tested['broken']}"
        if row["fixed"] - row["broken"] >= GSTEP_MARGIN:
            recommended.insert(0, "gstep")
            reasons["gstep"] = (
                f"at tau {c.tau:.3g} continues fixed {row['fixed']} and broke {row['broken']} "
                f"validation questions{on_test}"
            )
        else:
            reasons["gstep"] = (
                f"its best tau gains {row['fixed'] - row['broken']} validation question(s), under "
                f"the margin of {GSTEP_MARGIN} that tau chosen on the same questions needs{on_test}"
            )
    else:
        reasons["gstep"] = "no tau helps on the validation questions: never continue" if gate.trained else gate.why
    return Result(
        model,
        split,
        attc,
        attc_h,
        nec,
        nec_h,
        gate,
        learning_curve(split, seed=seed) if curve else [],
        recommended,
        reasons,
    )


def _f(v: float, digits: int = 3) -> str:
    return "n/a" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{digits}f}"


def render_toml(res: Result, meta: dict[str, Any], gate_file: str | None) -> str:
    a, n, g = res.attc, res.necessity, res.gstep
    description = (
        f"what solve and the app start with on {res.model}: the guards its calibration "
        f"({meta['date']}) shows do not lower held-out accuracy"
    )
    lines = [
        f"# Calibration of {res.model} for tuiagent's guards, written by `tuiagent calibrate`; the report is",
        f"# {meta['report']}. Every value here is [calibration]: fitted on the training questions below and",
        "# reported on held-out ones. These are the model's guard defaults: its own [models.<id>.guards.<guard>]",
        "# tables in models.toml and what you set for a run (--set, presets, the app) win over them.",
        "",
        "[calibration]",
        *(f"{k} = {json.dumps(v)}" for k, v in meta.items()),
        "",
    ]
    if a is not None:
        how = (
            f"Youden's J, blocks of right vs wrong runs separate (AUROC {_f(a.auroc)}, 95% interval "
            f"{_f(a.interval[0])}-{_f(a.interval[1])})"
            if a.separated
            else f"no separation (AUROC {_f(a.auroc)}, 95% interval {_f(a.interval[0])}-{_f(a.interval[1])}): "
            f"rethink on {a.action_rate:.0%} of training blocks"
        )
        lines += ["[guards.attc]", f"threshold = {a.threshold:.4f}  # [calibration] {how}", ""]
    if n is not None:
        how = (
            f"Youden's J (AUROC {_f(n.auroc)}, 95% interval {_f(n.interval[0])}-{_f(n.interval[1])})"
            if n.separated
            else f"no separation (AUROC {_f(n.auroc)}, 95% interval {_f(n.interval[0])}-{_f(n.interval[1])}): "
            f"enforce would skip {n.action_rate:.0%} of training blocks"
        )
        lines += ["[guards.necessity]", f"threshold = {n.threshold:.4f}  # [calibration] model judge: {how}", ""]
    if g.trained and g.choice is not None:
        lines.append("[guards.gstep]")
        if g.choice.tau is None or gate_file is None:
            lines.append(
                'weights = "off"  # [calibration] no tau had a positive net effect on the validation '
                "questions: never continue"
            )
        else:
            lines += [
                f'weights = "{gate_file}"  # [calibration] the gate fitted on the training questions',
                f"tau = {g.choice.tau:.4f}  # [calibration] best net effect of a continue on the validation "
                "questions (reported on the test questions in the report)",
            ]
        lines.append("")
    lines += [
        "[presets.recommended]",
        f"description = {json.dumps(description)}",
        f"guards = {json.dumps(res.recommended)}",
        "",
    ]
    return "\n".join(lines)


def machine_seconds(record: dict[str, Any]) -> float:
    """The machine time a question took: its wall time, shared with the questions beside it when
    ``concurrency`` were in flight."""
    return float(record["wall_s"]) / max(1, int(record.get("concurrency", 1)))


def minutes_per_100(records: Sequence[dict[str, Any]]) -> float:
    """Collection minutes per 100 questions, from the records' wall times."""
    walls = [machine_seconds(r) for r in records if "wall_s" in r]
    return float(np.mean(walls)) * 100 / 60 if walls else float("nan")


def render_report(res: Result, meta: dict[str, Any], command: str) -> str:
    s, a, ah, n, nh, g = res.split, res.attc, res.attc_heldout, res.necessity, res.necessity_heldout, res.gstep
    v2_train = [r for r in s.train if r.get("v") == RECORD_VERSION]

    def acc(rs: Sequence[dict[str, Any]], part: str) -> str:
        return f"{sum(bool(r[part]['correct']) for r in rs)}/{len(rs)}" if rs else "0/0"

    def cost(rs: Sequence[dict[str, Any]]) -> str:
        return _f(float(np.mean([machine_seconds(r) if "wall_s" in r else np.nan for r in rs])), 0) if rs else "n/a"

    lines = [
        f"# Calibration of {res.model}",
        "",
        f"{meta['date']}, {platform.machine()} ({platform.processor() or 'cpu'}), `{command}`.",
        "",
        "## Data",
        "",
        f"- {meta['data']}, question ids {meta['questions']}; greedy, guards off, default budgets; per question a "
        "tool-mode run and a chain-of-thought run; held-out questions (every fifth id) also a run with G-STEP "
        "continuing at every answer attempt (as G-STEP continued when that run was collected).",
        f"- training: {len(s.train)} questions ({len(v2_train)} collected here, {s.reused} reused v1 records that "
        f"serve the G-STEP gate only); held-out: {len(s.heldout)} questions, never fitted on "
        f"({sum(tau_part(r['qid']) == 'validation' for r in s.heldout)} validation, where G-STEP's tau is chosen; "
        f"{sum(tau_part(r['qid']) == 'test' for r in s.heldout)} test, in no choice).",
        f"- tool mode right: train {acc(v2_train, 'tool')}, held-out {acc(s.heldout, 'tool')}; CoT right: train "
        f"{acc(v2_train, 'cot')}, held-out {acc(s.heldout, 'cot')}.",
        f"- collection cost on this machine: {cost(v2_train)} s per training question (CoT + tool runs, judge), "
        f"{cost(s.heldout)} s per held-out one (also the continue run); "
        f"{_f(minutes_per_100([*v2_train, *s.heldout]), 0)} minutes per 100 questions at this mix.",
        "",
        "## ATTC threshold",
        "",
    ]
    if a is None or ah is None:
        lines += ["Not fitted: the training blocks lack a right or a wrong run.", ""]
    else:
        why_not = (
            "the training interval lies below 0.5: blocks of wrong runs are the more confident, the reverse "
            "of ATTC's premise"
            if a.interval[1] < 0.5
            else "the training interval includes 0.5, or too few questions"
        )
        lines += [
            f"Executed code blocks with a confidence: {a.n} in training ({a.n_positive} in right runs, "
            f"{a.groups} questions), {ah.n} held out ({ah.groups} questions).",
            "",
            "| | AUROC (right runs score higher) | 95% bootstrap interval (questions) |",
            "|---|---|---|",
            f"| training | {_f(a.auroc)} | {_f(a.interval[0])} - {_f(a.interval[1])} |",
            f"| held-out | {_f(ah.auroc)} | {_f(ah.interval[0])} - {_f(ah.interval[1])} |",
            "",
            (
                f"Separated on training blocks: threshold {a.threshold:.4f} by Youden's J."
                if a.separated
                else f"**No separation** ({why_not}): "
                f"threshold {a.threshold:.4f}, the {RARE:.0%} quantile of training confidences (at most the reference "
                f"{_default('attc'):g}), so ATTC rarely says rethink."
            ),
            f"On held-out blocks at this threshold: rethink on {_f(ah.action_rate * 100, 0)}% of blocks "
            f"({_f(ah.action_rate_pos * 100, 0)}% in right runs, {_f(ah.action_rate_neg * 100, 0)}% in wrong runs); "
            f"balanced accuracy {_f(ah.balanced_accuracy)}. ATTC still appends its trust sentence after every other "
            "executed call.",
            "",
        ]
    lines += ["## Necessity, model judge threshold", ""]
    if n is None or nh is None:
        lines += [
            "Not fitted: no model-judge verdicts on blocks of both kinds (tool needed: CoT wrong; not needed: "
            "CoT right).",
            "",
        ]
    else:
        lines += [
            "A block counts as needed when the model's own chain-of-thought run got the question wrong, as not "
            f"needed when it got it right. Blocks with a model verdict: {n.n} in training ({n.n_positive} needed), "
            f"{nh.n} held out.",
            "",
            "| | AUROC (needed blocks get lower P(unnecessary)) | 95% bootstrap interval |",
            "|---|---|---|",
            f"| training | {_f(n.auroc)} | {_f(n.interval[0])} - {_f(n.interval[1])} |",
            f"| held-out | {_f(nh.auroc)} | {_f(nh.interval[0])} - {_f(nh.interval[1])} |",
            "",
            (
                f"Separated: threshold {n.threshold:.4f} by Youden's J."
                if n.separated
                else f"**No separation**: threshold {n.threshold:.4f}, so enforce mode would rarely skip."
            ),
            f"Held out at this threshold, enforce would skip {_f(nh.action_rate * 100, 0)}% of blocks "
            f"({_f(nh.action_rate_pos * 100, 0)}% of needed ones, {_f(nh.action_rate_neg * 100, 0)}% of the others).",
            "",
        ]
    lines += ["## G-STEP gate and tau", ""]
    if not g.trained or g.choice is None:
        lines += [f"Not fitted: {g.why}. The calibration leaves G-STEP's settings alone.", ""]
    else:
        c = g.choice
        lines += [
            f"Gate trained on {g.train_samples} training samples (tool runs that ended at an answer), labels "
            f"[ours: a reconstruction of Appendix I's Table 11, not in the paper's text]. The held-out questions with a measured continue are split in two [ours]: "
            f"**validation** ({g.validation_samples} samples; every other held-out id, id/{HELDOUT_EVERY} odd), where "
            f"tau and the preset are chosen, and **test** ({g.test_samples} samples; id/{HELDOUT_EVERY} even), which "
            f"takes part in no choice and is only reported. On the test samples: AUROC {_f(g.test_auroc)}, accuracy "
            f"at p >= 0.5 {_f(g.accuracy_05)} (majority class {_f(g.majority)}).",
            "",
            f"Net effect of a continue, measured (token cost {TOKEN_COST:g} per token):",
            "",
            "| questions | tau | continues | wrong->right | right->wrong | extra tokens | net |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, table in (("validation", g.validation), ("test", g.test)):
            for key, r in table.items():
                label = {"always": "0 (always)", "paper": f"{PAPER_TAU:g} (paper)"}.get(key, f"{r['tau']:.4g} (chosen)")
                lines.append(
                    f"| {name} | {label} | {r['continues']} | {r['fixed']} | {r['broken']} | "
                    f"{r['tokens']:.0f} | {r['net']:+.2f} |"
                )
        lines += [
            "",
            (
                f"Chosen tau {c.tau:.4g} (validation net {c.net:+.2f}); its test row is the estimate that "
                "no choice has seen."
                if c.tau is not None
                else "No tau has a positive net effect on the validation questions: **never continue** (weights off)."
            ),
            "",
        ]
    lines += [
        "## Learning curve (held-out metrics against training questions; mean of random subsets)",
        "",
        "ATTC and necessity, over the questions collected here (they alone have per-block data):",
        "",
        "| training questions | ATTC balanced accuracy | ATTC rethink rate | necessity balanced accuracy |",
        "|---|---|---|---|",
    ]
    for r in (r for r in res.curve if r["pool"] == "collected"):
        lines.append(
            f"| {r['train_questions']} | {_f(r.get('attc_bacc', np.nan))} | "
            f"{_f(r.get('attc_rethink', np.nan))} | {_f(r.get('nec_bacc', np.nan))} |"
        )
    lines += [
        "",
        "The G-STEP gate, over every training question (reused v1 records included):",
        "",
        "| training questions | gate AUROC on held-out samples |",
        "|---|---|",
    ]
    for r in (r for r in res.curve if r["pool"] == "all"):
        lines.append(f"| {r['train_questions']} | {_f(r.get('gate_auroc', np.nan))} |")
    lines += [
        "",
        "Balanced accuracy 0.5 and AUROC 0.5 are chance. A curve still rising at the right end says "
        "more collection would pay; a flat one at chance says the signal is not there.",
        "",
        "## Recommended preset",
        "",
        f"guards = {json.dumps(res.recommended)}",
        "",
    ]
    lines += [f"- {guard}: {why}" for guard, why in res.reasons.items()]
    lines.append("")
    return "\n".join(lines)


def write(res: Result, out_dir: Path, meta: dict[str, Any], command: str) -> Path:
    """Write <model>.toml, <model>.md and, when the gate is used, <model>-gstep.npz; returns the TOML."""
    from guards.gstep.training import export_gate

    out_dir.mkdir(parents=True, exist_ok=True)
    gate_file = None
    g = res.gstep
    if g.trained and g.choice is not None and g.choice.tau is not None:
        gate_file = f"{res.model}-gstep.npz"
        assert g.gate is not None, "a trained gate has its (scaler, mlp)"
        scaler, mlp = g.gate
        export_gate(
            scaler,
            mlp,
            out_dir / gate_file,
            {
                "model": res.model,
                "created": meta["date"],
                "train_samples": g.train_samples,
                "tau": g.choice.tau,
                "max_tool_calls": g.budget,
                "text_bins": "reasoning",  # gate_data's samples: the paper's reading (Appendix I.2.2)
            },
        )
    meta = {**meta, "report": f"{res.model}.md"}
    (out_dir / f"{res.model}.md").write_text(render_report(res, meta, command), encoding="utf-8")
    path = out_dir / f"{res.model}.toml"
    path.write_text(render_toml(res, meta, gate_file), encoding="utf-8")
    return path


def question_range(records: Sequence[dict[str, Any]]) -> str:
    ids = sorted(r["qid"] for r in records)
    return f"{ids[0]}-{ids[-1]} ({len(ids)} questions)" if ids else "none"


def calibrate(
    model: str | None,
    data: Path,
    start: int,
    n: int,
    records: Path,
    out_dir: Path,
    *,
    reuse: Path | None = None,
    models_file: Path | None = None,
    threads: int | None = None,
    concurrency: int = 1,
    command: str = "tuiagent calibrate",
    log: Any = print,
) -> Path:
    """Collect (resumable), fit, write; returns the calibration file."""
    from tuiagent.runner import resolve_spec

    spec = resolve_spec(model, models_file)
    if n > 0:
        asyncio.run(
            collect(
                spec.id,
                data,
                start,
                n,
                records,
                reuse=reuse,
                models_file=models_file,
                threads=threads,
                concurrency=concurrency,
                log=log,
            )
        )
    v2 = list(
        {
            r["qid"]: r
            for r in load_records(records)  # one per question, the last written
            if r.get("v") == RECORD_VERSION and r.get("model") == spec.id
        }.values()
    )
    v1 = [r for r in (load_records(reuse) if reuse else []) if r.get("model") == spec.id]
    if not v2:
        raise ValueError(f"no v2 records of {spec.id} in {records}: collect some first (--n)")
    log(f"[calibrate] fitting on {len(v2)} collected + {len(v1)} reused records")
    res = fit_all(v2, v1, model=spec.id)
    meta = {
        "model": spec.id,
        "date": datetime.date.today().isoformat(),
        "data": str(data),
        "questions": question_range(v2),
        "train_questions": len(res.split.train),
        "reused_questions": res.split.reused,
        "heldout_questions": len(res.split.heldout),
        "command": command,
    }
    path = write(res, out_dir, meta, command)
    log(render_report(res, {**meta, "report": ""}, command))
    log(
        f"[calibrate] wrote {path} and its report; name it from models.toml: "
        f'[models."{spec.id}"] calibration = "{path.resolve()}"'
    )
    return path
