"""The Textual app and its one factory, :func:`make_app`, used by the CLI and the tests.

The app composes the screens and routes what they ask (``tuiagent.ui.messages``: messages go up)
to dialogs, other screens and the headless controller (``tuiagent.ui.controller``, which holds the
configuration, the model's state and every decision); it calls the screens' methods (calls go
down). Long work runs in workers (model loading in a thread, runs as async workers in the "run"
group), and every worker failure lands in one handler, :meth:`TuiAgentApp.on_worker_state_changed`,
which turns it into a readable notice.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.dom import DOMNode
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from tuiagent.backends.base import Backend
from tuiagent.core.fork import ForkPoint
from tuiagent.errors import UserError
from tuiagent.presets import Preset
from tuiagent.ui import messages as msg
from tuiagent.ui.controller import AS_RECORDED, AppConfig, AppController, ModelState
from tuiagent.ui.errors import describe_error
from tuiagent.ui.host import HostApp
from tuiagent.ui.run_screen import FieldsScreen, LiveRunScreen, RunScreen
from tuiagent.ui.screens.compare import CompareScreen
from tuiagent.ui.screens.replay import ReplayScreen
from tuiagent.ui.screens.solve import SolveScreen
from tuiagent.ui.search import SavedRunsSearch

if TYPE_CHECKING:  # mypy checks each screen against the protocol the app reads it through
    _LIVE: tuple[type[LiveRunScreen], ...] = (SolveScreen, CompareScreen)
    _SHOWN: type[RunScreen] = ReplayScreen
    _TYPED_IN: type[FieldsScreen] = SolveScreen


SCREENS = Binding.Group("solve/replay/compare", compact=True)


class TuiAgentApp(HostApp):
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

    def __init__(
        self,
        config: AppConfig | None = None,
        *,
        backend: Backend | None = None,
        backend_factory: Callable[[], Backend] | None = None,
    ):
        super().__init__()
        self.controller = AppController(
            config or AppConfig(), backend=backend, backend_factory=backend_factory, on_model_state=self._show_state
        )
        self.set_reactive(TuiAgentApp.raw_math, self.config.raw_math)

    def _show_state(self, state: ModelState) -> None:
        self.model_state = state

    # -- start and stop -------------------------------------------------------------------------

    # Signals that end the app like ctrl+q does (a run's end recorded, its kernel shut down):
    # the terminal closing, and the system asking the process to stop.
    QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.QUIT_SIGNALS:
            loop.add_signal_handler(sig, lambda: self.call_later(self.action_quit))
        try:
            self.controller.start()
        except UserError as e:
            self.report(e, title="configuration")
        self.switch_mode(self.config.screen if self.config.screen in self.MODES else "solve")

    def watch_model_state(self) -> None:
        self.refresh_bindings()  # f5 shows or hides

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "reload_model":
            return self.session.state in ("crashed", "failed")
        return True

    def on_model_crashed(self, crashed: msg.ModelCrashed) -> None:
        """Every later run would fail the same way: a reload is offered (the controller decides
        whether the crash was the shared model's)."""
        message = self.controller.crashed(crashed.events)
        if message is None:
            return
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
            self.controller.load_failed(describe_error(worker.error))
            self.report(worker.error, title="the model could not be loaded")
        else:
            self.report(worker.error, title=worker.name or "error")
        screen = self.screen
        if isinstance(screen, LiveRunScreen):
            screen.worker_failed(worker)

    # -- actions --------------------------------------------------------------------------------

    def action_help(self) -> None:
        from tuiagent.ui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen(self.screen))

    def on_run_picked(self, picked: msg.RunPicked) -> None:
        what, paths = picked.what, picked.paths
        if what == "replay":
            self.open_replay(paths[0])
        elif what == "export":
            self.export(paths)
        elif what == "fork":
            self.ask_fork(paths[0], None)
        else:
            self.open_compare(paths)

    def on_open_replay(self, asked: msg.OpenReplay) -> None:
        self.open_replay(asked.path)

    def open_replay(self, path: Path) -> None:
        """Show a saved run on the replay screen (it picks the file up when it is shown)."""
        self.pending["replay"] = Path(path)
        if self.current_mode == "replay":
            screen = self.screen
            assert isinstance(screen, ReplayScreen), screen
            screen.take_pending()
        else:
            self.switch_mode("replay")

    def on_ask_fork(self, asked: msg.AskFork) -> None:
        self.ask_fork(asked.parent, asked.step)

    def ask_fork(self, parent: Path, step: int | None) -> None:
        """Ask what a fork of ``parent`` needs (the step, when not given; then its settings) and run
        it on the solve screen."""
        from tuiagent.ui.screens.edit_value import EditValueScreen

        def with_step(value: str | None) -> None:
            if value is None:
                return
            try:
                at, point = self.controller.fork_step(parent, value)
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

    def on_ask_edit(self, asked: msg.AskEdit) -> None:
        """Edit the target of a saved run in a text area, then choose the settings and continue from
        the edit as a fork on the solve screen (compared with its parent when it ends)."""
        from tuiagent.ui.screens.edit_text import EditTextScreen

        parent, target = asked.parent, asked.target

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
            try:
                point, edit = self.controller.edit_point(parent, target, text)
            except UserError as e:
                self.report(e, title="edit")
                return
            where = f" from token {edit[2]}" if edit[2] is not None else ""
            self._ask_fork_settings(
                point,
                f"{point.edit.what if point.edit else target.target} of step {target.step} edited{where}: continue under (enter)",
                lambda preset: self.run_fork(parent, target.step, preset, edit),
            )

        language = "python" if target.target == "code" else None
        screen = EditTextScreen(
            title, target.current, context=hint, language=language, selected=target.target != "text"
        )
        self.push_screen(screen, edited)

    def _ask_fork_settings(self, point: ForkPoint, title: str, then: Callable[[Preset | None], object]) -> None:
        """The settings a fork at ``point`` runs under: the parent's (first: it then repeats the parent
        exactly where nothing was edited), none, all or a preset; ``then`` gets None for the parent's."""
        from tuiagent.ui.screens.presets import PresetsScreen

        try:
            choices = self.controller.fork_choices(point)
        except UserError as e:
            self.report(e, title="fork")
            return

        def chosen(preset: Preset | None) -> None:
            if preset is not None:
                then(None if preset.name == AS_RECORDED else preset)

        self.push_screen(PresetsScreen(choices, title), chosen)

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

    def on_open_compare(self, asked: msg.OpenCompare) -> None:
        self.open_compare(asked.paths)

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

    def on_rerun_as(self, asked: msg.RerunAs) -> None:
        self.rerun_as(asked.problem, asked.gold, asked.columns)

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
        self.controller.reloading()
        self.change_model(self.config.model)

    @work(exclusive=True, group="model-switch", exit_on_error=False, name="change model")
    async def change_model(self, model_id: str | None) -> None:
        """Close the model and open ``model_id`` (None: the default one), keeping the guard choices."""
        try:
            load = await self.controller.change_model(model_id)
        except UserError as e:
            self.report(e, title="configuration")
            return
        if load:
            self.load_model()

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
        if choice is None:
            return
        fmt, shade = choice
        if fmt == "inspect":
            self._export_inspect(paths)
            return
        try:
            out = self.controller.export(paths, fmt, shade=shade, math=not self.raw_math)
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


def make_app(
    config: AppConfig | None = None,
    *,
    backend: Backend | None = None,
    backend_factory: Callable[[], Backend] | None = None,
) -> TuiAgentApp:
    """The app for ``config``. Tests pass a ``backend`` (shared by every run) or a
    ``backend_factory`` (a fresh backend per run, e.g. a ScriptedBackend)."""
    return TuiAgentApp(config, backend=backend, backend_factory=backend_factory)
