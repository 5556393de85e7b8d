"""The one way tuiagent reads a file it is given or finds: trajectories, scripts, models.toml,
presets, calibration files, datasets, an eval's eval.json and results; ``json_loads`` the one way
their JSON is parsed.

Only a regular file is read (stdin only where ``-`` is given and the caller allows it), and at
most a size cap. The file is opened with O_NONBLOCK and checked with fstat before any read, so a
FIFO never blocks (a process stuck in open() on a FIFO ignores SIGINT and SIGTERM) and a device
such as /dev/zero, or a symlink to one, never fills memory. Every refusal is an ``UnreadableFile``
that names the file.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from tuiagent.errors import ConfigError

# [ours] Size caps. A long run's trajectory is a few MB and an eval's results or a dataset tens of
# MB; a configuration file or a script is a few KB.
DATA_BYTES = 1 << 30
CONFIG_BYTES = 16 << 20
SCRIPT_BYTES = 64 << 20

STDIN = "-"

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
}


class UnreadableFile(ConfigError):
    """A file that cannot be read: missing, not a regular file, too big, not UTF-8."""

    def __init__(self, problem: str, *, file: str, fix: str | None = None, missing: bool = False):
        self.missing = missing
        super().__init__(problem, file=file, fix=fix)


def read_bytes(
    path: Path | str, *, limit: int, what: str = "file", fix: str | None = None, stdin: bool = False
) -> bytes:
    """The bytes of ``path`` (a regular file of at most ``limit`` bytes; with ``stdin``, ``-`` is standard
    input). ``what`` names the file in the error ("trajectory", "script"), ``fix`` says what to do."""
    name = str(path)
    noun = what if what.endswith("file") else f"{what} file"  # "trajectory", or "records file"
    fix = fix or f"name a regular {noun} of at most {limit >> 20} MB"
    if stdin and name == STDIN:
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise UnreadableFile(f"standard input holds more than a {what} can ({limit >> 20} MB)", file=name, fix=fix)
        return data
    try:
        fd = os.open(Path(path).expanduser(), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        missing = isinstance(e, FileNotFoundError)
        raise UnreadableFile(f"cannot read the {what}: {e.strerror}", file=name, fix=fix, missing=missing) from None
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = f"cannot read the {what}: not a regular file ({_KINDS.get(stat.S_IFMT(st.st_mode), 'not a file')})"
    elif st.st_size > limit:
        problem = f"the {what} is {st.st_size >> 20} MB, more than a {what} can be ({limit >> 20} MB)"
    if problem:
        os.close(fd)
        raise UnreadableFile(problem, file=name, fix=fix)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise UnreadableFile(f"cannot read the {what}: {e.strerror}", file=name, fix=fix) from None
    if len(data) > limit:  # grew since fstat
        raise UnreadableFile(f"the {what} is more than a {what} can be ({limit >> 20} MB)", file=name, fix=fix)
    return data


def read_text(path: Path | str, *, limit: int, what: str = "file", fix: str | None = None, stdin: bool = False) -> str:
    """``read_bytes`` decoded as UTF-8; text that is not UTF-8 is an ``UnreadableFile`` naming the byte."""
    data = read_bytes(path, limit=limit, what=what, fix=fix, stdin=stdin)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableFile(
            f"the {what} is not UTF-8 text (byte {e.start})", file=str(path), fix=f"save the {what} as UTF-8"
        ) from None


def json_loads(text: str | bytes) -> Any:
    """``json.loads``, with nesting deeper than the parser's recursion limit raised as the
    JSONDecodeError a malformed line gets (``[[[[...`` a few thousand deep is a RecursionError there)."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", doc, 0) from None
