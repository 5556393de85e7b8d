"""`tuiagent doctor`: the real report on this machine, and the problems it must name with their fix."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tuiagent import cli, doctor, llama_build
from tuiagent.backends import crash
from tuiagent.config.loader import load_models
from tuiagent.errors import ConfigError

SECTIONS = ("Python and packages", "CPU and llama.cpp build", "Models", "Kernel", "Directories")


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=120)


def test_healthy_environment_reports_every_section_and_exits_0():
    llama_cpp = pytest.importorskip("llama_cpp")
    out = tuiagent("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    for section in SECTIONS:
        assert section in lines
    system_info = llama_cpp.llama_print_system_info().decode().strip()
    assert any(re.fullmatch(rf"  info  system info +{re.escape(system_info)}", line) for line in lines)
    assert re.search(r"^  ok    kernel start +\d+\.\d\d s", out.stdout, re.M)
    assert re.search(r"^  ok    first cell +print\(1 \+ 1\) -> 2 in \d+ ms", out.stdout, re.M)
    assert not re.search(r"^  fail ", out.stdout, re.M)
    # the batched engine's capacity for the default model (Qwen2.5-Coder-1.5B: 28 layers x 2 KV heads x 256 x f16)
    assert re.search(
        r"^  info  batched engine +eval --concurrency N: N sequences of 4096 tokens each, plus one for "
        r"the shared system prompt, in KV streams rounded up to a multiple of 4 when N > 1; KV cache 117 MB "
        r"a stream \(f16\), N=1: 235 MB, N=3: 470 MB, N=4: 940 MB",
        out.stdout,
        re.M,
    )
    assert re.fullmatch(r"doctor: (all good|0 problems, \d+ warnings?)", lines[-1])
    assert "\x1b" not in out.stdout and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "system_info, flags, expected",
    [
        pytest.param(
            "CPU : AVX = 1 | AVX2 = 1 | FMA = 1 | AMX_INT8 = 1 | REPACK = 1 |",
            {"avx", "avx2", "fma", "amx_tile", "amx_int8"},
            [r"fail  llama\.cpp build .*AMX ON.*this CPU advertises AMX.*#20824"],
            id="amx",
        ),
        pytest.param(
            "CPU : AVX = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 |",
            {"avx", "avx2"},
            [r"fail  instruction sets +the build uses AVX512, AVX512_VNNI, which this CPU lacks"],
            id="instruction-set-the-cpu-lacks",
        ),
    ],
)
def test_a_build_that_does_not_suit_this_cpu_fails_with_the_rebuild_command(monkeypatch, system_info, flags, expected):
    llama_cpp = pytest.importorskip("llama_cpp")
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: system_info.encode())
    monkeypatch.setattr(llama_build, "cpu_flags", lambda: set(flags))
    result = CliRunner().invoke(cli.app, ["doctor"])
    assert result.exit_code == 1, result.output
    for pattern in expected:
        assert re.search(pattern, result.output), result.output
    failed = re.search(r"^  fail  (?:llama\.cpp build|instruction sets).*\n +fix: (.*)$", result.output, re.M)
    assert failed and crash.REBUILD in failed.group(1)


def test_build_checks_compare_the_build_with_the_cpu():
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | AMX_INT8 = 0 | OPENMP = 1 |"
    fine = {c.name: c for c in doctor.build_checks(info, {"pni", "avx", "avx2"})}
    assert (fine["llama.cpp build"].status, fine["llama.cpp build"].detail) == ("ok", "SSE3 AVX AVX2 (AMX off)")
    assert fine["instruction sets"].status == "ok"
    lacking = {c.name: c for c in doctor.build_checks(info, {"pni", "avx"})}
    assert lacking["instruction sets"].status == "fail" and "AVX2" in lacking["instruction sets"].detail
    amx_elsewhere = {c.name: c for c in doctor.build_checks(info.replace("AMX_INT8 = 0", "AMX_INT8 = 1"), {"avx2"})}
    assert amx_elsewhere["llama.cpp build"].status == "fail"
    assert "advertises" not in amx_elsewhere["llama.cpp build"].detail  # the stronger wording is for AMX CPUs


def test_broken_models_toml_fails_with_the_loaders_message(tmp_path):
    bad = tmp_path / "models.toml"
    bad.write_text('[models.x]\nbackend = "tensorflow"\n[models.x.source]\nkind = "path"\npath = "/x"\n')
    with pytest.raises(ConfigError) as loader:
        load_models(bad)
    out = tuiagent("doctor", "--models", str(bad))
    assert out.returncode == 1
    assert f"  fail  models.toml          in {bad}" in out.stdout
    assert loader.value.problem in out.stdout and f"fix: {loader.value.fix}" in out.stdout
    assert "Kernel" in out.stdout.splitlines()  # the rest of the report still comes
    assert "Traceback" not in out.stdout + out.stderr


def test_json_lists_the_checks():
    out = tuiagent("doctor", "--json")
    report = json.loads(out.stdout)
    checks = report["checks"]
    assert [s for s in SECTIONS] == list(dict.fromkeys(c["section"] for c in checks))
    assert {c["status"] for c in checks} <= {"ok", "warn", "fail", "info"}
    assert all(c["fix"] for c in checks if c["status"] in ("warn", "fail"))
    assert report["problems"] == sum(c["status"] == "fail" for c in checks)
    assert report["warnings"] == sum(c["status"] == "warn" for c in checks)
    assert out.returncode == (1 if report["problems"] else 0)
    assert any(c["name"] == "kernel start" and c["status"] == "ok" for c in checks)


def test_verify_rehashes_the_assembled_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TUIAGENT_CACHE_DIR", str(tmp_path / "cache"))
    good = b"a model"
    models = tmp_path / "models.toml"
    models.write_text(
        '[models.tiny]\nbackend = "llama_cpp"\n[models.tiny.source]\nkind = "pypi_chunks"\n'
        f'packages = ["json"]\nfiles = ["__init__.py"]\nsize = {len(good)}\n'
        f'sha256 = "{hashlib.sha256(good).hexdigest()}"\n'
    )
    spec = load_models(models).get("tiny")
    from tuiagent.config.sources import assembled_path

    def tiny(verify: bool) -> doctor.Check:
        return next(c for c in doctor.model_checks(models, verify=verify) if c.name == "tiny")

    assembled = assembled_path(spec)
    assembled.parent.mkdir(parents=True)
    assembled.write_bytes(good)
    assert "re-checked" in tiny(verify=True).detail
    assembled.write_bytes(b"a mode!")  # same size: only a re-hash tells
    assert tiny(verify=False).status == "ok"
    damaged = tiny(verify=True)
    assert damaged.status == "fail" and "MISMATCH" in damaged.detail
    assert damaged.fix == f"rm {assembled} && tuiagent fetch tiny"
    # the default model is not assembled here: doctor reads its KV size only from a file at hand
    assert [p.name for p in assembled.parent.iterdir()] == [assembled.name]


class KernelThatCannotStart:
    """Test double for a kernel whose process cannot be started: it raises what ``JupyterKernel`` raises
    then (the real path: tests/test_as_installed.py, tests/kernels/test_kernel_failures.py)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def start(self) -> None:
        raise self.error

    async def shutdown(self) -> None: ...


def test_a_kernel_that_cannot_start_is_a_problem_with_its_cause_and_fix(monkeypatch):
    import tuiagent.runner
    from kernels.base import KernelFailed

    failed = KernelFailed(
        "it exited during start-up (exit code 1)",
        "Traceback ...\nbwrap: Can't mount proc",
        "bubblewrap could not build the sandbox",
        "run with --sandbox auto",
    )
    monkeypatch.setattr(tuiagent.runner, "make_kernel", lambda *a, **k: KernelThatCannotStart(failed))
    checks = {c.name: c for c in doctor.kernel_checks()}
    start = checks["kernel start"]
    assert start.status == "fail" and start.detail == (
        "it exited during start-up (exit code 1) (it printed: bwrap: "
        "Can't mount proc); likely cause: bubblewrap could not build the sandbox"
    )
    assert start.fix == "run with --sandbox auto" and "first cell" not in checks


def test_any_other_failure_of_the_kernel_check_is_reported_too(monkeypatch):
    import tuiagent.runner

    monkeypatch.setattr(
        tuiagent.runner,
        "make_kernel",
        lambda *a, **k: KernelThatCannotStart(RuntimeError("Kernel died before replying")),
    )
    start = {c.name: c for c in doctor.kernel_checks()}["kernel start"]
    assert start.status == "fail" and "Kernel died before replying" in start.detail and "tuiagent solve" in start.fix


def test_doctor_says_where_the_kernel_imports_the_project_from():
    from pathlib import Path

    import kernels

    checks = {c.name: c for c in doctor.kernel_checks()}
    assert checks["kernel imports"].detail.startswith(f"the project from {Path(kernels.__file__).parent.parent}")


def test_the_matmul_path_says_whose_setting_is_in_force(monkeypatch):
    from tuiagent.doctor import matmul_path

    for name in ("GGML_CPU_TILED_MM", "GGML_CPU_TILED_MM_FORCE"):
        monkeypatch.delenv(name, raising=False)
    assert matmul_path().startswith(
        "tiled K-quant matmul on for steps of 8 or more columns (llama.cpp's default); "
        "the batched engine decodes at most 4 columns a step"
    )
    monkeypatch.setenv("GGML_CPU_TILED_MM", "00")  # llama.cpp reads it with atoi
    assert matmul_path().startswith("tiled K-quant matmul off (yours")
    monkeypatch.setenv("GGML_CPU_TILED_MM", "1")
    monkeypatch.setenv("GGML_CPU_TILED_MM_FORCE", "1")
    assert matmul_path().startswith("tiled K-quant matmul forced at every width (yours")
