"""Warm kernels, started ahead so a run does not wait for one; each is used by one run only."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from kernels.base import Kernel
from kernels.jupyter import JupyterKernel


class KernelPool:
    """Keeps up to ``size`` started kernels from ``factory`` ready.

    ``acquire`` hands out a warm kernel (or starts one when none is ready or
    starting). On release the kernel is shut down, never reused, so no state
    passes from one run to the next, and a replacement starts in the
    background.
    """

    def __init__(self, size: int = 1, factory: Callable[[], Kernel] = JupyterKernel) -> None:
        self.size = size
        self._factory = factory
        self._tasks: set[asyncio.Task[Kernel]] = set()  # kernels starting or started, not yet handed out
        self._warm: deque[asyncio.Task[Kernel]] = deque()  # those of them no caller waits for, oldest first
        self._in_use: set[Kernel] = set()
        self._closed = False

    async def start(self) -> None:
        """Begin warming ``size`` kernels; returns at once."""
        self._fill()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Kernel]:
        """A started kernel for one run, shut down when the block exits."""
        kernel = await self._take()
        self._in_use.add(kernel)
        try:
            yield kernel
        finally:
            self._in_use.discard(kernel)
            self._fill()
            # Shielded: a cancelled run must still not leave its kernel behind.
            await asyncio.shield(kernel.shutdown())

    async def close(self) -> None:
        """Shut down every kernel: warm, starting or in use."""
        self._closed = True
        self._warm.clear()
        tasks = list(self._tasks)
        self._tasks.clear()
        for task in tasks:
            task.cancel()  # a kernel cancelled while starting cleans up after itself
        results = await asyncio.gather(*tasks, return_exceptions=True)
        started = [k for k in results if not isinstance(k, BaseException)]
        await asyncio.gather(*(k.shutdown() for k in [*started, *self._in_use]), return_exceptions=True)

    async def __aenter__(self) -> KernelPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _fill(self) -> None:
        while len(self._warm) < self.size and not self._closed:
            self._warm.append(self._spawn())

    def _spawn(self) -> asyncio.Task[Kernel]:
        task = asyncio.create_task(self._start_one())
        self._tasks.add(task)
        return task

    async def _start_one(self) -> Kernel:
        kernel = self._factory()
        await kernel.start()
        return kernel

    async def _take(self) -> Kernel:
        if self._closed:
            raise RuntimeError("the kernel pool is closed")
        task = self._warm.popleft() if self._warm else self._spawn()
        try:
            kernel = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # close() stopped it
                raise RuntimeError("the kernel pool is closed") from None
            if not self._closed:
                self._warm.appendleft(task)  # our caller gave up waiting: the kernel serves the next one
            raise
        except Exception:  # the kernel failed to start
            self._tasks.discard(task)
            raise
        self._tasks.discard(task)
        if self._closed:  # close() came while we waited and shut this kernel down
            raise RuntimeError("the kernel pool is closed")
        return kernel
