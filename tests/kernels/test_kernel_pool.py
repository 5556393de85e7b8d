"""KernelPool: its bookkeeping with stand-in kernels, then isolation with real ones."""

import asyncio
import os

import pytest

from kernels.base import CellResult
from kernels.pool import KernelPool


class FakeKernel:
    """Starts when ``gate`` opens (at once without one) and records its life."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.gate = gate
        self.started = self.shut_down = self.start_cancelled = False

    async def start(self) -> None:
        try:
            if self.gate is not None:
                await self.gate.wait()
        except asyncio.CancelledError:
            self.start_cancelled = True
            raise
        self.started = True

    async def execute(self, code: str, timeout: float) -> CellResult:
        return CellResult()

    async def interrupt(self) -> None: ...

    async def restart(self) -> None: ...

    async def shutdown(self) -> None:
        self.shut_down = True

    async def __aenter__(self) -> "FakeKernel":
        return self

    async def __aexit__(self, *exc: object) -> None: ...


def recording_factory(gate: asyncio.Event | None = None):
    made: list[FakeKernel] = []

    def factory() -> FakeKernel:
        made.append(FakeKernel(gate))
        return made[-1]

    return factory, made


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_kernels_are_warmed_ahead_and_replaced_on_release():
    factory, made = recording_factory()
    async with KernelPool(2, factory) as pool:
        await settle()
        assert len(made) == 2 and all(k.started for k in made)
        async with pool.acquire() as kernel:
            assert kernel is made[0] and not kernel.shut_down
            await settle()
            assert len(made) == 2  # nothing replaced while in use
        assert kernel.shut_down  # never handed out again
        await settle()
        assert len(made) == 3 and made[2].started
        async with pool.acquire() as second:
            assert second is made[1]


async def test_an_empty_pool_starts_a_kernel_on_demand():
    factory, made = recording_factory()
    pool = KernelPool(0, factory)
    async with pool.acquire() as kernel:
        assert kernel.started and made == [kernel]
    assert kernel.shut_down
    await pool.close()


async def test_concurrent_acquires_get_distinct_kernels():
    factory, made = recording_factory()
    async with KernelPool(1, factory) as pool:
        async with pool.acquire() as a, pool.acquire() as b:
            assert a is not b and a.started and b.started


async def test_close_shuts_down_warm_in_use_and_starting_kernels():
    gate = asyncio.Event()
    gate.set()
    factory, made = recording_factory(gate)
    pool = KernelPool(1, factory)
    async with pool.acquire() as in_use:
        gate.clear()
        await pool.start()  # a replacement that hangs while starting
        await settle()
        await pool.close()
        assert in_use.shut_down
        assert made[1].start_cancelled and not made[1].started
    with pytest.raises(RuntimeError):
        async with pool.acquire():
            pass


async def test_a_caller_that_gives_up_waiting_leaves_the_kernel_for_the_next():
    gate = asyncio.Event()
    factory, made = recording_factory(gate)
    async with KernelPool(1, factory) as pool:

        async def use() -> FakeKernel:
            async with pool.acquire() as kernel:
                return kernel

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(use(), 0.05)
        gate.set()
        assert await use() is made[0]


async def test_real_runs_in_parallel_get_their_own_kernels_and_leak_no_state():
    async with KernelPool(2) as pool:

        async def run(tag: str) -> tuple[str, str]:
            async with pool.acquire() as kernel:
                await kernel.execute(f"secret = {tag!r}", 30)
                await asyncio.sleep(0.2)  # let the other run write its secret too
                pid = kernel._km.provisioner.pid  # as the app sees it: inside a PID namespace each kernel is 2
                return pid, (await kernel.execute("secret", 30)).text

        (pid_a, seen_a), (pid_b, seen_b) = await asyncio.gather(run("a"), run("b"))
        assert pid_a != pid_b
        assert (seen_a, seen_b) == ("'a'", "'b'")
        async with pool.acquire() as fresh:
            assert (await fresh.execute("secret", 30)).error_name == "NameError"


def test_directories_of_a_killed_app_are_swept_and_live_ones_kept(tmp_path):
    import subprocess

    from kernels import workdirs

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = [tmp_path / f"tuiagent-kernel-{gone.pid}-abc", tmp_path / f"tuiagent-run-{gone.pid}-def"]
    live = [tmp_path / f"tuiagent-run-{os.getpid()}-ghi", tmp_path / "tuiagent-run-notapid", tmp_path / "other"]
    for d in stale + live:
        d.mkdir()
        (d / "kernel.json").write_text("{}")
    assert sorted(workdirs.sweep(tmp_path)) == sorted(stale)
    assert [d.exists() for d in stale + live] == [False, False, True, True, True]
