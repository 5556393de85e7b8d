"""Caps that hold for every user, root included, set inside the sandbox before Landlock and seccomp.

RLIMIT_NPROC does not bind root and a bind-mounted directory has no size or file-count limit, so
``kernels.confine`` asks bubblewrap to keep CAP_SYS_ADMIN and CAP_SETPCAP inside the sandbox's user
namespace (never outside it), uses them here, then drops every capability from the bounding set for
good before the kernel starts:

- the run's directory becomes a tmpfs of ``bytes`` and ``files`` inodes; /tmp (bubblewrap's tmpfs)
  is remounted with the same limits. A tmpfs counts a deleted file that is still open against both,
  so neither an unlinked-but-open file nor a million empty ones gets past them.
- the sandbox's PID namespace gets ``pid_max`` (Linux 6.14 made it per namespace): its threads and
  processes together can then hold only so many IDs, whoever the user is.

Standard library only, like ``kernels.confine``.
"""

from __future__ import annotations

import ctypes
import os

_MS_REMOUNT, _MS_NOSUID, _MS_NODEV = 32, 2, 4
_PR_CAPBSET_DROP = 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# Linux keeps the first 300 PIDs of a namespace out of use once its counter wraps (RESERVED_PIDS in
# kernel/pid.c), so a namespace with pid_max = 300 + N always has room for N tasks, and never more
# than 299 + N at once.
RESERVED_PIDS = 300
PID_MAX_FILE = "/proc/sys/kernel/pid_max"

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def tmpfs_options(size_bytes: int | None, files: int | None) -> bytes:
    """Mount options; a limit that is None is left to Linux (half the memory, as many inodes)."""
    options = [f"size={size_bytes}"] if size_bytes is not None else []
    options += [f"nr_inodes={files}"] if files is not None else []
    return ",".join([*options, "mode=0700"]).encode()


def mount_tmpfs(path: str, size_bytes: int | None, files: int | None) -> None:
    """A fresh tmpfs of ``size_bytes`` and ``files`` inodes at ``path``."""
    flags = _MS_NOSUID | _MS_NODEV
    _check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, tmpfs_options(size_bytes, files)), f"mount {path}")


def remount_tmpfs(path: str, size_bytes: int | None, files: int | None) -> None:
    """Give the tmpfs at ``path`` (bubblewrap's) the same limits."""
    flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV
    _check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, tmpfs_options(size_bytes, files)), f"remount {path}")


def cap_tasks(tasks: int) -> bool:
    """Set this PID namespace's pid_max so its tasks stay within ``RESERVED_PIDS + tasks``; False where
    this Linux keeps one pid_max for the whole machine (before 6.14) and the write is refused."""
    try:
        with open(PID_MAX_FILE, "w") as f:
            f.write(str(RESERVED_PIDS + tasks))
        with open(PID_MAX_FILE) as f:
            return int(f.read()) == RESERVED_PIDS + tasks
    except (OSError, ValueError):
        return False


def drop_capabilities() -> None:
    """Empty the bounding set (so no execve brings a capability back, uid 0 or not), then every set."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(_LINUX_CAPABILITY_VERSION_3, 0), (Data * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def apply(caps: dict[str, int | None], workdir: str | None) -> dict[str, str]:
    """Set the caps in ``caps`` (``bytes``, ``files``, ``tasks``; None: no cap) for /tmp and, unless
    None (a directory the user gave, whose files must outlive the kernel), ``workdir``, then drop every
    capability; returns what holds, by name, for the kernel's environment."""
    if workdir is not None:
        mount_tmpfs(workdir, caps["bytes"], caps["files"])
        os.chdir(workdir)  # bubblewrap's --chdir left the cwd on the directory now hidden under the tmpfs
        os.mkdir(".tmp", 0o700)  # the kernel's TMPDIR
    remount_tmpfs("/tmp", caps["bytes"], caps["files"])
    tasks = caps["tasks"]
    held = {
        "files": "tmpfs" if workdir is not None else "tmp-only",
        "tasks": "pid_max" if tasks is not None and cap_tasks(tasks) else "none",
    }
    drop_capabilities()
    return held
