"""The start-up cell every kernel runs: the standard imports, then resource limits.

The limits are set from inside the kernel process, so they bind the kernel
and whatever it spawns but not the app. They are a guard against runaway
cells, not a sandbox: a cell running as root can raise them again.
"""

from __future__ import annotations

import inspect

PRE_IMPORTS = (
    "import math, itertools, fractions, numpy, sympy\n"
    "import numpy as np, sympy as sp\n"
    "from fractions import Fraction\n"
)


def apply_limits(extra_data_bytes: int | None, cpu_seconds: int | None, extra_tasks: int | None) -> None:
    """Lower this process's rlimits; its source is shipped into the kernel, so it must stay self-contained.

    RLIMIT_DATA rather than RLIMIT_AS: a kernel with numpy and sympy loaded
    already maps about 1 GB of address space (thread stacks, malloc arenas,
    shared libraries) but a quarter of that as data, so RLIMIT_DATA tracks
    what cells allocate (Linux >= 4.7 counts private mmaps too). Even that
    baseline grows with the core count (OpenBLAS reserves ~40 MB per
    thread), so the limit is set to the data in use now plus
    ``extra_data_bytes``. RLIMIT_CPU counts the whole life of the process;
    its soft limit sends SIGXCPU, which kills the kernel. RLIMIT_NPROC counts
    every process and thread of the user, so it is set to those already
    running plus ``extra_tasks``; Linux does not apply it to root.
    """
    import os
    import resource

    def lower(which: int, soft: int, hard: int) -> None:
        _, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(which, (soft, hard))

    if extra_data_bytes is not None:
        try:
            with open("/proc/self/status") as status:
                in_use = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
        except (OSError, StopIteration):
            in_use = 0
        lower(resource.RLIMIT_DATA, in_use + extra_data_bytes, in_use + extra_data_bytes)
    if cpu_seconds is not None:
        # A hard limit one second later: SIGKILL only if SIGXCPU was ignored.
        lower(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)
    if extra_tasks is not None and os.path.isdir("/proc"):
        uid, tasks = os.getuid(), 0
        for pid in os.listdir("/proc"):
            try:
                if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                    tasks += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:  # the process ended while we looked
                pass
        lower(resource.RLIMIT_NPROC, tasks + extra_tasks, tasks + extra_tasks)


def startup_code(memory_limit_mb: int | None, cpu_time_limit_s: int | None, max_processes: int | None) -> str:
    """The pre-imports, then the limits (measured against the loaded kernel), leaving no other names behind."""
    extra_data_bytes = None if memory_limit_mb is None else memory_limit_mb * 1024 * 1024
    return (
        PRE_IMPORTS
        + inspect.getsource(apply_limits)
        + f"apply_limits({extra_data_bytes!r}, {cpu_time_limit_s!r}, {max_processes!r})\n"
        + "del apply_limits\n"
    )
