"""`tuiagent doctor`: one screen about this installation, to paste into a bug report.

Headless: the checks are gathered section by section as :class:`Check` records and rendered as
plain text or JSON; the CLI only prints them. Every warning and problem carries its fix.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuiagent import llama_build, paths
from tuiagent.backends import crash
from tuiagent.config.spec import ModelSpec
from tuiagent.errors import ConfigError

if TYPE_CHECKING:
    from kernels.base import CellResult
    from kernels.boundary import Caps

PACKAGES = ("tuiagent", "llama-cpp-python", "textual", "jupyter-client", "ipykernel", "numpy", "openai", "vllm")
# The cpuinfo flags that decide which llama.cpp build suits a CPU (see tuiagent.llama_build).
CPU_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "bmi2",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512vbmi",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)
LOW_DISK_BYTES = 2 * 10**9  # assembling a model needs its whole size free (the default: 1.1 GB)
NAME_WIDTH = 20

PYTHON, CPU, MODELS, KERNEL, DIRS = (
    "Python and packages",
    "CPU and llama.cpp build",
    "Models",
    "Kernel",
    "Directories",
)


@dataclass(frozen=True)
class Check:
    section: str
    name: str
    status: str  # "ok" | "warn" | "fail" | "info"
    detail: str
    fix: str | None = None


def run(models_file: Path | None = None, *, verify: bool = False) -> Iterator[Check]:
    """Every check, each yielded as soon as it is known (starting the kernel takes seconds)."""
    sections: list[tuple[str, Callable[[], Iterable[Check]]]] = [
        (PYTHON, python_checks),
        (CPU, cpu_checks),
        (MODELS, lambda: model_checks(models_file, verify=verify)),
        (KERNEL, kernel_checks),
        (DIRS, dir_checks),
    ]
    for section, gather in sections:
        try:
            yield from gather()
        except Exception as e:  # noqa: BLE001 - one broken check must not hide the rest of the report
            yield Check(
                section,
                "doctor",
                "fail",
                f"this check itself crashed: {type(e).__name__}: {e}",
                "please report it, with this output",
            )


# ----------------------------------------------------------------------------- Python and packages


def python_checks() -> Iterator[Check]:
    check = functools.partial(Check, PYTHON)
    yield check("python", "info", f"{platform.python_version()} ({sys.executable})")
    yield check("platform", "info", platform.platform())
    for name in PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        yield check(name, "info", version)


# ----------------------------------------------------------------------------- CPU and llama.cpp build


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def openmp_wait() -> str:
    """How llama.cpp's OpenMP threads will wait at barriers: the user's variables, or ours."""
    from tuiagent.backends.llama_model import OPENMP_SPIN_COUNT

    chosen = [f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ]
    return (
        " ".join(chosen) + " (yours)"
        if chosen
        else f"GOMP_SPINCOUNT={OPENMP_SPIN_COUNT} (the llama_cpp backend's default)"
    )


def matmul_path() -> str:
    """llama.cpp's tiled K-quant matmul (its rounding differs from the per-column path), and why runs
    on the batched engine stay exact whatever it does."""
    from tuiagent.backends.llama_batch import STEP_COLUMNS

    def atoi(name: str) -> int | None:  # as llama.cpp reads the variable; None when it is not set
        value = os.environ.get(name)
        number = re.match(r"\s*[+-]?\d+", value) if value is not None else None
        return None if value is None else int(number.group()) if number else 0

    if atoi("GGML_CPU_TILED_MM_FORCE") == 1 and atoi("GGML_CPU_TILED_MM") != 0:
        state = "forced at every width (yours: GGML_CPU_TILED_MM_FORCE=1)"
    elif atoi("GGML_CPU_TILED_MM") == 0:
        state = "off (yours: GGML_CPU_TILED_MM=0)"
    else:
        state = "on for steps of 8 or more columns (llama.cpp's default)"
    return (
        f"tiled K-quant matmul {state}; the batched engine decodes at most {STEP_COLUMNS} columns a "
        "step, so a run's numbers do not depend on how many others are in flight"
    )


def cpu_checks() -> Iterator[Check]:
    check = functools.partial(Check, CPU)
    flags = llama_build.cpu_flags()
    present = [f for f in CPU_FLAGS if f in flags]
    yield check("cpu", "info", f"{cpu_model()}, {os.cpu_count()} cores")
    yield check(
        "cpu flags",
        "info",
        (" ".join(present) or "none of the x86 ones llama.cpp uses")
        if flags
        else "unreadable (no /proc/cpuinfo flags)",
    )
    yield check("OpenMP waits", "info", openmp_wait())
    yield check("matmul path", "info", matmul_path())
    if llama_build.installed_version() is None:
        yield check(
            "llama.cpp build",
            "fail",
            "llama-cpp-python is not installed",
            "make run (or: pip install 'tuiagent[llama]')",
        )
        return
    from tuiagent.backends.llama_model import system_info

    try:
        info = system_info()
    except (ConfigError, OSError) as e:  # llama_cpp cannot be imported (ConfigError) or its library loaded
        yield check(
            "llama.cpp build",
            "fail",
            f"llama_cpp cannot be imported: {e}",
            f"reinstall it for this CPU: {crash.REBUILD}",
        )
        return
    yield check("system info", "info", info)
    yield from build_checks(info, flags)
    yield from record_checks()


def build_checks(system_info: str, flags: set[str]) -> list[Check]:
    """What llama.cpp's ``system_info`` says about its build, held against this CPU's ``flags``."""
    check = functools.partial(Check, CPU)
    built = [name for name in llama_build.SYSTEM_INFO_FLAGS if crash.system_info_has(system_info, name)]
    summary = " ".join(n for n in built if n != "AMX_INT8")
    if "AMX_INT8" in built:
        amx_cpu = "amx_tile" in flags or "amx_int8" in flags
        why = (
            "this CPU advertises AMX, so llama.cpp takes that path and can crash at the first decode"
            if amx_cpu
            else "it crashes at the first decode on CPUs that take it"
        )
        found = [
            check(
                "llama.cpp build",
                "fail",
                f"{summary} (AMX ON: llama.cpp's AMX matmul path is built in; {why}; upstream llama.cpp issue #20824)",
                f"rebuild llama-cpp-python for this CPU without AMX: {crash.REBUILD}",
            )
        ]
    else:
        found = [check("llama.cpp build", "ok", f"{summary} (AMX off)")]
    if not flags:
        found.append(check("instruction sets", "info", "not compared: this CPU's flags cannot be read"))
        return found
    lacking = [
        name
        for name in built
        if name != "AMX_INT8" and not all(f in flags for f in llama_build.SYSTEM_INFO_FLAGS[name])
    ]
    if lacking:
        found.append(
            check(
                "instruction sets",
                "fail",
                f"the build uses {', '.join(lacking)}, which this CPU lacks (it was built for "
                "another CPU; expect SIGILL at the first decode)",
                f"rebuild llama-cpp-python for this CPU: {crash.REBUILD}",
            )
        )
    else:
        found.append(check("instruction sets", "ok", "the build uses only what this CPU has"))
    return found


def record_checks() -> Iterator[Check]:
    """The record our build step leaves in the environment: which flags, and the smoke check."""
    check = functools.partial(Check, CPU)
    record, plan = llama_build.read_record(), llama_build.plan()
    if not record:
        yield check(
            "build record",
            "warn",
            "none: this llama-cpp-python was not built by tuiagent's build step, its flags are unknown",
            f"rebuild it for this CPU: {crash.REBUILD}",
        )
        return
    if llama_build.is_current(plan):
        flags_from = "$CMAKE_ARGS" if plan.source == "user" else "this CPU's flags"
        yield check("build record", "ok", f"built from {flags_from} (key {plan.key})")
    else:
        yield check(
            "build record",
            "warn",
            f"made for other flags or another version (key {record.get('key')}; this CPU needs "
            f"{plan.key}, llama-cpp-python {plan.version})",
            f"rebuild it for this CPU: {crash.REBUILD}",
        )
    smoke = record.get("smoke", "not recorded")
    ensure = f"{shlex.quote(sys.executable)} -m tuiagent.smoke"
    if smoke == "passed":
        yield check("smoke check", "ok", f"passed on {record.get('smoke_model', 'a local model')}")
    elif smoke == "failed":
        yield check(
            "smoke check",
            "fail",
            "failed: the model process crashed at its first token",
            f"run `{ensure}`: it says what crashed and how to fix it",
        )
    else:
        yield check("smoke check", "info", f"{smoke} (`{ensure}` runs it)")


# ----------------------------------------------------------------------------- models


def model_checks(models_file: Path | None, *, verify: bool = False) -> Iterator[Check]:
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import assembled_path, install_state, verify_assembled

    check = functools.partial(Check, MODELS)
    try:
        registry = load_models(models_file)
    except ConfigError as e:  # its text names the file and the key; the fix goes on its own line
        yield check("models.toml", "fail", str(e).removesuffix(f"\n  fix: {e.fix}"), e.fix)
        return
    yield check("models.toml", "ok", ", ".join(registry.files))
    for spec in registry:
        state = install_state(spec)
        head, _, fix = state.partition(": ")
        default = spec.id == registry.default
        detail = ", ".join(
            p for p in (spec.backend, head if fix else state, _size(spec), default and "the default") if p
        )
        if head == "broken":
            status = "fail"
        elif head in ("missing", "not downloaded"):
            status = "fail" if default else "info"  # an optional model is not a problem until asked for
            if spec.source.kind == "path":
                fix = f"put the model at {spec.source.path}, or change [models.{spec.id}.source] in {spec.origin}"
        else:
            status = "info" if state in ("server", "script") else "ok"
        if verify and (good := verify_assembled(spec)) is not None:
            if good:
                detail += ", sha256 re-checked"
            else:
                path = shlex.quote(str(assembled_path(spec)))
                status, detail = "fail", detail + ", sha256 MISMATCH (the assembled file is damaged)"
                fix = f"rm {path} && tuiagent fetch {spec.id}"
        yield check(spec.id, status, detail, fix or None)  # only missing/broken states carry one
        if default and spec.backend == "llama_cpp" and status == "ok":
            yield check("batched engine", "info", _engine_capacity(spec, at_hand=state == "ready"))


def _engine_capacity(spec: ModelSpec, *, at_hand: bool) -> str:
    """What ``eval --concurrency N`` holds on the batched llama.cpp engine (``backends.llama_batch``).
    The KV cache's size comes from the model file's header, read only when the file is ``at_hand``: a
    check does not assemble a model (a gigabyte written and hashed) as a side effect."""
    from tuiagent.backends.llama_batch import kv_bytes_per_token, stream_count
    from tuiagent.backends.llama_model import Vocab
    from tuiagent.config.sources import resolve_model_file

    n_ctx = spec.context_tokens
    shape = (
        f"eval --concurrency N: N sequences of {n_ctx} tokens each, plus one for the shared system prompt, "
        "in KV streams rounded up to a multiple of 4 when N > 1"
    )
    if not at_hand:
        return f"{shape} (its KV cache size once the model is assembled: tuiagent fetch {spec.id})"
    try:
        vocab = Vocab.load(str(resolve_model_file(spec)))
        try:
            per_token = kv_bytes_per_token(vocab.llm.metadata)
        finally:
            vocab.close()
    except Exception as e:  # noqa: BLE001 - the size is a detail; the shape is still right
        return f"{shape} (KV cache size unknown: {type(e).__name__}: {e})"
    if per_token is None:
        return shape
    per_seq = per_token * n_ctx
    sizes = ", ".join(f"N={n}: {_bytes(stream_count(n) * per_seq)}" for n in (1, 3, 4, 8))
    return f"{shape}; KV cache {_bytes(per_seq)} a stream (f16), {sizes}"


def _size(spec: ModelSpec) -> str:
    size, path = spec.source.size, spec.source.path
    if size is None and spec.source.kind == "path" and path and Path(path).is_file():
        size = Path(path).stat().st_size
    return "" if size is None else _bytes(size)


def _bytes(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


# ----------------------------------------------------------------------------- kernel


def kernel_checks() -> Iterator[Check]:
    from kernels.base import KernelFailed
    from kernels.sandbox import describe

    check = functools.partial(Check, KERNEL)
    yield check("sandbox", "info", f"auto is {describe('auto')}")
    yield check("kernel imports", "info", _kernel_imports())
    try:
        start_s, cell_s, result, caps = asyncio.run(_time_kernel())
    except KernelFailed as e:
        printed = f" (it printed: {e.stderr.splitlines()[-1]})" if e.stderr else ""
        yield check("kernel start", "fail", f"{e.what}{printed}; likely cause: {e.cause}", e.fix)
        return
    except Exception as e:  # noqa: BLE001 - whatever stops the kernel is the finding
        yield check(
            "kernel start",
            "fail",
            f"{type(e).__name__}: {e}",
            "run `tuiagent solve 'What is 1+1?'` to see the whole error, and report it",
        )
        return
    yield check("kernel start", "ok", f"{start_s:.2f} s (Jupyter, sandbox auto)")
    if result.error or result.text.strip() != "2":
        yield check(
            "first cell",
            "fail",
            f"print(1 + 1) gave {result.text!r}",
            f"reinstall the kernel packages ({shlex.quote(sys.executable)} -m pip install --force-reinstall "
            "ipykernel jupyter-client pyzmq)",
        )
    else:
        yield check("first cell", "ok", f"print(1 + 1) -> 2 in {cell_s * 1000:.0f} ms")
    yield _caps_check(*caps)


def _caps_check(caps: Caps | None, held: str) -> Check:
    """What bounds a kernel's files and tasks here, from what the kernel itself reported (``held``:
    kernels.confine's ``files=tmpfs,tasks=pid_max``, empty outside the OS boundary)."""
    if caps is None:
        return Check(KERNEL, "kernel caps", "info", "the kernel has no caps of its own")
    inside = dict(part.split("=", 1) for part in held.split(",") if "=" in part)
    files = (
        f"the run's directory and /tmp each a tmpfs of {caps.bytes >> 20 if caps.bytes else 'unlimited'} MB "
        f"and {caps.files} files"
        if inside.get("files") == "tmpfs"
        else f"the run's directory counted after each cell ({caps.bytes >> 20 if caps.bytes else 'no'} MB), "
        "no file-count cap (outside the OS boundary)"
    )
    if inside.get("tasks") == "pid_max":
        tasks, status = f"{caps.tasks} tasks (the PID namespace's pid_max; binds root too)", "ok"
    elif os.geteuid() != 0:
        tasks, status = f"{caps.tasks} tasks beyond the user's (RLIMIT_NPROC)", "ok"
    else:
        tasks, status = "threads not capped: running as root, where RLIMIT_NPROC does not bind", "warn"
        if inside:
            tasks += ", and this Linux has one pid_max for the whole machine (a per-namespace one came in 6.14)"
    fix = "run as an ordinary user, or on Linux 6.14 or newer with the strict sandbox" if status == "warn" else ""
    return Check(KERNEL, "kernel caps", status, f"{files}; {tasks}", fix)


def _kernel_imports() -> str:
    """Where the kernel imports the project from, and whether the sandbox must bring it back."""
    from kernels import boundary

    hidden = boundary.hidden_dirs()
    tops = dict.fromkeys(os.path.dirname(d) for d in boundary.package_dirs(boundary.PROJECT_PACKAGES))
    shown = [
        f"{top} (in a hidden home or /tmp: bound back read-only)" if boundary.hides(top, hidden) else top
        for top in tops
    ]
    return f"the project from {'; '.join(shown) or 'nowhere (not found)'}"


async def _time_kernel() -> tuple[float, float, CellResult, tuple[Caps | None, str]]:
    """Seconds to start a kernel, seconds for one cell, that cell's result, and the kernel's caps with
    what of them holds inside it."""
    from kernels.confine import CAPS_ENV
    from tuiagent.runner import make_kernel

    kernel = make_kernel("jupyter", sandbox="auto")
    started = time.perf_counter()
    try:
        await kernel.start()
        ready = time.perf_counter()
        result = await kernel.execute("print(1 + 1)", timeout=30)
        cell_s = time.perf_counter() - ready
        held = await kernel.execute(f"print(__import__('os').environ.get({CAPS_ENV!r}, ''))", timeout=30)
        return ready - started, cell_s, result, (getattr(kernel, "caps", None), held.text.strip())
    finally:
        await kernel.shutdown()


# ----------------------------------------------------------------------------- directories


def dir_checks() -> Iterator[Check]:
    check = functools.partial(Check, DIRS)
    config = paths.config_dir()
    models = "has a models.toml" if paths.user_models_file().is_file() else "no models.toml there (optional)"
    yield check("config dir", "info", f"{config}, {models}")
    for name, path, env in (
        ("data dir", paths.data_dir(), paths.DATA_ENV),
        ("runs dir", paths.runs_dir(), paths.DATA_ENV),
        ("cache dir", paths.cache_dir(), paths.CACHE_ENV),
    ):
        yield _writable(name, path, env)
    free = shutil.disk_usage(_existing(paths.cache_dir())).free
    if free < LOW_DISK_BYTES:
        yield check(
            "free disk (cache)",
            "warn",
            f"{_bytes(free)}: assembling a model needs its whole size",
            f"free space there, or set {paths.CACHE_ENV} to a directory on a larger disk",
        )
    else:
        yield check("free disk (cache)", "ok", _bytes(free))


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable(name: str, path: Path, env: str) -> Check:
    """Whether tuiagent can write in ``path``, or make it (nothing is created to find out)."""
    fix = f"make it writable (chmod u+w), or set {env} to a directory you can write"
    if path.is_dir():
        if os.access(path, os.W_OK | os.X_OK):
            return Check(DIRS, name, "ok", str(path))
        return Check(DIRS, name, "fail", f"{path} is not writable", fix)
    parent = _existing(path)
    if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return Check(DIRS, name, "ok", f"{path} (not created yet; made on first use)")
    return Check(DIRS, name, "fail", f"{path} cannot be created ({parent} is not a writable directory)", fix)


# ----------------------------------------------------------------------------- output


def render(check: Check) -> str:
    line = f"  {check.status:<5} {check.name:<{NAME_WIDTH}} {check.detail}".rstrip()
    return line + (f"\n{'':8}fix: {check.fix}" if check.fix else "")


def report(checks: Iterable[Check], write: Callable[[str], None]) -> list[Check]:
    """Write each check as it comes, under its section's title, then the summary; returns the checks."""
    done: list[Check] = []
    for check in checks:
        if not done or check.section != done[-1].section:
            write(("\n" if done else "") + check.section)
        write(render(check))
        done.append(check)
    write("\n" + summary(done))
    return done


def counts(checks: Iterable[Check]) -> tuple[int, int]:
    """(problems, warnings)."""
    statuses = [c.status for c in checks]
    return statuses.count("fail"), statuses.count("warn")


def summary(checks: list[Check]) -> str:
    problems, warnings = counts(checks)
    if not problems and not warnings:
        return "doctor: all good"
    return f"doctor: {problems} problem{'s' * (problems != 1)}, {warnings} warning{'s' * (warnings != 1)}"


def to_json(checks: list[Check]) -> str:
    problems, warnings = counts(checks)
    return json.dumps({"checks": [asdict(c) for c in checks], "problems": problems, "warnings": warnings}, indent=1)
