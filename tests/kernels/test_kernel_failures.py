"""A kernel that cannot start says why: its own stderr, kept through a pipe, read for the cause and a fix;
and the sandbox shows the kernel the packages it imports wherever the import system finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernels import boundary, failures, sandbox
from kernels.base import KernelFailed
from kernels.failures import StderrTail
from kernels.jupyter import JupyterKernel

STRICT = sandbox.strict_unavailable()


def test_the_tail_keeps_what_a_process_wrote_before_it_exited():
    tail = StderrTail()
    try:
        subprocess.run(
            [sys.executable, "-c", "import sys; [sys.stderr.write(f'line {i}\\n') for i in range(50)]"],
            stderr=tail.fd,
            check=True,
        )
        text = tail.text()  # read at once, after the exit: nothing may be missing
        assert text.splitlines() == [f"line {i}" for i in range(50 - failures.SHOWN_LINES, 50)]
        tail.clear()
        assert tail.text() == ""
    finally:
        tail.close()


def test_the_tail_is_bounded_whatever_is_written():
    tail = StderrTail()
    try:
        subprocess.run(
            [sys.executable, "-c", "import os; [os.write(2, b'x' * 65536) for _ in range(64)]; os.write(2, b'\\nend')"],
            stderr=tail.fd,
            check=True,
            timeout=60,
        )
        assert tail.text().endswith("end") and len(tail.text()) <= failures.KEEP_BYTES
    finally:
        tail.close()


@pytest.mark.parametrize(
    "stderr, cause, fix",
    [
        (
            "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
            "bubblewrap could not build the sandbox (bwrap: Can't mount proc",
            "--sandbox auto",
        ),
        ("tuiagent sandbox: Landlock is not available", "Landlock or seccomp could not be applied", "--sandbox netns"),
        (
            "Traceback ...\nModuleNotFoundError: No module named 'not_installed_anywhere'",
            "not_installed_anywhere is not installed",
            "pip install not_installed_anywhere",
        ),
        ("ModuleNotFoundError: No module named 'zmq'", "zmq is installed in", "install it into the environment"),
        ("", "it printed nothing", "try again"),
        (
            "SyntaxError: bad",
            "the kernel's Python failed while starting (SyntaxError: bad)",
            "reinstall the kernel packages",
        ),
    ],
)
def test_the_cause_and_the_fix_come_from_what_the_kernel_printed(stderr, cause, fix):
    found_cause, found_fix = failures.diagnose(stderr, "policy")
    assert cause in found_cause and fix in found_fix


def test_a_package_the_sandbox_hides_is_named_with_where_it_lies(monkeypatch):
    monkeypatch.setattr(boundary, "package_dirs", lambda names: ["/root/src/tuiagent/kernels"])
    monkeypatch.setattr(boundary, "hidden_dirs", lambda: ["/root", "/home"])
    cause, fix = failures.diagnose("ModuleNotFoundError: No module named 'kernels'", "strict")
    assert cause == "the sandbox hides /root/src/tuiagent/kernels, where kernels is installed"
    assert "--sandbox netns" in fix


def test_the_message_holds_what_happened_what_it_printed_the_cause_and_the_fix():
    text = str(KernelFailed("it exited during start-up (exit code 1)", "boom\nbang", "a cause", "a fix"))
    assert text.splitlines() == [
        "the kernel could not start: it exited during start-up (exit code 1)",
        "  the kernel printed:",
        "    boom",
        "    bang",
        "  likely cause: a cause",
        "  fix: a fix",
    ]


@pytest.fixture
def broken_launcher(tmp_path, monkeypatch):
    """A machine whose kernel cannot start: PYTHONPATH (which a kernel inherits) shadows ipykernel's launcher."""
    (tmp_path / "ipykernel_launcher.py").write_text(
        "import sys\nsys.stderr.write('launcher: giving up\\n')\nsys.exit(3)\n", encoding="utf-8"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))  # as the app's own interpreter would have it
    return tmp_path


@pytest.mark.parametrize(
    "level",
    [
        "policy",
        pytest.param("strict", marks=pytest.mark.skipif(STRICT is not None, reason=f"no OS boundary here: {STRICT}")),
    ],
)
async def test_a_kernel_that_exits_at_start_raises_kernel_failed_with_its_stderr(broken_launcher, level):
    kernel = JupyterKernel(sandbox=level, start_timeout_s=60)
    with pytest.raises(KernelFailed) as failed:
        await kernel.start()
    assert failed.value.what == "it exited during start-up (exit code 3)"
    assert failed.value.stderr == "launcher: giving up"
    assert "launcher: giving up" in failed.value.cause and failed.value.fix


@pytest.mark.skipif(STRICT is not None, reason=f"no OS boundary here: {STRICT}")
def test_the_sandbox_binds_back_a_package_that_is_on_no_path(tmp_path, monkeypatch):
    """An editable install's layout: the package's directory is found by a finder, not through sys.path."""
    hidden = Path.home() / f".tuiagent-test-{os.getpid()}"
    package = hidden / "checkout" / "kernels"
    monkeypatch.setattr(boundary, "package_dirs", lambda names=(): [str(package)])
    package.mkdir(parents=True)
    try:
        (package / "marker.txt").write_text("seen", encoding="utf-8")
        (package.parent / "secret.txt").write_text("private", encoding="utf-8")
        workdir, box, connection = tmp_path / "run", tmp_path / "box", tmp_path / "kernel.json"
        workdir.mkdir()
        box.mkdir()
        connection.write_text("{}")
        argv = [
            *boundary.prefix(boundary.BoundaryPaths(workdir, box, connection)),
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                    print(open({str(package / "marker.txt")!r}).read())
                    for path in ({str(package.parent / "secret.txt")!r}, {str(hidden)!r}):
                        try:
                            open(path).read()
                        except OSError as e:
                            print(type(e).__name__)
                """),
        ]
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, env=sandbox.kernel_env("strict", workdir, box)
        )
        assert done.returncode == 0, done.stderr
        # the package, and nothing beside it
        assert done.stdout.split() == ["seen", "FileNotFoundError", "PermissionError"]
    finally:
        import shutil

        shutil.rmtree(hidden, ignore_errors=True)
