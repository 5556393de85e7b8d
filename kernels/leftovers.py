"""What a cell left running in the kernel process, read from outside it (/proc), so that no code in
the cell can hide or replace the check.

A thread that outlives its cell keeps running and ipykernel sends its later prints with whatever
cell runs then; a signal handler a cell installed (a SIGALRM from ``setitimer``, say) fires in a
later, innocent cell. Python can stop neither, so either ends with a kernel restart. The kernel's
own threads and handlers are those present once its start-up cell has run.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass

import psutil

# How long a cell's threads get to end after it (ours: a thread joined at the cell's end is gone
# within milliseconds; one meant to linger is still there).
GRACE_S = 0.5
_POLL_S = 0.02


@dataclass(frozen=True)
class State:
    threads: int
    caught: int  # signals with a handler (SigCgt)
    ignored: int  # signals ignored (SigIgn)


def kernel_process(launched_pid: int) -> psutil.Process | None:
    """The ipykernel process: ``launched_pid`` itself, or (behind bwrap or unshare) its descendant."""
    try:
        launched = psutil.Process(launched_pid)
        # the innermost: bwrap's own command line names the kernel's too
        return next(
            (
                p
                for p in reversed([launched, *launched.children(recursive=True)])
                if p.cmdline()[1:3] == ["-m", "ipykernel_launcher"]
            ),
            None,
        )
    except (psutil.Error, ValueError):  # gone, or no PID at all
        return None


def read(process: psutil.Process) -> State | None:
    try:
        with open(f"/proc/{process.pid}/status") as f:
            fields = dict(line.split(":\t", 1) for line in f if ":\t" in line)
        return State(int(fields["Threads"]), int(fields["SigCgt"], 16), int(fields["SigIgn"], 16))
    except (OSError, KeyError, ValueError):
        return None  # the kernel is gone, or this is not Linux: nothing to compare


def _signals(mask: int) -> str:
    names = []
    for number in range(1, 65):
        if mask >> (number - 1) & 1:
            try:
                names.append(signal.Signals(number).name)
            except ValueError:
                names.append(f"signal {number}")
    return ", ".join(names)


async def left_behind(process: psutil.Process, baseline: State) -> str | None:
    """What the last cell left behind compared with ``baseline``, as a note; None when nothing."""
    deadline = time.monotonic() + GRACE_S
    while (now := read(process)) is not None and now.threads > baseline.threads and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
    if now is None:
        return None
    found = []
    if now.threads > baseline.threads:
        found.append(f"{now.threads - baseline.threads} thread(s) still running")
    if now.caught & ~baseline.caught:
        found.append(f"a handler for {_signals(now.caught & ~baseline.caught)}")
    if now.ignored != baseline.ignored:
        found.append(f"the handling of {_signals(now.ignored ^ baseline.ignored)} changed")
    if not found:
        return None
    return (
        f"The code left {' and '.join(found)} in the kernel after the cell ended; Python cannot undo "
        "that safely, so the kernel was restarted."
    )
