"""The worker pool of the eval and the collections: how many jobs run at once, a failing job, and
the two ways an interrupt stops it (at once; or after the jobs in flight, then at once)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tuiagent.core.batch import run_batch


async def test_every_item_runs_at_most_concurrency_at_a_time():
    running, most, done = 0, 0, []
    both_in = asyncio.Event()

    async def work(i: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == 2:
            both_in.set()
        await both_in.wait()  # the first job waits until a second is in flight beside it
        running -= 1
        done.append(i)

    assert await asyncio.wait_for(run_batch(range(5), work, concurrency=2), 30) is False  # 1 at a time: no second
    assert sorted(done) == [0, 1, 2, 3, 4] and most == 2


async def test_an_item_waiting_for_another_holds_no_worker():
    lead, follow, other = "lead", "follow", "other"
    items = [lead, follow, other]
    released, order = asyncio.Event(), []

    async def work(item: str) -> None:
        if item is lead:
            await released.wait()  # until "other" ran: it can only run if "follow" does not hold the second worker
        if item is other:
            released.set()
        order.append(item)

    waits_for = {id(follow): lead}
    assert (
        await asyncio.wait_for(run_batch(items, work, concurrency=2, after=lambda i: waits_for.get(id(i))), 30) is False
    )
    assert order == [other, lead, follow]


async def test_a_failing_job_cancels_the_others_and_is_raised():
    cancelled = asyncio.Event()
    waiting = asyncio.Event()

    async def work(i: int) -> None:
        if i == 0:
            try:
                waiting.set()
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        await waiting.wait()
        raise RuntimeError(f"job {i}")

    with pytest.raises(RuntimeError, match="job 1"):
        await run_batch([0, 1, 2], work, concurrency=2)
    assert cancelled.is_set()


async def test_by_default_a_cancel_stops_the_jobs_in_flight_at_once():
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def work(i: int) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.create_task(run_batch([0, 1], work))
    await started.wait()
    task.cancel()  # what asyncio.run does on Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


async def test_the_first_interrupt_finishes_the_job_in_flight_and_a_second_stops_at_once():
    messages: list[str] = []
    done: list[int] = []

    async def finish_after_one_interrupt(i: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0)
        done.append(i)

    assert (
        await run_batch(
            [0, 1, 2], finish_after_one_interrupt, finish_on_interrupt="test", unit="question", log=messages.append
        )
        is True
    )
    assert done == [0] and "finishing the current question" in messages[0]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers were removed

    stopped = asyncio.Event()

    async def never_finishes(i: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise

    messages.clear()
    with pytest.raises(asyncio.CancelledError):
        await run_batch([0, 1], never_finishes, finish_on_interrupt="test", unit="question", log=messages.append)
    asyncio.current_task().uncancel()  # the cancel was run_batch's, of this test's task
    assert stopped.is_set() and "second interrupt" in messages[-1]
