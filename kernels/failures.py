"""Why a kernel did not start: its own stderr, kept as it runs, read for the likely cause and a fix.

A kernel's stdout and stderr must not reach the terminal (they would scribble over the app), and
cell output travels over IOPub anyway; but what a failing start-up prints (bwrap's complaint, an
import error) is the one clue a person has. So stderr goes to a pipe whose last few KB are kept in
memory: a pipe, not a file, since code in the kernel could write to it without end.
"""

from __future__ import annotations

import os
import re
import select
import sys
import threading

from kernels import boundary
from kernels.base import KernelFailed

KEEP_BYTES = 8192  # ours: a traceback's worth
SHOWN_LINES = 12  # of them, in a message
_POLL_S = 0.1

_MISSING = re.compile(r"No module named '([^']+)'")
# The distributions that bring the modules a kernel imports at start-up.
_DISTRIBUTIONS = {
    "ipykernel": "ipykernel",
    "ipykernel_launcher": "ipykernel",
    "jupyter_client": "jupyter-client",
    "zmq": "pyzmq",
    "IPython": "ipython",
    "traitlets": "traitlets",
    "tornado": "tornado",
}


class StderrTail:
    """The write end of a pipe (``fd``) for every launch of one kernel, and the last bytes it carried.

    A thread drains the pipe so the kernel never blocks on it; ``text()`` first reads what is still
    in the pipe, so a kernel that just exited is heard in full.
    """

    def __init__(self) -> None:
        self._read, self.fd = os.pipe()  # the write end goes to each launch (Popen dups it)
        os.set_blocking(self._read, False)
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._drain, name="kernel-stderr", daemon=True).start()

    def _drain(self) -> None:
        while True:
            readable, _, _ = select.select([self._read], [], [], _POLL_S)
            with self._lock:
                if self._closed or (readable and self._take() == "end"):
                    return

    def _take(self) -> str:
        """Read what the pipe holds now, the lock held: "data", "empty" (nothing now) or "end"."""
        try:
            chunk = os.read(self._read, 65536)
        except BlockingIOError:
            return "empty"
        self._kept += chunk
        del self._kept[:-KEEP_BYTES]
        return "data" if chunk else "end"

    def clear(self) -> None:
        """Forget what was kept (before a start, so a failure shows that start's lines only)."""
        with self._lock:
            self._flush()
            self._kept.clear()

    def _flush(self) -> None:
        while not self._closed and self._take() == "data":
            pass

    def text(self) -> str:
        """The last lines the kernel wrote to stderr."""
        with self._lock:
            self._flush()
            lines = self._kept.decode("utf-8", "replace").strip().splitlines()
        return "\n".join(lines[-SHOWN_LINES:])

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self.fd)
            os.close(self._read)


def failed(what: str, stderr: str, level: str) -> KernelFailed:
    """The KernelFailed for a start that ended with ``what``, having printed ``stderr``, at sandbox ``level``."""
    cause, fix = diagnose(stderr, level)
    return KernelFailed(what, stderr, cause, fix)


def diagnose(stderr: str, level: str) -> tuple[str, str]:
    """The likely cause of a failed start, and its fix, from what the kernel printed."""
    python = sys.executable
    fallback = (
        "run with --sandbox auto, which falls back to the strongest level that works here, or "
        "--sandbox netns; `tuiagent doctor` says why the OS boundary cannot be had"
    )
    lines = stderr.splitlines()
    if bwrap := next((line for line in lines if line.startswith("bwrap:")), None):
        return (
            f"bubblewrap could not build the sandbox ({bwrap}); inside a container this is usually the "
            "fresh /proc of a PID namespace or a profile that refuses user namespaces",
            fallback,
        )
    if confine := next((line for line in lines if line.startswith("tuiagent sandbox:")), None):
        return f"Landlock or seccomp could not be applied ({confine})", fallback
    if missing := _MISSING.search(stderr):
        return _missing_module(missing.group(1), level)
    if lines:
        return (
            f"the kernel's Python failed while starting ({lines[-1]})",
            f"reinstall the kernel packages ({python} -m pip install --force-reinstall ipykernel jupyter-client "
            "pyzmq) if it names one of them; otherwise the lines above say what",
        )
    return (
        "it printed nothing: a machine too busy to start Python in time, or a start-up that hangs",
        "try again; `tuiagent doctor` times a kernel start",
    )


def _missing_module(module: str, level: str) -> tuple[str, str]:
    top = module.split(".")[0]
    found = boundary.package_dirs((top,))
    if not found:
        distribution = "tuiagent" if top in boundary.PROJECT_PACKAGES else _DISTRIBUTIONS.get(top, top)
        fix = (
            "install the project again (`make run`, or pip install -e . in the checkout)"
            if top in boundary.PROJECT_PACKAGES
            else f"{sys.executable} -m pip install {distribution}"
        )
        return f"{module} is not installed for {sys.executable}", fix
    where = found[0]
    hidden = boundary.hidden_dirs()
    if level == "strict" and boundary.hides(where, hidden):
        return (
            f"the sandbox hides {where}, where {top} is installed",
            "run with --sandbox netns until this is fixed, and report it with the output of `tuiagent doctor`",
        )
    return (
        f"{top} is installed in {where}, but the kernel's Python does not look there (PYTHONPATH, "
        "PYTHONNOUSERSITE or a .pth file that the app's environment has and the kernel's does not)",
        "install it into the environment of the interpreter that runs tuiagent",
    )
