"""Trajectory files: a versioned JSONL header, then one event a line, flushed as each happens."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from tuiagent import safe_read
from tuiagent.core.context import turn_prose_end
from tuiagent.core.events import SCHEMA, SCHEMA_VERSION, Event, RunStarted, TurnEnded, from_dict, to_dict
from tuiagent.errors import UserError

MAX_WARNINGS = 5  # bad lines named one by one when loading; the rest are counted in one more warning
# Ours: a long run's trajectory is a few MB; a line holds one event, its outputs capped by the kernel.
MAX_FILE_BYTES = safe_read.DATA_BYTES
MAX_LINE_BYTES = 64 << 20


class TrajectoryError(UserError):
    """A trajectory file that cannot be written, or is not one this version can read."""


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


class Recorder:
    """Appends events to a trajectory file; every line is flushed before ``write`` returns.

    A crash or Ctrl-C loses nothing already written: at worst the last line is
    partial, and the loader skips it with a warning.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        except OSError as e:
            raise TrajectoryError(f"cannot write trajectory {self.path}: {e.strerror}; choose another --out") from None
        # a file this recorder started and closes with no event in it (a run cancelled before it
        # began) is removed: it would list as an empty run
        self._empty_new = os.fstat(self._file.fileno()).st_size == 0
        if self._empty_new:
            self._write_line({"schema": SCHEMA, "version": SCHEMA_VERSION})
        elif not _starts_as_trajectory(self.path):
            self._file.close()
            self._file = None
            raise TrajectoryError(
                f"{self.path} exists and is not a trajectory; it was left as it was: "
                "choose another --out (a directory, or a new .jsonl file)"
            )

    def write(self, event: Event) -> None:
        self._write_line(to_dict(event))
        self._empty_new = False

    def _write_line(self, data: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"recorder for {self.path} is closed")
        try:
            self._file.write(json.dumps(data, ensure_ascii=False) + "\n")
        except UnicodeEncodeError:  # a lone surrogate (undecodable bytes in argv): as \udcXX it loads back the same
            self._file.write(json.dumps(data) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            if self._empty_new:
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Loaded:
    """A trajectory read back: the events of its good lines, and one warning (``file:line: why``)
    for each line that was skipped."""

    events: list[Event]
    warnings: list[str]


def load(path: Path) -> Loaded:
    """Read a trajectory back into the same event objects.

    A trajectory from a user is input like any other: a line cut short by a crash, or one edited
    by hand into something that is not JSON, not UTF-8, an unknown event type or an event with
    missing or mistyped fields, is skipped with a warning and the events around it are kept. A
    file that is not a trajectory, or is one from a newer format version, is refused.
    """
    path = Path(path)
    data = _read_regular_file(path)
    # Split on newlines only: str.splitlines would also split at U+2028 or U+0085, which
    # json.dumps(ensure_ascii=False) leaves unescaped inside strings.
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if not lines:
        raise TrajectoryError(f"{path} is empty, not a trajectory")
    _check_header(path, lines[0])
    events, warnings = [], []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            warnings.append(f"{path}:{n}: longer than {MAX_LINE_BYTES >> 20} MB; line skipped")
            continue
        try:
            events.append(from_dict(json.loads(line.decode("utf-8"))))
        except RecursionError:
            warnings.append(f"{path}:{n}: nested too deeply; line skipped")
        except UnicodeDecodeError:
            warnings.append(f"{path}:{n}: not UTF-8 text; line skipped")
        except json.JSONDecodeError:
            why = "cut short" if n == len(lines) else "not valid JSON"
            warnings.append(f"{path}:{n}: {why}; line skipped")
        except ValueError as e:
            warnings.append(f"{path}:{n}: {e}; line skipped")
    if len(warnings) > MAX_WARNINGS:
        warnings[MAX_WARNINGS:] = [f"{path}: {len(warnings) - MAX_WARNINGS} more bad lines skipped"]
    return Loaded(_with_prose_ends(events), warnings)


def _with_prose_ends(events: list[Event]) -> list[Event]:
    """Turns recorded before ``TurnEnded.prose_end`` existed get it computed, as the loop would have."""
    mode, out = "tool", []
    for e in events:
        if isinstance(e, RunStarted):
            mode = e.mode
        elif isinstance(e, TurnEnded) and e.prose_end is None:
            e = replace(e, prose_end=turn_prose_end(e, mode))
        out.append(e)
    return out


def _read_regular_file(path: Path) -> bytes:
    """The bytes of ``path`` through ``safe_read`` (a regular file of at most MAX_FILE_BYTES), its
    refusal a TrajectoryError as the UI's screens expect."""
    try:
        return safe_read.read_bytes(path, limit=MAX_FILE_BYTES, what="trajectory")
    except safe_read.UnreadableFile as e:
        raise TrajectoryError(str(e)) from None


def _starts_as_trajectory(path: Path) -> bool:
    """Whether the file's first line is a trajectory header (any version)."""
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline(4096).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(header, dict) and header.get("schema") == SCHEMA


def _check_header(path: Path, line: bytes) -> None:
    """Refuse a file whose first line is not a trajectory header this version can read."""
    try:
        header = json.loads(line.decode("utf-8")) if len(line) <= MAX_LINE_BYTES else None
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are both ValueErrors
        header = None
    if not isinstance(header, dict) or header.get("schema") != SCHEMA:
        raise TrajectoryError(f"{path} is not a tuiagent trajectory (first line has no schema {SCHEMA!r})")
    version = header.get("version", 0)
    if not isinstance(version, int):
        raise TrajectoryError(f"{path} has a trajectory version {version!r} that is not a number")
    if version > SCHEMA_VERSION:
        raise TrajectoryError(
            f"{path} was written by a newer tuiagent (trajectory version {version}); upgrade tuiagent"
        )
