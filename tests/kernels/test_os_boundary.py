"""The OS boundary on its own (kernels.boundary + kernels.confine), with no audit hook in front: code
written to escape, run with plain Python inside the sandbox. Each case must end in an OSError (or
see nothing), whatever route it takes; docs/reliability.md lists them. Run as root, and as nobody
where this machine lets an unprivileged user make namespaces.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import uuid

import pytest

from kernels import boundary, sandbox, workdirs
from kernels.launch import runtime_box

pytestmark = pytest.mark.skipif(
    sandbox.strict_unavailable() is not None, reason=f"no OS boundary here: {sandbox.strict_unavailable()}"
)

APP = os.getpid()
ABSTRACT = f"tuiagent-test-{uuid.uuid4().hex[:8]}"

# name -> code that must raise OSError inside the boundary (or print BLOCKED itself)
CASES = {
    # files: paths, descriptors, dir_fd, links, xattrs, device nodes
    "read /etc/shadow": "open('/etc/shadow').read()",
    "read a home directory": "print('BLOCKED' if os.listdir('/root') == [] else os.listdir('/root'))",
    "read the app's temp files": "open(USER_FILE).read()",
    "read through dir_fd": "fd = os.open('/usr', os.O_RDONLY); os.open('../etc/shadow', os.O_RDONLY, dir_fd=fd)",
    "read through opener": "open('../../etc/shadow', opener=lambda p, f: os.open(p, f, dir_fd=os.open('/usr/lib', os.O_RDONLY)))",
    "write into /usr": "open('/usr/tuiagent-test', 'w')",
    "write into /etc through dir_fd": "os.open('passwd', os.O_WRONLY | os.O_APPEND, dir_fd=os.open('/etc', os.O_RDONLY))",
    "append to a dotfile": "open(os.path.expanduser('~root/.bashrc'), 'a').write('x')",
    "write the connection file": "open(CONNECTION_FILE, 'w')",
    "chmod through a read-only descriptor": "os.chmod(os.open('/etc/passwd', os.O_RDONLY), 0o777)",
    "chown through a read-only descriptor": "os.chown(os.open('/etc/hostname', os.O_RDONLY), 1, 1)",
    "utime through a read-only descriptor": "os.utime(os.open('/etc/passwd', os.O_RDONLY), (0, 0))",
    "setxattr through a read-only descriptor": "os.setxattr(os.open('/etc/passwd', os.O_RDONLY), 'user.x', b'1')",
    "hard link to a secret": "os.link('/etc/shadow', 'shadow')",
    "symlink out, then write": "os.symlink('/etc/passwd', 'p'); open('p', 'a').write('x')",
    "rename a system file": "os.rename('/etc/hostname', 'h')",
    "mkfifo in the run directory": "os.mkfifo('fifo')",
    "mknod a device": "os.mknod('sda', 0o600 | stat.S_IFBLK, os.makedev(8, 0))",
    "open_by_handle_at": "libc.syscall(304, -100, None, 0) == 0 or err()",
    "file bigger than /tmp": "open('/tmp/big', 'wb').write(b'x' * (300 << 20))",
    # caps that hold for root too (kernels.confine_caps; CAPS below)
    "a flood of files": "[open(f'f{i}', 'w').close() for i in range(150_000)]",
    "a flood of files in /tmp": "[open(f'/tmp/f{i}', 'w').close() for i in range(150_000)]",
    "deleted files held open": "held = []\nfor i in range(40):\n    f = open(f'u{i}', 'wb'); os.unlink(f'u{i}'); held.append(f); f.write(b'x' * (4 << 20)); f.flush()",
    "thousands of threads": "import threading\ntry:\n    [threading.Thread(target=signal.pause, daemon=True).start() for _ in range(4000)]\nexcept RuntimeError as e:\n    raise OSError(str(e))",
    "write into the socket directory": "open(SOCKET_DIR + '/x', 'w')",
    # processes, by every route
    "os.fork": "os.fork()",
    "subprocess": "subprocess.run(['true'])",
    "posix_spawn": "os.posix_spawn('/bin/true', ['true'], {})",
    "fork_exec without an audit event": "import multiprocessing.util as u; u.spawnv_passfds(b'/bin/true', [b'true'], [])",
    "libc fork through ctypes": "libc.fork() >= 0 and print('ESCAPED') or err()",
    "vfork through ctypes": "libc.syscall(58) >= 0 and print('ESCAPED') or err()",
    "clone3 through ctypes": "libc.syscall(435, None, 0) >= 0 and print('ESCAPED') or err()",
    # other processes: signals, priority, affinity, tracing, memory
    "signal the app": "os.kill(APP, 0)",
    "pidfd_send_signal to the app": "signal.pidfd_send_signal(os.pidfd_open(APP), 0)",
    "renice the app": "os.setpriority(os.PRIO_PROCESS, APP, 19)",
    "pin the app to a CPU": "os.sched_setaffinity(APP, {0})",
    "read the app's environment": "open(f'/proc/{APP}/environ').read()",
    "ptrace": "libc.ptrace(16, APP, 0, 0) == 0 and print('ESCAPED') or err()",
    "process_vm_readv": "libc.syscall(310, APP, 0, 0, 0, 0, 0) >= 0 and print('ESCAPED') or err()",
    # namespaces and the kernel
    "unshare": "libc.unshare(0x00020000) == 0 and print('ESCAPED') or err()",
    "setns into the host network": "libc.setns(os.open('/proc/1/ns/net', os.O_RDONLY), 0) == 0 and print('ESCAPED') or err()",
    "mount": "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0 and print('ESCAPED') or err()",
    "chroot": "os.chroot('.')",
    "bpf": "libc.syscall(321, 0, None, 0) >= 0 and print('ESCAPED') or err()",
    "io_uring": "libc.syscall(425, 1, None) >= 0 and print('ESCAPED') or err()",
    "userfaultfd": "libc.syscall(323, 0) >= 0 and print('ESCAPED') or err()",
    "keyctl": "libc.syscall(250, 0, 0) >= 0 and print('ESCAPED') or err()",
    "perf_event_open": "libc.syscall(298, None, 0, -1, -1, 0) >= 0 and print('ESCAPED') or err()",
    "x32 syscall": "libc.syscall(0x40000000 + 39) >= 0 and print('ESCAPED') or err()",
    # network
    "TCP to loopback": "socket.create_connection(('127.0.0.1', 22), timeout=2)",
    "TCP bind": "socket.socket().bind(('127.0.0.1', 0))",
    "UDP out": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('1.1.1.1', 53))",
    "DNS": "socket.getaddrinfo('example.com', 80)",
    "the app's abstract unix socket": "s = socket.socket(socket.AF_UNIX); s.connect('\\0' + ABSTRACT)",
    "raw socket": "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
}

# Small caps, so that a flood reaches them in a second (the defaults: kernels.boundary).
CAPS = boundary.Caps(bytes=64 << 20, files=2_000, tasks=32)

PRELUDE = """
import ctypes, os, signal, socket, stat, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def err():
    e = ctypes.get_errno()
    raise OSError(e, os.strerror(e))
"""


def run_inside(code: str, user: tuple[int, int] | None = None, **names: object) -> subprocess.CompletedProcess[str]:
    runtime, workdir = workdirs.make("kernel"), workdirs.make("run")
    connection = runtime / "kernel.json"
    connection.write_text("{}")
    if user is not None:
        for path in (runtime, workdir, runtime_box(runtime), connection):
            os.chown(path, *user)
    paths = boundary.BoundaryPaths(workdir, runtime_box(runtime), connection)
    names |= {"CONNECTION_FILE": str(connection), "SOCKET_DIR": str(paths.box)}
    setup = "".join(f"{k} = {v!r}\n" for k, v in names.items())
    body = (
        PRELUDE + setup + "try:\n" + textwrap.indent(code, "    ") + "\n    print('ESCAPED')\n"
        "except (OSError, socket.gaierror) as e:\n    print('BLOCKED', type(e).__name__, e)\n"
    )
    demote = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups"] if user else []
    try:
        return subprocess.run(
            [*demote, *boundary.prefix(paths, caps=CAPS), sys.executable, "-c", body],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=workdir,
        )
    finally:
        import shutil

        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "secret.txt"
    path.write_text("keep me")
    return path


@pytest.fixture(scope="module")
def abstract_listener():
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + ABSTRACT)
    server.listen()
    yield server
    server.close()


@pytest.mark.parametrize("name", list(CASES))
def test_code_written_to_escape_is_stopped_by_the_os(name, user_file, abstract_listener):
    done = run_inside(CASES[name], APP=APP, USER_FILE=str(user_file), ABSTRACT=ABSTRACT)
    assert done.stdout.startswith("BLOCKED"), (done.stdout, done.stderr[-2000:])
    assert user_file.read_text() == "keep me"


def test_inside_only_the_sandbox_processes_and_loopback_exist():
    done = run_inside(
        "print('BLOCKED', sorted(p for p in os.listdir('/proc') if p.isdigit()), "
        "sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))"
    )
    assert done.stdout.startswith("BLOCKED ['1', '2'] ['lo']\n"), done.stdout


def test_threads_numpy_and_sympy_work_inside():
    done = run_inside(
        "import threading, numpy, sympy\nt = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(int(numpy.arange(4).sum()), sympy.factorint(2**32 + 1)); raise OSError('done')"
    )
    assert done.stdout.startswith("thread\n6 {641: 1, 6700417: 1}\nBLOCKED"), (done.stdout, done.stderr[-2000:])


def _nobody_can_sandbox() -> bool:
    if os.geteuid() != 0:
        return False
    probe = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            boundary.bwrap_binary() or "false",
            "--unshare-all",
            "--unshare-user",
            "--ro-bind",
            "/",
            "/",
            sys.executable,
            "-c",
            "pass",
        ],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.skipif(
    not _nobody_can_sandbox(),
    reason="needs root to become nobody, unprivileged user namespaces, and a Python nobody can run",
)
@pytest.mark.parametrize(
    "name",
    [
        "read /etc/shadow",
        "write into /usr",
        "signal the app",
        "os.fork",
        "TCP to loopback",
        "setns into the host network",
        "read the app's environment",
        "a flood of files",
        "thousands of threads",
    ],
)
def test_the_same_holds_for_an_unprivileged_user(name, user_file, abstract_listener):
    done = run_inside(CASES[name], user=(65534, 65534), APP=APP, USER_FILE=str(user_file), ABSTRACT=ABSTRACT)
    assert done.stdout.startswith("BLOCKED"), (done.stdout, done.stderr[-2000:])


def test_a_sys_path_entry_never_reopens_a_home_or_the_root(monkeypatch):
    from pathlib import Path

    monkeypatch.setattr(sys, "path", [*sys.path, str(Path.home()), "/", "/home"])
    roots = boundary._read_roots(["/root", "/home", str(Path.home())])
    assert "/" not in roots and str(Path.home()) not in roots and "/home" not in roots
    assert os.path.realpath(sys.prefix) in roots
