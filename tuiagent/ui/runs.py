"""Recent runs in the runs directory, read cheaply (first lines and last line only; no UI code)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from tuiagent import paths
from tuiagent.core.events import SCHEMA


@dataclass(frozen=True)
class RunInfo:
    path: Path
    problem: str
    model: str
    answer: str | None
    correct: bool | None
    reason: str  # RunFinished.reason, or "incomplete"
    when: str  # local time of the file's last change


def _last_line(path: Path, chunk: int = 8192) -> str:
    with path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - chunk))
        text = f.read().decode("utf-8", errors="replace")
    return text.rstrip("\n").rsplit("\n", 1)[-1]  # not splitlines: U+2028 inside a JSON string is no line end


def _object(line: str) -> dict:
    """A line's JSON object, or {} when it holds none (cut short, edited by hand, not JSON)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def run_info(path: Path) -> RunInfo | None:
    """The summary of one trajectory file, or None when it is not one."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head, started = _object(f.readline()), _object(f.readline())
        last = _object(_last_line(path))
    except OSError:
        return None
    if head.get("schema") != SCHEMA:
        return None
    finished = last if last.get("type") == "RunFinished" else {}
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
    return RunInfo(path, " ".join(str(started.get("problem", "")).split()), str(started.get("model_id", "")),
                   finished.get("answer"), finished.get("correct"), finished.get("reason", "incomplete"), when)


def recent_runs(directory: Path | None = None, limit: int = 100) -> list[RunInfo]:
    """The newest trajectories first."""
    directory = directory or paths.runs_dir()
    if not directory.is_dir():
        return []
    files = sorted(directory.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)[:limit]
    return [info for info in (run_info(p) for p in files) if info is not None]
