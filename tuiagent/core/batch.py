"""The one worker pool of the eval and the training collections: independent jobs, ``concurrency``
at a time, and what an interrupt does to them.

By default Ctrl-C stops at once: ``asyncio.run`` cancels the main task, and with it every job in
flight, whose results are not written (an eval's runs are redone on resuming). With
``finish_on_interrupt`` (the collections, whose questions take minutes) the first SIGINT or SIGTERM
lets the jobs in flight finish and starts no more; a second one cancels them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

Item = TypeVar("Item")

SIGNAL_SETTLE_S = 0.05  # [ours] before taking a job: a signal just delivered reaches its handler (two loop turns)


async def run_batch(
    items: Sequence[Item],
    work: Callable[[Item], Awaitable[None]],
    *,
    concurrency: int = 1,
    finish_on_interrupt: str | None = None,
    unit: str = "job",
    log: Callable[[str], None] = print,
) -> bool:
    """``work(item)`` for each item, ``concurrency`` workers taking them in order; True when an
    interrupt stopped it early. ``finish_on_interrupt`` is the label its messages start with (see
    the module docstring); ``unit`` names an item in them. The first exception of a job cancels the
    others and is raised."""
    pending = iter(items)
    stop = asyncio.Event()

    async def worker() -> None:
        while True:
            if finish_on_interrupt is not None:
                await asyncio.sleep(SIGNAL_SETTLE_S)
            if stop.is_set():
                return
            try:
                item = next(pending)
            except StopIteration:
                return
            await work(item)

    with _finishing_on_interrupt(finish_on_interrupt, unit, stop, log):
        workers = [asyncio.create_task(worker()) for _ in range(min(max(1, concurrency), len(items)))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
    return stop.is_set()


@contextlib.contextmanager
def _finishing_on_interrupt(
    label: str | None, unit: str, stop: asyncio.Event, log: Callable[[str], None]
) -> Iterator[None]:
    """SIGINT and SIGTERM handlers for the graceful stop (none when ``label`` is None), removed after."""
    if label is None:
        yield
        return
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        if stop.is_set():
            log(f"[{label}] second interrupt: stopping now, the unfinished {unit} is not written")
            if main is not None:
                main.cancel()
            return
        log(
            f"[{label}] interrupt ({signal.Signals(sig).name}): finishing the current {unit}, then stopping "
            "(again to stop now)"
        )
        stop.set()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
