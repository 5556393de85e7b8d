"""Code the model may write, run in a real kernel: each cell ends with a clear tool error within its
time limit, the kernel recovers or is replaced, the user's files and processes are untouched, and
nothing is left behind. docs/reliability.md lists these cases against what tuiagent does.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass

import psutil
import pytest
import pytest_asyncio

from kernels.jupyter import RESTART_NOTE, JupyterKernel
from kernels.sandbox import SandboxUnavailable, resolve
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.core.trajectory import Recorder, load
from tuiagent.protocol import RunSettings

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "TUIAGENT_TEST_SECRET"
# Slack on top of a cell's time limit for an interrupt grace period plus a kernel restart.
RESTART_SLACK_S = 15


@dataclass(frozen=True)
class Case:
    code: str
    timeout: float
    expect: str  # "interrupted", "restarted", "died", "refused", "truncated", "ok", or an exception name
    levels: tuple[str, ...] = (
        "strict",
        "netns",
        "policy",
    )  # where the case holds (an OSError from the OS, or the policy)
    # The kernel's own limits decide it (time limit, restart, output cap), the same at every level:
    # it runs at the first level only, so the suite does not wait for it three times.
    kernel_limit: bool = False
    # Printed by the cell once what the case is about is in place: a result without it comes from a
    # kernel that did not get that far within the time limit (a starved one on a loaded machine), and
    # the cell runs again with twice the limit. So does a cell meant to end at once (an error, a
    # refusal, an output) that timed out instead.
    ready: str | None = None


CASES = {
    "pure-Python infinite loop": Case("while True: pass", 2, "interrupted"),
    "sympy call that does not return": Case(
        "sp.factorint(sp.nextprime(10**40) * sp.nextprime(10**41))", 2, "interrupted", kernel_limit=True
    ),
    "C loop that ignores interrupts": Case("sum(range(10**15))", 2, "restarted"),
    "thread left running": Case(
        "import threading, time\nthreading.Thread(target=lambda: time.sleep(1000), daemon=True).start()", 5, "restarted"
    ),
    "_thread.start_new_thread": Case(
        "import _thread, time\n_thread.start_new_thread(time.sleep, (1000,))", 5, "restarted", kernel_limit=True
    ),
    "threading.Timer": Case(
        "import threading\nthreading.Timer(1000, print).start()", 5, "restarted", kernel_limit=True
    ),
    "stray-thread check replaced": Case(
        "import threading, time\nthreading.enumerate = lambda: []\nthreading.Thread(target=time.sleep, args=(1000,)).start()",
        5,
        "restarted",
        kernel_limit=True,
    ),
    "SIGALRM handler and timer left set": Case(
        "import signal\nsignal.signal(signal.SIGALRM, lambda *a: print('boom'))\nsignal.setitimer(signal.ITIMER_REAL, 3)",
        5,
        "restarted",
    ),
    "SIGTERM ignored": Case("import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)", 5, "restarted"),
    "memory bomb": Case("hog = [bytearray(10**7) for _ in range(10**6)]", 30, "MemoryError"),
    "fork bomb": Case("import os\nwhile True: os.fork()", 5, "refused"),
    "subprocess": Case("import subprocess; subprocess.run(['sleep', '100'])", 5, "refused"),
    "shell escape": Case("import os; os.system('sleep 100')", 5, "refused"),
    "giant output": Case("print('x' * 300_000_000)", 60, "truncated", kernel_limit=True),
    "flood of small outputs": Case("for i in range(10**6): print(i)", 60, "truncated", kernel_limit=True),
    "input()": Case("input('? ')", 5, "StdinNotImplementedError"),
    "sys.exit()": Case("import sys; sys.exit(3)", 5, "SystemExit"),
    "os._exit(1)": Case("import os; os._exit(1)", 30, "died"),
    "segfault through ctypes": Case("import ctypes; ctypes.string_at(0)", 5, "refused"),
    "SIGINT handler changed": Case(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ignoring SIGINT', flush=True)\nwhile True: pass",
        2,
        "restarted",
        kernel_limit=True,
        ready="ignoring SIGINT",
    ),
    "signal another process": Case("import os, signal; os.kill(os.getppid(), signal.SIGTERM)", 5, "refused"),
    "read the app's environment": Case("import os; open(f'/proc/{os.getppid()}/environ').read()", 5, "refused"),
    "read a secret through dir_fd": Case(
        "import os; os.read(os.open('shadow', os.O_RDONLY, dir_fd=os.open('/etc', os.O_RDONLY)), 10)",
        5,
        "PermissionError",
        levels=("strict",),
    ),
    "start a process without an audit event": Case(
        "import multiprocessing.util as u; u.spawnv_passfds(b'/bin/sleep', [b'sleep', b'100'], [])",
        5,
        "PermissionError",
        levels=("strict",),
    ),
    "signal the app through a pidfd": Case(
        f"import os, signal; signal.pidfd_send_signal(os.pidfd_open({os.getpid()}), signal.SIGTERM)",
        5,
        "OSError",
        levels=("strict",),
    ),
    "renice the app": Case(
        f"import os; os.setpriority(os.PRIO_PROCESS, {os.getpid()}, 19)", 5, "OSError", levels=("strict",)
    ),
    "2 GiB file": Case(
        "import os; os.posix_fallocate(os.open('big', os.O_CREAT | os.O_WRONLY), 0, 2 << 30)", 10, "OSError"
    ),
    "too many open files": Case("fs = [open('/dev/null') for _ in range(5000)]", 10, "OSError"),
    "list /proc": Case("import os; print(len(os.listdir('/proc')) > 0)", 5, "ok"),
    "lone surrogate between good prints": Case("print('before'); print('\\ud800'); print('after')", 5, "ok"),
    "30 MB exception message": Case("raise ValueError('x' * 30_000_000)", 30, "ValueError", kernel_limit=True),
}


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """A file and a directory of the user's, outside any run directory."""
    home = tmp_path_factory.mktemp("user-home")
    (home / "notes.txt").write_text("keep me")
    (home / "project").mkdir()
    (home / "project" / "main.py").write_text("print('hi')")
    return home


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["strict", "netns", "policy"])
async def kernel(request, user_files):
    """A kernel at each sandbox level this machine supports."""
    if not available(request.param):
        pytest.skip(f"this machine cannot provide sandbox {request.param!r}")
    os.environ[SECRET] = "hunter2"
    try:
        # An interrupt that takes the kernel more than the default 1 s to act on (a loaded machine: it
        # once took longer beside an eval and three test workers) restarts the kernel instead: a grace
        # of 3 s keeps "interrupted" apart from "restarted" without timing the machine.
        async with JupyterKernel(memory_limit_mb=1024, sandbox=request.param, interrupt_grace_s=3.0) as k:
            yield k
    finally:
        del os.environ[SECRET]


def assert_untouched(user_files):
    assert (user_files / "notes.txt").read_text() == "keep me"
    assert (user_files / "project" / "main.py").read_text() == "print('hi')"


async def assert_alive(kernel):
    result = await kernel.execute("print('alive')", 10)
    assert result.text == "alive" and not result.error


@pytest.mark.parametrize("name", list(CASES))
async def test_hostile_cell_ends_clearly_and_the_kernel_goes_on(kernel, user_files, name):
    case = CASES[name]
    if kernel.level not in case.levels:
        pytest.skip(f"only the OS boundary stops this; the kernel runs at level {kernel.level!r}")
    if case.kernel_limit and kernel.level != case.levels[0]:
        pytest.skip(f"the kernel's own limit decides this at every level; run at level {case.levels[0]!r}")
    timeout = case.timeout
    while True:
        started = time.monotonic()
        result = await kernel.execute(case.code, timeout)
        elapsed = time.monotonic() - started
        starved = result.timed_out and case.expect not in ("interrupted", "restarted")  # it meant to end at once
        reached = case.ready is None or case.ready in result.text
        if (reached and not starved) or timeout >= 4 * case.timeout:
            break  # the case got where it tests something, or three tries (limits x1, x2, x4) did not
        timeout *= 2
    assert elapsed < timeout + RESTART_SLACK_S, f"{name} took {elapsed:.1f} s"
    if case.expect == "interrupted":
        assert result.error and result.timed_out and not result.restarted
        assert "timed out" in result.text
    elif case.expect == "restarted":
        assert result.error and result.restarted and RESTART_NOTE in result.notes
    elif case.expect == "died":
        assert result.error and result.died and result.restarted and "exit code 1" in result.text
    elif case.expect == "refused":
        assert result.error and result.error_name == "PermissionError" and not result.restarted
        assert "tuiagent sandbox" in result.text
    elif case.expect == "truncated":
        assert not result.error and "Output truncated" in result.text
    elif case.expect == "ok":
        assert not result.error, result.text
        assert "before" not in case.code or result.text == "before\n\ufffd\nafter", result.text
    else:
        subclasses = ("PermissionError", "FileNotFoundError", "ProcessLookupError") if case.expect == "OSError" else ()
        assert result.error and result.error_name in (case.expect, *subclasses) and not result.restarted, result.text
    assert len(result.text) < 1_100_000  # the output cap (1M characters) plus notes
    await assert_alive(kernel)
    assert_untouched(user_files)


async def test_files_outside_the_run_directory_cannot_be_read_changed_or_deleted(kernel, user_files):
    notes, project = user_files / "notes.txt", user_files / "project"
    for code in (
        f"open({str(notes)!r}).read()",
        f"open({str(notes)!r}, 'w').write('gone')",
        f"import os; os.remove({str(notes)!r})",
        f"import os; os.rename({str(notes)!r}, 'stolen.txt')",
        f"import shutil; shutil.rmtree({str(project)!r})",
        f"import os; os.listdir({str(user_files)!r})",
        f"import os; os.symlink({str(notes)!r}, 'link'); open('link', 'w').write('gone')",
        f"import pathlib; pathlib.Path({str(project / 'main.py')!r}).write_text('gone')",
    ):
        result = await kernel.execute(code, 10)
        assert result.error_name == "PermissionError" and "tuiagent sandbox" in result.text, code
    assert_untouched(user_files)


async def test_links_planted_for_the_image_saver_are_not_followed(kernel, user_files):
    code = (
        f"import os\nfor n in range(1, 50): os.symlink({str(user_files / 'notes.txt')!r}, f'image-{{n}}.png')\n"
        "from IPython.display import Image, display\n"
        "display(Image(data=b'\\x89PNG\\r\\n\\x1a\\n' + b'x' * 100, format='png'))"
    )
    result = await kernel.execute(code, 60)  # a limit, not a wait: the cell takes well under a second
    saved = [o.path for o in result.outputs if o.path]
    assert saved and all(not p.startswith(str(kernel.workdir)) for p in saved), result.text
    assert_untouched(user_files)


async def test_the_run_directory_is_home_and_scratch(kernel):
    code = (
        "import os, tempfile, pathlib\n"
        "pathlib.Path('a.txt').write_text('1'); os.mkdir('d'); os.rename('a.txt', 'd/b.txt')\n"
        "t = tempfile.NamedTemporaryFile(delete=False); t.write(b'x'); t.close()\n"
        "print(os.path.expanduser('~') == os.getcwd(), t.name.startswith(os.getcwd()), sorted(os.listdir('d')))"
    )
    result = await kernel.execute(code, 10)
    assert result.text == "True True ['b.txt']", result.text


async def test_the_apps_secrets_are_not_in_the_kernels_environment(kernel):
    result = await kernel.execute(
        f"import os; print(os.environ.get({SECRET!r}), os.environ['HOME'] == os.getcwd())", 10
    )
    assert result.text == "None True"


async def test_no_network_connection_is_made(kernel):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        result = await kernel.execute(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)", 10)
        assert result.error_name == "PermissionError" and "network access" in result.text
        with pytest.raises(TimeoutError):
            server.accept()


def available(level: str) -> bool:
    try:
        return resolve(level) == level
    except SandboxUnavailable:
        return False


@pytest.mark.parametrize("level", ["netns", "strict"])
async def test_in_a_network_namespace_only_loopback_exists(level):
    if not available(level):
        pytest.skip(f"this machine cannot provide sandbox {level!r}")
    async with JupyterKernel(sandbox=level) as kernel:
        result = await kernel.execute(
            "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))", 10
        )
    assert result.text == "['lo']"


async def test_without_the_policy_a_segfault_and_an_ignored_sigterm_are_survived():
    async with JupyterKernel(sandbox="off") as kernel:
        pid = kernel._km.provisioner.pid
        result = await kernel.execute("import ctypes; ctypes.string_at(0)", 30)
        assert result.died and result.restarted and "SIGSEGV" in result.text
        await assert_alive(kernel)
        await kernel.execute("import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)", 5)
        pid = kernel._km.provisioner.pid
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_kernel_connections_are_ipc_signed_and_owner_only():
    async with JupyterKernel() as kernel:
        info = kernel._km.get_connection_info()
        runtime = os.path.dirname(kernel._km.connection_file)
        assert info["transport"] == "ipc" and info["key"] and info["signature_scheme"].startswith("hmac-")
        assert os.stat(runtime).st_mode & 0o777 == 0o700
        kernel_proc = psutil.Process(kernel._km.provisioner.pid)
        assert not [c for c in kernel_proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]


async def test_a_run_through_hostile_cells_keeps_a_complete_trajectory(tmp_path):
    cells = [
        "x = 1",
        "sum(range(10**15))",
        "import os; os._exit(1)",
        "import threading, time\nthreading.Thread(target=lambda: time.sleep(1000)).start()",
        "print('still here')",
    ]
    turns = [split_tokens(f"Step.\n```python\n{c}\n```\n```output", -0.01) for c in cells]
    backend = ScriptedBackend([*turns, split_tokens("\\boxed{1}", -0.01)])
    path = tmp_path / "run.jsonl"
    async with JupyterKernel() as kernel:
        with Recorder(path) as recorder:
            agent = Agent(backend, kernel, recorder=recorder, settings=RunSettings(exec_timeout_s=2, max_tool_calls=10))
            streamed = [e async for e in agent.stream("problem")]
    events = load(path).events
    assert [type(e) for e in events] == [type(e) for e in streamed]
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    assert [r.restarted for r in results] == [False, True, True, True, False]
    assert results[-1].shown == "still here"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].answer == "1"


async def test_no_process_or_descriptor_is_left_behind():
    me = psutil.Process()
    async with JupyterKernel() as kernel:  # warm the shared zmq context first
        await kernel.execute("1", 5)
    fds, before = me.num_fds(), set(me.children(recursive=True))  # the module's kernel may be running
    for code in ("sum(range(10**15))", "import os; os._exit(1)"):
        async with JupyterKernel() as kernel:
            await kernel.execute(code, 1)
            await kernel.execute("import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)", 5)

    def left() -> list[psutil.Process]:
        return [p for p in set(me.children(recursive=True)) - before if p.status() != psutil.STATUS_ZOMBIE]

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == []
    assert me.num_fds() <= fds
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


async def test_with_the_sandbox_off_processes_a_cell_started_do_not_outlive_the_kernel():
    code = (
        "import subprocess\n"
        "kids = [subprocess.Popen(['sleep', '1000']), subprocess.Popen(['setsid', 'sleep', '1000'])]\n"
        "print(*[k.pid for k in kids])"
    )
    async with JupyterKernel(sandbox="off") as kernel:
        first = [psutil.Process(int(p)) for p in (await kernel.execute(code, 10)).text.split()]
        await kernel.execute("import os; os._exit(1)", 10)  # the kernel dies: its children are orphaned
        assert [is_running(p) for p in first] == [False, False]
        second = [psutil.Process(int(p)) for p in (await kernel.execute(code, 10)).text.split()]
    assert [is_running(p) for p in second] == [False, False]


def is_running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("level", ["strict", "policy"])
async def test_the_network_is_there_only_when_a_setting_allows_it(level):
    if not available(level):
        pytest.skip(f"this machine cannot provide sandbox {level!r}")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        code = f"import socket; socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=5).close(); print('connected')"
        async with JupyterKernel(sandbox=level, network=True) as kernel:
            assert (await kernel.execute(code, 10)).text == "connected"
            assert (await kernel.execute("open('/etc/shadow').read()", 10)).error_name == "PermissionError"
