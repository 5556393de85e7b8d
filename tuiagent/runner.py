"""Headless entry point shared by the CLI, the app and the eval harness: one problem, one run, one file."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from guards.base import SettingsError
from guards.chain import GuardChain, available
from kernels.base import Kernel, KernelFailed
from kernels.sandbox import SandboxUnavailable
from kernels.sandbox import describe as describe_sandbox
from tuiagent import paths, plugins
from tuiagent.backends import Backend, open_backend
from tuiagent.config.loader import load_models
from tuiagent.config.spec import KernelCaps, ModelSpec
from tuiagent.core.events import Event, Notice, RunFinished
from tuiagent.core.faults import FaultInjector, FaultPlan
from tuiagent.core.fork import ForkPoint, guards_at
from tuiagent.core.judge import JudgeModels
from tuiagent.core.loop import Agent, opening_prompt
from tuiagent.core.run_spec import NOT_SETTINGS, RunSpec
from tuiagent.core.trajectory import Recorder, new_run_id
from tuiagent.errors import ConfigError, UserError
from tuiagent.protocol import BUDGETS, RunSettings, Sampling


@dataclass(frozen=True)
class RunInput:
    """What one run is given besides its configuration (a RunSpec): the problem and its gold answer,
    the model and the files it comes from, where the run is written, what the kernel's sandbox allows,
    and the tool fault to inject."""

    problem: str
    gold: str | None = None
    model: str | None = None  # a models.toml id; None: the default model
    models_file: Path | None = None
    script: Path | None = None  # the scripted model's turns
    out: Path | None = None  # a .jsonl file, or a directory for <run id>.jsonl; None: the runs directory
    sandbox: str = "auto"  # what kernel cells may do: auto, policy, netns, off (kernels.sandbox)
    network: bool = False  # cells may use the network (the sandbox refuses it otherwise)
    faults: FaultPlan | None = None  # a fault injected into a tool output (eval --inject, solve --inject)


# [ours] The fewest tokens of the model's context a new run must have left after its opening prompt:
# room for a short code block, its output and a \boxed{} answer. A problem that leaves less is refused
# before any work, instead of running (minutes, on a CPU) to a turn cut off with no answer.
MIN_ROOM_TOKENS = 256


class ProblemTooLong(UserError):
    """The problem leaves the model too little of its context to answer in."""


def check_room(
    backend: Backend, spec: ModelSpec, problem: str, settings: RunSettings, turn_tokens: int
) -> list[Notice]:
    """Refuse a problem whose opening prompt leaves under MIN_ROOM_TOKENS of the model's context; warn
    (a notice at the run's start) when it leaves less than one turn may generate (``turn_tokens``, or the
    run's token budget if smaller), since that turn may then end cut off before its answer."""
    used = backend.count_tokens(opening_prompt(backend, problem, settings))
    room = spec.context_tokens - used
    turn = min(turn_tokens, settings.max_tokens)
    if MIN_ROOM_TOKENS <= room < turn:
        return [
            Notice(
                level="warning",
                message=f"the problem leaves {room} of the {spec.context_tokens} tokens of {spec.id}'s context "
                f"to answer in (its prompt takes {used}), fewer than a turn may generate ({turn}): the run may "
                "end cut off (turn_length) before its answer",
            )
        ]
    if room < MIN_ROOM_TOKENS:
        raise ProblemTooLong(
            f"the problem leaves too little room to answer: its prompt takes {used} of the {spec.context_tokens} "
            f"tokens of {spec.id}'s context, {max(room, 0)} left, and a run needs at least {MIN_ROOM_TOKENS}\n"
            f"  fix: shorten the problem by {MIN_ROOM_TOKENS - room} tokens or more, or use a model with a larger "
            "context_size (models.toml)"
        )
    return []


def resolve_spec(model: str | None = None, models_file: Path | None = None) -> ModelSpec:
    """The models.toml entry of ``model`` (the default model when None), with ``models_file`` read last."""
    return load_models(models_file).get(model)


def open_model(spec: ModelSpec, script: Path | None = None) -> Backend:
    """The backend of ``spec`` (the scripted model replays ``script``'s turns)."""
    if script is not None and spec.backend != "scripted":
        raise ConfigError(
            f"--script replays turns on the scripted model, but this run's model is {spec.id} ({spec.backend})",
            fix="add --model scripted, or leave --script out",
        )
    options = {"script": script} if spec.backend == "scripted" else {}
    return open_backend(spec, **options)


@dataclass(frozen=True)
class Resolved:
    """A run's configuration with every layer applied (:func:`resolve`)."""

    settings: RunSettings  # budgets and mode
    sampling: Sampling
    kernel: str  # the tool kernel's "tuiagent.kernels" name
    guards_on: frozenset[str]
    guard_configs: dict[str, dict[str, Any]]  # per guard configured: its settings by key


def resolve(run: RunSpec, model: ModelSpec, *, toggleable: bool = False) -> Resolved:
    """``run`` on ``model``, its layers applied in one order, each later one winning:

    1. the shipped defaults: RunSettings', Sampling's and each guard's Settings (the last applied when
       the chain is built);
    2. the model's calibration file (fitted guard values) and
    3. its models.toml entry (its [sampling] and [guards] tables over 2: the loader merges them);
    4. the preset and 5. the command line (-g, --set, options; the app's panel before a run): a front
       end lays 5 over 4 with ``RunSpec.merged``, so ``run`` holds both;
    6. live toggles while the run goes on (``GuardChain.request``), not here.

    ``toggleable``: every installed guard is configured (so any can be switched on mid-run). Raises
    ValueError for a budget no run can keep."""
    names = set(available()) if "all" in (run.guards or ()) else set(run.guards or ())
    configs: dict[str, dict[str, Any]] = {name: {} for name in available()} if toggleable else {}
    configs.update({name: dict(values) for name, values in model.guards.items()})
    for name, values in run.guard_settings.items():
        configs.setdefault(name, {}).update(values)
    return Resolved(run.settings(), replace(model.sampling, **run.sampling), run.kernel, frozenset(names), configs)


def guard_chain(
    spec: ModelSpec,
    run: RunSpec,
    models_file: Path | None = None,
    *,
    toggleable: bool = False,
    resolved: Resolved | None = None,
) -> GuardChain | None:
    """The guards of ``run`` on the model of ``spec`` (their settings layered by :func:`resolve`;
    ``resolved``: that layering when the caller has it already). ``models_file``: where a guard's judge
    model is looked up.

    ``toggleable``: configure every installed guard, so any can be switched on during the run
    (the app does this); otherwise None when the run turns no guard on.
    """
    if not (run.guards or run.guard_settings or toggleable):
        return None
    try:  # the models.toml settings alone first, so an error names where the bad value is
        GuardChain({name: dict(values) for name, values in spec.guards.items()}, set())
    except SettingsError as e:
        raise ConfigError(
            str(e),
            file=spec.origin,
            key=f"models.{spec.id}.guards",
            fix="correct the value (`tuiagent guards` lists every setting)",
        ) from None
    resolved = resolved or resolve(run, spec, toggleable=toggleable)
    for name, values in run.guard_settings.items():
        if not toggleable and name not in resolved.guards_on:
            raise ConfigError(
                f"--set {name}.{next(iter(values), '...')}=... is for guard {name!r}, which is not on",
                key="--set",
                fix=f"turn it on with --guard {name}, or drop the setting",
            )
    try:
        chain = GuardChain(resolved.guard_configs, set(resolved.guards_on))
    except SettingsError as e:
        raise ConfigError(
            str(e), key="--guard / --set", fix="correct the name or value (`tuiagent guards` lists guards and settings)"
        ) from None
    check_judge_models(chain, models_file)
    return chain


def check_judge_models(chain: GuardChain, models_file: Path | None) -> None:
    """A guard's ``judge_model`` setting (the necessity guard's) must name a models.toml entry: said
    at start, not found out at the first code block."""
    named = {
        name: model for name, settings in chain.settings.items() if (model := getattr(settings, "judge_model", ""))
    }
    if not named:  # models.toml is read again only when a guard names a judge
        return
    registry = load_models(models_file)
    for name, model in named.items():
        if model not in registry.ids():
            try:
                registry.get(model)
            except ConfigError as e:
                raise ConfigError(e.problem, key=f"{name}.judge_model", fix=e.fix) from None


def trajectory_path(out: Path | None, run_id: str) -> Path:
    """``--out`` names a .jsonl file, or a directory (made if missing) for ``<run id>.jsonl``."""
    if out is None:
        return paths.runs_dir() / f"{run_id}.jsonl"
    return out if out.suffix == ".jsonl" and not out.is_dir() else out / f"{run_id}.jsonl"


KERNELS_GROUP = "tuiagent.kernels"
# Kernels shipped with tuiagent, found even when the installed entry points predate them.
_SHIPPED_KERNELS = {
    "jupyter": "kernels.jupyter:JupyterKernel",
    "noop": "kernels.noop:NoopKernel",
    "oracle": "kernels.oracle:OracleKernel",
    "calculator": "kernels.calculator:CalculatorKernel",
}


def kernel_names() -> list[str]:
    """Names of the installed kernels, without importing any of them."""
    return plugins.names(KERNELS_GROUP, _SHIPPED_KERNELS)


def kernel_class(name: str) -> type:
    """The kernel class registered as ``name`` under "tuiagent.kernels" (or shipped with tuiagent)."""
    return plugins.load(KERNELS_GROUP, name, "kernel", shipped=_SHIPPED_KERNELS, error=ConfigError)


def make_kernel(
    name: str = "jupyter",
    *,
    images_dir: Path | None = None,
    gold: str | None = None,
    sandbox: str | None = None,
    network: bool = False,
    caps: KernelCaps | None = None,
) -> Kernel:
    """An unstarted kernel ``name``, given those of ``images_dir``, ``gold``, ``sandbox``, ``network``
    (when asked for) and the ``caps`` of models.toml's [kernel] table its constructor takes."""
    cls = kernel_class(name)
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    offered: dict[str, object] = {
        "images_dir": images_dir,
        "gold": gold,
        "sandbox": sandbox,
        "network": network or None,
    }
    offered |= caps.kernel_kwargs() if caps is not None else {}
    try:
        kernel: Kernel = cls(**{k: v for k, v in offered.items() if v is not None and (takes_any or k in params)})
        return kernel
    except SandboxUnavailable as e:
        raise UserError(str(e)) from None
    except ValueError as e:  # what the kernel's constructor refuses (the oracle kernel without a gold answer)
        raise ConfigError(f"kernel {name!r}: {e}") from None


@contextlib.asynccontextmanager
async def kernel_for(
    settings: RunSettings,
    images_dir: Path,
    *,
    kernel: str = "jupyter",
    gold: str | None = None,
    sandbox: str | None = None,
    network: bool = False,
    caps: KernelCaps | None = None,
) -> AsyncIterator[Kernel | None]:
    """A started kernel for tool mode (Jupyter unless ``kernel`` names another; images saved beside
    the trajectory; ``gold`` for kernels that need it, e.g. oracle; ``sandbox`` for those that
    run code); none for CoT."""
    if settings.mode != "tool":
        yield None
        return
    async with make_kernel(
        kernel, images_dir=images_dir, gold=gold, sandbox=sandbox, network=network, caps=caps
    ) as started:
        yield started


async def run_problem(
    run: RunSpec,
    given: RunInput,
    on_event: Callable[[Event], None],
    *,
    backend: Backend | None = None,
    model_spec: ModelSpec | None = None,
    guards: GuardChain | None = None,
    kernel: Kernel | KernelFailed | None = None,
    approve: Callable[[str], Awaitable[bool]] | None = None,
    fork: ForkPoint | None = None,
    judge_models: JudgeModels | None = None,
    notices: Sequence[Notice] = (),
    faults: FaultInjector | None = None,
) -> RunFinished:
    """Run ``given``'s problem under ``run``'s configuration to the end, calling ``on_event`` for every
    event; returns the summary event. Raises ValueError for a budget no run can keep (RunSettings').

    Pass an open ``backend`` (and its ``model_spec``) to reuse a loaded model across runs, and a
    ``guards`` chain to keep a handle on it (toggle guards while the run goes on), and a started
    ``kernel`` (say, from a KernelPool) to use instead of starting ``run.kernel`` (the caller
    shuts it down), or the KernelFailed that says why none could be started (the run records it and
    ends as ``kernel_failed``), and ``approve`` to ask before each code block runs. ``fork``: continue a
    recorded run from a step instead (``fork_run`` makes the spec and input that go with it).
    ``judge_models``: the models a guard's judge may name, to share them across runs; by default
    this run opens its own from ``given.models_file`` and closes them at its end. ``notices``
    are recorded after the sandbox's, right after the run starts (the eval's: a retry elsewhere).
    ``faults``: the injector of the run's tool faults, to arm one while it runs (the app); by default
    one of ``given.faults`` when there is a plan.
    """
    spec = model_spec or resolve_spec(given.model, given.models_file)
    resolved = resolve(run, spec)
    settings, sampling = resolved.settings, resolved.sampling
    owned = backend is None
    backend = backend or open_model(spec, given.script)
    own_judges = judge_models is None
    judges = judge_models if judge_models is not None else JudgeModels(given.models_file)
    run_id = new_run_id()
    path = trajectory_path(given.out, run_id)
    finished = None
    try:
        room = check_room(backend, spec, given.problem, settings, sampling.max_tokens) if fork is None else []
        notices = [*room, *notices]
        with Recorder(path) as recorder:
            async with contextlib.AsyncExitStack() as stack:
                if kernel is None:
                    kernel = await enter_kernel(
                        stack,
                        kernel_for(
                            settings,
                            path.with_suffix(""),
                            kernel=resolved.kernel,
                            gold=given.gold,
                            sandbox=given.sandbox,
                            network=given.network,
                            caps=spec.kernel_caps,
                        ),
                    )
                failed = kernel if isinstance(kernel, KernelFailed) else None
                agent = Agent(
                    backend,
                    kernel if settings.mode == "tool" and not isinstance(kernel, KernelFailed) else None,
                    sampling=sampling,
                    settings=settings,
                    recorder=recorder,
                    guards=guards
                    if guards is not None
                    else guard_chain(spec, run, given.models_file, resolved=resolved),
                    approve=approve,
                    notices=[*sandbox_notices(kernel), *notices],
                    kernel_failed=failed,
                    judge_models=judges,
                    faults=faults if faults is not None else FaultInjector(given.faults) if given.faults else None,
                )
                async for event in agent.stream(given.problem, gold=given.gold, run_id=run_id, fork=fork):
                    on_event(event)
                    if isinstance(event, RunFinished):
                        finished = event
    finally:
        try:
            if own_judges:
                await judges.aclose()
        finally:
            if owned:
                await backend.aclose()
    assert finished is not None
    return finished


async def enter_kernel(
    stack: contextlib.AsyncExitStack, source: contextlib.AbstractAsyncContextManager[Kernel | None]
) -> Kernel | KernelFailed | None:
    """The kernel ``source`` yields, entered on ``stack`` (which shuts it down); or the KernelFailed that
    says why it would not start, for ``run_problem`` to record."""
    try:
        return await stack.enter_async_context(source)
    except KernelFailed as e:
        return e


def raise_if_kernel_failed(finished: RunFinished, events: list[Event]) -> None:
    """Raise again the KernelFailed of a run that ended ``kernel_failed`` (its Notice says why): for
    callers whose records must hold only runs that ran (the eval, the calibration and gate collections)."""
    if finished.reason == "kernel_failed":
        why = next(e.message for e in reversed(events) if isinstance(e, Notice) and e.level == "error")
        raise KernelFailed(why.splitlines()[0], text=why)


SANDBOX_NOTICE = "kernel sandbox: "  # then the level in force and what it is made of


def sandbox_notices(kernel: object | None) -> list[Notice]:
    """The sandbox in force, for the transcript, the app and the trajectory (its first notice)."""
    level = getattr(kernel, "level", None)
    if level is None:
        return []
    network = "; network allowed" if getattr(kernel, "network", False) else ""
    asked = getattr(kernel, "sandbox", level)  # "auto" says why it is not strict
    return [Notice(level="info", message=f"{SANDBOX_NOTICE}{describe_sandbox(asked)}{network}")]


def fork_run(point: ForkPoint, spec: RunSpec | None = None, **given: Any) -> tuple[RunSpec, RunInput]:
    """The spec and input of a fork of ``point``: the parent's problem, gold, model, mode, budgets,
    sampling and guards (as on at the fork point), with ``spec`` laid over them; ``given``: RunInput
    fields besides (where to write, the models file ...). Guards given in ``spec`` (even none) replace
    the parent's guards and their settings; otherwise its guard settings go over the parent's. The
    kernel and mode are the parent's: the fork re-runs its cells."""
    started = point.started
    spec = spec or RunSpec()
    guards, inherited = guards_at(point) if spec.guards is None else ((), {})
    # The parent's budgets as it ran (raised ones included), held fixed so that the fork differs by
    # what ``spec`` changes alone: given, so no guard raises them again.
    parent = RunSpec(
        guards=guards,
        guard_settings=inherited,
        run={k: started.settings[k] for k in BUDGETS if k in started.settings},
        sampling=dict(started.sampling),
    )
    merged = parent.merged(spec)
    # a preset's kernel and a condition's evidence do not carry to a fork: it re-runs the parent's cells;
    # the parent's mode and tool do (its prompt is the fork's, and a calculator's cells need the calculator)
    kept = {"mode": started.mode}
    if (tool := started.settings.get("tool", "python")) != "python":
        kept["tool"] = tool
    merged = replace(merged, run={**{k: v for k, v in merged.run.items() if k not in NOT_SETTINGS}, **kept})
    fields = {"gold": started.gold, "model": started.model_id, **given}
    return merged, RunInput(started.problem, **fields)
