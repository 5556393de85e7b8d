"""A dead model process explained: what crashed, the likely cause, the command that fixes it."""

from __future__ import annotations

import re
import shlex
import signal
import sys

from tuiagent.backends.base import BackendCrashed

REBUILD = f"{shlex.quote(sys.executable)} -m tuiagent.llama_build install --force"
# The same, with AVX-512 off: for a fault that a build for this CPU still hits.
REBUILD_PLAIN = (
    "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
    f"-DGGML_AMX_BF16=OFF' {REBUILD}"
)
_FRAME = re.compile(r'File "([^"]+)", line \d+ in (\w+)')


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def system_info_has(system_info: str, feature: str) -> bool:
    """Whether llama.cpp's system info reports ``feature = 1`` (e.g. AMX_INT8)."""
    return re.search(rf"\b{re.escape(feature)} = 1\b", system_info) is not None


def where(log_tail: str) -> str:
    """The innermost Python frame that faulthandler dumped, as 'llama_cpp/_internals.py in decode'."""
    frames = _FRAME.findall(log_tail)
    for path, func in frames:  # faulthandler lists the innermost frame first
        if "llama_cpp" in path:
            short = path[path.rfind("llama_cpp") :]
            return f"in llama.cpp's native code, called from {short} ({func})"
    return "in native code" if frames else ""


def describe(
    model_id: str,
    returncode: int | None,
    log_tail: str,
    system_info: str,
    *,
    during: str,
    cpu_flags: set[str] | frozenset[str] = frozenset(),
    log: str | None = None,
) -> BackendCrashed:
    """The exception for a model worker that exited with ``returncode`` while ``during``."""
    sig = signal_name(returncode)
    how = f"with {sig}" if sig else f"with exit code {returncode}"
    place = where(log_tail)
    assertion = next((ln.strip() for ln in log_tail.splitlines() if "GGML_ASSERT" in ln), "")
    problem = f"the model process for {model_id!r} died {how} while {during}" + (f", {place}" if place else "")
    if assertion:
        problem += f": {assertion}"
    amx_cpu = "amx_tile" in cpu_flags or "amx_int8" in cpu_flags
    if sig == "SIGKILL":
        cause = (
            "it was killed from outside: most often by the out-of-memory killer (the model and its "
            "context did not fit in free memory), or by `kill -9`"
        )
        fix = "close other programs or pick a smaller model (--model qwen2.5-coder-0.5b), then load the model again"
    elif system_info_has(system_info, "AMX_INT8"):
        cause = (
            "this llama.cpp build has the AMX matrix-multiply path, which crashes on some CPUs "
            "(upstream llama.cpp issue #20824)" + ("; this CPU advertises AMX" if amx_cpu else "")
        )
        fix = f"rebuild llama-cpp-python for this CPU without AMX: {REBUILD}"
    elif sig == "SIGILL":
        cause = "the llama.cpp build uses instructions this CPU does not have (it was built for another CPU)"
        fix = f"rebuild llama-cpp-python for this CPU: {REBUILD}"
    elif assertion:
        cause = "llama.cpp stopped at one of its internal checks (an unsupported model file or setting)"
        fix = "check the model file and its settings in models.toml; `tuiagent doctor` shows both"
    elif sig is None:
        cause = "the process exited on its own; its log says why"
        fix = "run `tuiagent doctor` and see the log below"
    else:
        cause = "a fault inside llama.cpp: a build that does not suit this CPU, or a damaged model file"
        fix = f"rebuild llama-cpp-python for this CPU: {REBUILD}\n  if it persists, without AVX-512: {REBUILD_PLAIN}"
    message = f"{problem}\n  likely cause: {cause}\n  fix: {fix}"
    if log:
        message += f"\n  log: {log}"
    return BackendCrashed(message, signal=sig, returncode=returncode, log=log)
