"""Build llama-cpp-python for the CPU it will run on: explicit instruction sets, never the AMX path.

llama-cpp-python's default ``-march=native`` compiles llama.cpp's AMX matmul on CPUs that
advertise AMX, which segfaults at the first decode on some machines (llama.cpp issue #20824); so
on x86-64 we switch on exactly the instruction sets ``/proc/cpuinfo`` lists, AMX never. The flags
key the cached wheel and a record in the venv, so a build made with other flags is rebuilt; a
user's own ``CMAKE_ARGS`` replace ours. Standard library only: the Makefile runs it before
anything else is installed. More, with the measurements: docs/install.md ("The llama.cpp build").
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"  # the pin in pyproject.toml (a test keeps them equal)

# ggml's CMake options for x86 and the /proc/cpuinfo flags each one needs (ggml-cpu/CMakeLists.txt
# adds -m<flag> for every option that is ON; GGML_AVX512 adds -mavx512{f,cd,vl,dq,bw}).
X86_OPTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_F16C", ("avx", "f16c")),
    ("GGML_FMA", ("avx", "fma")),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_AVX_VNNI", ("avx2", "avx_vnni")),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512vbmi")),
    ("GGML_AVX512_VNNI", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512_vnni")),
    ("GGML_AVX512_BF16", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512_bf16")),
)
AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
# [ours] Parts of llama-cpp-python's build tuiagent never loads: the multimodal library (llama.cpp's
# tools/mtmd: clip, miniaudio, stb_image; llama_cpp imports it only inside its multimodal chat
# handlers). Leaving it out cut the build from 353 s to 212 s here (docs/install.md, "The llama.cpp build").
UNUSED_PARTS = ("-DLLAVA_BUILD=OFF",)

# What llama.cpp's system info calls an instruction set -> the cpuinfo flags it needs.
SYSTEM_INFO_FLAGS: dict[str, tuple[str, ...]] = {
    "SSE3": ("pni",),
    "SSSE3": ("ssse3",),
    "AVX": ("avx",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX2": ("avx2",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "BMI2": ("bmi2",),
    "AVX512": ("avx512f",),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_INT8": ("amx_int8",),
}


@dataclass(frozen=True)
class BuildPlan:
    """What to build: the CMake arguments, where they came from, and the key of the result."""

    version: str
    cmake_args: str
    source: str  # "cpu" (ours, from this CPU's flags), "user" ($CMAKE_ARGS) or "default" (not x86-64)
    key: str


def cpu_flags() -> set[str]:
    """This CPU's feature flags as Linux names them (empty where they cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    if sys.platform == "darwin":  # Intel Macs: sysctl lists features in capitals ("AVX2", "AVX1.0")
        out = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        names = {w.lower().replace("avx1.0", "avx").replace("sse4.2", "sse4_2") for w in out.split()}
        return names | {"avx512_vnni" for n in names if n == "avx512vnni"}
    return set()


def is_x86_64(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64")


def portable_cmake_args(flags: set[str]) -> str:
    """CMake arguments for an x86-64 CPU with these flags: native detection off, AMX off."""
    args = ["-DGGML_NATIVE=OFF"]
    args += [f"-D{opt}={'ON' if all(f in flags for f in needs) else 'OFF'}" for opt, needs in X86_OPTIONS]
    args += [f"-D{opt}=OFF" for opt in AMX_OPTIONS]
    return " ".join(args)


def plan(env: Mapping[str, str] | None = None, flags: set[str] | None = None, machine: str | None = None) -> BuildPlan:
    env = os.environ if env is None else env
    user = env.get("CMAKE_ARGS", "").strip()
    if user:
        args, source = user, "user"
    elif is_x86_64(machine):
        args, source = " ".join([portable_cmake_args(cpu_flags() if flags is None else flags), *UNUSED_PARTS]), "cpu"
    else:  # AMX is x86-only; llama.cpp's native build is right elsewhere
        args, source = " ".join(UNUSED_PARTS), "default"
    material = json.dumps([VERSION, args, sys.implementation.cache_tag, machine or platform.machine()])
    return BuildPlan(VERSION, args, source, hashlib.sha256(material.encode()).hexdigest()[:16])


# ----------------------------------------------------------------------------- the installed build


def record_path() -> Path:
    """The record of the build installed in this environment."""
    return Path(sys.prefix) / "tuiagent-llama-build.json"


def read_record() -> dict[str, Any]:
    try:
        record: dict[str, Any] = json.loads(record_path().read_text())
        return record
    except (OSError, ValueError):
        return {}


def write_record(**fields: object) -> None:
    path = record_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields, indent=1) + "\n")
    tmp.replace(path)


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_current(p: BuildPlan) -> bool:
    """The environment holds a build of this version made with exactly these flags."""
    return installed_version() == p.version and read_record().get("key") == p.key


def wheel_cache_dir(key: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Where wheels built with ``key`` are kept; None when caching is off (``PIP_NO_CACHE_DIR``)."""
    env = os.environ if env is None else env
    if env.get("PIP_NO_CACHE_DIR", "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    root = env.get("TUIAGENT_CACHE_DIR", "").strip()
    if not root:
        xdg = env.get("XDG_CACHE_HOME", "").strip()
        root = str(Path(xdg) / "tuiagent") if xdg else str(Path.home() / ".cache" / "tuiagent")
    return Path(root).expanduser() / "wheels" / PACKAGE / key


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print("  $", " ".join(shlex.quote(a) for a in cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def build_wheel(p: BuildPlan) -> Path:
    """A wheel of llama-cpp-python built with ``p.cmake_args``: from our keyed cache, or built now."""
    cache = wheel_cache_dir(p.key)
    if cache is not None:
        found = sorted(cache.glob("*.whl"))
        if found:
            print(f"llama-cpp-python {p.version}: reusing the wheel built for these flags ({found[-1]})")
            return found[-1]
    print(
        f"llama-cpp-python {p.version}: building from source for this CPU (several minutes)\n"
        f"  CMAKE_ARGS={p.cmake_args or '(llama.cpp defaults)'}",
        flush=True,
    )
    out = Path(tempfile.mkdtemp(prefix="tuiagent-llama-wheel-"))
    env = {**os.environ, "CMAKE_ARGS": p.cmake_args, "FORCE_CMAKE": "1"}
    started = time.monotonic()
    _pip(
        "wheel",
        "--no-deps",
        "--no-cache-dir",
        "--no-binary",
        PACKAGE,
        "--wheel-dir",
        str(out),
        f"{PACKAGE}=={p.version}",
        env=env,
    )
    print(f"llama-cpp-python {p.version}: built in {time.monotonic() - started:.0f} s", flush=True)
    wheel = next(out.glob("*.whl"))
    if cache is None:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "cmake_args.txt").write_text(p.cmake_args + "\n")
    kept = cache / wheel.name
    shutil.move(str(wheel), kept)
    shutil.rmtree(out, ignore_errors=True)
    return kept


def install(p: BuildPlan, *, force: bool = False) -> bool:
    """Install the build ``p`` describes unless it is already here; True when something was installed."""
    if not force and is_current(p):
        return False
    wheel = build_wheel(p)
    _pip("install", "--quiet", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel))
    _pip("install", "--quiet", str(wheel))  # its own dependencies, where missing
    write_record(**asdict(p), smoke="pending")
    return True


def main(argv: list[str] | None = None) -> int:
    """``plan`` and ``install``; the smoke check after it is ``python -m tuiagent.smoke``."""
    ap = argparse.ArgumentParser(prog="python -m tuiagent.llama_build", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("plan", help="print the flags this CPU gets, and whether the installed build has them")
    i = sub.add_parser("install", help="build and install llama-cpp-python for this CPU unless it is already here")
    i.add_argument("--force", action="store_true", help="rebuild even when the installed build matches")
    args = ap.parse_args(argv)
    p = plan()
    if args.cmd == "plan":
        print(
            json.dumps(
                {**asdict(p), "installed": installed_version(), "current": is_current(p), "record": read_record()},
                indent=1,
            )
        )
        return 0
    return install_or_explain(p, force=args.force)


def install_or_explain(p: BuildPlan, *, force: bool = False) -> int:
    """``install``, with a build failure told in one message; 0 or 1."""
    try:
        install(p, force=force)
    except subprocess.CalledProcessError as err:
        print(
            f"error: building llama-cpp-python failed ({err}); the output above says why.\n"
            "  fix: install a C/C++ compiler and cmake (Debian: apt-get install build-essential cmake), "
            "then run the same command again",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
