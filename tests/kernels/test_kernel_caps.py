"""Caps that hold for whoever runs the kernel, root included (issue 40): a real kernel in the OS
boundary, as the user the suite runs as, given small caps so that a flood hits them in a second.
Each case: the cell gets a readable error, the kernel goes on (restarted when its files filled a
place), and the next cell runs."""

from __future__ import annotations

import os

import pytest

from kernels import sandbox
from kernels.boundary import TASKS as TASKS_DEFAULT
from kernels.jupyter import JupyterKernel

pytestmark = pytest.mark.skipif(
    sandbox.strict_unavailable() is not None, reason=f"no OS boundary here: {sandbox.strict_unavailable()}"
)

DISK_MB, FILES, TASKS = 16, 500, 32


def small_kernel() -> JupyterKernel:
    return JupyterKernel(sandbox="strict", disk_limit_mb=DISK_MB, max_files=FILES, max_processes=TASKS)


async def held(kernel: JupyterKernel) -> dict[str, str]:
    from kernels.confine import CAPS_ENV

    text = (await kernel.execute(f"print(__import__('os').environ.get({CAPS_ENV!r}, ''))", 10)).text.strip()
    return dict(part.split("=", 1) for part in text.split(","))


async def test_a_flood_of_files_stops_at_the_file_cap_and_the_kernel_goes_on():
    async with small_kernel() as kernel:
        assert (await held(kernel))["files"] == "tmpfs"
        code = (
            "import os\nmade = 0\ntry:\n    for i in range(150_000):\n        open(f'f{i}', 'w').close(); made += 1\n"
            "except OSError as e:\n    print(made, e.strerror)"
        )
        result = await kernel.execute(code, 60)
        made, _, why = result.text.partition(" ")
        assert int(made) < FILES and why.startswith("No space left on device"), result.text
        assert result.restarted and f"its cap: {FILES} files" in result.text and "deleted" in result.text
        assert (await kernel.execute("import os; print(os.listdir('.'))", 10)).text == "['.tmp']"


async def test_deleted_files_held_open_count_against_the_size_cap():
    async with small_kernel() as kernel:
        code = (
            "import os\nheld = []\ntry:\n    for i in range(100):\n"
            "        path = os.path.join(os.environ['TMPDIR'], f'u{i}'); f = open(path, 'wb'); os.unlink(path)\n"
            "        held.append(f); f.write(b'x' * (1 << 20)); f.flush()\n"
            "except OSError as e:\n    print(len(held), e.strerror)"
        )
        result = await kernel.execute(code, 60)
        count, _, why = result.text.partition(" ")
        assert int(count) <= DISK_MB and why.startswith("No space left on device"), result.text
        assert result.restarted and f"its cap: {DISK_MB} MB" in result.text
        assert (await kernel.execute("print(1 + 1)", 10)).text == "2"


async def test_thousands_of_threads_stop_at_the_task_cap_for_root_too():
    async with small_kernel() as kernel:
        if (await held(kernel))["tasks"] != "pid_max":
            pytest.skip("this Linux has one pid_max for the whole machine (a per-namespace one came in 6.14)")
        code = (
            # small stacks: 8 MB ones would meet the memory cap (RLIMIT_DATA counts them) first
            "import threading\nthreading.stack_size(1 << 16)\nstop = threading.Event(); started = 0\ntry:\n"
            "    for _ in range(4000):\n"
            "        threading.Thread(target=stop.wait, daemon=True).start(); started += 1\n"
            "except RuntimeError as e:\n    print(started, e)\nstop.set()"
        )
        result = await kernel.execute(code, 60)
        started, _, why = result.text.partition(" ")
        # pid_max = 300 + TASKS: at most that many IDs at once, the kernel's own threads among them
        assert TASKS <= int(started) < 300 + TASKS and why == "can't start new thread", result.text
        assert (await kernel.execute("print(1 + 1)", 10)).text == "2"


async def test_the_socket_directory_takes_no_files():
    async with small_kernel() as kernel:
        code = "try:\n    open(IPC_DIR + '/x', 'w')\nexcept OSError as e:\n    print(type(e).__name__)"
        ipc_dir = os.path.dirname(kernel._manager().connection_file) + "/box"
        result = await kernel.execute(code.replace("IPC_DIR", repr(ipc_dir)), 10)
        assert result.text == "PermissionError", result.text
        await kernel.execute("open('mine.txt', 'w').write('x')", 10)
        # the kernel's directory is a tmpfs over the host's: nothing a cell writes lands on the host
        assert kernel.workdir is not None and os.listdir(kernel.workdir) == [".tmp"]


def test_models_toml_kernel_table_reaches_the_kernel(tmp_path):
    from tuiagent.config.spec import KernelCaps
    from tuiagent.runner import make_kernel

    kernel = make_kernel("jupyter", sandbox="strict", caps=KernelCaps(disk_mb=DISK_MB, files=FILES))
    assert isinstance(kernel, JupyterKernel) and kernel.caps.bytes == DISK_MB << 20 and kernel.caps.files == FILES
    assert kernel.caps.tasks == TASKS_DEFAULT  # not set: the kernel's default


async def test_a_run_whose_cell_hits_a_cap_goes_on_and_records_it():
    from tuiagent.backends.scripted import ScriptedBackend, split_tokens
    from tuiagent.core import events as ev
    from tuiagent.core.loop import Agent
    from tuiagent.protocol import RunSettings

    flood = "for i in range(150_000):\n    open(f'f{i}', 'w').close()"
    turns = [
        split_tokens(f"Let me try.\n```python\n{flood}\n```\n```output", -0.01),
        split_tokens("\\boxed{42}", -0.01),
    ]
    async with small_kernel() as kernel:
        agent = Agent(ScriptedBackend(turns), kernel, settings=RunSettings(output_chars=4000))
        events = [e async for e in agent.stream("problem")]
    result = next(e for e in events if isinstance(e, ev.ToolResult))
    assert result.error and result.restarted and result.error_name == "OSError"  # ENOSPC, in the traceback
    assert f"its cap: {FILES} files" in result.shown  # what the model read, and the trajectory keeps
    assert any(isinstance(e, ev.Notice) and "restarted" in e.message for e in events)
    assert events[-1].answer == "42"
