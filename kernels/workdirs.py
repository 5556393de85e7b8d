"""The temporary directories kernels live in (runtime files, and the run's working directory).

Their names carry the app's PID, so the directories of an app that was killed (kill -9 gives it
no chance to clean up) can be recognised and removed by the next app that starts a kernel.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

_NAME = re.compile(r"tuiagent-(?:kernel|run)-(\d+)-")


def make(kind: str) -> Path:
    """A new private (0700) directory for ``kind`` ("kernel" or "run") owned by this process."""
    return Path(tempfile.mkdtemp(prefix=f"tuiagent-{kind}-{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def sweep(directory: Path | None = None) -> list[Path]:
    """Remove this user's kernel directories in ``directory`` (the temp dir) whose app is gone."""
    directory = Path(directory or tempfile.gettempdir())
    removed = []
    for entry in directory.glob("tuiagent-*-*-*"):
        match = _NAME.match(entry.name)
        try:
            mine = entry.is_dir() and not entry.is_symlink() and entry.stat().st_uid == os.getuid()
        except OSError:
            continue
        if match and mine and not _alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def disk_use(directory: Path, limit: int) -> int:
    """Bytes the files under ``directory`` take on disk, counted without following links; stops
    counting once past ``limit`` (a directory of a million files is not walked to the end)."""
    used = 0
    for root, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            try:
                used += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:  # removed while we looked
                continue
            if used > limit:
                return used
    return used


def empty(directory: Path) -> None:
    """Remove everything inside ``directory`` (links themselves, never what they point to)."""
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


@functools.cache
def sweep_once() -> None:
    """``sweep`` the temp dir, once per process (on the first kernel start)."""
    sweep()
