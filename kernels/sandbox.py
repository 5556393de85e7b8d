"""What code in a kernel may do: the levels, a scrubbed environment, and an in-process policy.

The kernel runs code a language model wrote, careless or, through a prompt injection, hostile.
The boundary is the operating system's (``kernels.boundary``); the audit-hook policy (PEP 578)
here runs inside the kernel as a friendly first layer that turns an attempt into a
PermissionError naming what was refused, so the model can adapt; on its own it is no boundary.
Levels (``sandbox=``): ``auto`` (the strongest that works here, ``resolve``), ``strict``,
``netns``, ``policy``, ``off``. The threat model and what each level guarantees: docs/reliability.md.
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from kernels import boundary, failures

if TYPE_CHECKING:  # only in install_policy's annotations, quoted: its source is shipped to the kernel
    from collections.abc import Iterable
    from typing import Any

LEVELS = ("auto", "strict", "netns", "policy", "off")

# Variables a kernel inherits from the app; everything else (API keys, tokens, the user's
# configuration) stays out. Locale and library paths keep the interpreter working as it does
# for the user; the thread counts keep numeric libraries polite on shared cores.
_PASSTHROUGH = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "SYSTEMROOT",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
)


class SandboxUnavailable(RuntimeError):
    """The isolation asked for cannot be had on this machine."""


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"unknown sandbox level {level!r}; choose one of {', '.join(LEVELS)}")
    return level


def resolve(level: str) -> str:
    """The level in force for ``level`` on this machine: ``auto`` becomes the strongest that works;
    SandboxUnavailable when ``strict`` or ``netns`` cannot be had."""
    check_level(level)
    if level in ("auto", "strict"):
        why = strict_unavailable()
        if why is None:
            return "strict"
        if level == "strict":
            raise SandboxUnavailable(
                f"sandbox 'strict' needs the OS boundary, and here there is {why}; "
                "use sandbox 'auto' to run with the strongest level this machine has"
            )
    if level in ("auto", "netns"):
        if _unshare_argv() is not None:
            return "netns"
        if level == "netns":
            raise SandboxUnavailable(
                "sandbox 'netns' needs `unshare` able to make a network namespace (root, or user "
                "namespaces enabled); use sandbox 'policy' or 'auto' here"
            )
        return "policy"
    return level


def describe(level: str) -> str:
    """The level in force with what it is made of, for doctor and the app's status line; under
    ``auto`` without the OS boundary, why it is missing."""
    shown = resolve(level)
    parts = {
        "strict": f"{boundary.describe()} + policy",
        "netns": "policy + network namespace",
        "policy": "audit-hook policy only, no OS boundary",
        "off": "resource limits only",
    }
    why = f"; strict is not available: {strict_unavailable()}" if level == "auto" and shown != "strict" else ""
    return f"{shown} ({parts[shown]}){why}"


# What the probe runs inside the boundary: the kernel's own imports, after the launcher's.
_PROBE_CODE = "import ipykernel.kernelapp"
_PROBE_TIMEOUT_S = 60  # ours: as long as a kernel's start may take (JupyterKernel.start_timeout_s)


@functools.cache
def strict_unavailable() -> str | None:
    """Why a kernel cannot run inside the OS boundary here; None when it can. Found once per process by
    starting one as a launch does (the same bwrap flags, binds, Landlock and seccomp, the kernel's
    environment) up to importing ipykernel: inside containers it is ``--proc``, ``--dev`` or the user
    namespace that fails, which a bare bwrap call does not show."""
    if (missing := boundary.unavailable()) is not None:
        return missing
    with tempfile.TemporaryDirectory(prefix="tuiagent-probe-") as tmp:
        workdir, box, connection = Path(tmp, "run"), Path(tmp, "box"), Path(tmp, "kernel.json")
        workdir.mkdir()
        box.mkdir()
        connection.write_text("{}")
        argv = [*boundary.prefix(boundary.BoundaryPaths(workdir, box, connection)), sys.executable, "-c", _PROBE_CODE]
        try:
            done = subprocess.run(
                argv,
                env=kernel_env("strict", workdir, box),
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"a kernel's start inside it did not run ({e})"
    if done.returncode == 0:
        return None
    cause, _ = failures.diagnose(done.stderr, "strict")
    return f"a kernel cannot start inside it ({cause})"


def kernel_env(level: str, workdir: Path, box: Path) -> dict[str, str]:
    """The kernel's environment: HOME and TMPDIR in the run's directory, the per-run configuration
    and caches in ``box``, and (unless ``off``) only the variables in ``_PASSTHROUGH`` (plus
    ``LC_*``) from the app's environment."""
    if level == "off":
        env = dict(os.environ)
    else:
        env = {k: v for k, v in os.environ.items() if k in _PASSTHROUGH or k.startswith("LC_")}
    tmp = workdir / ".tmp"
    tmp.mkdir(exist_ok=True)
    # Inside the OS boundary the box takes only sockets: configuration and caches go to the capped
    # tmpfs of the run's directory (kernels.confine_caps), where they die with the kernel.
    state = tmp if level == "strict" else box
    env.update(
        HOME=str(workdir),
        TMPDIR=str(tmp),
        # The user's IPython profile and startup scripts stay out of the kernel.
        IPYTHONDIR=str(state / "ipython"),
        # Per run: a matplotlibrc or font cache one run writes is never read by the next.
        MPLCONFIGDIR=str(state / "matplotlib"),
        XDG_CACHE_HOME=str(state / "cache"),
        XDG_CONFIG_HOME=str(state / "config"),
        MPLBACKEND="Agg",
    )
    if not _imports_from_user_site():
        env["PYTHONNOUSERSITE"] = "1"  # the user's own packages stay out, unless the app itself runs on them
    return env


def _imports_from_user_site() -> bool:
    """Whether this interpreter imports from the user's site-packages (``pip install --user``); a venv does not."""
    return site.ENABLE_USER_SITE is True and site.getusersitepackages() in sys.path


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


def launch_prefix(
    level: str,
    paths: boundary.BoundaryPaths,
    network: bool = False,
    caps: boundary.Caps | None = None,
    private_workdir: bool = True,
) -> tuple[str, ...]:
    """What goes before the kernel's command line for the level in force ``level`` (from ``resolve``);
    ``network`` lets the kernel use the host's network (no namespace, no Landlock TCP rule); ``caps``
    what the kernel may hold (only the OS boundary can make them hold for root), ``private_workdir``
    see ``boundary.prefix``."""
    if level == "strict":
        return tuple(boundary.prefix(paths, network, caps, private_workdir))
    if level == "netns" and not network:
        prefix = _unshare_argv()
        assert prefix is not None, "resolve() checked it"
        return prefix
    return ()


def install_policy(workdir: str, write_roots: tuple[str, ...], network: bool = False) -> None:
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
            parts = path.split("/")
            return len(parts) < 3 or not parts[2].isdigit()  # /proc/cpuinfo yes, another process no
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
        "os.remove": ((0, 1),),
        "os.rmdir": ((0, 1),),
        "os.mkdir": ((0, 2),),
        "os.rename": ((0, 2), (1, 3)),
        "os.link": ((0, 2), (1, 3)),
        "os.symlink": ((1, 2),),
        "os.chmod": ((0, 2),),
        "os.chown": ((0, 3),),
        "os.utime": ((0, 3),),
        "os.truncate": ((0, None),),
        "os.mkfifo": ((0, 2),),
        "os.mknod": ((0, 3),),
        "os.setxattr": ((0, None),),
        "os.removexattr": ((0, None),),
        "shutil.rmtree": ((0, 1),),
        "sqlite3.connect": ((0, None),),
        "dbm.open": ((0, None),),
    }
    lists = {"os.listdir", "os.scandir"}
    processes = {
        "os.fork",
        "os.forkpty",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "subprocess.Popen",
        "os.startfile",
    }
    networking = {
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyname_ex",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
    }
    native = {
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "ctypes.string_at",
        "ctypes.wstring_at",
        "ctypes.cdata",
        "ctypes.cdata/buffer",
    }
    own_pid, own_group = os.getpid(), os.getpgid(0)

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
        elif (event == "os.kill" and args[0] not in (own_pid, 0)) or (event == "os.killpg" and args[0] != own_group):
            raise refused("signalling other processes")
        elif not network and (event in networking or (event == "socket.__new__" and args[1] != socket.AF_UNIX)):
            raise refused("network access")
        elif event in native:
            raise refused("native code through ctypes")

    sys.addaudithook(hook)


def policy_code(workdir: Path, write_roots: tuple[Path, ...], network: bool = False) -> str:
    """The start-up cell part that installs the policy, leaving no names behind."""
    roots = tuple(str(p) for p in write_roots)
    return (
        inspect.getsource(install_policy)
        + f"install_policy({str(workdir)!r}, {roots!r}, {network!r})\ndel install_policy\n"
    )
