"""Running an eval: every problem (and variant) under every setting and seed, concurrently where the
backend allows, each finished run appended to the results file before the next is counted.

A local llama.cpp model is shared by all runs as the batched engine (``concurrency`` sequences,
exact whatever runs beside each other, turns reused through ``eval.reuse``) and loaded again if
its process dies; vLLM and OpenAI-compatible backends are shared too; a scripted backend is made
per run, as are ``backend_factory(job)`` backends (tests, benchmarks). Jupyter kernels come from a
warm ``KernelPool``. How each backend and kernel is shared: docs/evaluating.md ("Concurrency").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernels.base import Kernel, KernelFailed
from tuiagent import paths
from tuiagent.backends.base import BackendCrashed, Failover, Sessions
from tuiagent.core.batch import run_batch
from tuiagent.core.judge import JudgeModels
from tuiagent.core.run_spec import RunSpec
from tuiagent.errors import UserError
from tuiagent.eval.datasets import Fields, Problem, load_dataset, select
from tuiagent.eval.faults_report import job_plan
from tuiagent.eval.judging import check_judge
from tuiagent.eval.metrics import run_record
from tuiagent.eval.protocols import JudgePass, VariantPass, installed, ran_protocols
from tuiagent.eval.results import ResultStore, legacy_safe_name, run_key, safe_name, trajectory_path
from tuiagent.eval.reuse import GenerationMemo, ReusingBackend
from tuiagent.eval.shards import describe, shard_name, shard_of
from tuiagent.presets import Preset

if TYPE_CHECKING:
    from tuiagent.runner import RunInput

PER_RUN_BACKENDS = ("scripted",)
MAX_FAILURES_IN_A_ROW = 5


@dataclass(frozen=True)
class Job:
    problem: Problem
    setting: Preset
    seed: int

    @property
    def group(self) -> tuple[str, str, int]:
        """The runs of one problem and seed (under every setting)."""
        return self.problem.dataset, self.problem.unit, self.seed

    @property
    def key(self) -> str:
        return run_key(self.problem.dataset, self.problem.id, self.problem.variant, self.setting.name, self.seed)

    def done_in(self, store: ResultStore, retry_errors: bool = False) -> bool:
        """Whether ``store`` holds this run, of this very question."""
        return store.done(self.key, question_hash=self.problem.question_hash(), retry_errors=retry_errors)


# [ours] What an eval's runs get unless its options or a setting say otherwise: no wall clock, so a
# run ends by tokens, tool calls and turns, and its record does not depend on the machine's load
# (``--max-time`` asks for a budget). Fingerprints hash the budget in force; one without
# ``max_wall_s`` was made when evals defaulted to 600 s (``LEGACY_WALL_S``).
EVAL_RUN_DEFAULTS: dict[str, Any] = {"max_wall_s": None}
LEGACY_WALL_S = 600.0


@dataclass
class EvalConfig:
    """What one ``tuiagent eval`` does. ``base``: the eval-wide budgets and sampling (the options
    given); each setting's spec is laid over it, so a setting's own values win."""

    datasets: list[str]
    settings: list[Preset]
    out: Path
    model: str | None = None
    models_file: Path | None = None
    script: Path | None = None
    seeds: int = 1
    limit: int | None = None
    offset: int = 0
    ids: set[str] | None = None
    fields: Fields = field(default_factory=Fields)
    concurrency: int = 1
    base: RunSpec = field(default_factory=RunSpec)
    retry_errors: bool = False
    baseline: str | None = None
    sandbox: str = "auto"  # what kernel cells may do (kernels.sandbox)
    reuse_generations: bool = True  # on the local model, generate identical turns once (eval.reuse)
    judge: str | None = None  # the judge model (models.toml id) of --judge (eval.judging)
    shard: tuple[int, int] | None = None  # (I, N): only shard I of N of the problems (eval.shards)
    protocols: list[str] = field(default_factory=list)  # the --protocol values given (eval.protocols)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # a protocol's name -> its switches' options
    inject: list[str] = field(default_factory=list)  # --inject: fault kinds, each a variant (eval.faults_report)
    inject_at: int = 1  # --inject-at: the executed call the fault hits
    broken_tool: bool = False  # --broken-tool: later runs of the same code get the fault too


@dataclass
class EvalOutcome:
    total: int = 0
    already_done: int = 0
    ran: int = 0
    failed: int = 0
    cancelled: bool = False
    wall_s: float = 0.0
    invalid_variants: list[dict[str, Any]] = field(default_factory=list)
    model: str = ""

    @property
    def throughput_per_min(self) -> float:
        return 60.0 * self.ran / self.wall_s if self.wall_s > 0 else 0.0


def default_out(datasets: list[str], model: str, name: str | None = None) -> Path:
    """``<data dir>/evals/<name>``; the default name comes from the datasets and the model, so the same
    command finds (and resumes) the same results."""
    if not name:
        stems = [Path(d).stem if not d.startswith("hf:") else d[3:] for d in datasets]
        name = "+".join(stems) + "-" + model
    evals = paths.data_dir() / "evals"
    old = evals / legacy_safe_name(name)  # one an older version named: it still resumes
    return old if old.is_dir() else evals / safe_name(name)


def load_problems(cfg: EvalConfig, *, whole: bool = False) -> list[Problem]:
    """The selected problems: of ``cfg.shard`` only, unless ``whole``."""
    out: list[Problem] = []
    names: set[str] = set()
    for spec in cfg.datasets:
        problems = select(load_dataset(spec, cfg.fields), limit=cfg.limit, offset=cfg.offset, ids=cfg.ids)
        if problems and problems[0].dataset in names:
            raise UserError(f"two datasets are named {problems[0].dataset!r}; rename one of the files")
        names.update(p.dataset for p in problems[:1])
        out.extend(problems)
    if not out:
        raise UserError("no problems selected (check --limit, --offset and --id)")
    if cfg.shard is None or whole:
        return out
    mine = shard_of(out, cfg.shard)
    if not mine:
        raise UserError(f"shard {cfg.shard[0]}/{cfg.shard[1]} has no problems: only {len(out)} are selected")
    return mine


def evidence_question(problem: Problem, setting: Preset) -> str:
    """The question a run is given: as written, or under Agent-OracleEvidence a distractor variant's
    clean question (its evidence without the distractor, arXiv 2605.00136 section 2.2; our reading)."""
    return (
        str(problem.meta.get("clean_question", problem.question))
        if setting.spec.evidence == "oracle"
        else problem.question
    )


def plan(problems: list[Problem], settings: list[Preset], seeds: int) -> list[Job]:
    """Problem-major order: an interrupted eval has whole problems (every setting) done."""
    return [Job(p, s, seed) for p in problems for seed in range(seeds) for s in settings]


def reuse_order(jobs: list[Job], concurrency: int) -> tuple[list[Job], dict[int, Job]]:
    """With reused generations and several runs in flight: ``concurrency`` problems at a time, first
    every one's first setting, then every one's second, ...; and, by ``id``, the job each of a
    problem's other settings starts after (its first setting's, so they reuse its turns rather than
    generate them beside it)."""
    groups: dict[tuple[str, str, int], list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.group, []).append(job)
    keys = list(groups)
    ordered: list[Job] = []
    for start in range(0, len(keys), concurrency):
        block = [groups[k] for k in keys[start : start + concurrency]]
        for i in range(max(len(g) for g in block)):
            ordered += [g[i] for g in block if i < len(g)]
    return ordered, {id(job): g[0] for g in groups.values() for job in g[1:]}


class EvalRunner:
    """Runs jobs against one model; see the module docstring for how backends and kernels are shared."""

    def __init__(
        self,
        spec: Any,
        store: ResultStore,
        cfg: EvalConfig,
        *,
        backend_factory: Callable[[Job], Any] | None = None,
        kernels: dict[str, Callable[..., Any]] | None = None,
        pooled: tuple[str, ...] = ("jupyter",),
        log: Callable[[str], None] = print,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.spec, self.store, self.cfg = spec, store, cfg
        self.backend_factory = backend_factory
        self.kernels = dict(kernels or {})
        self.pooled = pooled
        self.log = log
        self.on_record = on_record or (lambda r: None)
        self.concurrency = max(1, int(cfg.concurrency))
        self.shared_backend: Any = None
        self.memo: GenerationMemo | None = None  # identical generations, reused across runs (eval.reuse)
        self.engine: str | None = None  # the shared backend's fingerprint (LlamaCppBackend.engine)
        self._pools: dict[str, Any] = {}
        self.outcome = EvalOutcome(model=spec.id)  # live: what an interrupted eval had done

    # -- runs ----------------------------------------------------------------------------------

    def base(self) -> RunSpec:
        """The eval-wide spec: the eval's defaults (no wall clock) under the options given."""
        return RunSpec(run=dict(EVAL_RUN_DEFAULTS)).merged(self.cfg.base)

    def base_run(self, *, legacy: bool = False) -> dict[str, Any]:
        """The eval-wide spec as the settings' fingerprints hash it (unchanged since before RunSpec):
        a wall-time budget of 600 s is left out, as evals made when it was the default hashed it;
        ``legacy``: the base such an eval would have hashed for the same options."""
        run = dict(self.base().run)
        if legacy and "max_wall_s" not in self.cfg.base.run:
            run.pop("max_wall_s")
        elif run.get("max_wall_s") == LEGACY_WALL_S:
            run.pop("max_wall_s")
        return {"run": run, "sampling": dict(self.cfg.base.sampling)}

    def run_spec(self, job: Job) -> RunSpec:
        """The job's configuration: its setting's spec over the eval-wide one, sampled with the job's seed."""
        return self.base().merged(job.setting.spec).merged(RunSpec(sampling={"seed": job.seed}))

    def run_input(self, job: Job) -> RunInput:
        """What the job's run is given: its question (as its setting's evidence has it), the model under
        test, its trajectory file and its tool fault."""
        from tuiagent.runner import RunInput

        return RunInput(
            evidence_question(job.problem, job.setting),
            model=self.spec.id,
            models_file=self.cfg.models_file,
            script=self.cfg.script,
            gold=job.problem.gold,
            out=self.trajectory(job),
            faults=job_plan(job.problem, job.seed),
        )

    def trajectory(self, job: Job) -> Path:
        p = job.problem
        return trajectory_path(self.store.dir, p.dataset, job.setting.name, p.unit, job.seed)

    def check(self, settings: list[Preset]) -> None:
        """Fail before any run when a setting cannot be built (bad guard setting, unknown kernel)."""
        from tuiagent.runner import guard_chain, kernel_class

        for setting in settings:
            probe = Job(Problem("check", "0", "1 + 1", "2"), setting, 0)
            spec = self.run_spec(probe)
            spec.settings()  # ValueError: a budget no run can keep
            chain = guard_chain(self.spec, spec, self.cfg.models_file)
            for name in setting.spec.guards or ():
                guard = chain.settings.get(name) if chain is not None else None
                if getattr(guard, "judge", "") == "model" and not getattr(guard, "judge_model", "x"):
                    self.log(
                        f"WARNING: setting {setting.name!r}: {name}'s model judge is the model under test "
                        f"({self.spec.id}); set {name}.judge_model to another models.toml model for an "
                        "independent judge"
                    )
            if setting.spec.mode == "tool" and setting.spec.kernel not in self.kernels:
                kernel_class(setting.spec.kernel)

    # -- running --------------------------------------------------------------------------------

    async def __aenter__(self) -> EvalRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.close()
        if self.shared_backend is not None:
            backend, self.shared_backend = self.shared_backend, None
            await backend.aclose()
        if self.memo is not None:
            self.memo.close()

    def _open_shared(self) -> None:
        if self.backend_factory is None and self.spec.backend not in PER_RUN_BACKENDS and self.shared_backend is None:
            from tuiagent.backends import BATCHED_BACKENDS, open_backend
            from tuiagent.runner import open_model

            if self.spec.backend in BATCHED_BACKENDS:
                self.log(f"{self.spec.id}: {self.concurrency} run(s) in flight on llama.cpp's batched engine")
                self.shared_backend = open_backend(self.spec, n_seq=self.concurrency)
                self.engine = getattr(self.shared_backend, "engine", None)
                if self.cfg.reuse_generations and self.memo is None and self.engine is not None:
                    self.memo = GenerationMemo(self.store.dir)
                    if len(self.memo):
                        self.log(f"{len(self.memo)} generation(s) of earlier runs can be reused")
                return
            self.shared_backend = open_model(self.spec, self.cfg.script)

    async def _reopen_shared(self, dead: Any) -> None:
        """Replace a shared backend whose process died (once, however many runs saw it die)."""
        if dead is None or self.shared_backend is not dead:
            return
        self.shared_backend = None
        await dead.aclose()
        self.log("the model process died; loading the model again")
        await asyncio.to_thread(self._open_shared)

    def _kernel_factory(self, name: str) -> Callable[..., Any]:
        if name in self.kernels:
            return self.kernels[name]
        from tuiagent.runner import make_kernel

        caps = self.spec.kernel_caps
        return lambda gold=None: make_kernel(name, gold=gold, sandbox=self.cfg.sandbox, caps=caps)

    async def _start_pools(self, jobs: list[Job]) -> None:
        from kernels.pool import KernelPool

        needed = {j.setting.spec.kernel for j in jobs if j.setting.spec.mode == "tool"} & set(self.pooled)
        for name in sorted(needed - set(self._pools)):
            factory = self._kernel_factory(name)
            pool = KernelPool(
                size=min(self.concurrency, sum(j.setting.spec.kernel == name for j in jobs)), factory=factory
            )
            await pool.start()
            self._pools[name] = pool

    @contextlib.asynccontextmanager
    async def _kernel(self, job: Job) -> AsyncIterator[Kernel | KernelFailed | None]:
        """The job's started kernel (None in CoT), or the KernelFailed that says why none would start."""
        if job.setting.spec.mode != "tool":
            yield None
            return
        from tuiagent.runner import enter_kernel

        name = job.setting.spec.kernel
        source = (
            self._pools[name].acquire() if name in self._pools else self._kernel_factory(name)(gold=job.problem.gold)
        )
        async with contextlib.AsyncExitStack() as stack:
            yield await enter_kernel(stack, source)

    async def run_one(self, job: Job) -> dict[str, Any] | None:
        """Run one job; its record (already appended), or None when it was cancelled."""
        from tuiagent.core.events import Event, Notice
        from tuiagent.runner import raise_if_kernel_failed, run_problem

        given = self.run_input(job)
        path = self.trajectory(job)
        retried: list[Notice] = []  # a server that failed under this run: it starts again on another
        while True:
            path.unlink(missing_ok=True)  # a partial trajectory of an interrupted earlier try
            for leftover in path.parent.glob(path.stem + "/*"):
                leftover.unlink(missing_ok=True)
            events: list[Event] = []
            backend = self.backend_factory(job) if self.backend_factory is not None else self.shared_backend
            session = backend.session() if backend is self.shared_backend and isinstance(backend, Sessions) else None
            reusing = ReusingBackend(session or backend, self.memo) if self.memo is not None and session else None
            served = session or backend
            try:
                async with self._kernel(job) as kernel:
                    finished = await run_problem(
                        self.run_spec(job),
                        given,
                        events.append,
                        backend=reusing or served,
                        model_spec=self.spec,
                        kernel=kernel,
                        notices=retried,
                    )
            finally:
                if session is not None:
                    await session.aclose()
                if self.backend_factory is not None and backend is not None:
                    await backend.aclose()
            if finished.reason != "backend_crashed" or not (isinstance(backend, Failover) and backend.serving()):
                break
            why = next((e.message for e in reversed(events) if isinstance(e, Notice)), "its server failed")
            self.log(f"notice: run {job.key}: {why}; starting it again from scratch on another server")
            retried.append(Notice(level="warning", message=f"started again from scratch on another server: {why}"))
        if finished.reason == "cancelled":
            return None
        if finished.reason == "backend_crashed":  # the model's fault, not the run's: reload, retry later
            await self._reopen_shared(backend)
            why = next((e.message for e in reversed(events) if isinstance(e, Notice)), "the model process died")
            raise BackendCrashed(f"{why.splitlines()[0]} (the model was reloaded)")
        raise_if_kernel_failed(finished, events)  # the machine's fault, not the run's: no record, retried later
        record = {
            "key": job.key,
            "dataset": job.problem.dataset,
            "problem_id": job.problem.id,
            "variant": job.problem.variant,
            "setting": job.setting.name,
            "setting_fp": job.setting.fingerprint(self.base_run()),
            "seed": job.seed,
            "model": self.spec.id,
            "gold": job.problem.gold,
            "reference": job.problem.reference,
            "question_hash": job.problem.question_hash(),
            "question": given.problem,
            "clean_question": job.problem.meta.get("clean_question"),
            **run_record(events),
            "engine": getattr(backend, "engine", self.spec.backend),
            "determinism": getattr(served, "determinism", None),
            "server": getattr(served, "base_url", None),
            "server_retries": len(retried),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        if reusing is not None:
            record.update(
                reused_turns=reusing.reused_turns,
                reused_s=round(reusing.reused_s, 3),
                replayed_turns=reusing.replayed_turns,
            )
            if reusing.mismatched:
                record["reuse_mismatch"] = True
                self.log(
                    f"warning: {job.key}: a reused turn decoded again gave other logprobs than when it was "
                    "generated (exactness broken); this run stopped reusing"
                )
        self.store.append(record)
        self.on_record(record)
        return record

    def _warn_other_engines(self, jobs: list[Job]) -> None:
        """A resumed eval whose earlier runs came from another engine (another build, engine or
        option) would compare numbers that differ in their last digits: say so."""
        keys = {j.key for j in jobs}
        other = [r for k, r in self.store.records.items() if k in keys and r.get("engine") not in (None, self.engine)]
        if self.engine is not None and other:
            self.log(
                f"warning: {len(other)} run(s) already in {self.store.dir} were made by another engine "
                f"({', '.join(sorted({str(r['engine']) for r in other}))}; now {self.engine}): their tokens may "
                "differ from what this one generates; use a new --out to compare runs of one engine"
            )

    async def run(self, jobs: list[Job]) -> EvalOutcome:
        """Run the jobs not yet in the store, ``concurrency`` at a time."""
        outcome = self.outcome = EvalOutcome(total=len(jobs), model=self.spec.id)
        todo = [j for j in jobs if not j.done_in(self.store, self.cfg.retry_errors)]
        outcome.already_done = len(jobs) - len(todo)
        stale = [j for j in todo if self.store.stale(j.key, j.problem.question_hash())]
        if stale:
            self.log(
                f"note: {len(stale)} run(s) in {self.store.dir} were of another question text under the same key "
                "(a distractor variant written again, or an edited dataset): they run again and replace those"
            )
        if not todo:
            return outcome
        self.store.check_trajectories({j.key: self.trajectory(j) for j in todo})
        self._open_shared()
        self._warn_other_engines(jobs)
        await self._start_pools(todo)
        leaders: dict[int, Job] = {}
        if self.memo is not None and self.concurrency > 1:
            todo, leaders = reuse_order(todo, self.concurrency)
        failures_in_a_row = 0
        first_error: list[BaseException] = []
        started = time.monotonic()

        async def attempt(job: Job) -> None:
            nonlocal failures_in_a_row
            try:
                record = await self.run_one(job)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # one run failing (a kernel that would not start) is not the eval failing
                outcome.failed += 1
                failures_in_a_row += 1
                first_error.append(e)
                if isinstance(e, KernelFailed):
                    self.log(f"run {job.key} failed; it will be retried on the next run: {e}")
                else:
                    self.log(f"run {job.key} failed ({type(e).__name__}: {e}); it will be retried on the next run")
                if failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                    raise UserError(
                        f"{failures_in_a_row} runs in a row failed; stopping. "
                        f"First: {type(first_error[0]).__name__}: {first_error[0]}"
                    ) from e
                return
            if record is not None:
                outcome.ran += 1
                failures_in_a_row = 0

        try:
            await run_batch(todo, attempt, concurrency=self.concurrency, after=lambda job: leaders.get(id(job)))
        finally:
            outcome.wall_s = time.monotonic() - started
        return outcome


async def build_problems(cfg: EvalConfig, pass_: VariantPass) -> list[Problem]:
    """The clean problems and every protocol's variants of them, each variant next to its problem
    (those a protocol left out in ``pass_.left_out``, what it records in ``pass_.notes``)."""
    problems = load_problems(cfg)
    variants: list[Problem] = []
    for protocol in installed():
        variants += protocol.variants(problems, cfg)
        variants += await protocol.written_variants(problems, pass_)
    # variants next to their problem, so problem-major order keeps a problem's runs together
    order = {(p.dataset, p.id): i for i, p in enumerate(problems)}
    everything = problems + variants
    everything.sort(key=lambda p: (order[(p.dataset, p.id)], p.variant))
    return everything


async def judge_runs(
    cfg: EvalConfig,
    store: ResultStore,
    described: dict[str, Any],
    protocols: frozenset[str],
    log: Callable[[str], None],
) -> None:
    """Each protocol's judging pass after the runs (``eval.protocols``), cached in the directory's
    judgements.jsonl, through one judge model opened once for all of them."""
    models = JudgeModels(cfg.models_file, concurrency=cfg.concurrency)
    pass_ = JudgePass(cfg, store, described, protocols, models, log)
    try:
        for protocol in installed():
            await protocol.judge(pass_)
    finally:
        await models.aclose()


async def run_eval(
    cfg: EvalConfig,
    *,
    log: Callable[[str], None] = print,
    backend_factory: Callable[[Job], Any] | None = None,
    variant_backend: Callable[[], Any] | None = None,
    kernels: dict[str, Callable[..., Any]] | None = None,
    pooled: tuple[str, ...] = ("jupyter",),
    on_plan: Callable[[int, int], None] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    on_variant_progress: Callable[[int, int], None] | None = None,
) -> EvalOutcome:
    """Load, plan and run an eval (resuming what ``cfg.out`` already holds). ``on_plan(total, done)``
    is called once the jobs are known, ``on_record`` after each finished run."""
    from tuiagent.runner import open_model, resolve_spec

    spec = resolve_spec(cfg.model, cfg.models_file)
    if (
        cfg.seeds > 1
        and float({**spec_sampling(spec), **cfg.base.sampling}.get("temperature", 0.0)) == 0.0
        and not any(s.spec.sampling.get("temperature") for s in cfg.settings)
    ):
        log(
            f"note: {cfg.seeds} seeds with greedy sampling (temperature 0) give identical runs; "
            "pass --temperature for different samples"
        )
    for protocol in installed():
        protocol.check(cfg)
    if cfg.judge:
        check_judge(cfg.judge, spec.id, cfg.models_file, log)
        if not any(p.judges(cfg) for p in installed()):
            uses = "; ".join(p.judge_use for p in installed() if p.judge_use)
            log(f"note: the judge {cfg.judge} asks nothing in this eval; it judges {uses}")
    for protocol in installed():
        cfg.settings = [*cfg.settings, *protocol.added_settings(cfg, log)]
    for protocol in installed():
        for note in protocol.advise(cfg):
            log(f"note: {note}")
    with ResultStore(cfg.out) as store:
        runner = EvalRunner(
            spec,
            store,
            cfg,
            backend_factory=backend_factory,
            kernels=kernels,
            pooled=pooled,
            log=log,
            on_record=on_record,
        )
        fingerprints = {s.name: s.fingerprint(runner.base_run()) for s in cfg.settings}
        store.check_compatible(
            spec.id, fingerprints, {s.name: s.fingerprint(runner.base_run(legacy=True)) for s in cfg.settings}
        )
        runner.check(cfg.settings)  # before anything costly: a bad setting fails here

        def variant_model(model_id: str | None) -> tuple[Callable[[], Any], bool, str]:
            """The backend a protocol's variants are written with: the eval's own model, the one its
            runs share, opened once on first need; another named model, opened for them alone."""
            named = spec if model_id in (None, spec.id) else resolve_spec(model_id, cfg.models_file)
            if variant_backend is not None:  # tests: a double of their own
                return variant_backend, True, named.id
            if named is spec and backend_factory is None and spec.backend not in PER_RUN_BACKENDS:

                def own_model() -> Any:
                    runner._open_shared()
                    return runner.shared_backend

                return own_model, False, spec.id
            return (lambda: open_model(named, cfg.script)), True, named.id

        made = VariantPass(cfg, spec.id, variant_model, log, on_variant_progress)
        try:
            problems = await build_problems(cfg, made)
        except BaseException:
            await runner.aclose()
            raise
        jobs = [
            j
            for j in plan(problems, cfg.settings, cfg.seeds)
            if not any(p.skips(j.problem, j.setting) for p in installed())
        ]
        previous = store.manifest() or {}
        was = (previous["shard"]["index"], previous["shard"]["count"]) if previous.get("shard") else None
        if store.records and was != cfg.shard:
            raise UserError(
                f"{cfg.out} holds the runs of {shard_name(was)}, not of {shard_name(cfg.shard)}\n"
                "  fix: pass another --out for each shard"
            )
        # settings of earlier invocations into the same directory stay listed (their runs stay reported)
        described = {s["name"]: s for s in previous.get("settings", [])}
        ran = list(dict.fromkeys([*ran_protocols(previous), *cfg.protocols]))  # this session's and earlier ones'
        described.update({s.name: s.describe() | {"fingerprint": fingerprints[s.name]} for s in cfg.settings})
        store.write_manifest(
            {
                "model": spec.id,
                "backend": spec.backend,
                "datasets": list(dict.fromkeys([*previous.get("datasets", []), *cfg.datasets])),
                "settings": list(described.values()),
                "baseline": cfg.baseline or previous.get("baseline") or cfg.settings[0].name,
                "seeds": cfg.seeds,
                "limit": cfg.limit,
                "offset": cfg.offset,
                "run": runner.base().run,  # the budgets in force (no wall clock unless asked)
                "sampling": cfg.base.sampling,
                "concurrency": runner.concurrency,
                "invalid_variants": made.left_out,
                **made.notes,
                "sessions": previous.get("sessions", []),
                "judge": cfg.judge or previous.get("judge"),
                "protocols": ran,
                "inject": (
                    {"kinds": cfg.inject, "at": cfg.inject_at, "broken": cfg.broken_tool}
                    if cfg.inject
                    else previous.get("inject")
                ),
                "shard": describe(load_problems(cfg, whole=True), cfg.shard) if cfg.shard else None,
            }
            | {key: value for p in installed() for key, value in p.manifest(cfg, previous).items()}
        )
        if on_plan:
            on_plan(len(jobs), sum(j.done_in(store, cfg.retry_errors) for j in jobs))
        try:
            async with runner:
                await runner.run(jobs)
            if cfg.judge:
                await judge_runs(cfg, store, described, frozenset(ran), log)
        except (asyncio.CancelledError, KeyboardInterrupt):
            runner.outcome.cancelled = True
            raise
        finally:
            outcome = runner.outcome
            outcome.invalid_variants = made.left_out
            manifest = store.manifest() or {}
            manifest.setdefault("sessions", []).append(
                {
                    "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "ran": outcome.ran,
                    "failed": outcome.failed,
                    "wall_s": round(outcome.wall_s, 2),
                    "concurrency": runner.concurrency,
                    "interrupted": outcome.cancelled,
                    "engine": runner.engine,
                    "reused_generations": runner.memo is not None,
                }
            )
            store.write_manifest(manifest)
    return outcome


def spec_sampling(spec: Any) -> dict[str, Any]:
    sampling = spec.sampling
    return dataclasses.asdict(sampling) if dataclasses.is_dataclass(sampling) and not isinstance(sampling, type) else {}
