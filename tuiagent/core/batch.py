"""The one worker pool of the eval and the training collections: jobs, ``concurrency`` at a time,
each one after the job it waits for (if any), and what an interrupt does to them.

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
    after: Callable[[Item], Item | None] | None = None,
    finish_on_interrupt: str | None = None,
    unit: str = "job",
    log: Callable[[str], None] = print,
) -> bool:
    """``work(item)`` for each item, ``concurrency`` workers taking them in order; True when an
    interrupt stopped it early. ``after(item)``: an item of the batch that must have finished first
    (the eval's other settings of a problem reuse its first setting's turns); a worker takes the
    first item that may start, so one that waits holds no worker. ``finish_on_interrupt`` is the
    label its messages start with (see the module docstring); ``unit`` names an item in them. The
    first exception of a job cancels the others and is raised."""
    pending = list(items)
    in_batch = {id(item) for item in pending}
    finished: set[int] = set()
    changed = asyncio.Condition()
    stop = asyncio.Event()

    def may_start(item: Item) -> bool:
        first = after(item) if after is not None else None
        return first is None or id(first) not in in_batch or id(first) in finished

    async def take() -> Item | None:
        async with changed:
            while pending and not stop.is_set():
                ready = next((i for i, item in enumerate(pending) if may_start(item)), None)
                if ready is not None:
                    return pending.pop(ready)
                await changed.wait()  # every pending item waits for one in flight
            return None

    async def worker() -> None:
        while True:
            if finish_on_interrupt is not None:
                await asyncio.sleep(SIGNAL_SETTLE_S)
            if stop.is_set():
                return
            item = await take()
            if item is None:
                return
            try:
                await work(item)
            finally:
                async with changed:
                    finished.add(id(item))
                    changed.notify_all()

    with _finishing_on_interrupt(finish_on_interrupt, unit, stop, log):
        workers = [asyncio.create_task(worker()) for _ in range(min(max(1, concurrency), len(pending)))]
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
