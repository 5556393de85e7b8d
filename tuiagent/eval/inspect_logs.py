"""An eval's results as inspect_ai eval logs (``tuiagent eval ... --inspect-log``): one log per dataset
and setting in ``<dir>/inspect/``, each run a sample (``tuiagent.export.inspect_log``), its eval
record (problem id, variant, seed, every guard's numbers) in the sample's metadata.

A sample's id is the problem (with its variant) and its epoch the seed + 1, as inspect counts the
repeats of one sample. The directory is written whole each time, so it matches results.jsonl.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuiagent.core.trajectory import TrajectoryError, load
from tuiagent.eval.results import ResultStore, trajectory_path
from tuiagent.export.inspect_log import eval_log, log_name, require_inspect, write
from tuiagent.export.inspect_sample import RunSample

INSPECT_DIR = "inspect"
MAX_NAMED = 3  # ours: runs without a trajectory named one by one; the rest are counted


def _unit(record: dict[str, Any]) -> str:
    return f"{record['problem_id']}~{record['variant']}" if record.get("variant") else str(record["problem_id"])


def _trajectory(directory: Path, record: dict[str, Any]) -> Path:
    """The run's trajectory: where the record says, else where the harness puts it in this directory
    (a results directory moved, or merged from shards)."""
    recorded = Path(record["trajectory"]) if record.get("trajectory") else None
    if recorded is not None and recorded.is_file():
        return recorded
    return trajectory_path(directory, record["dataset"], record["setting"], _unit(record), int(record["seed"]))


def write_inspect_logs(directory: Path, log: Callable[[str], None] = print) -> list[Path]:
    """Write ``<directory>/inspect/*.eval`` from the results directory, one log at a time (its
    trajectories loaded for it alone); returns the files written."""
    require_inspect()
    store = ResultStore(directory)
    settings = {s["name"]: s for s in (store.manifest() or {}).get("settings", [])}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in sorted(store.records.values(), key=lambda r: (r["dataset"], r["setting"], r["key"])):
        groups.setdefault((record["dataset"], record["setting"]), []).append(record)
    out = store.dir / INSPECT_DIR
    for old in out.glob("*.eval"):
        old.unlink()
    eval_set = hashlib.sha256(str(store.dir.resolve()).encode()).hexdigest()[:22]  # the logs of one results directory
    written: list[Path] = []
    left_out: list[str] = []
    for (dataset, setting), records in groups.items():
        runs = []
        for record in records:
            path = _trajectory(store.dir, record)
            try:
                events = load(path).events
            except TrajectoryError as e:
                left_out.append(f"{record['key']}: {e}")
                continue
            extra = {k: v for k, v in record.items() if k != "key"}
            runs.append(RunSample(events, _unit(record), epoch=int(record["seed"]) + 1, metadata=extra, path=path))
        if runs:
            described = {"eval_setting": settings.get(setting, {}), "results_dir": str(store.dir)}
            result = eval_log(
                runs, task=dataset, setting=setting, dataset=dataset, metadata=described, eval_set_id=eval_set
            )
            written.append(write(result, out / log_name(result)))
    for line in left_out[:MAX_NAMED]:
        log(f"warning: left out of the inspect logs: {line}")
    if len(left_out) > MAX_NAMED:
        log(f"warning: {len(left_out) - MAX_NAMED} more runs left out of the inspect logs")
    return written
