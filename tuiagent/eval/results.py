"""The append-only results file of an eval: one JSON object per finished run, flushed and synced as it
is written, keyed by dataset / problem id (+ variant) / setting / seed.

An interrupted eval loses at most the runs that were in flight; re-running the same command reads
this file and runs only the keys that are missing. A later line with the same key wins (that is how
``--retry-errors`` replaces a failed run without rewriting the file). A line cut short by a crash is
skipped on reading (``skipped_lines`` counts them): the file is a ``core.jsonl_store.JsonlStore``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from tuiagent.core import trajectory
from tuiagent.core.events import Event, RunStarted
from tuiagent.core.jsonl_store import JsonlStore
from tuiagent.errors import ConfigError, UserError
from tuiagent.safe_read import CONFIG_BYTES, json_loads, read_text

RESULTS = "results.jsonl"
MANIFEST = "eval.json"
MAX_NAME = 120  # [ours] characters of a name made by safe_name: well under a file name's 255 bytes


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+=-]+", "_", text).strip("_") or "x"


def safe_name(text: str) -> str:
    """``text`` as one file name: characters outside [A-Za-z0-9._+=-] made "_", at most MAX_NAME long.
    A name changed or cut short ends in a hash of the whole text, so two texts never share one (and
    the names older versions gave, which cut that hash off only past MAX_NAME, stay as they were)."""
    clean = _clean(text)
    if clean == text and len(clean) <= MAX_NAME:
        return clean
    return f"{clean[: MAX_NAME - 7]}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"


def legacy_safe_name(text: str) -> str:
    """The name safe_name gave before it kept the hash of a long text (which then collided)."""
    clean = _clean(text)
    if clean != text:
        clean += "-" + hashlib.sha1(text.encode()).hexdigest()[:6]
    return clean[:MAX_NAME]


def trajectory_path(directory: Path, dataset: str, setting: str, unit: str, seed: int) -> Path:
    """Where an eval in ``directory`` writes the trajectory of one run: one file per run key."""
    return directory / "runs" / safe_name(dataset) / safe_name(setting) / f"{safe_name(unit)}-s{seed}.jsonl"


def run_key(dataset: str, problem_id: str, variant: str, setting: str, seed: int) -> str:
    unit = f"{problem_id}~{variant}" if variant else problem_id
    return f"{dataset}/{unit}/{setting}/{seed}"


def has_trajectory(record: dict[str, Any]) -> bool:
    """Whether the run's trajectory file is there (an eval's results may be read without them)."""
    path = record.get("trajectory")
    return isinstance(path, str) and bool(path) and Path(path).is_file()


def run_events(record: dict[str, Any]) -> list[Event] | None:
    """The events of the run's trajectory; None when the file is not there."""
    return trajectory.load(Path(record["trajectory"])).events if has_trajectory(record) else None


def question_of(events: list[Event]) -> str:
    """The question the run saw (its RunStarted's problem: a cue or a distractor included)."""
    return next((e.problem for e in events if isinstance(e, RunStarted)), "")


class ResultsError(UserError):
    """A results directory that belongs to another eval (another model, or a setting that changed)."""


class ResultStore:
    """``<dir>/results.jsonl`` (append-only, a ``core.jsonl_store.JsonlStore``) and ``<dir>/eval.json``
    (what the eval was)."""

    def __init__(self, directory: Path | str):
        self.dir = Path(directory).expanduser()
        self.path = self.dir / RESULTS
        self._lines = JsonlStore(self.path, key="key")
        self.records: dict[str, dict[str, Any]] = self._lines.latest
        self.skipped_lines = self._lines.skipped_lines
        for record in self.records.values():
            if record.get("trajectory"):
                record["trajectory"] = self._located(str(record["trajectory"]))

    # -- the manifest ---------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any] | None:
        path = self.dir / MANIFEST
        if not path.exists():
            return None
        try:
            manifest = json_loads(read_text(path, limit=CONFIG_BYTES, what="eval manifest"))
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"the eval manifest is not valid JSON ({e.msg}, line {e.lineno} column {e.colno})",
                file=str(path),
                fix="restore it from a copy; without one, move it aside and run the eval again with the same "
                "options (results.jsonl keeps every finished run)",
            ) from None
        if not isinstance(manifest, dict):
            raise ConfigError(
                "the eval manifest is not a JSON object", file=str(path), fix="restore it from a copy, or move it aside"
            )
        return manifest

    def write_manifest(self, data: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        tmp.replace(self.dir / MANIFEST)

    def check_compatible(self, model: str, fingerprints: dict[str, str], legacy: dict[str, str] | None = None) -> None:
        """Refuse to mix runs of another model, or of a setting whose definition changed, in one file.
        ``legacy``: each setting's fingerprint as an eval made under the old 600 s default wall-time
        budget hashed it; a match says to pass ``--max-time 600``."""
        models = {r.get("model") for r in self.records.values()} - {model}
        if models:
            raise ResultsError(
                f"{self.path} holds runs of model {', '.join(sorted(map(str, models)))}, not {model}\n"
                "  fix: pass another --out (or --name) for this model"
            )
        for record in self.records.values():
            name, fp = record.get("setting"), record.get("setting_fp")
            if name in fingerprints and fp != fingerprints[name]:
                if legacy and fp == legacy.get(name):
                    raise ResultsError(
                        f"{self.path}: the runs of setting {name!r} were made under the old default wall-time "
                        "budget of 600 s; evals now run without a wall clock unless asked\n"
                        "  fix: pass --max-time 600 to go on with them as they were made, or another --out"
                    )
                raise ResultsError(
                    f"{self.path}: setting {name!r} was defined differently when its runs were written "
                    "(guards, guard settings, budgets or sampling changed)\n"
                    "  fix: give the changed setting another name, or pass another --out"
                )

    # -- records --------------------------------------------------------------------------------

    def done(self, key: str, *, question_hash: str | None = None, retry_errors: bool = False) -> bool:
        """Whether the run ``key`` is stored; with ``question_hash``, a stored run of another question
        text under that key (a distractor variant written again, a dataset edited) is not done."""
        record = self.records.get(key)
        if record is None or self.stale(key, question_hash):
            return False
        return not (retry_errors and record.get("reason") == "error")

    def stale(self, key: str, question_hash: str | None) -> bool:
        """The stored run ``key`` was given another question than the one whose hash is ``question_hash``."""
        stored = (self.records.get(key) or {}).get("question_hash")
        return question_hash is not None and stored is not None and stored != question_hash

    def append(self, record: dict[str, Any]) -> None:
        """Write one finished run: flushed and fsynced before this returns. A trajectory under this
        directory is written relative to it, so a moved or copied eval directory keeps its runs."""
        path = record.get("trajectory")
        self._lines.append({**record, "trajectory": self._relative(path)} if path else record)
        self.records[record["key"]] = record

    def check_trajectories(self, planned: dict[str, Path]) -> None:
        """Refuse runs (key -> trajectory) that would write a file another run key's trajectory is in,
        stored or planned: a run starts by removing what its file holds."""
        owners = {Path(r["trajectory"]).resolve(): k for k, r in self.records.items() if r.get("trajectory")}
        for key, path in planned.items():
            owner = owners.setdefault(path.resolve(), key)
            if owner != key:
                raise ResultsError(
                    f"runs {owner} and {key} would share the trajectory file {path}\n"
                    "  fix: give one of the two problems another id (or pass another --out)"
                )

    def _relative(self, path: str) -> str:
        try:
            return Path(path).resolve().relative_to(self.dir.resolve()).as_posix()
        except ValueError:  # outside the directory (merged shards point into theirs)
            return path

    def _located(self, path: str) -> str:
        """A recorded trajectory path as an absolute one: a relative path is under this directory; an
        absolute one that is gone (results written before paths were relative, in a directory since
        moved) is looked for under this directory's ``runs/``."""
        p = Path(path)
        if not p.is_absolute():
            return str(self.dir.resolve() / p)
        if not p.exists() and "runs" in p.parts:
            at = len(p.parts) - 1 - p.parts[::-1].index("runs")
            moved = self.dir.joinpath(*p.parts[at:])
            if moved.is_file():
                return str(moved)
        return path

    def close(self) -> None:
        self._lines.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
