"""A real IPython kernel per run, driven over jupyter-client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from queue import Empty
from typing import Any

import psutil
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from kernels import leftovers, workdirs
from kernels.base import CellResult, KernelFailed
from kernels.boundary import DISK_MB, FILES, TASKS, BoundaryPaths, Caps
from kernels.failures import StderrTail, failed
from kernels.launch import launch_kwargs, new_kernel_manager, runtime_box
from kernels.limits import startup_code
from kernels.outputs import ImageSaver, OutputCollector
from kernels.sandbox import launch_prefix, policy_code, resolve

# How often a call waiting on the kernel checks that it is still alive.
_LATE_READ_S = 1.0  # [ours] how long past a deadline waiting messages are still read
_LIVENESS_POLL_S = 0.1
# Free space below which a capped tmpfs counts as filled (ours: less than a cell's next write).
_FULL_BYTES = 64 * 1024
# How long bwrap gets to exit once the kernel inside it was killed (ours: it takes milliseconds).
_BWRAP_EXIT_S = 1.0

RESTART_NOTE = (
    "The kernel was restarted: all variables, functions and imports from earlier cells were lost; "
    "only the standard imports are back (math, itertools, fractions, Fraction, sympy, sp, numpy, np)."
)


def _answers(msg: dict[str, Any], msg_id: str) -> bool:
    """Whether ``msg`` answers the execute request ``msg_id``. The parent's type is checked too, since
    ids are not unique: the client and the manager (which sends a strict kernel's interrupt requests)
    number their messages apart under one session id, so after a restart an interrupt request can get
    the id of the cell it interrupts, and its idle status read as the cell's end, while the cell runs on."""
    parent = msg["parent_header"]
    return bool(parent.get("msg_id") == msg_id and parent.get("msg_type") == "execute_request")


class _KernelGone(Exception):
    """The kernel process exited (``exit_code``), or was shut down (None), while a call waited on it."""

    def __init__(self, exit_code: int | None) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


class JupyterKernel:
    """An ipykernel process on this interpreter, in its own working directory, over IPC.

    Every start and restart runs the start-up cell (``kernels.limits``): the
    pre-imports math, itertools, fractions, Fraction, numpy, np, sympy and
    sp (sympy imported when a cell first uses it), then the resource limits.

    - ``timeout``: seconds a call may run when ``execute`` is given none.
    - ``memory_limit_mb``: data memory the cells may allocate on top of the
      started kernel's own (RLIMIT_DATA); past it a cell gets MemoryError. sympy, imported when
      first used, takes about 35 MB of it.
    - ``cpu_time_limit_s``: CPU seconds for the kernel's whole life, start-up
      included, not per call (RLIMIT_CPU); past it the kernel is killed and
      restarted with a fresh budget.
    - ``max_processes``: processes/threads the kernel may add to those its
      user already runs (RLIMIT_NPROC, which does not bind root); inside the OS boundary also the
      sandbox's PID namespace's cap, which does (``kernels.confine_caps``).
    - ``max_files``: inside the OS boundary, the files (inodes) the run's directory and /tmp may
      each hold; ``disk_limit_mb`` is then each one's size (a tmpfs, where a deleted file still
      open counts), and a cell that fills one gets ENOSPC, after which the kernel is restarted.
    - ``workdir``: the kernel's cwd; by default a temporary directory made in
      ``start`` and removed by ``shutdown`` (a given one is kept).
    - ``images_dir``: where the app saves display images (never a directory the kernel can
      write); by default one beside the connection file, removed by ``shutdown``.
    - ``output_limit_chars``: text kept per call; the rest is counted in a note.
    - ``network``: let cells use the host's network (off by default at every level but ``off``).
    - ``disk_limit_mb``: what the run's directory may hold on disk; past it, after a cell, the
      kernel is restarted and (unless ``workdir`` was given) the directory emptied. Outside the OS
      boundary this is counted after each cell; inside it, it is a hard cap (see ``max_files``).
    - ``interrupt_grace_s``: how long a timed-out cell may take to stop after
      the interrupt before the kernel is restarted.
    - ``start_timeout_s``: how long a start or restart may take.
    - ``sandbox``: what cells may do, see ``kernels.sandbox`` ("auto", "strict", "netns", "policy",
      "off"); ``level`` is the one in force ("auto" resolved).
    - None turns a limit off.
    """

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        memory_limit_mb: int | None = 2048,
        cpu_time_limit_s: int | None = 600,
        max_processes: int | None = TASKS,
        workdir: Path | str | None = None,
        images_dir: Path | str | None = None,
        output_limit_chars: int = 1_000_000,
        interrupt_grace_s: float = 1.0,
        start_timeout_s: float = 60.0,
        sandbox: str = "auto",
        disk_limit_mb: int | None = DISK_MB,
        max_files: int | None = FILES,
        network: bool = False,
    ) -> None:
        self.timeout = timeout
        self.sandbox = sandbox
        self.level = resolve(sandbox)  # a level this machine cannot provide fails here, before any run starts
        self._cpu_time_limit_s = cpu_time_limit_s
        self._limits_code = startup_code(memory_limit_mb, cpu_time_limit_s, max_processes, output_limit_chars)
        self._given_workdir = Path(workdir) if workdir is not None else None
        self._images_dir = Path(images_dir) if images_dir is not None else None
        self._output_limit_chars = output_limit_chars
        self._disk_limit = None if disk_limit_mb is None else disk_limit_mb * 1024 * 1024
        self.caps = Caps(bytes=self._disk_limit, files=max_files, tasks=max_processes)
        self.network = network  # cells may use the host's network (a setting, off by default)
        self._grace_s = interrupt_grace_s
        self._start_timeout_s = start_timeout_s
        self._lock = asyncio.Lock()
        self._closed = False
        self._km: AsyncKernelManager | None = None
        self._client: AsyncKernelClient | None = None
        self._runtime_dir: Path | None = None
        self._workdir: Path | None = None
        self._images: ImageSaver | None = None
        self._spawned: set[psutil.Process] = set()
        self._stderr: StderrTail | None = None
        self._baseline: tuple[psutil.Process, leftovers.State] | None = None  # the kernel as its start-up left it

    @property
    def workdir(self) -> Path | None:
        """The kernel's working directory once started."""
        return self._workdir

    async def start(self) -> None:
        async with self._lock:
            if self._km is not None or self._closed:
                raise RuntimeError("a JupyterKernel can be started only once")
            try:
                workdirs.sweep_once()
                self._runtime_dir = workdirs.make("kernel")
                if self._given_workdir is None:
                    self._workdir = workdirs.make("run")
                else:
                    self._workdir = self._given_workdir
                    self._workdir.mkdir(parents=True, exist_ok=True)
                # never the run's directory: the kernel could plant links there for the app to follow
                self._images = ImageSaver(self._images_dir or self._runtime_dir / "images")
                box = runtime_box(self._runtime_dir)
                # the policy names the run's directory, known only now; every restart runs it again
                policy = policy_code(self._workdir, (box,), self.network) if self.level != "off" else ""
                self._startup_code = self._limits_code + policy
                paths = BoundaryPaths(self._workdir, box, self._runtime_dir / "kernel.json")
                self._km = new_kernel_manager(
                    self._runtime_dir,
                    launch_prefix(self.level, paths, self.network, self.caps, self._given_workdir is None),
                    "message" if self.level == "strict" else "signal",
                )
                self._stderr = StderrTail()
                try:
                    await self._km.start_kernel(
                        **launch_kwargs(self._workdir, self._runtime_dir, self.level, self._stderr.fd)
                    )
                except OSError as e:  # the launcher itself (bwrap, the interpreter) could not be run
                    raise self._failed(f"its process could not be started ({e})") from None
                await self._connect()
            except BaseException:
                self._closed = True
                await self._teardown()
                raise

    async def execute(self, code: str, timeout: float | None = None) -> CellResult:
        """Run ``code``; a timeout, a dead kernel or a restart is reported in the result, not raised."""
        timeout = self.timeout if timeout is None else timeout
        async with self._lock:
            if self._client is None:
                raise RuntimeError("the kernel is not running")
            try:
                return await self._execute(code, timeout)
            except asyncio.CancelledError:
                await self.interrupt()  # don't leave the abandoned cell running
                raise
            finally:
                self._remember_processes()

    async def interrupt(self) -> None:
        """Send SIGINT to the kernel's process group; a running cell ends with KeyboardInterrupt."""
        if self._km is not None and self._km.has_kernel:
            await self._km.interrupt_kernel()

    async def restart(self) -> None:
        """Start the kernel afresh (all state lost); waits for a running cell, so interrupt first."""
        async with self._lock:
            if self._client is None:
                raise RuntimeError("the kernel is not running")
            await self._restart()

    async def shutdown(self) -> None:
        """Kill the kernel and remove its files; idempotent. A running cell returns within a liveness poll."""
        self._closed = True
        async with self._lock:
            await self._teardown()

    async def __aenter__(self) -> JupyterKernel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _running(self) -> tuple[AsyncKernelManager, AsyncKernelClient]:
        """The manager and the client of the started kernel (RuntimeError when it is not running)."""
        if self._km is None or self._client is None:
            raise RuntimeError("the kernel is not running")
        return self._km, self._client

    def _manager(self) -> AsyncKernelManager:
        if self._km is None:
            raise RuntimeError("the kernel is not running")
        return self._km

    def _collector(self) -> OutputCollector:
        if self._images is None:
            raise RuntimeError("the kernel is not started")
        return OutputCollector(self._images, self._output_limit_chars)

    async def _execute(self, code: str, timeout: float) -> CellResult:
        started = time.perf_counter()
        collector = self._collector()

        def result(notes: tuple[str, ...] = (), **flags: bool) -> CellResult:
            return CellResult(
                outputs=collector.outputs(),
                error_name=collector.error_name,
                duration_s=time.perf_counter() - started,
                notes=collector.notes() + notes,
                **flags,
            )

        km, client = self._running()
        msg_id = client.execute(code, allow_stdin=False, stop_on_error=False)
        try:
            if await self._collect(client, msg_id, collector, time.monotonic() + timeout):
                reply = await self._reply(client, msg_id)
                if self._baseline is not None and (left := await leftovers.left_behind(*self._baseline)) is not None:
                    await self._restart()
                    return result((left, RESTART_NOTE), error=True, restarted=True)
                if (full := self._over_disk_limit()) is not None:
                    await self._restart()
                    return result((full, RESTART_NOTE), error=True, restarted=True)
                return result(error=collector.error_name is not None or reply.get("status") not in ("ok", None))
            timed_out = f"Execution timed out after {timeout:g} s"
            await km.interrupt_kernel()
            if await self._collect(client, msg_id, collector, time.monotonic() + self._grace_s):
                await self._reply(client, msg_id)
                note = f"{timed_out} and was interrupted; variables from earlier cells are kept."
                return result((note,), error=True, timed_out=True)
            await self._restart()
            note = f"{timed_out} and did not stop when interrupted."
            return result((note, RESTART_NOTE), error=True, timed_out=True, restarted=True)
        except _KernelGone as gone:
            if self._closed:
                return result(("The kernel was shut down while this cell ran.",), error=True, died=True)
            await self._restart()
            note = f"The kernel died ({self._describe_exit(gone.exit_code)})."
            return result((note, RESTART_NOTE), error=True, died=True, restarted=True)

    async def _collect(
        self, client: AsyncKernelClient, msg_id: str, collector: OutputCollector, deadline: float
    ) -> bool:
        """Feed ``msg_id``'s IOPub messages to ``collector`` until the kernel is idle (True) or ``deadline`` (False)."""
        while (msg := await self._next_msg(client.get_iopub_msg, deadline)) is not None:
            if not _answers(msg, msg_id):
                continue
            if msg["msg_type"] == "status":
                if msg["content"]["execution_state"] == "idle":
                    return True
            else:
                collector.add(msg["msg_type"], msg["content"])
        return False

    async def _reply(self, client: AsyncKernelClient, msg_id: str) -> dict[str, Any]:
        """Read the execute_reply's content (sent before the idle status), so replies never pile up
        unread; empty if none came within the grace period."""
        deadline = time.monotonic() + self._grace_s
        while (reply := await self._next_msg(client.get_shell_msg, deadline)) is not None:
            if _answers(reply, msg_id):
                content: dict[str, Any] = reply["content"]
                return content
        return {}

    async def _next_msg(self, get: Callable[..., Awaitable[dict[str, Any]]], deadline: float) -> dict[str, Any] | None:
        """The next message from ``get``; None at ``deadline``; _KernelGone if the kernel exits or is shut down."""
        while not self._closed:
            # Just past the deadline a message already waiting is still taken: on a loaded machine this
            # process may not have run while the kernel answered, and that answer is not late. Bounded,
            # so a cell that floods output cannot outrun its time limit.
            remaining = deadline - time.monotonic()
            if remaining <= -_LATE_READ_S:
                return None
            try:
                return await get(timeout=min(max(remaining, 0.0), _LIVENESS_POLL_S))
            except Empty:
                if remaining <= 0:
                    return None
            provisioner = self._manager().provisioner
            if provisioner is None:
                raise RuntimeError("the kernel has no process")
            exit_code = await provisioner.poll()
            if exit_code is not None:
                raise _KernelGone(exit_code)
        raise _KernelGone(None)

    async def _connect(self) -> None:
        """Open a fresh client, wait until IOPub is subscribed, then run the start-up cell."""
        client = self._manager().client()
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        deadline = time.monotonic() + self._start_timeout_s
        try:
            # ipykernel greets each new IOPub subscriber: from then on no output can be missed.
            while (msg := await self._next_msg(client.get_iopub_msg, deadline)) is not None:
                if msg["msg_type"] == "iopub_welcome":
                    break
            else:
                raise self._failed(f"it did not answer within {self._start_timeout_s:g} s")
            collector = self._collector()
            msg_id = client.execute(self._startup_code, store_history=False, allow_stdin=False)
            if not await self._collect(client, msg_id, collector, deadline):
                raise self._failed(f"its start-up cell did not finish within {self._start_timeout_s:g} s")
            await self._reply(client, msg_id)
            if collector.error_name is not None:
                text = "\n".join(o.text for o in collector.outputs())
                raise KernelFailed(
                    "its start-up cell failed",
                    text,
                    "the pre-imports or the resource limits failed in this environment (the lines above say which)",
                    "install what the lines above name missing into this environment",
                )
            process = leftovers.kernel_process(getattr(self._manager().provisioner, "pid", -1))
            state = leftovers.read(process) if process is not None else None
            self._baseline = (process, state) if process is not None and state is not None else None
        except _KernelGone as gone:
            client.stop_channels()
            raise self._failed(f"it exited during start-up ({self._describe_exit(gone.exit_code)})") from None
        except BaseException:
            client.stop_channels()
            raise
        self._client = client

    def _failed(self, what: str) -> KernelFailed:
        return failed(what, self._stderr.text() if self._stderr is not None else "", self.level)

    def _over_disk_limit(self) -> str | None:
        """A note when the run's directory holds more than its limit (emptied first, unless given)."""
        if self.level == "strict" and (full := self._filled_tmpfs()) is not None:
            return full
        if self._disk_limit is None or self._workdir is None or (self.level == "strict" and not self._given_workdir):
            return None
        used = workdirs.disk_use(self._workdir, self._disk_limit)
        if used <= self._disk_limit:
            return None
        note = (
            f"The files the code wrote in its directory take more than {self._disk_limit >> 20} MB, "
            "the limit of a run's directory"
        )
        if self._given_workdir is not None:
            return note + "; the kernel was restarted and the files kept."
        workdirs.empty(self._workdir)
        (self._workdir / ".tmp").mkdir(exist_ok=True)
        return note + "; they were deleted and the kernel was restarted."

    def _filled_tmpfs(self) -> str | None:
        """A note when a cell filled the run's directory or /tmp inside the OS boundary (each a capped
        tmpfs, seen from here through the kernel's /proc root); a restart gives it fresh ones."""
        if self._baseline is None or self._workdir is None:
            return None
        root = f"/proc/{self._baseline[0].pid}/root"
        places = [("/tmp", f"{root}/tmp")]
        if self._given_workdir is None:  # a given one is the host's directory, counted by _over_disk_limit
            places.insert(0, ("the run's directory", f"{root}{self._workdir}"))
        for place, path in places:
            try:
                fs = os.statvfs(path)
            except OSError:  # the kernel is gone: the next call finds out
                return None
            out_of = [
                *(
                    [f"{self.caps.bytes >> 20} MB"]
                    if self.caps.bytes and fs.f_bavail * fs.f_frsize < _FULL_BYTES
                    else []
                ),
                *([f"{self.caps.files} files"] if self.caps.files and fs.f_favail == 0 else []),
            ]
            if out_of:
                return (
                    f"The files the code wrote filled {place} (its cap: {' and '.join(out_of)}); "
                    "they were deleted and the kernel was restarted."
                )
        return None

    def _remember_processes(self) -> None:
        """Note the processes the cells started (only possible with the sandbox off), while the
        kernel is alive to be their parent: once it dies they belong to init, out of sight."""
        if self.level != "off" or self._km is None or not self._km.has_kernel:
            return
        pid = getattr(self._km.provisioner, "pid", None)  # the local provisioner's (the base class has none)
        if pid is None:
            return
        try:
            self._spawned |= set(psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass

    def _kill_spawned(self) -> None:
        """Kill what the cells started, even a process that left the kernel's process group (setsid);
        psutil checks each is still the process noted, not a reused PID."""
        self._remember_processes()
        for process in self._spawned:
            with contextlib.suppress(psutil.Error):
                process.kill()
        self._spawned.clear()

    async def _end_inside(self, km: AsyncKernelManager) -> None:
        """Behind bwrap: end the sandbox from its PID 1 (bwrap's reaper, which takes the kernel with it)
        and give bwrap a moment to reap it and exit, so each process is reaped by its parent. Killing
        bwrap first would orphan that reaper to whatever PID 1 the machine has."""
        provisioner = km.provisioner
        if self.level != "strict" or provisioner is None or not km.has_kernel:
            return
        with contextlib.suppress(psutil.Error, ValueError):
            for reaper in psutil.Process(getattr(provisioner, "pid", -1)).children():
                reaper.kill()
        deadline = time.monotonic() + _BWRAP_EXIT_S
        while await provisioner.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _restart(self) -> None:
        km, client = self._running()
        client.stop_channels()
        self._client = None
        self._kill_spawned()
        await self._end_inside(km)
        if self._stderr is not None:
            self._stderr.clear()
        await km.restart_kernel(now=True)
        await self._connect()

    async def _teardown(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.stop_channels()
        self._kill_spawned()
        km, self._km = self._km, None
        if km is not None:
            await self._end_inside(km)
            await km.shutdown_kernel(now=True)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
            self._runtime_dir = None
        if self._given_workdir is None and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _describe_exit(self, exit_code: int | None) -> str:
        if exit_code is None:
            return "it was shut down"
        if self.level == "strict" and exit_code > 128:
            exit_code = 128 - exit_code  # bwrap reports a kernel killed by signal N as 128 + N
        if exit_code >= 0:
            return f"exit code {exit_code}"
        try:
            sig = signal.Signals(-exit_code)
        except ValueError:
            return f"killed by signal {-exit_code}"
        if sig == signal.SIGXCPU:
            return f"it used up its CPU-time limit of {self._cpu_time_limit_s} s"
        if sig == signal.SIGKILL:
            return "killed by SIGKILL, often the system running out of memory"
        return f"killed by {sig.name}"
