"""Trajectory files: a versioned JSONL header, then one event a line, flushed as each happens."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import IO

from tuiagent.core.events import SCHEMA, SCHEMA_VERSION, Event, from_dict, to_dict
from tuiagent.errors import UserError


class TrajectoryError(UserError):
    """A trajectory file that cannot be written, or is not one this version can read."""


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


class Recorder:
    """Appends events to a trajectory file; every line is flushed before ``write`` returns.

    A crash or Ctrl-C loses nothing already written: at worst the last line is
    partial, and the loader skips a partial last line.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        except OSError as e:
            raise TrajectoryError(f"cannot write trajectory {self.path}: {e.strerror}; choose another --out") from None
        if self.path.stat().st_size == 0:
            self._write_line({"schema": SCHEMA, "version": SCHEMA_VERSION})

    def write(self, event: Event) -> None:
        self._write_line(to_dict(event))

    def _write_line(self, data: dict) -> None:
        if self._file is None:
            raise ValueError(f"recorder for {self.path} is closed")
        self._file.write(json.dumps(data, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(path: Path) -> list[Event]:
    """Read a trajectory back into the same event objects."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise TrajectoryError(f"cannot read trajectory {path}: {e.strerror}") from None
    if not lines:
        raise TrajectoryError(f"{path} is empty, not a trajectory")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        header = {}
    if header.get("schema") != SCHEMA:
        raise TrajectoryError(f"{path} is not a tuiagent trajectory (first line has no schema {SCHEMA!r})")
    if header.get("version", 0) > SCHEMA_VERSION:
        raise TrajectoryError(
            f"{path} was written by a newer tuiagent (trajectory version {header['version']}); upgrade tuiagent"
        )
    events = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            events.append(from_dict(json.loads(line)))
        except json.JSONDecodeError:
            if n == len(lines):  # a line cut short by a crash
                break
            raise TrajectoryError(f"{path}:{n}: not valid JSON") from None
        except (ValueError, TypeError) as e:
            raise TrajectoryError(f"{path}:{n}: {e}") from None
    return events
