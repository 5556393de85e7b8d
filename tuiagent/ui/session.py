"""The app's model and guard configuration, shared by every run (no UI code).

The model is opened once (in a worker thread: loading a GGUF takes seconds) and kept across runs;
if its process dies, the state is "crashed" and runs are refused until the app opens it again.
A scripted backend replays its turns from the start, so it is opened afresh for each run; tests
pass ``backend_factory`` to get the same behaviour with their own doubles.

A live comparison on a local llama.cpp model runs its columns together on a second worker loaded
as the batched engine (``backends.llama_batch``, one sequence a column): one decode step carries
every column's next token, and a column's tokens do not depend on the columns beside it. It is
opened on the first comparison and kept while the app runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

from guards.chain import GuardChain, available
from tuiagent.backends.base import Backend, BatchedBackend
from tuiagent.config.spec import ModelSpec
from tuiagent.core.run_spec import RunSpec
from tuiagent.errors import UserError
from tuiagent.runner import RunInput, guard_chain, open_model, resolve_spec


class ModelSession:
    """Resolves the model spec, opens the backend once, and remembers the guard choices for the next run."""

    def __init__(
        self, config: Any, *, backend: Backend | None = None, backend_factory: Callable[[], Backend] | None = None
    ):
        self.config = config
        self.spec: ModelSpec | None = None
        self.backend = backend
        self.factory = backend_factory
        self.batched: BatchedBackend | None = None  # the comparison's engine (see the module docstring)
        self.state = "idle"  # idle, loading, ready, failed, crashed (its process died; reload to go on)
        self.error = ""
        self._ready: asyncio.Event | None = None
        guards = config.run_spec.guards or ()
        self.enabled: set[str] = set(available()) if "all" in guards else set(guards)
        self.overrides: dict[str, dict[str, Any]] = {k: dict(v) for k, v in config.run_spec.guard_settings.items()}

    # -- the model ------------------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        return self.spec.id if self.spec is not None else (self.config.model or "default model")

    def resolve(self) -> ModelSpec:
        """Read models.toml (raises ConfigError, shown as a notice by the app)."""
        self.spec = resolve_spec(self.config.model, self.config.models_file)
        return self.spec

    @property
    def needs_loading(self) -> bool:
        """Whether a backend has to be opened before the first run (not for doubles or scripts)."""
        return self.backend is None and self.factory is None and (self.spec is None or self.spec.backend != "scripted")

    def load_blocking(self) -> None:
        """Open the backend (call from a worker thread)."""
        spec = self.spec if self.spec is not None else self.resolve()
        if self.needs_loading:
            self.backend = open_model(spec, self.config.script)
        from kernels.sandbox import strict_unavailable

        strict_unavailable()  # its probe starts a sandboxed Python once: here, not at the first run

    def ready_event(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    def set_state(self, state: str, error: str = "") -> None:
        self.state, self.error = state, error
        if state in ("ready", "failed", "crashed"):
            self.ready_event().set()
        else:
            self.ready_event().clear()

    async def backend_for_run(self) -> tuple[Backend, bool]:
        """The backend for one run and whether the caller must close it (a fresh per-run backend)."""
        if self.factory is not None:
            return self.factory(), True
        await self.ready_event().wait()
        if self.state == "failed":
            raise RuntimeError(f"the model could not be loaded: {self.error}")
        if self.state == "crashed":
            raise UserError(self.error)
        if self.backend is not None:
            return self.backend, False
        assert self.spec is not None
        return open_model(self.spec, self.config.script), True

    async def columns_backend(self, columns: int) -> BatchedBackend | None:
        """The batched engine for ``columns`` live columns, or None where columns take the run
        backend (not a local llama.cpp model, or test doubles). Raises what opening it raises."""
        if self.factory is not None or self.backend is None or self.spec is None or self.spec.backend != "llama_cpp":
            return None
        held = self.batched
        if held is not None and getattr(held, "n_seq", 0) >= columns and getattr(held, "alive", True):
            return held
        await self.drop_columns_backend()  # too few sequences, or its process died
        from tuiagent.backends import open_backend

        opened = await asyncio.to_thread(open_backend, self.spec, n_seq=columns)
        self.batched = cast(BatchedBackend, opened)  # a llama_cpp model opened with n_seq: LlamaCppBackend
        return self.batched

    async def drop_columns_backend(self) -> None:
        """Close and forget the comparison's engine (its process died, or it has too few sequences)."""
        held, self.batched = self.batched, None
        if held is not None:
            await held.aclose()

    @property
    def shared(self) -> bool:
        """True when runs share one loaded model (a live comparison then runs its columns in turn)."""
        return self.factory is None and self.backend is not None

    async def aclose(self) -> None:
        await self.drop_columns_backend()
        if self.backend is not None:
            backend, self.backend = self.backend, None
            await backend.aclose()

    # -- requests and guards --------------------------------------------------------------------

    def run_spec(self, column: RunSpec | None = None) -> RunSpec:
        """The app's config (its budgets, sampling, mode and kernel) under the guard choices made so
        far; or under a compare ``column``'s spec laid over that config instead of the choices."""
        base: RunSpec = replace(self.config.run_spec, guards=(), guard_settings={})
        chosen = (
            column if column is not None else RunSpec(guards=tuple(sorted(self.enabled)), guard_settings=self.overrides)
        )
        return base.merged(chosen)

    def inputs(self, problem: str, gold: str | None = None) -> RunInput:
        """What a run of ``problem`` is given besides its spec: the app's model, files and sandbox."""
        c = self.config
        return RunInput(
            problem,
            gold=gold or None,
            model=c.model,
            models_file=c.models_file,
            script=c.script,
            out=c.out,
            sandbox=c.sandbox,
            network=c.network,
        )

    def chain(self, run: RunSpec | None = None) -> GuardChain:
        """A chain with every installed guard configured (so any can be switched on mid-run)."""
        assert self.spec is not None
        chain = guard_chain(self.spec, run or self.run_spec(), self.config.models_file, toggleable=True)
        assert chain is not None
        return chain

    def remember(self, guard: str, *, enabled: bool | None = None, settings: dict[str, Any] | None = None) -> None:
        if enabled is True:
            self.enabled.add(guard)
        elif enabled is False:
            self.enabled.discard(guard)
        if settings:
            self.overrides.setdefault(guard, {}).update(settings)
