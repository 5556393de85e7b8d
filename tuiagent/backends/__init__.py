"""Model backends, imported lazily: opening a model is what loads llama_cpp, vllm or an HTTP client."""

from __future__ import annotations

import importlib

from tuiagent.backends.base import Backend, GenerationStats
from tuiagent.config.spec import ModelSpec
from tuiagent.protocol import Sampling, Token, TokenStream

_MODULES = {
    "llama_cpp": "tuiagent.backends.llama_cpp",
    "vllm": "tuiagent.backends.vllm",
    "openai": "tuiagent.backends.openai",
    "scripted": "tuiagent.backends.scripted",
}
# The backends loaded as a batched engine for several sequences in flight (option n_seq); the others
# serve concurrent requests as they are (a server, vLLM) or one after another.
BATCHED_BACKENDS = ("llama_cpp",)


def open_backend(spec: ModelSpec, **options: object) -> Backend:
    """Create the backend named by ``spec.backend``; each module exposes ``create(spec, **options)``."""
    module = importlib.import_module(_MODULES[spec.backend])
    backend: Backend = module.create(spec, **options)
    return backend


__all__ = ["BATCHED_BACKENDS", "Backend", "GenerationStats", "Sampling", "Token", "TokenStream", "open_backend"]
