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

# A Unix socket's path holds at most 107 bytes (sun_path), and a kernel's IPC sockets are
# <kernel dir>/box/ipc-<n>: under a long TMPDIR they cannot be made (ZMQError "File name too long").
SOCKET_PATH_MAX = 107
_SOCKET_TAIL = len("/box/ipc-99")
SHORT_TEMP = "/tmp"  # where a kernel's directory goes when the temp dir is too long for its sockets
# Where a kernel's directory goes first: a short path, in memory, and outside /tmp, which cells may
# write inside the OS boundary; a socket directory under /tmp would be writable through that rule
# (Landlock rules reach across the mounts below them), past the caps of kernels.confine_caps.
SHARED_MEMORY = "/dev/shm"


def _prefix(kind: str) -> str:
    return f"tuiagent-{kind}-{os.getpid()}-"


def kernel_base(tempdir: str | None = None) -> str:
    """The directory a kernel's directory is made in: /dev/shm where there is one to write in, else
    the temp dir, or /tmp when the socket paths would not fit under the temp dir (mkdtemp adds 8
    characters to the prefix)."""
    if os.path.isdir(SHARED_MEMORY) and os.access(SHARED_MEMORY, os.W_OK | os.X_OK):
        return SHARED_MEMORY
    tempdir = tempdir or tempfile.gettempdir()
    longest = len(os.fsencode(tempdir)) + 1 + len(_prefix("kernel")) + 8 + _SOCKET_TAIL
    if longest > SOCKET_PATH_MAX and os.access(SHORT_TEMP, os.W_OK | os.X_OK):
        return SHORT_TEMP
    return tempdir


def make(kind: str) -> Path:
    """A new private (0700) directory for ``kind`` ("kernel" or "run") owned by this process."""
    return Path(tempfile.mkdtemp(prefix=_prefix(kind), dir=kernel_base() if kind == "kernel" else None))


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
    """``sweep`` the temp dir (and /tmp, where kernels go when it is too long), once per process
    (on the first kernel start)."""
    for directory in dict.fromkeys((tempfile.gettempdir(), kernel_base())):
        sweep(Path(directory))
