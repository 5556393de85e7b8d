"""G-STEP's part of ``tuiagent calibrate`` (``tuiagent.training.calibrators``): the gate fitted on
the training questions (``training``'s samples and hyper-parameters), its ``tau`` chosen on the
validation half of the held-out questions by the measured effect of a continue (each held-out
question gets a run with G-STEP continuing at every answer), both reported on the test half.
docs/calibration.md ("The G-STEP gate and tau")."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from guards.gstep.features import N_FEATURES
from guards.gstep.guard import Gate
from guards.gstep.training import export_gate, fit_gate, samples, train_budget
from tuiagent.core.run_spec import RunSpec
from tuiagent.training.calibrate_fit import auroc
from tuiagent.training.calibrators import HELDOUT_EVERY, Calibrator, Record, Split, fmt, heldout_part

PAPER_TAU = 0.05  # [paper] G-STEP's tau, shown beside the chosen one
TOKEN_COST = 1e-4  # [ours] one right answer is worth 10,000 generated tokens
MARGIN = 3  # [ours] fixed - broken on the validation questions for G-STEP to count as helping (tau
# is chosen on those same questions, so a smaller margin is within noise)
MIN_SAMPLES = 20  # [ours] early stopping holds out 10%, which needs a few samples of each label
# G-STEP sending every answer back: any gate gives p >= 0 (a calibration may have set weights off)
CONTINUE_ALWAYS = {"tau": 0.0, "weights": "auto"}


@dataclass(frozen=True)
class TauChoice:
    """tau by the net effect of a continue on held-out questions; None = never continue."""

    tau: float | None
    net: float  # at the chosen tau (0.0 for never-continue)
    table: list[dict[str, float]]  # per candidate tau: continues, fixed, broken, tokens, net


def net_effect(
    p: np.ndarray, delta: np.ndarray, extra_tokens: np.ndarray, tau: float, token_cost: float = TOKEN_COST
) -> dict[str, float]:
    """Over questions where p >= tau (the gate says continue): +1 per wrong->right, -1 per
    right->wrong (``delta`` = correct after the continue - correct at commit), minus the extra
    tokens times ``token_cost``."""
    go = np.asarray(p) >= tau
    d = np.asarray(delta)[go]
    tokens = float(np.asarray(extra_tokens, dtype=np.float64)[go].sum())
    fixed, broken = int((d > 0).sum()), int((d < 0).sum())
    return {
        "tau": float(tau),
        "continues": int(go.sum()),
        "fixed": fixed,
        "broken": broken,
        "tokens": tokens,
        "net": fixed - broken - token_cost * tokens,
    }


def choose_tau(
    p: ArrayLike,
    delta: ArrayLike,
    extra_tokens: ArrayLike,
    *,
    token_cost: float = TOKEN_COST,
    taus: Sequence[float] | None = None,
) -> TauChoice:
    """The tau with the largest positive net effect (the highest such tau on a tie: fewer
    continues); never-continue (tau None, net 0) when no tau beats doing nothing."""
    p_arr = np.asarray(p, dtype=np.float64)
    candidates = sorted(set(taus if taus is not None else [PAPER_TAU, *np.unique(p_arr).tolist()]))
    table = [net_effect(p_arr, np.asarray(delta), np.asarray(extra_tokens), t, token_cost) for t in candidates]
    best: dict[str, float] | None = None
    for row in table:
        if row["net"] > 0 and (best is None or row["net"] >= best["net"]):
            best = row
    if best is None:
        return TauChoice(None, 0.0, table)
    return TauChoice(float(best["tau"]), float(best["net"]), table)


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


def gate_data(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
    if not any(r["tool"].get("reason") == "answer" for r in records):  # no state at which the gate is asked
        return np.zeros((0, N_FEATURES)), np.zeros(0, dtype=np.int64), np.zeros(0), []
    x, y, w, _, info = samples(records)
    return x, y, w, info


def fit_gstep(
    train: Sequence[Record], heldout: Sequence[Record], *, token_cost: float = TOKEN_COST, seed: int = 0
) -> GateResult:
    """The gate on the training questions, tau on the validation held-out questions (by the measured
    continues), both reported on the test held-out questions."""
    budget = train_budget(train)
    x, y, w, _ = gate_data(train)
    if len(y) < MIN_SAMPLES or min(int(y.sum()), int((y == 0).sum())) < 2:
        return GateResult(False, f"too few training samples ({len(y)}, continue {int(y.sum())})", train_samples=len(y))
    measured = [r for r in heldout if "continue" in r]
    hx, hy, _, hinfo = gate_data(measured)
    part = np.array([heldout_part(int(i["qid"])) for i in hinfo])
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


class GStepCalibration(Calibrator):
    guard = "gstep"
    label = "the G-STEP gate"
    order = 30
    runs = {
        "continue": RunSpec(
            guards=("gstep",),
            guard_settings={"gstep": CONTINUE_ALWAYS},
            run={"mode": "tool"},
            sampling={"temperature": 0.0},
        )
    }
    runs_doc = "a run with G-STEP continuing at every answer attempt (as G-STEP continued when that run was collected)"
    curve_pool = "all"
    curve_columns = (("gate_auroc", "gate AUROC on held-out samples"),)

    def progress(self, record: Record) -> str:
        run = record.get("continue")
        return f"continue {run['answer']!r} ({'right' if run['correct'] else 'wrong'})" if run else ""

    def fit(self, split: Split, *, seed: int) -> GateResult:
        return fit_gstep(split.train, split.heldout, seed=seed)

    def toml(self, fitted: GateResult, out_dir: Path, meta: Mapping[str, Any]) -> list[str]:
        g = fitted
        if not g.trained or g.choice is None:
            return []
        if g.choice.tau is None:
            return [
                "[guards.gstep]",
                'weights = "off"  # [calibration] no tau had a positive net effect on the validation '
                "questions: never continue",
                "",
            ]
        gate_file = f"{meta['model']}-gstep.npz"
        assert g.gate is not None, "a trained gate has its (scaler, mlp)"
        scaler, mlp = g.gate
        export_gate(
            scaler,
            mlp,
            out_dir / gate_file,
            {
                "model": meta["model"],
                "created": meta["date"],
                "train_samples": g.train_samples,
                "tau": g.choice.tau,
                "max_tool_calls": g.budget,
                "text_bins": "reasoning",  # gate_data's samples: the paper's reading (Appendix I.2.2)
            },
        )
        return [
            "[guards.gstep]",
            f'weights = "./{gate_file}"  # [calibration] the gate fitted on the training questions (beside this file)',
            f"tau = {g.choice.tau:.4f}  # [calibration] best net effect of a continue on the validation "
            "questions (reported on the test questions in the report)",
            "",
        ]

    def report(self, fitted: GateResult) -> list[str]:
        g = fitted
        lines = ["## G-STEP gate and tau", ""]
        if not g.trained or g.choice is None:
            return [*lines, f"Not fitted: {g.why}. The calibration leaves G-STEP's settings alone.", ""]
        c = g.choice
        lines += [
            f"Gate trained on {g.train_samples} training samples (tool runs that ended at an answer), labels "
            f"[ours: a reconstruction of Appendix I's Table 11, not in the paper's text]. The held-out questions with a measured continue are split in two [ours]: "
            f"**validation** ({g.validation_samples} samples; every other held-out id, id/{HELDOUT_EVERY} odd), where "
            f"tau and the preset are chosen, and **test** ({g.test_samples} samples; id/{HELDOUT_EVERY} even), which "
            f"takes part in no choice and is only reported. On the test samples: AUROC {fmt(g.test_auroc)}, accuracy "
            f"at p >= 0.5 {fmt(g.accuracy_05)} (majority class {fmt(g.majority)}).",
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
        return [
            *lines,
            "",
            (
                f"Chosen tau {c.tau:.4g} (validation net {c.net:+.2f}); its test row is the estimate that "
                "no choice has seen."
                if c.tau is not None
                else "No tau has a positive net effect on the validation questions: **never continue** (weights off)."
            ),
            "",
        ]

    def recommend(self, fitted: GateResult) -> tuple[bool, str]:
        g, c = fitted, fitted.choice
        if c is None or c.tau is None:
            return False, "no tau helps on the validation questions: never continue" if g.trained else g.why
        row, tested = g.validation["chosen"], g.test["chosen"]
        on_test = f"; on the {g.test_samples} test questions it fixed {tested['fixed']} and broke {tested['broken']}"
        if row["fixed"] - row["broken"] >= MARGIN:
            return True, (
                f"at tau {c.tau:.3g} continues fixed {row['fixed']} and broke {row['broken']} validation questions{on_test}"
            )
        return False, (
            f"its best tau gains {row['fixed'] - row['broken']} validation question(s), under "
            f"the margin of {MARGIN} that tau chosen on the same questions needs{on_test}"
        )

    def curve(self, heldout: Sequence[Record], *, seed: int) -> Callable[[list[Record]], dict[str, float]]:
        hx, hy, _, _ = gate_data(heldout)

        def measure(train: list[Record]) -> dict[str, float]:
            x, y, w, _ = gate_data(train)
            if len(y) < MIN_SAMPLES or min(int(y.sum()), int((y == 0).sum())) < 2 or not len(hy):
                return {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    scaler, mlp = fit_gate(x, y, w, seed=seed)
                except ValueError:  # early stopping's validation split drew one label only
                    return {}
            return {"gate_auroc": auroc(Gate.from_sklearn(scaler, mlp).p_continue(hx), hy.astype(bool))}

        return measure
