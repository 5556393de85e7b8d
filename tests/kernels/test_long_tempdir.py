"""Where a kernel's directory goes: /dev/shm where there is one; without it, under a long TMPDIR,
its IPC sockets (<kernel dir>/box/ipc-<n>) must fit a Unix socket path (107 bytes), so its
directory goes to /tmp instead, and a real kernel starts and runs."""

from __future__ import annotations

import tempfile

import pytest

from kernels import workdirs
from kernels.jupyter import JupyterKernel


def test_kernels_go_to_shared_memory_where_there_is_one(tmp_path, monkeypatch):
    monkeypatch.setattr(workdirs, "SHARED_MEMORY", str(tmp_path))
    assert workdirs.kernel_base("/var/tmp/" + "d" * 80) == str(tmp_path)


@pytest.fixture
def no_shared_memory(monkeypatch):
    monkeypatch.setattr(workdirs, "SHARED_MEMORY", "/nonexistent/shm")


def test_a_short_temp_dir_is_kept_and_a_long_one_sends_kernels_to_tmp(no_shared_memory):
    assert workdirs.kernel_base("/tmp") == "/tmp"
    assert workdirs.kernel_base("/var/tmp/short") == "/var/tmp/short"
    assert workdirs.kernel_base("/var/tmp/" + "d" * 80) == workdirs.SHORT_TEMP


@pytest.fixture
def long_tempdir(tmp_path, monkeypatch):
    long = tmp_path / ("long-temp-dir-" + "x" * 70)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    return long


async def test_a_kernel_starts_and_runs_under_a_long_temp_dir(long_tempdir, no_shared_memory):
    async with JupyterKernel(sandbox="policy") as kernel:
        result = await kernel.execute("print(6 * 7)", 10)
        assert result.text == "42" and not result.error, result.text
        assert str(kernel._runtime_dir).startswith(workdirs.SHORT_TEMP + "/tuiagent-kernel-")
        assert str(kernel.workdir).startswith(str(long_tempdir))  # the run's files stay where the user asked
