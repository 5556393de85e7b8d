"""Compare: one problem under two to four guard settings side by side (each column its own run and
kernel), or saved trajectories; rows aligned by step, a summary row at the bottom."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Static

from guards.chain import available
from tuiagent.backends.base import BatchedBackend
from tuiagent.core import events as ev
from tuiagent.core.compare import run_columns, step_cells, summary
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import TrajectoryError, load
from tuiagent.errors import UserError
from tuiagent.presets import grammar
from tuiagent.runner import run_problem
from tuiagent.ui.errors import describe_error
from tuiagent.ui.messages import ModelCrashed
from tuiagent.ui.widgets.compare_grid import CompareGrid
from tuiagent.ui.widgets.compare_summary import CompareSummary
from tuiagent.ui.widgets.problem_input import ProblemInput
from tuiagent.ui.widgets.top_bar import TopBar

if TYPE_CHECKING:
    from textual import getters
    from textual.worker import Worker

    from tuiagent.ui.host import HostApp

MAX_COLUMNS = 4


def fork_label(events: list[ev.Event]) -> str:
    """ " · fork of …ID @ step N" for a fork (the tail of the parent's run id), "" for any other run."""
    started = events[0] if events and isinstance(events[0], ev.RunStarted) else None
    if started is None or not started.parent:
        return ""
    parent = str(started.parent.get("run_id", ""))
    edit = f" ({started.parent['edit']} edited)" if started.parent.get("edit") else ""
    return f" · fork of …{parent.rsplit('-', 1)[-1]} @ step {started.parent.get('step')}{edit}"  # a run id ends in its own hex


class CompareScreen(Screen[None]):
    if TYPE_CHECKING:  # the app this runs in, typed the way textual types its own (textual.getters.app)
        app = getters.app(HostApp)

    BINDINGS = [
        Binding("ctrl+r", "run", "Run all", priority=True),
        Binding("ctrl+s", "stop", "Stop", priority=True),
        Binding("plus", "add_column", "Add column"),
        Binding("minus", "remove_column", "Remove column"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.events: list[list[ev.Event]] = []
        self.labels: list[str] = []
        self.errors: list[str] = []
        self.files: list[Path] = []
        self._dirty = False

    def compose(self) -> ComposeResult:
        config = self.app.config
        yield TopBar("· compare", id="top")
        with Horizontal(id="compare-input"):
            yield ProblemInput(config.problem, id="compare-problem")
            with Vertical(id="compare-controls"):
                yield Button("Run ^r", id="compare-run", variant="primary", compact=True)
                yield Button("Stop ^s", id="compare-stop", variant="error", compact=True, disabled=True)
                yield Input(config.gold or "", placeholder="gold", id="compare-gold", compact=True)
        with Horizontal(id="compare-columns"):
            for spec in config.columns[:MAX_COLUMNS]:
                yield self._column_input(spec)
        yield CompareGrid(id="compare-grid")
        yield CompareSummary(id="compare-summary")
        yield Footer()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Saved runs cannot be stopped or given columns: hide those keys (ctrl+r goes live)."""
        if self.has_class("-files") and action in ("stop", "add_column", "remove_column"):
            return False
        return True

    def _column_input(self, spec: str) -> Input:
        box = Input(
            spec,
            placeholder="guards: none | all | a preset | attc prunetir attc.threshold=0.9",
            compact=True,
            classes="column-spec",
        )
        box.tooltip = "the guards of this column: none, all, a preset, or guard names and guard.key=value settings"
        return box

    def on_mount(self) -> None:
        self.watch(self.app, "model_state", self._model_state)
        self.watch(self.app, "raw_math", lambda _: self._refresh(), init=False)
        self.set_interval(0.2, self._refresh_if_dirty)
        if self.app.config.compare:
            self.open_files(list(self.app.config.compare))
        else:
            self.app.ensure_model()
            self._refresh()

    def on_screen_resume(self) -> None:
        self.call_after_refresh(self.take_pending)

    def _model_state(self, state: tuple[str, str, str]) -> None:
        if not self.has_class("-files"):  # saved runs show the model(s) that made them
            self.query_one(TopBar).set_model(*state)

    def saved_runs(self) -> list[Path]:
        """The files compared, or the trajectories of a live comparison once every column has ended
        (what f9 exports)."""
        if self.files:
            return list(self.files)
        ends = [next((e for e in reversed(run) if isinstance(e, ev.RunFinished)), None) for run in self.events]
        paths = [Path(e.trajectory) for e in ends if e is not None and e.trajectory]
        return paths if len(paths) == len(self.events) >= 2 else []

    def take_pending(self) -> None:
        paths = self.app.pending.pop("compare", None)
        if paths:
            self.open_files(paths)

    # -- saved trajectories ---------------------------------------------------------------------

    def open_files(self, paths: list[Path]) -> None:
        runs, labels = [], []
        for p in paths[:MAX_COLUMNS]:
            try:
                loaded = load(p)
            except TrajectoryError as e:
                self.app.report(e, title="compare")
                continue
            if loaded.warnings:
                self.notify("\n".join(loaded.warnings), title="compare: lines skipped", severity="warning", timeout=12)
            runs.append(loaded.events)
            labels.append(f"{Path(p).stem}{fork_label(loaded.events)} · {summary(loaded.events).guards}")
        if not runs:
            return
        self.add_class("-files")
        row = self.query_one("#compare-columns")
        row.remove_children()
        row.mount_all(Static(Content.styled(label, "bold $text-accent"), classes="column-label") for label in labels)
        self.files, self.events, self.labels, self.errors = list(paths), runs, labels, [""] * len(runs)
        self.query_one(TopBar).title = f"· compare {len(runs)} saved runs"
        self.query_one(TopBar).show_recorded([e for evs in runs for e in evs])
        self.refresh_bindings()
        self._refresh()

    # -- live comparison ------------------------------------------------------------------------

    def column_specs(self) -> list[tuple[str, RunSpec]]:
        """Each column's setting string (the one grammar, with the presets of the model in use) as
        (its label, naming everything it sets; its spec)."""
        words = grammar(self.app.controller.presets())
        specs = [words.parse(box.value or "none") for box in self.query(".column-spec").results(Input)]
        return [(words.text(spec), spec) for spec in specs]

    def action_run(self) -> None:
        if self.has_class("-files"):
            self.run_saved_live()
            return
        problem = self.query_one("#compare-problem", ProblemInput).text.strip()
        if not problem:
            self.notify("type a problem first", severity="warning")
            return
        try:
            specs = self.column_specs()
        except (ValueError, UserError) as e:
            self.app.report(str(e), title="column setting")
            return
        if any(w.group == "run" and w.is_running for w in self.app.workers):
            self.notify("a run is going on: stop it first (ctrl+s)", severity="warning")
            return
        if not self.app.can_run():
            return
        gold = self.query_one("#compare-gold", Input).value.strip() or None
        self.events = [[] for _ in specs]
        self.labels = [label for label, _ in specs]
        self.errors = [""] * len(specs)
        self._set_running(True)
        self.compare(problem, gold, specs)

    async def start(self, problem: str, gold: str | None, columns: list[str]) -> None:
        """Fill in the problem and the columns, then run them (rerun-as from the solve screen)."""
        await self.go_live(problem, gold, columns)
        self.action_run()

    async def go_live(self, problem: str, gold: str | None, columns: list[str]) -> None:
        """Leave saved runs (if shown) for a live comparison of ``problem`` under ``columns``."""
        self.query_one("#compare-problem", ProblemInput).text = problem
        self.query_one("#compare-gold", Input).value = gold or ""
        row = self.query_one("#compare-columns")
        await row.remove_children()
        await row.mount_all([self._column_input(c) for c in columns[:MAX_COLUMNS]])
        if self.has_class("-files"):
            self.remove_class("-files")
            self.files, self.events, self.labels, self.errors = [], [], [], []
            top = self.query_one(TopBar)
            top.title = "· compare"
            top.set_model(*self.app.model_state)
            self.app.ensure_model()
            self.refresh_bindings()
        self._refresh()  # the summaries under the new columns' names at once, not the last ones'

    @work(exclusive=True, group="go-live", exit_on_error=False, name="go live")
    async def run_saved_live(self) -> None:
        """The saved runs' problem again, live, a column per saved run under the guards it started
        with: edit the columns, then ctrl+r."""
        first = self.events[0][0] if self.events and self.events[0] else None
        problem = first.problem if isinstance(first, ev.RunStarted) else ""
        gold = first.gold if isinstance(first, ev.RunStarted) else None
        columns = [summary(evs).guards.replace("+", " ") for evs in self.events] or ["none", "all"]
        await self.go_live(problem, gold, columns)
        self.notify("a live comparison of the saved runs' problem: edit the columns, then ctrl+r", timeout=6)

    def action_stop(self) -> None:
        for worker in self.workers:
            if worker.group == "run" and worker.is_running:
                worker.cancel()

    def action_add_column(self) -> None:
        boxes = list(self.query(".column-spec"))
        if len(boxes) >= MAX_COLUMNS:
            self.notify(f"at most {MAX_COLUMNS} columns", severity="warning")
            return
        taken = {box.value.strip() for box in self.query(".column-spec").results(Input)}
        fresh = next(
            (c for c in ("none", "all", *self.app.controller.presets(), *available()) if c not in taken), "none"
        )
        self.query_one("#compare-columns").mount(self._column_input(fresh))
        self.call_after_refresh(self._refresh)  # the summary row follows the columns

    def action_remove_column(self) -> None:
        boxes = list(self.query(".column-spec"))
        if len(boxes) <= 2:
            self.notify("at least 2 columns", severity="warning")
            return
        boxes[-1].remove()
        self.call_after_refresh(self._refresh)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "compare-run":
            self.action_run()
        elif event.button.id == "compare-stop":
            self.action_stop()

    def _set_running(self, running: bool) -> None:
        self.query_one("#compare-run", Button).disabled = running
        self.query_one("#compare-stop", Button).disabled = not running

    @work(exclusive=True, group="run", exit_on_error=False, name="compare")
    async def compare(self, problem: str, gold: str | None, specs: list[tuple[str, RunSpec]]) -> None:
        try:
            batched = await self._columns_backend(len(specs))
            concurrent = self.app.config.concurrent_columns or batched is not None
            starts = [partial(self._column, i, spec, problem, gold, batched) for i, (_, spec) in enumerate(specs)]
            results = await run_columns(starts, concurrent=concurrent)
            for i, r in enumerate(results):
                if isinstance(r, BaseException):
                    self.errors[i] = describe_error(r)
                    self.app.report(r, title=f"column {i + 1}")
                elif r.reason == "backend_crashed" and batched is not None:
                    await self.app.session.drop_columns_backend()
                    self.errors[i] = "the comparison's model process died; run again to reload it"
                elif r.reason == "backend_crashed":
                    self.post_message(ModelCrashed(self.events[i]))
        finally:
            self._set_running(False)
            self._refresh()

    async def _columns_backend(self, columns: int) -> BatchedBackend | None:
        """The batched engine the columns run on together (a local model), or None (see ModelSession)."""
        session = self.app.session
        await session.ready_event().wait()
        if (
            session.batched is None
            and session.spec is not None
            and session.spec.backend == "llama_cpp"
            and session.backend is not None
        ):
            self.notify(f"loading {session.model_id} as a batched engine, so the {columns} columns run together")
        try:
            return await session.columns_backend(columns)
        except Exception as e:  # noqa: BLE001 - the columns still run, one after another
            self.app.report(e, title="the batched engine did not load; the columns run one after another")
            return None

    async def _column(
        self, i: int, spec: RunSpec, problem: str, gold: str | None, batched: BatchedBackend | None = None
    ) -> ev.RunFinished:
        session = self.app.session
        backend, owned = (batched.session(), True) if batched is not None else await session.backend_for_run()
        # A column runs with its own guards and settings over the app's config: nothing chosen on the
        # solve screen's guard panel carries over.
        run = session.run_spec(column=spec)
        try:
            return await run_problem(
                run,
                session.inputs(problem, gold),
                partial(self._on_event, i),
                backend=backend,
                model_spec=session.spec,
                guards=session.chain(run),
            )
        finally:
            if owned:
                await backend.aclose()

    def _on_event(self, column: int, e: ev.Event) -> None:
        self.events[column].append(e)
        self._dirty = True

    def worker_failed(self, worker: Worker[Any]) -> None:
        self._set_running(False)

    # -- drawing --------------------------------------------------------------------------------

    def _refresh_if_dirty(self) -> None:
        if self._dirty:
            self._refresh()

    def _refresh(self) -> None:
        self._dirty = False
        if not self.events:
            labels = [box.value or "none" for box in self.query(".column-spec").results(Input)]
            self.query_one(CompareSummary).show(labels, [None] * len(labels))
            self.query_one(CompareGrid).show([[] for _ in labels])
            return
        math = not self.app.raw_math
        running = any(w.group == "run" and w.is_running for w in self.workers)
        live = [running and not any(isinstance(e, ev.RunFinished) for e in evs) for evs in self.events]
        self.query_one(CompareGrid).show([step_cells(evs) for evs in self.events], math=math, open_columns=live)
        self.query_one(CompareSummary).show(
            self.labels, [summary(evs) if evs else None for evs in self.events], self.errors, math=math
        )
