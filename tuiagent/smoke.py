"""The smoke check after installing llama-cpp-python: one tiny generation in a child process.

    python -m tuiagent.smoke [--force]    # build for this CPU if needed (tuiagent.llama_build), then check

Starting a ``LlamaCppBackend`` is the check: its worker process loads the model and samples one
token before it reports ready, so a build that crashes at the first decode crashes there, and the
user reads what crashed, the likely cause and the fix instead of a segfault.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from tuiagent.llama_build import BuildPlan, install_or_explain, plan, read_record, write_record


def smallest_local_model() -> tuple[str, Path] | None:
    """(model id, GGUF path) of the smallest llama_cpp model already on this machine, if any."""
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import install_state, resolve_model_file

    found: list[tuple[int, str, Path]] = []
    for spec in load_models():
        if spec.backend != "llama_cpp" or install_state(spec) != "ready":
            continue
        try:
            path = resolve_model_file(spec)
        except Exception:  # noqa: BLE001 - a model that is not usable here is simply not a candidate
            continue
        if path is not None and path.is_file():
            found.append((path.stat().st_size, spec.id, path))
    if not found:
        return None
    _, model_id, path = min(found)
    return model_id, path


def run_smoke(model_id: str, path: Path) -> str:
    """Start the model in its worker (which samples one token) and close it; returns llama.cpp's
    system info. Raises ``BackendCrashed`` with the readable message when the worker dies."""
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(path, model_id=model_id, n_ctx=256)
    info = str(backend.info["system_info"])
    asyncio.run(backend.aclose())
    return info


def ensure_smoke(plan: BuildPlan) -> int:
    """Run the smoke check unless it passed for this build; 0 when the build works (or cannot be
    checked yet: no model on this machine), 1 when it crashed."""
    from tuiagent.backends.base import BackendCrashed
    from tuiagent.backends.crash import system_info_has

    record = read_record()
    if record.get("key") == plan.key and record.get("smoke") == "passed":
        return 0
    found = smallest_local_model()
    if found is None:
        print("llama.cpp smoke check: skipped, no model on this machine yet (it runs when a model first starts)")
        return 0
    model_id, path = found
    try:
        info = run_smoke(model_id, path)
    except BackendCrashed as e:
        write_record(**{**record, "smoke": "failed"})
        print(f"error: the llama.cpp smoke check crashed.\n{e}", file=sys.stderr)
        return 1
    write_record(**{**record, "smoke": "passed", "smoke_model": model_id})
    amx = system_info_has(info, "AMX_INT8")
    print(f"llama.cpp smoke check passed on {model_id} (AMX {'on' if amx else 'off'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tuiagent.smoke",
        description="Build llama-cpp-python for this CPU unless it is here, then run the smoke check.",
    )
    ap.add_argument("--force", action="store_true", help="rebuild even when the installed build matches")
    args = ap.parse_args(argv)
    p = plan()
    return install_or_explain(p, force=args.force) or ensure_smoke(p)


if __name__ == "__main__":
    sys.exit(main())
