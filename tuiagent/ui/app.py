"""The Textual app and its one factory, :func:`make_app`, used by the CLI and the tests.

Messages go up, method calls go down; long work runs in workers (model loading in a thread, runs as
async workers in the "run" group), and every worker failure lands in one handler,
:meth:`TuiAgentApp.on_worker_state_changed`, which turns it into a readable notice.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.dom import DOMNode
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from tuiagent.backends.base import Backend
from tuiagent.core import events as ev
from tuiagent.core.fork import EditTarget, ForkPoint
from tuiagent.core.run_spec import RunSpec
from tuiagent.errors import UserError
from tuiagent.presets import Preset
from tuiagent.ui.errors import describe_error
from tuiagent.ui.key_order import KeysInOrder
from tuiagent.ui.run_screen import FieldsScreen, LiveRunScreen, RunScreen
from tuiagent.ui.screens.compare import CompareScreen
from tuiagent.ui.screens.replay import ReplayScreen
from tuiagent.ui.screens.solve import SolveScreen
from tuiagent.ui.search import SavedRunsSearch
from tuiagent.ui.session import ModelSession

if TYPE_CHECKING:  # mypy checks each screen against the protocol the app reads it through
    _LIVE: tuple[type[LiveRunScreen], ...] = (SolveScreen, CompareScreen)
    _SHOWN: type[RunScreen] = ReplayScreen
    _TYPED_IN: type[FieldsScreen] = SolveScreen


@dataclass(frozen=True)
class AppConfig:
    """What the app starts with. ``screen``: solve (default), replay (``replay`` file) or compare
    (``compare`` files, or a live comparison of ``columns``)."""

    model: str | None = None
    models_file: Path | None = None
    script: Path | None = None
    problem: str = ""
    gold: str | None = None
    # The guards on at the start and their settings, and the budgets, sampling, mode and kernel of every run.
    run_spec: RunSpec = field(default_factory=lambda: RunSpec(guards=("all",)))
    out: Path | None = None
    screen: str = "solve"
    replay: Path | None = None
    compare: tuple[Path, ...] = ()
    columns: tuple[str, ...] = ("none", "all")
    concurrent_columns: bool = False
    flush_s: float = 0.05
    sandbox: str = "auto"  # what kernel cells may do (kernels.sandbox)
    network: bool = False  # cells may use the network (--allow-network)
    confirm: bool = False  # ask before each code block runs (toggled with ctrl+k)
    raw_math: bool = False  # the model's LaTeX shown as written (toggled with f10)


SCREENS = Binding.Group("solve/replay/compare", compact=True)


class TuiAgentApp(KeysInOrder):
    """tuiagent: solve, replay and compare runs of a local model that reasons and writes Python."""

    CSS_PATH = "app.tcss"
    TITLE = "tuiagent"
    ENABLE_COMMAND_PALETTE = True
    MODES = {"solve": SolveScreen, "replay": ReplayScreen, "compare": CompareScreen}
    COMMANDS = App.COMMANDS | {SavedRunsSearch}

    BINDINGS = [
        Binding("f1", "help", "Help", priority=True),
        Binding("f5", "reload_model", "Reload model", priority=True),  # shown when there is a model to reload
        Binding("ctrl+o", "open_run", "Open run", priority=True),
        Binding("f2", "switch_mode('solve')", "Solve screen", priority=True, group=SCREENS),
        Binding("f3", "switch_mode('replay')", "Replay screen", priority=True, group=SCREENS),
        Binding("f4", "switch_mode('compare')", "Compare screen", priority=True, group=SCREENS),
        Binding("ctrl+l", "choose_model", "Model", priority=True),
        Binding("ctrl+t", "toggle_dark", "Light/dark", priority=True),
        Binding("f9", "export", "Export…", priority=True, tooltip="the run or comparison shown, to Markdown or HTML"),
        Binding(
            "f8",
            "toggle_shade",
            "Token confidence",
            priority=True,
            tooltip="shade text and code by each token's probability; hover a token for its value",
        ),
        Binding(
            "f10",
            "toggle_raw_math",
            "Raw math",
            priority=True,
            tooltip="show the model's LaTeX as it wrote it, or again as readable math",
        ),
    ]

    model_state: reactive[tuple[str, str, str]] = reactive(("", "idle", ""))
    shade_tokens: reactive[bool] = reactive(False)  # token confidence drawn (f8), on every screen
    raw_math: reactive[bool] = reactive(False)  # the model's LaTeX shown as written (f10), on every screen

    def __init__(
        self,
        config: AppConfig | None = None,
        *,
        backend: Backend | None = None,
        backend_factory: Callable[[], Backend] | None = None,
    ):
        super().__init__()
        self.config = config or AppConfig()
        self.session = ModelSession(self.config, backend=backend, backend_factory=backend_factory)
        self.errors: list[str] = []  # every error notice shown, for tests and the help screen
        self.pending: dict[str, Any] = {}  # files for a screen to open when it is shown
        self.set_reactive(TuiAgentApp.raw_math, self.config.raw_math)

    # -- start and stop -------------------------------------------------------------------------

    # Signals that end the app like ctrl+q does (a run's end recorded, its kernel shut down):
    # the terminal closing, and the system asking the process to stop.
    QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.QUIT_SIGNALS:
            loop.add_signal_handler(sig, lambda: self.call_later(self.action_quit))
        try:
            self.session.resolve()
            self.model_state = (self.session.model_id, "idle", "")
        except UserError as e:
            self.session.set_state("failed", str(e))
            self.model_state = (self.config.model or "?", "failed", "bad config")
            self.report(e, title="configuration")
        self.switch_mode(self.config.screen if self.config.screen in self.MODES else "solve")

    def ensure_model(self) -> None:
        """Start loading the model unless it is loaded, loading, or failed."""
        s = self.session
        if s.state != "idle":
            return
        if not s.needs_loading:
            s.set_state("ready")
            self.model_state = (s.model_id, "ready", "")
            return
        s.set_state("loading")
        self.model_state = (s.model_id, "loading", "")
        self.load_model()

    @work(thread=True, exclusive=True, group="model", exit_on_error=False, name="load model")
    def load_model(self) -> None:
        self.session.load_blocking()
        self.call_from_thread(self._model_loaded)

    def _model_loaded(self) -> None:
        self.session.set_state("ready")
        self.model_state = (self.session.model_id, "ready", "")
        self.notify(f"{self.session.model_id} is loaded", timeout=3)

    def watch_model_state(self) -> None:
        self.refresh_bindings()  # f5 shows or hides

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "reload_model":
            return self.session.state in ("crashed", "failed")
        return True

    def can_run(self) -> bool:
        """Whether a run can start; if not (the model failed to load or crashed), says why."""
        if self.session.state in ("failed", "crashed"):
            self.report(self.session.error, title="no model")
            return False
        return True

    def model_crashed(self, events: Sequence[ev.Event]) -> None:
        """A run (its ``events``) ended because the shared model's process died: every later run would
        fail the same way, so the model is marked crashed and a reload is offered."""
        s = self.session
        if not s.shared or s.state == "crashed":  # a per-run backend dies alone; the next run opens another
            return
        message = next((e.message for e in reversed(events) if isinstance(e, ev.Notice) and e.level == "error"), "")
        s.set_state("crashed", "the model crashed: press f5 to reload it")
        self.model_state = (s.model_id, "crashed", "f5 reloads")
        self.errors.append(f"the model crashed: {message}")
        self.clear_notifications()  # the run's toast of the same message would cover the dialog
        from tuiagent.ui.screens.model_crashed import ModelCrashedScreen

        def closed(reload: bool | None) -> None:
            if reload:
                self.action_reload_model()

        self.push_screen(ModelCrashedScreen(message), closed)

    def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.QUIT_SIGNALS:
            loop.remove_signal_handler(sig)

    async def action_quit(self) -> None:
        """Stop any run (the kernel is interrupted and shut down, the trajectory closed), free the model, quit."""
        running = [w for w in self.workers if w.group == "run" and w.is_running]
        for w in running:
            w.cancel()
        for w in running:
            try:
                await asyncio.wait_for(w.wait(), timeout=5)
            except Exception:  # noqa: BLE001 - cancelled or failed: either way it is over
                pass
        try:
            await asyncio.wait_for(self.session.aclose(), timeout=5)
        except Exception:  # noqa: BLE001
            pass
        self.exit()

    # -- the one place where worker failures become notices -------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state != WorkerState.ERROR or worker.error is None:
            return
        if worker.group == "model":
            self.session.set_state("failed", describe_error(worker.error))
            self.model_state = (self.session.model_id, "failed", "")
            self.report(worker.error, title="the model could not be loaded")
        else:
            self.report(worker.error, title=worker.name or "error")
        screen = self.screen
        if isinstance(screen, LiveRunScreen):
            screen.worker_failed(worker)

    def report(self, error: BaseException | str, *, title: str = "error") -> None:
        text = error if isinstance(error, str) else describe_error(error)
        self.errors.append(f"{title}: {text}")
        self.notify(text, title=title, severity="error", timeout=12)

    # -- actions --------------------------------------------------------------------------------

    def action_help(self) -> None:
        from tuiagent.ui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen(self.screen))

    def action_open_run(self) -> None:
        from tuiagent.ui.screens.open_run import OpenRunScreen

        if not isinstance(self.screen, OpenRunScreen):
            self.push_screen(OpenRunScreen(), self._opened)

    def _opened(self, result: tuple[str, list[Path]] | None) -> None:
        if not result:
            return
        what, paths = result
        if what == "replay":
            self.open_replay(paths[0])
        elif what == "export":
            self.export(paths)
        elif what == "fork":
            self.ask_fork(paths[0], None)
        else:
            self.open_compare(paths)

    def open_replay(self, path: Path) -> None:
        """Show a saved run on the replay screen (it picks the file up when it is shown)."""
        self.pending["replay"] = Path(path)
        if self.current_mode == "replay":
            screen = self.screen
            assert isinstance(screen, ReplayScreen), screen
            screen.take_pending()
        else:
            self.switch_mode("replay")

    # The fork dialog's first choice: keep the parent's guards and settings (then the fork repeats it exactly).
    AS_RECORDED = "as recorded"

    def ask_fork(self, parent: Path, step: int | None) -> None:
        """Ask what a fork of ``parent`` needs (the step, when not given; then its settings) and run
        it on the solve screen."""
        from tuiagent.core.fork import fork_point
        from tuiagent.core.trajectory import load
        from tuiagent.ui.screens.edit_value import EditValueScreen

        def with_step(value: str | None) -> None:
            if value is None:
                return
            try:
                if not value.strip().isdigit():
                    raise UserError(f"{value!r} is not a step number")
                at = int(value)
                point = fork_point(load(parent).events, at, parent)
            except UserError as e:
                self.report(e, title="fork")
                return
            self._ask_fork_settings(
                point, f"fork after step {at}: run it under (enter)", lambda preset: self.run_fork(parent, at, preset)
            )

        if step is None:
            self.push_screen(EditValueScreen("fork after step (0: before the first turn)", 0), with_step)
        else:
            with_step(str(step))

    def ask_edit(self, parent: Path, target: EditTarget) -> None:
        """Edit ``target`` of the saved run ``parent`` in a text area, then choose the settings and
        continue from the edit as a fork on the solve screen (compared with its parent when it ends)."""
        from tuiagent.core.fork import edit_point, text_edit
        from tuiagent.core.trajectory import load
        from tuiagent.ui.screens.edit_text import EditTextScreen

        if target.target == "text":
            title = f"step {target.step}: the model's text"
            hint = "the tokens you leave in place stay as generated; the model reads the rest as its own and goes on"
        else:
            title = f"step {target.step}: the {target.target} of its call"
            hint = "selected: typing replaces it, an arrow key keeps it to change a part"

        def edited(text: str | None) -> None:
            if text is None:
                return
            if text == target.current:
                self.notify("nothing changed: f forks without an edit", severity="warning")
                return
            token, replacement = text_edit(target.tokens, text) if target.target == "text" else (None, text)
            try:
                point = edit_point(
                    load(parent).events, target.step, target.target, replacement, token=token, path=parent
                )
            except UserError as e:
                self.report(e, title="edit")
                return
            where = f" from token {token}" if token is not None else ""
            self._ask_fork_settings(
                point,
                f"{point.edit.what if point.edit else target.target} of step {target.step} edited{where}: continue under (enter)",
                lambda preset: self.run_fork(parent, target.step, preset, (target.target, replacement, token)),
            )

        language = "python" if target.target == "code" else None
        screen = EditTextScreen(
            title, target.current, context=hint, language=language, selected=target.target != "text"
        )
        self.push_screen(screen, edited)

    def _ask_fork_settings(self, point: ForkPoint, title: str, then: Callable[[Preset | None], object]) -> None:
        """The settings a fork at ``point`` runs under: the parent's (first: it then repeats the parent
        exactly where nothing was edited), none, all or a preset; ``then`` gets None for the parent's."""
        from tuiagent.core.fork import guards_at
        from tuiagent.ui.screens.presets import PresetsScreen

        try:
            guards, settings = guards_at(point)
            named = self.preset_choices()
        except UserError as e:
            self.report(e, title="fork")
            return
        recorded = Preset(
            self.AS_RECORDED,
            RunSpec(guards=guards, guard_settings=settings),
            description="the parent's settings: only the edit differs"
            if point.edit
            else "the parent's settings: repeats its next step exactly",
        )

        def chosen(preset: Preset | None) -> None:
            if preset is not None:
                then(None if preset.name == self.AS_RECORDED else preset)

        self.push_screen(PresetsScreen([recorded, *named], title), chosen)

    def presets(self) -> dict[str, Preset]:
        """The presets for the model in use (its calibration's ``recommended``, the user's), read
        afresh each time, so after a model switch they are the new model's."""
        from tuiagent.presets import load_presets

        model = self.session.spec.id if self.session.spec is not None else self.config.model
        return load_presets(model=model, models_file=self.config.models_file)

    def preset_choices(self) -> list[Preset]:
        """None, all and every preset for the model in use, as the preset dialogs list them."""
        return [Preset("none", RunSpec(guards=())), Preset("all", RunSpec(guards=("all",))), *self.presets().values()]

    def use_run_settings(self, spec: RunSpec) -> None:
        """The budgets, sampling, mode and kernel of ``spec`` for the next runs (a preset chosen in the
        app: those it does not give go back to their defaults); the guard choices are the panel's."""
        self.config = _with(self.config, run_spec=replace(spec, guards=(), guard_settings={}))
        self.session.config = self.config

    @work(exclusive=True, group="fork", exit_on_error=False, name="fork")
    async def run_fork(
        self, parent: Path, step: int, preset: Preset | None, edit: tuple[str, str, int | None] | None = None
    ) -> None:
        """Run a fork of ``parent`` after ``step`` (with ``edit``: (target, replacement, token) at
        ``step``) on the solve screen."""
        await self.switch_mode("solve")
        screen = self.screen
        assert isinstance(screen, SolveScreen), screen
        screen.fork(parent, step, preset, edit)

    def open_compare(self, paths: Iterable[Path]) -> None:
        self.pending["compare"] = [Path(p) for p in paths]
        if self.current_mode == "compare":
            screen = self.screen
            assert isinstance(screen, CompareScreen), screen
            screen.take_pending()
        else:
            self.switch_mode("compare")

    def action_choose_model(self) -> None:
        from tuiagent.ui.screens.models import ModelsScreen

        self.push_screen(ModelsScreen(self.session.model_id), self._model_chosen)

    def _model_chosen(self, model_id: str | None) -> None:
        if not model_id or (model_id == self.session.model_id and self.session.state not in ("crashed", "failed")):
            return
        if any(w.group == "run" and w.is_running for w in self.workers):
            self.notify("stop the run before changing the model", severity="warning")
            return
        self.change_model(model_id)

    @work(exclusive=True, group="rerun-as", exit_on_error=False, name="rerun as")
    async def rerun_as(self, problem: str, gold: str | None, columns: list[str]) -> None:
        """Run ``problem`` on the compare screen under ``columns`` (guard settings or presets)."""
        await self.switch_mode("compare")
        screen = self.screen
        assert isinstance(screen, CompareScreen), screen
        await screen.start(problem, gold, columns)

    def action_reload_model(self) -> None:
        """Close the model that crashed (or failed to load) and load it again."""
        if any(w.group == "run" and w.is_running for w in self.workers):
            self.notify("stop the run before reloading the model", severity="warning")
            return
        self.session.set_state("loading")  # at once: no second reload, and the crash dialog closes
        self.model_state = (self.session.model_id, "loading", "")
        self.change_model(self.config.model)

    @work(exclusive=True, group="model-switch", exit_on_error=False, name="change model")
    async def change_model(self, model_id: str | None) -> None:
        """Close the model and open ``model_id`` (None: the default one), keeping the guard choices."""
        old = self.session
        await old.aclose()
        self.config = _with(self.config, model=model_id)
        self.session = ModelSession(self.config)
        self.session.enabled, self.session.overrides = old.enabled, old.overrides  # keep the guard choices
        try:
            self.session.resolve()
        except UserError as e:
            self.session.set_state("failed", str(e))
            self.model_state = (self.session.model_id, "failed", "")
            self.report(e, title="configuration")
            return
        self.ensure_model()

    def action_export(self) -> None:
        paths = self.screen.saved_runs() if isinstance(self.screen, RunScreen) else []
        if not paths:
            self.notify("nothing saved to export here yet: run a problem or open a saved run", severity="warning")
            return
        self.export(paths)

    def export(self, paths: list[Path]) -> None:
        """Ask for a format, then write the export of ``paths`` (one run, or a comparison) beside the first."""
        from tuiagent.ui.screens.export import ExportScreen

        what = "this run" if len(paths) == 1 else f"this comparison of {len(paths)} runs"
        self.push_screen(ExportScreen(what), partial(self._export, paths))

    def _export(self, paths: list[Path], choice: tuple[str, bool] | None) -> None:
        from tuiagent.export import default_output, export_runs

        if choice is None:
            return
        fmt, shade = choice
        if fmt == "inspect":
            self._export_inspect(paths)
            return
        out = default_output(paths, fmt)
        try:
            out.write_text(export_runs(paths, fmt, shade=shade, math=not self.raw_math), encoding="utf-8")
        except (UserError, OSError) as e:
            self.report(e, title="export")
            return
        self.notify(str(out), title=f"exported ({fmt})", timeout=8)

    @work(exclusive=True, group="export", exit_on_error=False, name="export inspect")
    async def _export_inspect(self, paths: list[Path]) -> None:
        """inspect_ai logs of ``paths`` beside the first run (importing inspect_ai takes seconds: off the UI)."""
        from tuiagent.export.inspect_log import export_inspect

        try:
            written, _ = await asyncio.to_thread(export_inspect, paths)
        except (UserError, OSError) as e:
            self.report(e, title="export")
            return
        folder = written[0].parent
        self.notify(
            f"{', '.join(p.name for p in written)} in {folder}; open with: inspect view --log-dir {folder}",
            title=f"exported ({len(written)} inspect log{'s' if len(written) > 1 else ''})",
            timeout=10,
            markup=False,
        )

    def action_toggle_shade(self) -> None:
        from tuiagent.export.confidence import legend

        self.shade_tokens = not self.shade_tokens
        if self.shade_tokens:
            self.notify(
                f"shaded: {legend()} (darker: less sure); hover a token for its p; each code block "
                "names its least sure token",
                title="token confidence: on",
                timeout=5,
                markup=False,
            )
        else:
            self.notify("token confidence: off", timeout=2)

    def action_toggle_raw_math(self) -> None:
        self.raw_math = not self.raw_math
        self.notify(
            "math: the LaTeX as the model wrote it" if self.raw_math else "math: rendered for reading",
            timeout=2,
            markup=False,
        )

    def action_toggle_dark(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    # -- command palette: every key's action, with its key --------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        seen: set[str] = set()
        chain: list[tuple[DOMNode, BindingType]] = [(screen, b) for b in screen.BINDINGS]
        chain += [(self, b) for b in self.BINDINGS]
        chain += [(a.node, a.binding) for a in screen.active_bindings.values()]  # the focused widget's
        for node, b in chain:
            if not isinstance(b, Binding) or not b.description or b.system or b.description in seen:
                continue
            seen.add(b.description)
            key = self.get_key_display(Binding(b.key.split(",")[0].strip(), b.action))
            yield SystemCommand(
                b.description,
                f"key: {key}" + (f" · {b.tooltip}" if b.tooltip else ""),
                partial(self._run_binding, b.action, node),
            )

    def _run_binding(self, action: str, node: Any) -> None:
        self.call_later(self.run_action, action, node)


def _with(config: AppConfig, **changes: Any) -> AppConfig:
    return replace(config, **changes)


def make_app(
    config: AppConfig | None = None,
    *,
    backend: Backend | None = None,
    backend_factory: Callable[[], Backend] | None = None,
) -> TuiAgentApp:
    """The app for ``config``. Tests pass a ``backend`` (shared by every run) or a
    ``backend_factory`` (a fresh backend per run, e.g. a ScriptedBackend)."""
    return TuiAgentApp(config, backend=backend, backend_factory=backend_factory)
