"""Headless entry point shared by the CLI, the app and the eval harness: one problem, one run, one file."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from guards.base import SettingsError
from guards.chain import GuardChain, available
from tuiagent import paths
from tuiagent.backends import Backend, open_backend
from tuiagent.config.loader import load_models
from tuiagent.config.spec import ModelSpec
from tuiagent.core.events import Event, RunFinished
from tuiagent.core.loop import Agent, RunSettings
from tuiagent.core.trajectory import Recorder, new_run_id
from tuiagent.errors import ConfigError


@dataclass(frozen=True)
class RunRequest:
    """What a person asks for: a problem, a model, budgets, where to write."""

    problem: str
    model: str | None = None
    models_file: Path | None = None
    script: Path | None = None
    gold: str | None = None
    settings: RunSettings = field(default_factory=RunSettings)
    sampling_overrides: dict = field(default_factory=dict)
    out: Path | None = None
    guards: tuple[str, ...] = ()
    guard_settings: dict[str, dict] = field(default_factory=dict)


def resolve_spec(request: RunRequest) -> ModelSpec:
    registry = load_models(request.models_file)
    return registry.get(request.model or registry.default)


def open_model(spec: ModelSpec, request: RunRequest) -> Backend:
    options = {"script": request.script} if spec.backend == "scripted" else {}
    return open_backend(spec, **options)


def guard_chain(spec: ModelSpec, request: RunRequest) -> GuardChain | None:
    """The run's guards: settings from models.toml, overridden by the request's; on as requested."""
    names = set(available()) if "all" in request.guards else set(request.guards)
    if not names and not request.guard_settings:
        return None
    configs = {name: dict(values) for name, values in spec.guards.items()}
    for name, values in request.guard_settings.items():
        configs.setdefault(name, {}).update(values)
    try:
        return GuardChain(configs, names)
    except SettingsError as e:
        raise ConfigError(str(e), file=spec.origin, key=f"models.{spec.id}.guards",
                          fix="correct the value (see `tuiagent guards`), in models.toml or --set") from None


def trajectory_path(request: RunRequest, run_id: str) -> Path:
    """``--out`` names a .jsonl file, or a directory (made if missing) for ``<run id>.jsonl``."""
    out = request.out
    if out is None:
        return paths.runs_dir() / f"{run_id}.jsonl"
    return out if out.suffix == ".jsonl" and not out.is_dir() else out / f"{run_id}.jsonl"


@contextlib.asynccontextmanager
async def kernel_for(settings: RunSettings, images_dir: Path) -> AsyncIterator[object | None]:
    """A started Jupyter kernel for tool mode (images saved beside the trajectory); none for CoT."""
    if settings.mode != "tool":
        yield None
        return
    from kernels.jupyter import JupyterKernel

    async with JupyterKernel(images_dir=images_dir) as kernel:
        yield kernel


async def run_problem(
    request: RunRequest,
    on_event: Callable[[Event], None],
    *,
    backend: Backend | None = None,
    spec: ModelSpec | None = None,
) -> RunFinished:
    """Run one problem to the end, calling ``on_event`` for every event; returns the summary event.

    Pass an open ``backend`` (and its ``spec``) to reuse a loaded model across runs.
    """
    spec = spec or resolve_spec(request)
    owned = backend is None
    backend = backend or open_model(spec, request)
    sampling = replace(spec.sampling, **request.sampling_overrides)
    run_id = new_run_id()
    path = trajectory_path(request, run_id)
    finished = None
    try:
        with Recorder(path) as recorder:
            async with kernel_for(request.settings, path.with_suffix("")) as kernel:
                agent = Agent(
                    backend,
                    kernel,
                    sampling=sampling,
                    settings=request.settings,
                    recorder=recorder,
                    guards=guard_chain(spec, request),
                )
                async for event in agent.stream(request.problem, gold=request.gold, run_id=run_id):
                    on_event(event)
                    if isinstance(event, RunFinished):
                        finished = event
    finally:
        if owned:
            await backend.aclose()
    assert finished is not None
    return finished
