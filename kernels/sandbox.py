"""What code in a kernel may do: a scrubbed environment, an in-process policy, and (where the
platform allows) a network namespace.

The threat model, in short (docs/reliability.md has it in full): the model is not an attacker, but
it writes careless and sometimes destructive code. The policy stops the accidents (deleting or
overwriting the user's files, reading their secrets, talking to the network, starting processes,
loading native code) with a clear PermissionError the model can read. It runs inside the kernel
as a Python audit hook (PEP 578), so it is not a boundary against code written to escape it; the
network namespace is a real boundary for the network, and nothing here replaces a container or VM
for hostile code.

Levels (``sandbox=``):

- ``"auto"`` (our default): the policy, plus a network namespace when ``unshare`` can make one.
- ``"policy"``: the policy and the scrubbed environment, no namespace.
- ``"netns"``: the policy in a network namespace; an error if none can be made.
- ``"off"``: only the resource limits (for users whose cells need processes or the network).
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only in install_policy's annotations, quoted: its source is shipped to the kernel
    from collections.abc import Iterable
    from typing import Any

LEVELS = ("auto", "policy", "netns", "off")

# Variables a kernel inherits from the app; everything else (API keys, tokens, the user's
# configuration) stays out. Locale and library paths keep the interpreter working as it does
# for the user; the thread counts keep numeric libraries polite on shared cores.
_PASSTHROUGH = (
    "PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH", "SYSTEMROOT",
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
)


class SandboxUnavailable(RuntimeError):
    """The isolation asked for cannot be had on this machine."""


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"unknown sandbox level {level!r}; choose one of {', '.join(LEVELS)}")
    return level


def kernel_env(level: str, workdir: Path, runtime_dir: Path, cache_dir: Path) -> dict[str, str]:
    """The kernel's environment: HOME and TMPDIR in the run's directory, and (unless ``off``) only
    the variables in ``_PASSTHROUGH`` (plus ``LC_*``) from the app's environment."""
    if level == "off":
        env = dict(os.environ)
    else:
        env = {k: v for k, v in os.environ.items() if k in _PASSTHROUGH or k.startswith("LC_")}
    tmp = workdir / ".tmp"
    tmp.mkdir(exist_ok=True)
    env.update(
        HOME=str(workdir),
        TMPDIR=str(tmp),
        # The user's IPython profile and startup scripts stay out of the kernel.
        IPYTHONDIR=str(runtime_dir / "ipython"),
        # Shared between runs so matplotlib builds its font cache once, not in every kernel.
        MPLCONFIGDIR=str(cache_dir / "matplotlib"),
        MPLBACKEND="Agg",
        PYTHONNOUSERSITE="1",
    )
    return env


@functools.cache
def _unshare_argv() -> tuple[str, ...] | None:
    """The command prefix that starts a process without network, or None where none works.

    Root can make a network namespace directly; other users need a user namespace too, which
    some distributions turn off. Probed once per process (a few milliseconds).
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    candidates = [(unshare, "--net")] if os.geteuid() == 0 else [(unshare, "--net", "--map-root-user")]
    for argv in candidates:
        try:
            probe = subprocess.run([*argv, "true"], capture_output=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return (*argv, "--")
    return None


def launch_prefix(level: str) -> tuple[str, ...]:
    """What goes before the kernel's command line for ``level``; exec'd, so the kernel keeps its PID
    and interrupts still reach it."""
    if level in ("auto", "netns"):
        prefix = _unshare_argv()
        if prefix is not None:
            return prefix
        if level == "netns":
            raise SandboxUnavailable(
                "sandbox 'netns' needs `unshare` able to make a network namespace (root, or user "
                "namespaces enabled); use sandbox 'policy' or 'auto' here"
            )
    return ()


def install_policy(workdir: str, write_roots: tuple[str, ...]) -> None:
    """Install the audit hook; its source is shipped into the kernel, so it stays self-contained.

    Writes (open for writing, remove, rename, chmod, mkdir ...) are allowed under ``workdir``
    and ``write_roots`` only. Reads are allowed there, in the Python installation and the
    directories on sys.path, in world-readable files of the system directories, and in this
    process's own /proc entry; not in the user's home, other users' files or other processes.
    Starting processes, signalling other processes, sockets and ctypes are refused. Every
    refusal is a PermissionError that says what was refused, so the model can adapt.
    """
    import errno
    import os
    import socket
    import stat
    import sys

    def real(path: object, dir_fd: object = None) -> str | None:
        if path is None or isinstance(path, int):
            return None  # an open descriptor: its file was checked when it was opened
        if not isinstance(path, (str, bytes, os.PathLike)):
            return None  # not a path; the call itself will fail
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return None  # not a path; the call itself will fail
        if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(text):
            text = os.path.join(f"/proc/self/fd/{dir_fd}", text)
        return os.path.realpath(text)

    def roots(paths: "Iterable[object]") -> tuple[str, ...]:
        return tuple(sorted({os.path.realpath(p) for p in paths if isinstance(p, str) and p and os.path.isdir(p)}))

    writable = roots((workdir, *write_roots))
    readable = writable + roots((sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path))
    system = ("/usr", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/sys", "/dev", "/System", "/Library")
    own_proc = f"/proc/{os.getpid()}"
    devices = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random")

    def under(path: str, tops: tuple[str, ...]) -> bool:
        return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)

    def may_read(path: str) -> bool:
        if under(path, readable) or under(path, (own_proc,)):
            return True
        if path == "/proc" or under(path, ("/proc",)):
            return not path.split("/")[2].isdigit()  # /proc/cpuinfo yes, another process no
        if under(path, system):
            try:
                return bool(os.stat(path).st_mode & stat.S_IROTH)
            except OSError:
                return True  # missing: let the call fail as it would anyway
        return False

    def may_write(path: str) -> bool:
        return under(path, writable) or path in devices

    def refused(what: str, path: str | None = None) -> PermissionError:
        message = f"tuiagent sandbox: {what} is not allowed in this kernel"
        return PermissionError(errno.EPERM, message) if path is None else PermissionError(errno.EACCES, message, path)

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    # event -> (path argument, dir_fd argument or None) pairs that the event changes
    changes = {
        "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
        "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
        "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),), "os.truncate": ((0, None),),
        "os.mkfifo": ((0, 2),), "os.mknod": ((0, 3),), "os.setxattr": ((0, None),),
        "os.removexattr": ((0, None),), "shutil.rmtree": ((0, 1),), "sqlite3.connect": ((0, None),),
        "dbm.open": ((0, None),),
    }
    lists = {"os.listdir", "os.scandir"}
    processes = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                 "subprocess.Popen", "os.startfile", "os.killpg"}
    network = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
               "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getnameinfo"}
    native = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
              "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata", "ctypes.cdata/buffer"}
    own_pid = os.getpid()

    def hook(event: str, args: "tuple[Any, ...]") -> None:
        __tracebackhide__ = True  # noqa: F841 (IPython leaves this frame out of tracebacks)
        if event == "open":
            path = real(args[0])
            if path is None:
                return
            mode, flags = args[1], args[2] or 0
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & write_flags)
            if writing and not may_write(path):
                raise refused("writing outside the run's directory", path)
            if not writing and not may_read(path):
                raise refused("reading outside the run's directory and the Python installation", path)
        elif event in changes:
            for at, fd_at in changes[event]:
                path = real(args[at], args[fd_at] if fd_at is not None else None)
                if path is not None and not may_write(path):
                    raise refused("changing files outside the run's directory", path)
        elif event in lists:
            path = real(args[0] if args[0] is not None else ".")
            if path is not None and not may_read(path):
                raise refused("listing directories outside the run's directory", path)
        elif event in processes:
            raise refused("starting or signalling other processes")
        elif event == "os.kill" and args[0] not in (own_pid, 0):
            raise refused("signalling other processes")
        elif event in network or (event == "socket.__new__" and args[1] != socket.AF_UNIX):
            raise refused("network access")
        elif event in native:
            raise refused("native code through ctypes")

    sys.addaudithook(hook)


def policy_code(workdir: Path, write_roots: tuple[Path, ...]) -> str:
    """The start-up cell part that installs the policy, leaving no names behind."""
    roots = tuple(str(p) for p in write_roots)
    return inspect.getsource(install_policy) + f"install_policy({str(workdir)!r}, {roots!r})\ndel install_policy\n"
