"""One writer per eval directory: an advisory ``fcntl.flock`` on ``<dir>/eval.lock``, held for a
whole ``tuiagent eval`` (resume and ``--report-only`` included).

Two evals given the same ``--out`` would otherwise both append every run and write every
trajectory twice. The kernel drops the lock when its holder dies, kill -9 included, so a stale
file never blocks the next run; the PID written into it only names the holder in the refusal. A directory the lock
created is removed again when the command stops before writing anything into it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tuiagent.errors import ConfigError

LOCK = "eval.lock"


class DirectoryBusy(ConfigError):
    """Another process holds the eval directory's lock."""


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s lock while the block runs; refuse at once (no waiting) when another process holds it."""
    created = not directory.exists()
    path = directory / LOCK
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        raise ConfigError(
            f"cannot take the eval directory's lock {path}: {e.strerror}", fix="pass an --out you can write to"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise DirectoryBusy(
                f"another tuiagent eval (PID {holder}) is writing to {directory}",
                fix="wait for it to finish (or stop it), or pass another --out",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            if created and os.listdir(directory) == [LOCK]:  # stopped before any run: leave no directory
                with suppress(OSError):
                    path.unlink()
                    directory.rmdir()
    finally:
        os.close(fd)  # drops the lock (the kernel drops it too if this process dies first)
