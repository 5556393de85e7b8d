"""Saved runs in the runs directory, read cheaply (the first lines and the last line only; no UI code)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any

from tuiagent import paths, safe_read
from tuiagent.core.compare import guards_label
from tuiagent.core.events import SCHEMA, Event, from_dict
from tuiagent.mathtext import render_latex, render_math


@dataclass(frozen=True)
class RunInfo:
    path: Path
    problem: str
    model: str
    answer: str | None
    correct: bool | None
    reason: str  # RunFinished.reason, or "incomplete"
    when: str  # local time of the file's last change
    mtime: float = 0.0
    guards: str = "none"  # the guards on at the start, joined with "+"
    calls: int | None = None
    tokens: int | None = None
    wall_s: float | None = None
    interventions: str = ""  # what its Intervention events replaced ("output", "code+text"), "" when none

    def shown(self, *, math: bool = True) -> RunInfo:
        """This run with its problem and answer as they read (their math rendered, as the app and
        the transcripts show it), or, with ``math`` off, as written."""
        if not math:
            return self
        answer = None if self.answer is None else render_latex(self.answer)
        return replace(self, problem=render_math(self.problem), answer=answer)

    @property
    def result(self) -> str:
        """ "right", "wrong" or "" (no gold answer, no answer, or cancelled: a run stopped by a person
        is not graded, though its record holds the grade of no answer)."""
        if self.reason == "cancelled":
            return ""
        return "right" if self.correct is True else "wrong" if self.correct is False else ""

    def matches(self, query: str) -> bool:
        """Whether every word of ``query`` is in the problem, answer, model, guards, result or end reason."""
        hay = " ".join(
            [
                self.problem,
                self.answer or "",
                self.model,
                self.guards,
                self.result,
                self.reason,
                self.when,
                self.path.name,
            ]
        ).lower()
        return all(word in hay for word in query.lower().split())


def _all_lines(data: bytes) -> Iterator[str]:
    """The lines of ``data`` one at a time, split on "\n" only (U+2028 inside a JSON string is no line end)."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        yield data[start:end].decode("utf-8", errors="replace")
        start = end + 1


def _lines(data: bytes, n: int) -> list[str]:
    """The first ``n`` lines of ``data`` ("" for those it lacks)."""
    out = list(islice(_all_lines(data), n))
    return out + [""] * (n - len(out))


def _last_line(data: bytes) -> str:
    end = len(data.rstrip(b"\n"))
    return data[data.rfind(b"\n", 0, end) + 1 : end].decode("utf-8", errors="replace")


def _object(line: str) -> dict[str, Any]:
    """A line's JSON object, or {} when it holds none (cut short, edited by hand, not JSON)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


# The guards on at the start are recorded (GuardToggled "on at start") right after RunStarted; read at
# most this many lines for them (ours: a run has a handful of guards, well under this). A fork's come
# after its copy of the parent's steps, so a fork's lines are read on to its fork mark.
HEAD_LINES = 24


def _events(lines: Iterable[str]) -> Iterator[Event]:
    """The events of trajectory ``lines`` (after the header), read one at a time; a bad line is skipped."""
    for line in lines:
        try:
            yield from_dict(_object(line))
        except (ValueError, TypeError, KeyError):
            continue


def _guards_on(data: bytes, started: dict[str, Any], head: list[str]) -> str:
    """The guards on at the start of the run (of a fork: at its fork point), as core.compare reads them."""
    return guards_label(_events(islice(_all_lines(data), 1, None) if started.get("parent") else head))


INTERVENTION = b'"type": "Intervention"'  # how the recorder writes the event's type


def _interventions(data: bytes) -> str:
    """The targets of the run's Intervention events (an edit a fork continues from, an injected
    fault), joined with "+"; "" when it has none (most runs: one scan for the type, no parsing)."""
    if INTERVENTION not in data:
        return ""
    targets = []
    for line in data.splitlines():
        if INTERVENTION in line:
            record = _object(line.decode("utf-8", errors="replace"))
            target = str(record.get("target", "?"))
            targets.append(f"fault:{target}" if record.get("fault") else target)
    return "+".join(dict.fromkeys(targets))


def run_info(path: Path) -> RunInfo | None:
    """The summary of one trajectory file, or None when it is not one; a file that cannot be read
    (gone, a FIFO, a device) is a ``safe_read.UnreadableFile``."""
    data = safe_read.read_bytes(path, limit=safe_read.DATA_BYTES, what="trajectory")
    head, first, *rest = _lines(data, 2 + HEAD_LINES)
    if _object(head).get("schema") != SCHEMA:
        return None
    started, last, mtime = _object(first), _object(_last_line(data)), _mtime(path)
    finished = last if last.get("type") == "RunFinished" else {}
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime))
    return RunInfo(
        path,
        " ".join(str(started.get("problem", "")).split()),
        str(started.get("model_id", "")),
        finished.get("answer"),
        finished.get("correct"),
        finished.get("reason", "incomplete"),
        when,
        mtime,
        _guards_on(data, started, [first, *rest]),
        finished.get("tool_calls"),
        finished.get("generated_tokens"),
        finished.get("wall_s"),
        _interventions(data),
    )


def recent_runs(
    directory: Path | None = None, limit: int = 5000, skipped: list[tuple[Path, str]] | None = None
) -> list[RunInfo]:
    """The newest trajectories first; files that are not trajectories, or cannot be read (a FIFO, a
    link to a device), are left out (and added to ``skipped`` with why)."""
    directory = directory or paths.runs_dir()
    if not directory.is_dir():
        return []
    files = sorted(directory.glob("*.jsonl"), key=_mtime, reverse=True)[:limit]
    found = []
    for p in files:
        try:
            info = run_info(p)
        except safe_read.UnreadableFile as e:
            if skipped is not None:
                skipped.append((p, e.problem))
            continue
        if info is not None:
            found.append(info)
        elif skipped is not None:
            skipped.append((p, "not a trajectory"))
    return found


def _mtime(path: Path) -> float:
    """When the file last changed (0 for a link to nothing): the listing's order."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
