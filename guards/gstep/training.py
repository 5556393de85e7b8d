"""G-STEP's training pipeline: collect runs of our own model, train the gate, report.

    python -m guards.gstep.training collect --model MODEL --data FILE --n 200 --records FILE
    python -m guards.gstep.training train --records FILE --out GATE.npz --report GATE.md
    python -m guards.gstep.training report --records FILE

``collect`` runs each question in CoT and tool mode through the real loop (guards off, greedy) and
appends one compact record a line (resumable, Ctrl-C finishes the question); ``train`` computes the
gate's features with the guard's own code (``guards.gstep.features``), labels them as the paper
does, cross-validates by question and exports plain arrays (needs scikit-learn; the guard only
numpy). Details and the shipped gate's numbers: docs/calibration.md ("The G-STEP gate").
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from guards.gstep.features import TEXT_BINS, GateInput, budget_remaining, reasoning_text
from tuiagent.core.batch import run_batch
from tuiagent.core.run_spec import RunSpec
from tuiagent.parsing import tool_block_start
from tuiagent.protocol import FIRST_CALLS, RunSettings
from tuiagent.training.records import load_records, open_records, read_questions, scratch_dir
from tuiagent.training.records import record_from_events as compact_record

RECORD_VERSION = 1

# -- labels -------------------------------------------------------------------------------------
# Appendix I.2.1 labels each sample continue or commit "based on hindsight knowledge derived from the
# gold answer and CoT performance", by the priority rules of its Table 11, whose body is not in the
# paper's text we have ("Priority 2 acts as the primary signal for the CoT-to-Tool gap" is all of it).
# The rules below are our reconstruction from those two sentences [ours]; the weights are I.3's
# "strong (3x), medium (2x), and weak (1x)" [paper], the +1 for a CoT-fixable sample is our reading of
# its "additional boosts applied for targeted error heuristics" [ours].

CONTINUE_LABEL, COMMIT_LABEL = 1, 0
STRONG, MEDIUM, WEAK, COT_FIXABLE_BONUS = 3, 2, 1, 1


def gate_input_from_record(record: dict[str, Any]) -> GateInput:
    """Offline: a collection record's tool run at its final answer attempt (see :func:`record_from_events`).

    Each turn's code block is found with the loop's own ``tool_block_start``; the budget is counted
    in the frame of the record's own tool budget (:func:`train_budget`: one budget for a whole
    training set, the one the gate is then trained at)."""
    tool = record["tool"] if "tool" in record else record
    turns = tool["turns"]
    starts = [(t["text"], tool_block_start(t["text"], t["stop"], "tool")) for t in turns]
    calls = tuple((c[0], c[1], bool(c[2])) for c in tool["calls"] if c[3])
    budget = budget_remaining(record_budget(record), len(calls))
    return GateInput(
        turn_index=len(turns),
        calls=calls,
        reasoning=reasoning_text(starts),
        final_text=tool.get("final_text", turns[-1]["text"] if turns else ""),
        budget=budget,
    )


def record_from_events(
    qid: int, question: str, gold: str, model: str, tool_events: Sequence[Any], cot_events: Sequence[Any]
) -> dict[str, Any]:
    """A v1 record (``tuiagent.training.records.record_from_events``)."""
    return compact_record(qid, question, gold, model, tool_events, cot_events, version=RECORD_VERSION)


def record_budget(record: dict[str, Any]) -> int:
    """The tool budget a record's tool run had (records before the field: the loop's default)."""
    tool = record["tool"] if "tool" in record else record
    return int(tool.get("max_tool_calls", RunSettings().max_tool_calls))


def train_budget(records: Iterable[dict[str, Any]]) -> int:
    """The one tool budget of a set of training records: the gate's budget frame (``budget_remaining``
    counts against it online whatever budget a run has). Records of several budgets cannot share
    one frame and are refused."""
    budgets = sorted({record_budget(r) for r in records})
    if len(budgets) != 1:
        raise ValueError(
            f"the records were collected with tool budgets {budgets}: a gate is trained at one budget, "
            "collect with one max_tool_calls"
        )
    return budgets[0]


def label(record: dict[str, Any]) -> tuple[int, float, str]:
    """(label, sample weight, kind) of a record, rules in priority order [ours: a reconstruction of
    Appendix I.2.1's Table 11, whose body the paper's text lacks; weights from I.3]:
    agent correct -> commit (strong, x3); else CoT correct -> continue (strong, x3, plus 1 because
    it is CoT-fixable: 4); else fewer than 2 executed tool calls -> continue (medium, x2); else
    commit (weak, x1)."""
    tool, cot = record["tool"], record["cot"]
    if tool.get("correct"):
        return COMMIT_LABEL, float(STRONG), "agent_correct"
    if cot.get("correct"):
        return CONTINUE_LABEL, float(STRONG + COT_FIXABLE_BONUS), "cot_fixable"
    if sum(1 for c in tool["calls"] if c[3]) < 2:
        return CONTINUE_LABEL, float(MEDIUM), "under_computed"
    return COMMIT_LABEL, float(WEAK), "both_wrong"


# -- collect -------------------------------------------------------------------------------------


async def collect(
    model: str | None,
    data: Path,
    start: int,
    n: int,
    records: Path,
    *,
    models_file: Path | None = None,
    script: Path | None = None,
    threads: int | None = None,
    first_call: str = "required",
    log: Any = print,
) -> int:
    """Run the questions not yet in ``records``; returns how many records were appended. The tool
    runs begin with a tool call (``first_call``, RunSettings.first_call): Appendix I.1's "the
    interaction is initialized with a required tool-use step" [paper]; "free" lets the model decide."""
    from tuiagent.runner import RunInput, open_model, raise_if_kernel_failed, resolve_spec, run_problem

    spec = resolve_spec(model, models_file)
    with open_records(records, spec.id, "a gate") as store:
        done = set(store.latest)
        todo = [q for q in read_questions(data, start, n) if q[0] not in done]
        log(f"[gstep collect] {len(done)} already in {records}; {len(todo)} to run")
        if not todo:
            return 0
        if threads:
            spec = dataclasses.replace(spec, options={**spec.options, "n_threads": int(threads)})
        backend = open_model(spec, script)
        out = scratch_dir("gstep-collect", spec.id)
        out.mkdir(parents=True, exist_ok=True)
        written = 0

        async def question(item: tuple[int, str, str]) -> None:
            nonlocal written
            qid, text, gold = item
            t0 = time.monotonic()
            parts = {}
            for mode in ("cot", "tool"):
                events: list[Any] = []
                run = {"mode": mode, **({"first_call": first_call} if mode == "tool" else {})}
                greedy = RunSpec(guards=(), run=run, sampling={"temperature": 0.0})
                given = RunInput(text, gold=gold, model=spec.id, models_file=models_file, script=script, out=out)
                finished = await run_problem(greedy, given, events.append, backend=backend, model_spec=spec)
                raise_if_kernel_failed(finished, events)
                parts[mode] = events
            record = record_from_events(qid, text, gold, spec.id, parts["tool"], parts["cot"])
            record["wall_s"] = round(time.monotonic() - t0, 2)
            store.append(record)
            written += 1
            log(
                f"[gstep collect] q{qid}: tool {record['tool']['answer']!r} "
                f"({'right' if record['tool']['correct'] else 'wrong'}, {len(record['tool']['calls'])} calls), "
                f"cot {record['cot']['answer']!r} ({'right' if record['cot']['correct'] else 'wrong'}), "
                f"gold {gold}; {record['wall_s']:.0f} s; {len(done) + written} in file"
            )

        try:
            await run_batch(todo, question, finish_on_interrupt="gstep collect", unit="question", log=log)
        finally:
            await backend.aclose()
    return written


# -- samples, training, report -------------------------------------------------------------------


def samples(
    records: Iterable[dict[str, Any]], text_bins: str = "reasoning"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """(X, y, sample weights, groups = question ids, info) — one sample per question whose tool run
    ended at an answer attempt (the only state at which the gate is ever consulted); the 64 text
    bins over ``text_bins`` (``guards.gstep.features.TEXT_BINS``)."""
    from guards.gstep.features import features

    xs, ys, ws, gs, info = [], [], [], [], []
    for r in records:
        if r["tool"].get("reason") != "answer":
            continue
        y, w, kind = label(r)
        xs.append(features(gate_input_from_record(r), text_bins))
        ys.append(y)
        ws.append(w)
        gs.append(int(r["qid"]))
        info.append({"qid": r["qid"], "kind": kind})
    x = np.asarray(xs, dtype=np.float64).reshape(len(xs), -1)
    return x, np.asarray(ys, dtype=np.int64), np.asarray(ws, dtype=np.float64), np.asarray(gs), info


HYPER = {  # [paper] Appendix I.3 (no G-STEP code is published)
    "hidden_layer_sizes": (128, 64),
    "activation": "relu",
    "solver": "adam",
    "learning_rate_init": 1e-3,
    "alpha": 1e-4,
    "early_stopping": True,
    "validation_fraction": 0.1,
    "n_iter_no_change": 20,
    "max_iter": 1000,  # [default] an upper bound; early stopping ends training well before it
}


def fit_gate(x: np.ndarray, y: np.ndarray, w: np.ndarray, *, seed: int = 0) -> tuple[Any, Any]:
    """Standardise, then an MLP (128, 64) with ReLU, Adam lr 1e-3, L2 1e-4, early stopping on a
    10% validation split with patience 20. scikit-learn 1.9's MLPClassifier.fit takes
    sample_weight, so the label weights are passed as such (no row replication)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x)
    mlp = MLPClassifier(random_state=seed, **HYPER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(scaler.transform(x), y, sample_weight=w)
    return scaler, mlp


def export_gate(scaler: Any, mlp: Any, path: Path, meta: dict[str, Any]) -> None:
    """Write the gate as plain arrays (np.savez; loaded with allow_pickle=False): ``mean``, ``scale``,
    ``train_sd`` (each feature's standard deviation over the training rows, 0 where it was constant:
    ``scale`` is 1 there, so the range check needs this), ``W0, b0, W1, b1, W2, b2`` (hidden ReLU
    layers, logistic output = P(continue)) and ``meta``, a JSON string (feature names, model id,
    training summary, and ``max_tool_calls`` and ``text_bins``, which ``meta`` must give: the tool
    budget of the training runs, the gate's budget frame, and the text its 64 bins hash). Format v2 =
    v1 plus ``train_sd`` and ``max_tool_calls``; a file without ``text_bins`` hashed the final text."""
    from guards.gstep.features import FEATURE_NAMES

    if list(mlp.classes_) != [COMMIT_LABEL, CONTINUE_LABEL]:
        raise ValueError(f"the gate needs both classes in training, got {list(mlp.classes_)}")
    if not isinstance(meta.get("max_tool_calls"), int):
        raise ValueError("a gate's meta names the tool budget it was trained at (max_tool_calls)")
    if meta.get("text_bins") not in TEXT_BINS:
        raise ValueError(f"a gate's meta names what its text bins hash (text_bins: {', '.join(TEXT_BINS)})")
    arrays = {
        "mean": np.asarray(scaler.mean_, dtype=np.float64),
        "scale": np.asarray(scaler.scale_, dtype=np.float64),
        "train_sd": np.sqrt(np.asarray(scaler.var_, dtype=np.float64)),
    }
    for i, (coef, intercept) in enumerate(zip(mlp.coefs_, mlp.intercepts_)):
        arrays[f"W{i}"] = np.asarray(coef, dtype=np.float64)
        arrays[f"b{i}"] = np.asarray(intercept, dtype=np.float64)
    meta = {**meta, "feature_names": FEATURE_NAMES, "n_layers": len(mlp.coefs_), "format": "gstep-gate-v2"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        # numpy's stub lets **arrays fill savez's allow_pickle: bool; the keys are W0, b0, ... only
        np.savez(f, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]


def _metrics(y: np.ndarray, p: np.ndarray, tau: float) -> dict[str, float]:
    pred = (p >= tau).astype(int)
    tp = int(((pred == 1) & (y == 1)).sum())
    fp = int(((pred == 1) & (y == 0)).sum())
    fn = int(((pred == 0) & (y == 1)).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "accuracy": float((pred == y).mean()) if len(y) else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "predicted_continue": float(pred.mean()) if len(y) else 0.0,
    }


def cross_validate(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    groups: np.ndarray,
    *,
    folds: int = 5,
    taus: Sequence[float] = (0.5, 0.05),
    seed: int = 0,
) -> dict[Any, Any]:
    """GroupKFold by question id; mean and sd over held-out folds of each metric (continue = positive):
    ``{tau: {metric: (mean, sd)}}``, and under ``"pooled"`` ``{tau: {metric: value}}`` over all
    out-of-fold predictions."""
    from sklearn.model_selection import GroupKFold

    from guards.gstep.guard import Gate

    per: dict[float, list[dict[str, Any]]] = {t: [] for t in taus}
    oof = np.full(len(y), np.nan)
    for train_idx, test_idx in GroupKFold(n_splits=folds).split(x, y, groups):
        if len(set(y[train_idx])) < 2:
            continue
        scaler, mlp = fit_gate(x[train_idx], y[train_idx], w[train_idx], seed=seed)
        gate = Gate.from_sklearn(scaler, mlp)
        p = gate.p_continue(x[test_idx])
        oof[test_idx] = p
        for t in taus:
            per[t].append(_metrics(y[test_idx], p, t))
    out: dict[Any, Any] = {
        t: {k: (float(np.mean([m[k] for m in ms])), float(np.std([m[k] for m in ms]))) for k in ms[0]}
        for t, ms in per.items()
        if ms
    }
    seen = ~np.isnan(oof)
    out["pooled"] = {t: _metrics(y[seen], oof[seen], t) for t in taus}
    return out


def split_questions(
    groups: np.ndarray, y: np.ndarray, *, test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held out): question ids are split, stratified by label, so no held-out question
    is ever trained on."""
    rng = np.random.default_rng(seed)
    test = []
    for cls in (0, 1):
        idx = np.flatnonzero(y == cls)
        rng.shuffle(idx)
        test.extend(idx[: int(round(len(idx) * test_fraction))].tolist())
    test_idx = np.array(sorted(test), dtype=int)
    train_idx = np.array(sorted(set(range(len(y))) - set(test)), dtype=int)
    assert not set(groups[train_idx]) & set(groups[test_idx])
    return train_idx, test_idx


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    kinds = Counter(label(r)[2] for r in records)
    endings = Counter(r["tool"].get("reason") for r in records)
    return {
        "questions": n,
        "tool_accuracy": sum(bool(r["tool"].get("correct")) for r in records) / n if n else 0.0,
        "cot_accuracy": sum(bool(r["cot"].get("correct")) for r in records) / n if n else 0.0,
        "label_kinds": dict(kinds),
        "tool_endings": dict(endings),
        "mean_tool_calls": float(np.mean([sum(c[3] for c in r["tool"]["calls"]) for r in records])) if n else 0.0,
        "mean_wall_s": float(np.mean([r.get("wall_s", 0.0) for r in records])) if n else 0.0,
    }


def train(
    records_path: Path,
    out: Path,
    report: Path | None,
    *,
    tau: float = 0.05,
    seed: int = 0,
    folds: int = 5,
    test_fraction: float = 0.2,
    text_bins: str = "reasoning",
    log: Any = print,
) -> dict[str, Any]:
    """Cross-validate, fit on a training split, evaluate on held-out questions, write weights + report.
    ``text_bins``: what the 64 text bins hash, recorded in the gate (the guard hashes the same)."""
    from guards.gstep.guard import Gate

    records = load_records(records_path)
    models = sorted({r.get("model") for r in records}, key=str)  # key: a record without a model is None
    if len(models) > 1:
        raise SystemExit(f"{records_path} mixes models {models}: a gate is model-specific")
    budget = train_budget(records)
    x, y, w, groups, info = samples(records, text_bins)
    if len(y) < 2 * folds or len(set(y.tolist())) < 2:
        raise SystemExit(f"too few samples to train ({len(y)}, labels {Counter(y.tolist())})")
    cv = cross_validate(x, y, w, groups, folds=folds, taus=(0.5, tau), seed=seed)
    train_idx, test_idx = split_questions(groups, y, test_fraction=test_fraction, seed=seed)
    scaler, mlp = fit_gate(x[train_idx], y[train_idx], w[train_idx], seed=seed)
    gate = Gate.from_sklearn(scaler, mlp)
    held = {t: _metrics(y[test_idx], gate.p_continue(x[test_idx]), t) for t in (0.5, tau)}
    summary = summarise(records)
    meta = {
        "model": models[0] if models else None,
        "records": str(records_path),
        "samples": int(len(y)),
        "train_questions": int(len(train_idx)),
        "heldout_questions": int(len(test_idx)),
        "label_counts": {"continue": int(y.sum()), "commit": int((y == 0).sum())},
        "hyper": {k: list(v) if isinstance(v, tuple) else v for k, v in HYPER.items()},
        "seed": seed,
        "max_tool_calls": budget,
        "text_bins": text_bins,
        "first_call": dict(Counter(r["tool"].get("first_call", "free") for r in records)),
        "n_iter": int(mlp.n_iter_),
        "heldout": held,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    export_gate(scaler, mlp, out, meta)
    text = render_report(summary, meta, cv, held, tau, info)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text, encoding="utf-8")
    log(text)
    return {"summary": summary, "meta": meta, "cv": cv, "heldout": held}


def _pm(pair: tuple[float, float]) -> str:
    return f"{pair[0]:.3f} ± {pair[1]:.3f}"


def render_report(
    summary: dict[str, Any],
    meta: dict[str, Any],
    cv: dict[Any, Any],
    held: dict[float, dict[str, float]],
    tau: float,
    info: Sequence[dict[str, Any]],
) -> str:
    kinds = Counter(i["kind"] for i in info)
    lines = [
        f"# G-STEP gate for {meta['model']}",
        "",
        f"Created {meta['created']} by `python -m guards.gstep.training train` from `{meta['records']}`.",
        "",
        "## Data",
        "",
        f"- questions collected: {summary['questions']} (GSM8K train split, greedy, guards off, default budgets: "
        f"max_tool_calls {meta['max_tool_calls']}, the gate's budget frame; tool runs by first call: "
        f"{meta.get('first_call', {})})",
        f"- the 64 text bins hash the {meta.get('text_bins', 'final')} text",
        f"- tool-mode accuracy: {summary['tool_accuracy']:.3f}; CoT-mode accuracy: {summary['cot_accuracy']:.3f}",
        f"- tool runs by ending: {summary['tool_endings']}",
        f"- mean executed tool calls: {summary['mean_tool_calls']:.2f}; mean seconds per question (both modes): "
        f"{summary['mean_wall_s']:.1f}",
        f"- samples (tool run ended at an answer attempt): {meta['samples']}",
        f"- labels [ours: reconstructed Table 11 of Appendix I]: agent_correct -> commit x3: {kinds.get('agent_correct', 0)}; "
        f"cot_fixable -> continue x4: {kinds.get('cot_fixable', 0)}; under_computed (<2 calls) -> continue x2: "
        f"{kinds.get('under_computed', 0)}; both_wrong -> commit x1: {kinds.get('both_wrong', 0)}",
        f"- continue / commit: {meta['label_counts']['continue']} / {meta['label_counts']['commit']}",
        "",
        "## Model",
        "",
        f"StandardScaler -> MLPClassifier{tuple(meta['hyper']['hidden_layer_sizes'])} ReLU, Adam lr "
        f"{meta['hyper']['learning_rate_init']}, alpha {meta['hyper']['alpha']}, early stopping (10% validation, "
        f"patience {meta['hyper']['n_iter_no_change']}), label weights as sample_weight; seed {meta['seed']}; "
        f"the shipped fit stopped after {meta['n_iter']} epochs.",
        "",
        "## Cross-validation (5-fold GroupKFold by question id, held-out folds, continue = positive)",
        "",
        "| threshold | accuracy | precision | recall | F1 | share predicted continue |",
        "|---|---|---|---|---|---|",
    ]
    for t, m in cv.items():
        if t == "pooled":
            continue
        lines.append(
            f"| p >= {t} | {_pm(m['accuracy'])} | {_pm(m['precision'])} | {_pm(m['recall'])} | "
            f"{_pm(m['f1'])} | {_pm(m['predicted_continue'])} |"
        )
    lines += [
        "",
        "Mean ± sd over the folds; a precision or recall with nothing to count in a fold (no predicted "
        "or no actual continue) counts as 0 there. Pooled over all out-of-fold predictions:",
        "",
        "| threshold | accuracy | precision | recall | F1 | share predicted continue |",
        "|---|---|---|---|---|---|",
    ]
    for t, m in cv.get("pooled", {}).items():
        lines.append(
            f"| p >= {t} | {m['accuracy']:.3f} | {m['precision']:.3f} | {m['recall']:.3f} | "
            f"{m['f1']:.3f} | {m['predicted_continue']:.3f} |"
        )
    lines += [
        "",
        f"## Shipped gate on held-out questions ({meta['heldout_questions']} questions never trained on; "
        f"trained on {meta['train_questions']})",
        "",
        "| threshold | accuracy | precision | recall | F1 | share predicted continue |",
        "|---|---|---|---|---|---|",
    ]
    for t, m in held.items():
        lines.append(
            f"| p >= {t} | {m['accuracy']:.3f} | {m['precision']:.3f} | {m['recall']:.3f} | "
            f"{m['f1']:.3f} | {m['predicted_continue']:.3f} |"
        )
    n_commit, n_cont = meta["label_counts"]["commit"], meta["label_counts"]["continue"]
    baseline = max(n_commit, n_cont) / max(1, n_commit + n_cont)
    pooled = cv.get("pooled", {}).get(0.5)
    reading = (
        f"Majority-class baseline (always {'commit' if n_commit >= n_cont else 'continue'}): accuracy {baseline:.3f}."
    )
    if pooled:
        verdict = "does not beat" if pooled["accuracy"] <= baseline else "beats"
        reading += (
            f" At p >= 0.5 the pooled out-of-fold accuracy is {pooled['accuracy']:.3f}: the gate {verdict} "
            f"the baseline on this much data ({meta['samples']} samples)."
        )
    lines += [
        "",
        "## Reading",
        "",
        reading,
        "",
        f"The guard uses tau = {tau} [paper]: at that threshold the gate asks to continue often; the "
        "safety rules (no progress, 3 extra turns, tool budget) bound the cost. Retrain as more records "
        "arrive with the same command.",
        "",
    ]
    return "\n".join(lines)


# -- command line --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guards.gstep.training", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="run questions in CoT and tool mode, append compact records")
    c.add_argument("--model", default=None, help="model id from models.toml (default: the default model)")
    c.add_argument("--models", type=Path, default=None, help="an extra models.toml")
    c.add_argument("--script", type=Path, default=None, help="scripted backend turns (tests)")
    c.add_argument("--data", type=Path, required=True, help="GSM8K-style JSONL (question, answer with '#### n')")
    c.add_argument("--start", type=int, default=0)
    c.add_argument("--n", type=int, default=200)
    c.add_argument("--records", type=Path, required=True)
    c.add_argument(
        "--threads",
        type=int,
        default=None,
        help="llama.cpp threads (default: the model's setting, else all CPUs); 1 is faster on a busy "
        "machine, where spinning threads wait for each other",
    )
    c.add_argument(
        "--first-call",
        choices=FIRST_CALLS,
        default="required",
        help="required: each tool run begins with a tool call (the paper, Appendix I.1); free: the model decides",
    )
    t = sub.add_parser("train", help="train the gate from records; write weights and a report")
    t.add_argument("--records", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--report", type=Path, default=None)
    t.add_argument("--tau", type=float, default=0.05)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--text-bins",
        choices=TEXT_BINS,
        default="reasoning",
        help="what the 64 hashed bins read: the reasoning text (the paper, Appendix I.2.2) or the answering "
        "turn's text (the gates trained before 2026-12-07)",
    )
    r = sub.add_parser("report", help="summarise a records file")
    r.add_argument("--records", type=Path, required=True)
    args = parser.parse_args(argv)

    if args.command == "collect":

        def log(msg: str) -> None:
            print(msg, flush=True)

        try:
            n = asyncio.run(
                collect(
                    args.model,
                    args.data,
                    args.start,
                    args.n,
                    args.records,
                    models_file=args.models,
                    script=args.script,
                    threads=args.threads,
                    first_call=args.first_call,
                    log=log,
                )
            )
        except (KeyboardInterrupt, asyncio.CancelledError):
            log("[gstep collect] stopped")
            return 130
        log(f"[gstep collect] appended {n} records to {args.records}")
        return 0
    if args.command == "train":
        train(args.records, args.out, args.report, tau=args.tau, seed=args.seed, text_bins=args.text_bins)
        return 0
    records = load_records(args.records)
    print(json.dumps(summarise(records), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
