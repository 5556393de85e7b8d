"""Launching an IPython kernel on the caller's own interpreter, over IPC.

No installed kernelspec is consulted: whatever ``python3`` kernel a machine has
registered may belong to another environment, without sympy or numpy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import zmq.asyncio
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

KERNEL_ARGV = [
    sys.executable,
    "-m",
    "ipykernel_launcher",
    "-f",
    "{connection_file}",
    # In-memory history: no writes to a shared history.sqlite on every cell.
    "--HistoryManager.enabled=False",
]


class _OwnInterpreterSpecs(KernelSpecManager):
    """Resolves every kernel name to ipykernel on ``sys.executable``."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=KERNEL_ARGV,
            display_name="Python 3 (tuiagent)",
            language="python",
            interrupt_mode="signal",
            resource_dir="",
        )


def new_kernel_manager(runtime_dir: Path) -> AsyncKernelManager:
    """A manager whose connection file and IPC sockets live in ``runtime_dir`` (keep it private: it holds the key)."""
    return AsyncKernelManager(
        kernel_name="python3",
        transport="ipc",
        ip=str(runtime_dir / "ipc"),
        connection_file=str(runtime_dir / "kernel.json"),
        kernel_spec_manager=_OwnInterpreterSpecs(),
        # One shared context (one I/O thread) for every kernel of this process.
        context=zmq.asyncio.Context.instance(),
    )


def launch_kwargs(workdir: Path, runtime_dir: Path) -> dict[str, object]:
    """Popen arguments for ``start_kernel``.

    IPYTHONDIR points into ``runtime_dir`` so the user's IPython profile and
    startup scripts stay out of the kernel; the process's own stdout/stderr
    are discarded so they cannot scribble over a terminal UI (cell output
    travels over IOPub, file-descriptor writes included).
    """
    env = dict(os.environ, IPYTHONDIR=str(runtime_dir / "ipython"))
    return {
        "cwd": str(workdir),
        "env": env,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
    }
