"""``tuiagent calibrate MODEL``: collect (resumable), fit every model-specific guard parameter on
training questions, report them on held-out ones, and write the model's calibration file.

The collection is ``calibrate_collect`` (records v2; ``--n 0`` fits what is there); what is fitted
for each guard, and how, is the guard's calibrator (``tuiagent.training.calibrators``, registered
by the guard's package): this module splits the records, asks each calibrator for its fit, draws
the learning curve's training subsets, and writes what the calibrators say.
Output: ``<out-dir>/<model>.toml`` (values tagged [calibration]), ``<model>.md`` (the report) and
any file a calibrator names (G-STEP's gate, ``<model>-gstep.npz``); name the TOML from models.toml
as ``calibration``. The command, each fit's rule and what it found for the default model:
docs/calibration.md.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import platform
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuiagent.training.calibrate_collect import collect
from tuiagent.training.calibrators import (
    HELDOUT_EVERY,
    RECORD_VERSION,
    Calibrator,
    Record,
    Split,
    fmt,
    heldout_part,
    installed,
    split_records,
)
from tuiagent.training.records import load_records

CURVE_REPEATS = 5  # [ours] random training subsets per learning-curve point
CURVE_POOLS = {
    "collected": "over the questions collected here (they alone have per-block data)",
    "all": "over every training question (reused v1 records included)",
}


@dataclass
class Result:
    model: str
    split: Split
    calibrators: list[Calibrator]
    fits: dict[str, Any]  # guard -> what its calibrator fitted (None: nothing)
    curve: list[dict[str, Any]]
    recommended: list[str]
    reasons: dict[str, str]


def _sizes(n: int) -> list[int]:
    return sorted({k for k in (10, 20, 40, 80, 160, 320) if k < 0.9 * n} | {n}) if n else []


def learning_curve(split: Split, calibrators: Sequence[Calibrator], *, seed: int = 0) -> list[dict[str, Any]]:
    """Held-out metrics against the number of training questions, the mean over random subsets: per
    pool of training records (``Calibrator.curve_pool``), the same subsets for every calibrator
    drawing from it."""
    rng = np.random.default_rng(seed)
    pools = {
        "collected": [r for r in split.train if r.get("v") == RECORD_VERSION],
        "all": list(split.train),
    }
    rows: list[dict[str, Any]] = []
    for pool, records in pools.items():
        measures = [c.curve(split.heldout, seed=seed) for c in calibrators if c.curve_pool == pool and c.curve_columns]
        if not measures:
            continue
        for n in _sizes(len(records)):
            runs = []
            for _ in range(CURVE_REPEATS if n < len(records) else 1):
                sub = [records[i] for i in rng.choice(len(records), n, replace=False)]
                runs.append({k: v for measure in measures for k, v in measure(sub).items()})
            row: dict[str, Any] = {"pool": pool, "train_questions": n}
            for key in sorted({k for r in runs for k in r}):
                finite = [r[key] for r in runs if key in r and not np.isnan(r[key])]
                row[key] = float(np.mean(finite)) if finite else float("nan")
            rows.append(row)
    return rows


def fit_all(
    v2: Sequence[Record],
    v1: Sequence[Record] = (),
    *,
    model: str,
    seed: int = 0,
    curve: bool = True,
    calibrators: Sequence[Calibrator] | None = None,
) -> Result:
    """Every installed calibrator's fit (or those given), the learning curve, the recommended preset."""
    split = split_records(v2, v1)
    found = list(installed() if calibrators is None else calibrators)
    fits = {c.guard: c.fit(split, seed=seed) for c in found}
    recommended, reasons = [], {}
    for c in found:
        use, reasons[c.guard] = c.recommend(fits[c.guard])
        if use:
            recommended.append(c.guard)
    return Result(
        model, split, found, fits, learning_curve(split, found, seed=seed) if curve else [], recommended, reasons
    )


def render_toml(res: Result, meta: dict[str, Any], out_dir: Path) -> str:
    """The calibration file; a calibrator may write files it names into ``out_dir``."""
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
    for c in res.calibrators:
        lines += c.toml(res.fits[c.guard], out_dir, meta)
    lines += [
        "[presets.recommended]",
        f"description = {json.dumps(description)}",
        f"guards = {json.dumps(res.recommended)}",
        "",
    ]
    return "\n".join(lines)


def machine_seconds(record: Record) -> float:
    """The machine time a question took: its wall time, shared with the questions beside it when
    ``concurrency`` were in flight."""
    return float(record["wall_s"]) / max(1, int(record.get("concurrency", 1)))


def minutes_per_100(records: Sequence[Record]) -> float:
    """Collection minutes per 100 questions, from the records' wall times."""
    walls = [machine_seconds(r) for r in records if "wall_s" in r]
    return float(np.mean(walls)) * 100 / 60 if walls else float("nan")


def _names(names: Iterable[str]) -> str:
    """ "A", "A and b", "A, b and c": a sentence's start."""
    *rest, last = list(names)
    joined = f"{', '.join(rest)} and {last}" if rest else last
    return joined[:1].upper() + joined[1:]


def _curve_lines(res: Result) -> list[str]:
    lines = ["## Learning curve (held-out metrics against training questions; mean of random subsets)", ""]
    for pool, where in CURVE_POOLS.items():
        columns = [col for c in res.calibrators if c.curve_pool == pool for col in c.curve_columns]
        if not columns:
            continue
        lines += [
            f"{_names(c.label or c.guard for c in res.calibrators if c.curve_pool == pool and c.curve_columns)}, {where}:",
            "",
            f"| training questions | {' | '.join(header for _, header in columns)} |",
            f"|---|{'---|' * len(columns)}",
        ]
        for r in (r for r in res.curve if r["pool"] == pool):
            lines.append(f"| {r['train_questions']} | {' | '.join(fmt(r.get(key, np.nan)) for key, _ in columns)} |")
        lines.append("")
    return [
        *lines,
        "Balanced accuracy 0.5 and AUROC 0.5 are chance. A curve still rising at the right end says "
        "more collection would pay; a flat one at chance says the signal is not there.",
        "",
    ]


def render_report(res: Result, meta: dict[str, Any], command: str) -> str:
    s = res.split
    v2_train = [r for r in s.train if r.get("v") == RECORD_VERSION]

    def acc(rs: Sequence[Record], part: str) -> str:
        return f"{sum(bool(r[part]['correct']) for r in rs)}/{len(rs)}" if rs else "0/0"

    def cost(rs: Sequence[Record]) -> str:
        return fmt(float(np.mean([machine_seconds(r) if "wall_s" in r else np.nan for r in rs])), 0) if rs else "n/a"

    extra = [f"{name}: {c.runs_doc}" for c in res.calibrators for name in c.runs]
    lines = [
        f"# Calibration of {res.model}",
        "",
        f"{meta['date']}, {platform.machine()} ({platform.processor() or 'cpu'}), `{command}`.",
        "",
        "## Data",
        "",
        f"- {meta['data']}, question ids {meta['questions']}; greedy, guards off, default budgets; per question a "
        f"tool-mode run and a chain-of-thought run; held-out questions (ids divisible by {HELDOUT_EVERY}) also "
        + ("; ".join(extra) if extra else "nothing else")
        + ".",
        f"- training: {len(s.train)} questions ({len(v2_train)} collected here, {s.reused} reused v1 records, "
        f"which carry no per-block data); held-out: {len(s.heldout)} questions, never fitted on "
        f"({sum(heldout_part(r['qid']) == 'validation' for r in s.heldout)} validation, where a calibrator "
        f"makes its choices; {sum(heldout_part(r['qid']) == 'test' for r in s.heldout)} test, in no choice).",
        f"- tool mode right: train {acc(v2_train, 'tool')}, held-out {acc(s.heldout, 'tool')}; CoT right: train "
        f"{acc(v2_train, 'cot')}, held-out {acc(s.heldout, 'cot')}.",
        f"- collection cost on this machine: {cost(v2_train)} s per training question (CoT + tool runs, judge), "
        f"{cost(s.heldout)} s per held-out one (also the extra runs); "
        f"{fmt(minutes_per_100([*v2_train, *s.heldout]), 0)} minutes per 100 questions at this mix.",
        "",
    ]
    for c in res.calibrators:
        lines += c.report(res.fits[c.guard])
    lines += _curve_lines(res)
    lines += ["## Recommended preset", "", f"guards = {json.dumps(res.recommended)}", ""]
    lines += [f"- {guard}: {why}" for guard, why in res.reasons.items()]
    lines.append("")
    return "\n".join(lines)


def write(res: Result, out_dir: Path, meta: dict[str, Any], command: str) -> Path:
    """Write <model>.toml, <model>.md and the files the calibrators name; returns the TOML."""
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "report": f"{res.model}.md"}
    (out_dir / f"{res.model}.md").write_text(render_report(res, meta, command), encoding="utf-8")
    path = out_dir / f"{res.model}.toml"
    path.write_text(render_toml(res, meta, out_dir), encoding="utf-8")
    return path


def question_range(records: Sequence[Record]) -> str:
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
    try:
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
        report = render_report(res, {**meta, "report": ""}, command)
        path = write(res, out_dir, meta, command)
    except (KeyError, TypeError, IndexError) as e:  # a record not as the collections write them
        files = f"{records}" + (f" or {reuse}" if reuse else "")
        raise ValueError(
            f"a record in {files} lacks what the fits read ({type(e).__name__}: {e}); records come from "
            "`tuiagent calibrate` (v2) and G-STEP's collection (v1, --reuse) of the same model"
        ) from None
    log(report)
    log(
        f"[calibrate] wrote {path} and its report; name it from models.toml: "
        f'[models."{spec.id}"] calibration = "{path.resolve()}"'
    )
    return path
