"""Saved runs as inspect_ai eval logs, written through inspect_ai's own log API (the ``inspect``
extra), so ``inspect view`` opens them and ``inspect_ai.analysis.samples_df`` / ``evals_df`` read them.

Each run is one sample (``tuiagent.export.inspect_sample``: its messages, transcript and score).

One log per setting: an inspect eval is one task x one model x one configuration, and its viewer
and ``evals_df`` put one log in one row with its accuracy, so settings sit side by side as rows
(``task_args.setting``, ``metadata.guards``) and ``samples_df`` joins each sample to its setting.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuiagent.core import events as ev
from tuiagent.core.compare import guards_label
from tuiagent.core.trajectory import load
from tuiagent.errors import UserError
from tuiagent.export.inspect_sample import (
    SCORER,
    RunSample,
    generate_config,
    guard_settings,
    model_name,
    run_start,
    sample,
    utc,
)

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog

INSTALL = "pip install 'tuiagent[inspect]'"


def require_inspect() -> None:
    """Raise a UserError that says how to install inspect_ai when it is not installed."""
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise UserError(f"writing inspect logs needs inspect_ai: {INSTALL}") from None


# -- a log ----------------------------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def eval_log(
    runs: Sequence[RunSample],
    *,
    task: str,
    setting: str,
    dataset: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    eval_set_id: str | None = None,
) -> EvalLog:
    """The runs of one setting (one model) as one inspect eval log. As inspect scores epochs, a
    sample's epochs (an eval's seeds) are reduced to their mean score first, and the accuracy and
    its stderr are inspect's own metrics over those, for the samples with a gold."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalPlan,
        EvalPlanStep,
        EvalResults,
        EvalSampleReductions,
        EvalSampleScore,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ModelUsage
    from inspect_ai.scorer import SampleScore, accuracy, mean_score, stderr

    if not runs:
        raise UserError(f"no runs for setting {setting!r}")
    samples = [sample(r) for r in runs]
    first = run_start(runs[0].events)
    model = model_name(first.model_id)
    guards = guard_settings(runs[0].events)
    starts = [run_start(r.events).t for r in runs]
    ends = [r.events[-1].t for r in runs]
    created = utc(min(starts))
    eval_id = hashlib.sha256(
        "\n".join([task, setting, model, *sorted(s.uuid or "" for s in samples)]).encode()
    ).hexdigest()[:22]
    epochs: dict[str | int, list[Any]] = {}
    for s in samples:
        if s.scores:
            epochs.setdefault(s.id, []).append(s.scores[SCORER])
    reduced = [SampleScore(score=mean_score()(scores), sample_id=sid) for sid, scores in epochs.items()]
    metrics = {}
    if reduced:
        # inspect types a metric as a union with its deprecated form, which takes Scores, not SampleScores
        values = {"accuracy": accuracy()(reduced), "stderr": stderr()(reduced)}  # type: ignore[arg-type]
        metrics = {name: EvalMetric(name=name, value=v) for name, v in values.items() if isinstance(v, (int, float))}
    n_epochs = max(s.epoch for s in samples)
    reducer = "mean" if n_epochs > 1 else None
    usage = ModelUsage()
    for s in samples:
        usage = usage + s.model_usage[model]
    described = {
        "setting": setting,
        "guards": guards_label(runs[0].events),
        "guard_settings": guards,
        "mode": first.mode,
        "run_settings": first.settings,
        "sampling": first.sampling,
        "backend": first.backend,
        **(metadata or {}),
    }
    settings = first.settings
    spec = EvalSpec(
        eval_set_id=eval_set_id,
        eval_id=eval_id,
        run_id=eval_id,
        created=created.isoformat(),
        task=task,
        task_id=eval_id,
        task_display_name=f"{task} · {setting}",
        task_args={"setting": setting},
        solver="tuiagent",
        solver_args={"guards": sorted(guards), "guard_settings": guards, "mode": first.mode},
        dataset=EvalDataset(
            name=dataset or task,
            samples=len({s.id for s in samples}),
            sample_ids=list(dict.fromkeys(str(s.id) for s in samples)),
        ),
        model=model,
        model_generate_config=generate_config(first.sampling),
        config=EvalConfig(
            epochs=n_epochs,
            epochs_reducer=[reducer] if reducer else None,
            token_limit=settings.get("max_tokens"),
            time_limit=_int(settings.get("max_wall_s")),
        ),
        packages={"tuiagent": _version("tuiagent"), "inspect_ai": _version("inspect_ai")},
        metadata=described,
    )
    log = EvalLog(
        status="success",
        eval=spec,
        plan=EvalPlan(
            steps=[
                EvalPlanStep(solver="tuiagent", params={"guards": guards, "mode": first.mode, "run_settings": settings})
            ],
            config=generate_config(first.sampling),
        ),
        results=EvalResults(
            total_samples=len(samples),
            completed_samples=sum(s.error is None for s in samples),
            scores=[
                EvalScore(
                    name=SCORER,
                    scorer=SCORER,
                    reducer=reducer,
                    scored_samples=len(reduced),
                    unscored_samples=len(dict.fromkeys(s.id for s in samples)) - len(reduced),
                    metrics=metrics,
                )
            ]
            if reduced
            else [],
        ),
        stats=EvalStats(
            started_at=created.isoformat(), completed_at=utc(max(ends)).isoformat(), model_usage={model: usage}
        ),
        samples=samples,
    )
    if reduced:  # set after: EvalLog's validator takes reductions beside results only as dicts
        log.reductions = [
            EvalSampleReductions(
                scorer=SCORER,
                reducer=reducer,
                samples=[
                    EvalSampleScore(**r.score.model_dump(exclude={"history"}), sample_id=r.sample_id) for r in reduced
                ],
            )
        ]
    return log


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def log_name(log: EvalLog) -> str:
    """``<created>_<task>-<setting>_<id>.eval``, the shape of the names inspect gives its own logs."""
    created = datetime.fromisoformat(log.eval.created).strftime("%Y-%m-%dT%H-%M-%S+00-00")
    setting = str(log.eval.task_args.get("setting", ""))
    return f"{created}_{_safe(log.eval.task + '-' + setting)}_{log.eval.eval_id}.eval"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+=-]+", "-", text).strip("-") or "run"


def write(log: EvalLog, path: Path) -> Path:
    """Write a log with inspect's writer (``.eval``, or ``.json`` by the suffix)."""
    from inspect_ai.log import write_eval_log

    path.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(log, str(path))
    return path


# -- tuiagent export --inspect --------------------------------------------------------------------


def setting_label(events: Sequence[ev.Event]) -> str:
    """A run's setting when nothing else names it: its guards on at the start, "cot" for a run without the tool."""
    label = guards_label(events)
    if run_start(events).mode == "cot":
        return "cot" if label == "none" else f"cot+{label}"
    return label


def export_inspect(paths: Sequence[Path], out: Path | None = None) -> tuple[list[Path], list[str]]:
    """Write saved runs as inspect logs, one per setting (model, mode, guards and their settings, budgets,
    sampling): into the directory ``out`` (default: beside the first run), or the file ``out`` (.eval
    or .json) when the runs are of one setting. A log's runs are read again when it is written, so
    many runs are never held in memory together. Returns the files written and the loader's warnings."""
    require_inspect()
    if not paths:
        raise UserError("give a trajectory file to export")
    groups: dict[str, list[tuple[Path, str]]] = {}
    labels: dict[str, str] = {}
    warnings: list[str] = []
    ids: set[str] = set()
    for path in map(Path, paths):
        loaded = load(path)
        warnings += loaded.warnings
        if not any(isinstance(e, ev.RunStarted) for e in loaded.events):
            raise UserError(f"{path} has no start of a run (RunStarted): nothing to export")
        started = run_start(loaded.events)
        run_id = started.run_id
        while run_id in ids:  # the same run given twice (or copied): inspect needs distinct ids
            run_id += "+"
        ids.add(run_id)
        key = repr(
            (
                started.model_id,
                started.mode,
                sorted(guard_settings(loaded.events).items()),
                sorted(started.settings.items()),
                sorted(started.sampling.items()),
            )
        )
        labels.setdefault(key, setting_label(loaded.events))
        groups.setdefault(key, []).append((path, run_id))
    file_out = out is not None and out.suffix.lower() in (".eval", ".json")
    if file_out and len(groups) > 1:
        raise UserError(f"the runs are of {len(groups)} settings, which make {len(groups)} logs: give -o a directory")
    directory = out if out is not None and not file_out else Path(paths[0]).parent
    written = []
    used: dict[str, int] = {}
    for key, members in groups.items():
        label = labels[key]
        used[label] = used.get(label, 0) + 1  # two settings with one label (other budgets): keep both apart
        setting = label if used[label] == 1 else f"{label}#{used[label]}"
        runs = [RunSample(load(path).events, run_id, path=path) for path, run_id in members]
        log = eval_log(runs, task="tuiagent", setting=setting)
        written.append(write(log, out if file_out and out is not None else directory / log_name(log)))
    return written, warnings
