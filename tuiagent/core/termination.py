"""Ending a command's asyncio work the way Ctrl-C ends it when the terminal closes (SIGHUP) or the
system asks the process to end (SIGTERM): the main task is cancelled, so ``finally`` blocks run,
the end is recorded and kernels are shut down, where the default handlers would kill the process."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def cancelled_on_termination(work: Awaitable[T], stopped_by: list[signal.Signals]) -> T:
    """Await ``work``; on SIGTERM or SIGHUP cancel it (the signal is appended to ``stopped_by``).
    Run it as ``asyncio.run``'s main coroutine: the caller then sees ``asyncio.CancelledError``."""
    task, loop = asyncio.current_task(), asyncio.get_running_loop()
    assert task is not None  # asyncio.run runs this coroutine as a task

    def stop(sig: signal.Signals) -> None:
        stopped_by.append(sig)
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await work
    finally:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
