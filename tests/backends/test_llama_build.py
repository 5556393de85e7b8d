"""The llama.cpp build for this CPU (tuiagent.llama_build) and what a crashing build tells the user."""

from __future__ import annotations

import asyncio
import re
import tomllib
from pathlib import Path

import pytest

from tuiagent import llama_build
from tuiagent.backends import crash
from tuiagent.backends.base import BackendCrashed

ROOT = Path(__file__).resolve().parents[2]
# /proc/cpuinfo flags of a Sapphire Rapids Xeon (the class of CPU whose native builds crash), abridged.
SAPPHIRE_RAPIDS = set(
    "fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 avx512f avx512dq avx512cd avx512bw "
    "avx512vl avx512ifma avx512vbmi avx512_vbmi2 avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8".split()
)
HASWELL = set("fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2".split())


def options(args: str) -> dict[str, str]:
    return dict(re.findall(r"-D(\w+)=(\w+)", args))


def test_the_pinned_version_is_the_one_pyproject_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [r for deps in project["optional-dependencies"].values() for r in deps if r.startswith("llama-cpp-python")]
    assert pins and all(r.endswith(f"=={llama_build.VERSION}") for r in pins), pins


def test_an_amx_cpu_keeps_avx512_and_vnni_but_never_gets_the_amx_path():
    got = options(llama_build.portable_cmake_args(SAPPHIRE_RAPIDS))
    assert got["GGML_NATIVE"] == "OFF"
    assert {
        got[k]
        for k in (
            "GGML_AVX512",
            "GGML_AVX512_VNNI",
            "GGML_AVX512_BF16",
            "GGML_AVX512_VBMI",
            "GGML_AVX_VNNI",
            "GGML_AVX2",
            "GGML_FMA",
            "GGML_F16C",
        )
    } == {"ON"}
    assert {got[k] for k in llama_build.AMX_OPTIONS} == {"OFF"}


def test_a_cpu_without_avx512_gets_no_avx512_instructions():
    got = options(llama_build.portable_cmake_args(HASWELL))
    assert got["GGML_AVX2"] == "ON" and got["GGML_AVX512"] == "OFF" and got["GGML_AVX512_VNNI"] == "OFF"
    assert got["GGML_AVX_VNNI"] == "OFF"
    bare = options(llama_build.portable_cmake_args(set()))
    assert set(bare.values()) == {"OFF"}  # an unknown CPU: plain x86-64


def test_the_key_follows_the_flags_and_the_users_cmake_args_win():
    spr = llama_build.plan(env={}, flags=SAPPHIRE_RAPIDS, machine="x86_64")
    hsw = llama_build.plan(env={}, flags=HASWELL, machine="x86_64")
    assert spr.source == hsw.source == "cpu" and spr.key != hsw.key
    mine = llama_build.plan(env={"CMAKE_ARGS": "-DGGML_NATIVE=ON"}, flags=HASWELL, machine="x86_64")
    assert (mine.cmake_args, mine.source) == ("-DGGML_NATIVE=ON", "user") and mine.key not in (spr.key, hsw.key)
    arm = llama_build.plan(env={}, flags=set(), machine="aarch64")
    assert (arm.cmake_args, arm.source) == ("-DLLAVA_BUILD=OFF", "default")  # llama.cpp's native build
    assert "-DLLAVA_BUILD=OFF" in spr.cmake_args.split()  # the multimodal library is never loaded


def test_wheels_are_cached_per_key_unless_pip_caching_is_off(tmp_path):
    d = llama_build.wheel_cache_dir("abc", env={"TUIAGENT_CACHE_DIR": str(tmp_path)})
    assert d == tmp_path / "wheels" / "llama-cpp-python" / "abc"
    assert (
        llama_build.wheel_cache_dir("abc", env={"TUIAGENT_CACHE_DIR": str(tmp_path), "PIP_NO_CACHE_DIR": "1"}) is None
    )


def test_install_repairs_a_build_made_with_other_flags_and_skips_a_current_one(tmp_path, monkeypatch):
    monkeypatch.setattr(llama_build, "record_path", lambda: tmp_path / "record.json")
    monkeypatch.setattr(llama_build, "installed_version", lambda: llama_build.VERSION)
    built: list[str] = []
    monkeypatch.setattr(llama_build, "build_wheel", lambda p: built.append(p.key) or tmp_path / "x.whl")
    monkeypatch.setattr(llama_build, "_pip", lambda *args, env=None: None)
    p = llama_build.plan(env={}, flags=HASWELL, machine="x86_64")
    llama_build.write_record(key="a-native-build", smoke="passed")  # e.g. a crashing -march=native build
    assert llama_build.install(p) is True and built == [p.key]
    assert llama_build.read_record()["key"] == p.key and llama_build.read_record()["smoke"] == "pending"
    assert llama_build.install(p) is False and built == [p.key]
    assert llama_build.install(p, force=True) is True and len(built) == 2


def test_the_installed_llama_cpp_runs_no_amx_code_and_nothing_this_cpu_lacks():
    """Fails when this environment's llama.cpp would run AMX code (it crashes on some AMX CPUs,
    upstream llama.cpp #20824), or instructions this CPU does not have."""
    llama_cpp = pytest.importorskip("llama_cpp")
    info = llama_cpp.llama_print_system_info().decode()
    flags = llama_build.cpu_flags()
    if "amx_tile" in flags or "amx_int8" in flags:
        assert not crash.system_info_has(info, "AMX_INT8"), info
    assert not crash.system_info_has(info, "AMX_INT8"), f"our builds never enable AMX: {info}"
    if flags:
        lacking = [
            name
            for name, needs in llama_build.SYSTEM_INFO_FLAGS.items()
            if crash.system_info_has(info, name) and not set(needs) <= flags
        ]
        assert not lacking, f"the build uses {lacking}, which this CPU lacks: {info}"


def test_the_environment_holds_the_build_for_this_cpu():
    """What `make test` installs: the record names this CPU's flags, so a re-run changes nothing."""
    record = llama_build.read_record()
    if not record:
        pytest.skip("llama-cpp-python was not installed by tuiagent.llama_build here")
    if record.get("source") == "cpu":
        assert llama_build.is_current(llama_build.plan(env={})), record


# --------------------------------------------------------------- a crashing build, explained


class SegfaultingWorker:
    """Test double for a crashing llama.cpp build: a worker that dies with SIGSEGV as it starts."""

    worker_command = ("-c", "import ctypes; ctypes.string_at(0)")


def test_a_worker_that_segfaults_at_start_is_a_readable_error(smollm2_path):
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    backend_class = type("SegfaultingBackend", (SegfaultingWorker, LlamaCppBackend), {})
    with pytest.raises(BackendCrashed) as err:
        backend_class(smollm2_path, model_id="smollm2-135m", n_ctx=256)
    text = str(err.value)
    assert err.value.signal == "SIGSEGV" and err.value.returncode == -11
    assert "'smollm2-135m' died with SIGSEGV while loading the model" in text
    assert "likely cause:" in text and "llama_build install --force" in text
    assert Path(err.value.log).is_file()


def test_the_smoke_check_reports_a_crash_and_fails(tmp_path, monkeypatch, capsys, smollm2_path):
    from tuiagent import smoke
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    monkeypatch.setattr(llama_build, "record_path", lambda: tmp_path / "record.json")
    p = llama_build.plan(env={})
    llama_build.write_record(key=p.key, smoke="pending")
    monkeypatch.setattr(smoke, "smallest_local_model", lambda: ("smollm2-135m", smollm2_path))
    crashing = type("SegfaultingBackend", (SegfaultingWorker, LlamaCppBackend), {})
    monkeypatch.setattr("tuiagent.backends.llama_cpp.LlamaCppBackend", crashing)
    assert smoke.ensure_smoke(p) == 1
    out = capsys.readouterr()
    assert "smoke check crashed" in out.err and "SIGSEGV" in out.err and "Traceback" not in out.err
    assert llama_build.read_record()["smoke"] == "failed"
    monkeypatch.setattr("tuiagent.backends.llama_cpp.LlamaCppBackend", LlamaCppBackend)
    assert smoke.ensure_smoke(p) == 0  # the real worker on a build that works
    assert llama_build.read_record()["smoke"] == "passed"
    assert smoke.ensure_smoke(p) == 0 and "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("rc", "info", "flags", "expect"),
    [
        (-11, "CPU : AVX2 = 1 | AMX_INT8 = 1 |", {"amx_tile"}, ["#20824", "this CPU advertises AMX", crash.REBUILD]),
        (-4, "CPU : AVX512 = 1 |", set(), ["instructions this CPU does not have", crash.REBUILD]),
        (-9, "CPU : AVX2 = 1 |", set(), ["out-of-memory", "smaller model"]),
        (-11, "CPU : AVX2 = 1 |", set(), ["a fault inside llama.cpp", "without AVX-512"]),
    ],
)
def test_each_kind_of_crash_names_its_likely_cause_and_fix(rc, info, flags, expect):
    err = crash.describe("m", rc, "", info, during="generating", cpu_flags=flags)
    assert all(e in str(err) for e in expect), str(err)


def test_an_abort_quotes_the_failed_check_and_the_python_frame():
    log = (
        "/src/ggml.c:123: GGML_ASSERT(n_tokens <= n_batch) failed\nFatal Python error: Aborted\n\n"
        "Current thread 0x01 (most recent call first):\n"
        '  File "/venv/lib/python3.11/site-packages/llama_cpp/_internals.py", line 320 in decode\n'
        '  File "/venv/lib/python3.11/site-packages/llama_cpp/llama.py", line 700 in eval\n'
    )
    text = str(crash.describe("m", -6, log, "", during="generating"))
    assert "SIGABRT" in text and "GGML_ASSERT(n_tokens <= n_batch) failed" in text
    assert "called from llama_cpp/_internals.py (decode)" in text and "internal checks" in text


def test_describe_is_used_by_the_backend_for_a_real_kill(smollm2_path):
    """A worker killed mid-generation: the stream raises the explanation, the tokenizer still works."""
    import os
    import signal

    from tuiagent.backends.llama_cpp import LlamaCppBackend
    from tuiagent.protocol import Sampling

    backend = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=512)

    async def run() -> None:
        n = 0
        with pytest.raises(BackendCrashed, match="SIGSEGV while generating") as err:
            async for _ in backend.stream("1, 2, 3, 4, 5,", Sampling(max_tokens=400), []):
                n += 1
                if n == 3:
                    os.kill(backend.worker_pid, signal.SIGSEGV)
        assert "llama_cpp/_internals.py" in str(err.value) or "native code" in str(err.value)
        assert not backend.alive and backend.count_tokens("still here") > 0
        with pytest.raises(BackendCrashed):  # a dead model stays dead until it is opened again
            async for _ in backend.stream("again", Sampling(max_tokens=4), []):
                pass
        await backend.aclose()

    asyncio.run(run())
