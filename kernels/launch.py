"""Launching an IPython kernel on the caller's own interpreter, over IPC.

No installed kernelspec is consulted: whatever ``python3`` kernel a machine has
registered may belong to another environment, without sympy or numpy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zmq.asyncio
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from kernels.sandbox import kernel_env

KERNEL_ARGV = (
    sys.executable,
    "-m",
    "ipykernel_launcher",
    "-f",
    "{connection_file}",
    # In-memory history: no writes to a shared history.sqlite on every cell.
    "--HistoryManager.enabled=False",
)


class _OwnInterpreterSpecs(KernelSpecManager):
    """Resolves every kernel name to ipykernel on ``sys.executable``, behind ``prefix`` (the sandbox's).

    Behind bubblewrap the process jupyter-client started is bwrap, not the kernel, and signals to it
    do not reach inside: interrupts then go as a message on the control channel, and ipykernel
    signals itself.
    """

    def __init__(self, prefix: tuple[str, ...] = (), interrupt_mode: str = "signal", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._argv = [*prefix, *KERNEL_ARGV]
        self._interrupt_mode = interrupt_mode

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=self._argv,
            display_name="Python 3 (tuiagent)",
            language="python",
            interrupt_mode=self._interrupt_mode,
            resource_dir="",
        )


def runtime_box(runtime_dir: Path) -> Path:
    """The part of ``runtime_dir`` the kernel may write: its IPC sockets, per-run configuration and caches
    (the connection file beside it stays read-only inside the OS boundary)."""
    box = runtime_dir / "box"
    box.mkdir(mode=0o700, exist_ok=True)
    return box


def new_kernel_manager(
    runtime_dir: Path, prefix: tuple[str, ...] = (), interrupt_mode: str = "signal"
) -> AsyncKernelManager:
    """A manager whose connection file and IPC sockets live in ``runtime_dir``, launching behind ``prefix``.

    Keep ``runtime_dir`` owner-only (mkdtemp makes it 0700): the connection file holds the
    HMAC key that signs every message, and IPC sockets there are reachable by no other user.
    Nothing listens on TCP, so the kernel needs no network, even inside a network namespace.
    """
    return AsyncKernelManager(
        kernel_name="python3",
        transport="ipc",
        ip=str(runtime_box(runtime_dir) / "ipc"),
        connection_file=str(runtime_dir / "kernel.json"),
        kernel_spec_manager=_OwnInterpreterSpecs(prefix, interrupt_mode),
        # One shared context (one I/O thread) for every kernel of this process.
        context=zmq.asyncio.Context.instance(),
    )


def launch_kwargs(
    workdir: Path, runtime_dir: Path, sandbox: str = "off", stderr: int = subprocess.DEVNULL
) -> dict[str, object]:
    """Popen arguments for ``start_kernel``: the sandbox's environment, and the process's own
    stdout discarded and stderr sent to ``stderr`` (a pipe of ``kernels.failures.StderrTail``), so
    neither can scribble over a terminal UI (cell output travels over IOPub, file-descriptor writes
    included)."""
    return {
        "cwd": str(workdir),
        "env": kernel_env(sandbox, workdir, runtime_box(runtime_dir)),
        "stdout": subprocess.DEVNULL,
        "stderr": stderr,
    }
