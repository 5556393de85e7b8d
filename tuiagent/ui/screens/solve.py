"""Solve: type a problem, run it, watch the trajectory stream with every guard's numbers; switch
guards and their settings while it runs; stop at once (the partial trajectory is kept)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label

from guards.base import SettingsError
from guards.chain import Change, GuardChain, guard_class
from tuiagent.core import events as ev
from tuiagent.core.faults import FaultInjector
from tuiagent.core.fork import ForkPoint
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import TrajectoryError, load
from tuiagent.errors import UserError
from tuiagent.presets import Preset, grammar
from tuiagent.runner import RunInput, run_problem, trajectory_path
from tuiagent.ui.guard_state import states_from_chain, validate
from tuiagent.ui.messages import AskFork, ModelCrashed, OpenCompare, RerunAs
from tuiagent.ui.screens.confirm_code import ConfirmCodeScreen
from tuiagent.ui.screens.fault_menu import FaultMenuScreen
from tuiagent.ui.widgets.code_block import CodeBlockView
from tuiagent.ui.widgets.guard_panel import GuardPanel
from tuiagent.ui.widgets.problem_input import ProblemInput
from tuiagent.ui.widgets.status_line import StatusLine
from tuiagent.ui.widgets.top_bar import TopBar
from tuiagent.ui.widgets.trajectory import TrajectoryView

if TYPE_CHECKING:
    from textual import getters
    from textual.worker import Worker

    from tuiagent.ui.host import HostApp


class SolveScreen(Screen[None]):
    """The default screen."""

    if TYPE_CHECKING:  # the app this runs in, typed the way textual types its own (textual.getters.app)
        app = getters.app(HostApp)

    BINDINGS = [
        Binding("ctrl+r", "run", "Run", priority=True),
        Binding("ctrl+s", "stop", "Stop", priority=True),
        Binding("ctrl+g", "guards", "Guards panel", priority=True, tooltip="focus the guard panel; again: back"),
        Binding("ctrl+g", "leave_guards", "Back from guards", priority=True),
        Binding("f7", "all_guards", "All guards off/on", priority=True, show=False),
        Binding("ctrl+n", "new", "New", priority=True),
        Binding("ctrl+k", "toggle_confirm", "Ask before running code", priority=True, show=False),
        Binding("y", "copy_answer", "Copy answer"),
        Binding("ctrl+e", "edit_problem", "Edit problem", show=False),
        Binding("f6", "rerun_as", "Rerun as…", priority=True),
        Binding("ctrl+f", "fork", "Fork…", priority=True, show=False),
        Binding("f12", "compare_parent", "Compare with parent", priority=True, show=False),
        Binding(
            "ctrl+b",
            "inject_fault",
            "Inject fault…",
            priority=True,
            show=False,
            tooltip="while a run goes on: arm a fault (wrong number, error, empty, timeout, stale) for its next tool output",
        ),
    ]

    FIELDS = [  # the fields one can type in, for the help screen
        ("problem  (ctrl+e)", "type or paste the problem; ctrl+r runs it; tab goes on to the gold answer"),
        ("gold answer  (tab)", "optional: the right answer; the run is then marked right or wrong"),
    ]

    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]

    running: reactive[bool] = reactive(False)

    def __init__(self) -> None:
        super().__init__()
        self.chain: GuardChain | None = None
        self.inputs: RunInput | None = None  # what the run going on was given
        self.run_path: Path | None = None
        self.parent_path: Path | None = None  # the run this one forked, when it is a fork
        self.finished: ev.RunFinished | None = None
        self.answer: str | None = None
        self.ask_before_code = self.app.config.confirm
        self.faults: FaultInjector | None = None  # the running solve's: a fault armed here hits its next output

    def compose(self) -> ComposeResult:
        config = self.app.config
        yield TopBar("· solve", id="top")
        with Horizontal(id="input-row"):
            yield ProblemInput(config.problem, id="problem")
            with Vertical(id="controls"):
                yield Button("Run ^r", id="run", variant="primary", compact=True)
                yield Button("Stop ^s", id="stop", variant="error", compact=True, disabled=True)
                yield Label("gold answer ⇥", id="gold-label")
                yield Input(
                    config.gold or "",
                    placeholder="optional",
                    id="gold",
                    compact=True,
                    tooltip="the right answer, if you know it: the run is then marked right or wrong",
                )
        with Horizontal(id="main"):
            yield TrajectoryView(flush_s=config.flush_s, id="trajectory")
            yield GuardPanel(id="guards")
        yield StatusLine(id="status")
        yield Footer()

    def on_mount(self) -> None:
        for button in self.query(Button):  # ctrl+r and ctrl+s press them: tab goes from the problem to the gold
            button.can_focus = False
        self.watch(self.app, "model_state", self._model_state)
        self.app.ensure_model()
        self._show_guards()
        self.query_one(ProblemInput).focus()
        self.sandbox_level()

    # -- state shown ----------------------------------------------------------------------------

    def sandbox_level(self) -> None:
        """The kernel sandbox level in force, on the status line before the first run (a run's own
        notice confirms it). Levels that need probing the OS (auto, strict, netns start a process)
        are found in a thread."""
        level = self.app.config.sandbox
        if level in ("off", "policy"):
            self._show_sandbox(level)
        else:
            self._probe_sandbox(level)

    @work(thread=True, exclusive=True, group="sandbox", exit_on_error=False, name="sandbox level")
    def _probe_sandbox(self, level: str) -> None:
        from kernels.sandbox import resolve

        try:
            found = resolve(level)
        except Exception:  # noqa: BLE001 - strict unavailable: the run says so when it starts
            return
        self.app.call_from_thread(self._show_sandbox, found)

    def _show_sandbox(self, level: str) -> None:
        status = self.query_one(StatusLine)
        status.sandbox = level
        status.refresh()

    def _model_state(self, state: tuple[str, str, str]) -> None:
        model, status, detail = state
        self.query_one(TopBar).set_model(model, status, detail)
        if status in ("ready", "idle") and not self.query_one(GuardPanel).states:
            self._show_guards()

    def _show_guards(self) -> None:
        session = self.app.session
        if session.spec is None:
            return
        try:
            self.query_one(GuardPanel).show(states_from_chain(session.chain()))
        except Exception as e:  # noqa: BLE001 - a bad guard setting in models.toml: say so, keep going
            self.app.report(e, title="guards")
        self._show_guards_on()

    def _show_guards_on(self) -> None:
        """The guards on, under the problem box: seen even where the panel is hidden (80 columns)."""
        on = [name for name, s in self.query_one(GuardPanel).states.items() if s.enabled]
        self.query_one(ProblemInput).border_subtitle = f"guards: {' '.join(on) or 'none'} · ctrl+g"

    def watch_running(self, running: bool) -> None:
        self.query_one("#run", Button).disabled = running
        self.query_one("#stop", Button).disabled = not running
        self.set_class(running, "-running")
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Run and Stop show as disabled (dimmed in the footer) when they would do nothing."""
        if action == "stop" and not self.running:
            return None
        if action in ("run", "new", "fork") and self.running:
            return None
        if action == "inject_fault" and not self.running:
            return None
        if action == "fork" and self.run_path is None:
            return None
        if action == "compare_parent" and (self.running or self.parent_path is None):
            return None
        in_panel = self.query_one(GuardPanel).has_focus_within
        if action == "guards":
            return not in_panel
        if action == "leave_guards":
            return in_panel
        return True

    # -- actions --------------------------------------------------------------------------------

    def after_typing(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once the focused field has handled the keys already sent to it: a priority
        key (ctrl+r) is handled by the app before keys typed just ahead of it reach the field (a paste,
        tmux send-keys), and the field's own queue runs in order."""
        (self.focused or self).call_later(callback)

    def action_run(self) -> None:
        self.after_typing(self._run)

    def _run(self) -> None:
        problem = self.query_one(ProblemInput).text.strip()
        if not problem:
            self.notify("type a problem first", severity="warning")
            self.query_one(ProblemInput).focus()
            return
        if self.running:
            self.notify("a run is going on: stop it first (ctrl+s)", severity="warning")
            return
        if not self.app.can_run():
            return
        gold = self.query_one("#gold", Input).value.strip() or None
        self.running = True
        self.solve(problem, gold)
        self.query_one(TrajectoryView).focus()

    def action_toggle_confirm(self) -> None:
        self.ask_before_code = not self.ask_before_code
        self.notify(
            "each code block waits for your yes (y) or no (n)"
            if self.ask_before_code
            else "code blocks run without asking",
            title="ask before running code: " + ("on" if self.ask_before_code else "off"),
        )

    async def _approve(self, code: str) -> bool:
        """Asked by the loop before each block runs; read live, so ctrl+k applies mid-run."""
        if not self.ask_before_code:
            return True
        dialog = ConfirmCodeScreen(code)
        status, blocks = self.query_one(StatusLine), self.query_one(TrajectoryView).code_blocks()
        status.wait(True)  # shown as waiting, not running; the wait is not counted in tok/s
        if blocks:
            blocks[-1].status = "pending"
        try:
            answer = await self.app.push_screen_wait(dialog)
            approved = bool(answer)
        except asyncio.CancelledError:  # the run was stopped while the question was open
            if dialog.is_attached:
                dialog.dismiss(False)
            raise
        finally:
            status.wait(False)
        if approved and blocks:
            blocks[-1].set_running()
        return approved

    def action_stop(self) -> None:
        for worker in self.workers:
            if worker.group == "run" and worker.is_running:
                worker.cancel()

    def on_descendant_focus(self) -> None:
        self.refresh_bindings()  # the footer says what ctrl+g does now

    def on_descendant_blur(self) -> None:
        self.refresh_bindings()

    def action_leave_guards(self) -> None:
        self.remove_class("-show-guards")
        self.query_one(TrajectoryView).focus()

    def action_guards(self) -> None:
        panel = self.query_one(GuardPanel)
        narrow = self.has_class("-narrow")
        if narrow:
            self.add_class("-show-guards")
        else:
            self.remove_class("-hide-guards")
        panel.focus_list()

    def action_new(self) -> None:
        if self.running:
            self.notify("stop the run first (ctrl+s)", severity="warning")
            return
        problem = self.query_one(ProblemInput)
        problem.text = ""
        self.query_one("#gold", Input).value = ""
        self.query_one(TrajectoryView).reset()
        self.query_one(StatusLine).reset()
        self.query_one(StatusLine).state = "idle"
        problem.focus()

    def saved_runs(self) -> list[Path]:
        """The trajectory of the last run (what f9 exports)."""
        return [self.run_path] if self.run_path is not None and self.run_path.exists() else []

    def action_edit_problem(self) -> None:
        self.query_one(ProblemInput).focus()

    def action_copy_answer(self) -> None:
        if self.answer is None:
            self.notify("no answer yet", severity="warning")
            return
        self.app.copy_to_clipboard(self.answer)
        self.notify(f"answer copied: {self.answer}", timeout=3)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.action_run()
        elif event.button.id == "stop":
            self.action_stop()

    def on_code_block_view_copied(self, message: CodeBlockView.Copied) -> None:
        self.notify(f"{message.what} copied", timeout=2)

    # -- the run --------------------------------------------------------------------------------

    def solve(self, problem: str, gold: str | None) -> None:
        self.parent_path = None
        session = self.app.session
        inputs = session.inputs(problem, gold)
        self.faults = FaultInjector(inputs.faults)  # from now on: ctrl+b arms a fault as soon as running is set
        self._launch(session.run_spec(), inputs)

    def fork(
        self, parent: Path, step: int, preset: Preset | None, edit: tuple[str, str, int | None] | None = None
    ) -> None:
        """Fork the saved run ``parent`` after ``step`` under ``preset`` (None: the parent's guards);
        ``edit`` = (target, replacement, token): continue from that edit of step ``step`` instead, and
        open the fork beside its parent in compare when it ends."""
        from tuiagent.core.fork import edit_point, fork_point
        from tuiagent.runner import fork_run

        if self.running:
            self.notify("a run is going on: stop it first (ctrl+s)", severity="warning")
            return
        if not self.app.can_run():
            return
        try:
            events = load(parent).events
            if edit is None:
                point = fork_point(events, step, parent)
            else:
                target, replacement, token = edit
                point = edit_point(events, step, target, replacement, token=token, path=parent)
            base = self.app.session.inputs(point.started.problem, point.started.gold)
            spec, inputs = fork_run(
                point,
                None if preset is None else preset.spec,
                models_file=base.models_file,
                script=base.script,
                sandbox=base.sandbox,
                network=base.network,
                out=base.out,
            )
            spec.settings()  # a preset's budget no run can keep: ValueError
        except (UserError, ValueError) as e:
            self.app.report(e, title="fork")
            return
        self.query_one(ProblemInput).text = point.started.problem
        self.query_one("#gold", Input).value = point.started.gold or ""
        self.parent_path = Path(parent)
        self.running = True
        self.faults = FaultInjector(inputs.faults)
        self._launch(spec, inputs, point)
        self.query_one(TrajectoryView).focus()

    @work(exclusive=True, group="run", exit_on_error=False, name="run")
    async def _launch(self, spec: RunSpec, inputs: RunInput, fork: ForkPoint | None = None) -> None:
        session = self.app.session
        trajectory, status = self.query_one(TrajectoryView), self.query_one(StatusLine)
        trajectory.reset()
        status.begin()
        trajectory.start_stream()
        self.finished, self.answer, self.run_path = None, None, None
        backend, owned = None, False
        try:
            backend, owned = await session.backend_for_run()
            self.inputs = inputs
            self.chain = session.chain(spec)
            if fork is not None:  # the fork's guards while it runs; the panel's own come back after
                self.query_one(GuardPanel).show(states_from_chain(self.chain))
            await run_problem(
                spec,
                inputs,
                self.on_run_event,
                backend=backend,
                model_spec=session.spec,
                guards=self.chain,
                approve=self._approve,
                fork=fork,
                faults=self.faults,
            )
        finally:
            self.chain = None
            self.faults = None
            if fork is not None:
                self._show_guards()
            trajectory.stop_stream()
            if self.finished is None:
                self._show_partial()
            self.running = False
            if owned and backend is not None:
                await backend.aclose()
        if fork is not None and fork.edit is not None and self.finished is not None and self.run_path is not None:
            assert self.parent_path is not None
            self.post_message(OpenCompare([self.parent_path, self.run_path]))  # the edit beside what it replaced
        elif fork is not None and self.finished is not None:
            self.notify("fork finished: f12 compares it with its parent", timeout=6)
        if self.finished is not None and self.finished.reason == "backend_crashed":
            self.post_message(ModelCrashed(trajectory.events))

    def on_run_event(self, e: ev.Event) -> None:
        """Every event of the run, as it happens: counted, drawn, and passed to the guard panel."""
        self.query_one(StatusLine).observe(e)
        self.query_one(TrajectoryView).feed(e)
        if isinstance(e, ev.TokenDelta):
            return
        if isinstance(e, ev.GuardToggled):
            self.query_one(GuardPanel).confirm(e)
            self._show_guards_on()
        elif isinstance(e, ev.RunStarted) and self.inputs is not None:
            self.run_path = trajectory_path(self.inputs.out, e.run_id)
        elif isinstance(e, ev.Notice) and e.level in ("warning", "error"):
            self.notify(e.message, severity=e.level, timeout=8 if e.level == "warning" else 30)
        elif isinstance(e, ev.RunFinished):
            self.finished, self.answer = e, e.answer
            self.query_one(StatusLine).end(e.reason)
            if e.reason in ("error", "kernel_failed"):
                self.app.errors.append(f"run: {e.reason}")

    def _show_partial(self) -> None:
        """After a stop: the summary the loop recorded in the trajectory file (the partial run is kept)."""
        status = self.query_one(StatusLine)
        fin = None
        if self.run_path is not None and self.run_path.exists():
            try:
                fin = next((e for e in reversed(load(self.run_path).events) if isinstance(e, ev.RunFinished)), None)
            except TrajectoryError:
                fin = None
        if fin is not None:
            self.finished = fin
            self.query_one(TrajectoryView).feed(fin)
            status.observe(fin)
        status.end(fin.reason if fin else "cancelled")
        if self.run_path is not None:
            self.notify(f"stopped; the partial trajectory is in {self.run_path}", timeout=6)

    def worker_failed(self, worker: Worker[Any]) -> None:
        if worker.group == "run":
            self.running = False
            self.query_one(StatusLine).end("error")

    # -- the guard panel ------------------------------------------------------------------------

    def current_column(self) -> str:
        """The guards on now and every setting that differs from its default, as a compare column."""
        states = self.query_one(GuardPanel).states
        on = [name for name, s in states.items() if s.enabled]
        changed = {
            name: {k: v for k, v in states[name].settings.items() if asdict(guard_class(name).Settings()).get(k) != v}
            for name in on
        }
        return grammar().text(RunSpec(guards=tuple(on), guard_settings=changed))

    def presets(self) -> list[Preset] | None:
        """None, all and every preset for the model in use, in the order they are numbered from 0;
        None (after a notice) when a presets file is bad."""
        try:
            return self.app.controller.preset_choices()
        except UserError as e:
            self.app.report(e, title="presets")
            return None

    def choose_preset(self, then: Callable[[Preset | None], None], title: str | None = None) -> None:
        """Offer every preset (:meth:`presets`); ``then`` gets the choice; ``title`` says what it is for
        (by default: applying it to the guards)."""
        from tuiagent.ui.screens.presets import PresetsScreen

        presets = self.presets()
        if presets is not None:
            self.app.push_screen(PresetsScreen(presets, title) if title else PresetsScreen(presets), then)

    def action_rerun_as(self) -> None:
        """This problem again under a preset, beside the current settings, on the compare screen."""
        self.after_typing(self._rerun_as)

    def _rerun_as(self) -> None:
        problem = self.query_one(ProblemInput).text.strip()
        if not problem:
            self.notify("type a problem first", severity="warning")
            return
        if self.running:
            self.notify("a run is going on: stop it first (ctrl+s)", severity="warning")
            return
        gold = self.query_one("#gold", Input).value.strip() or None
        current = self.current_column()

        def chosen(preset: Preset | None) -> None:
            if preset is not None:
                self.post_message(RerunAs(problem, gold, [current, preset.name]))

        self.choose_preset(
            chosen, "run this problem again under a preset, beside the current settings, on the compare screen (enter)"
        )

    def action_fork(self) -> None:
        """Fork this run: a step to regenerate from, then the settings (the parent's, or a preset)."""
        if self.run_path is None or not self.run_path.exists():
            self.notify("run something first: a fork continues a saved run", severity="warning")
            return
        self.post_message(AskFork(self.run_path, None))

    def action_inject_fault(self) -> None:
        """Choose a fault kind; it is armed for the next tool output of the running solve."""
        if not self.running:
            self.notify("a fault is armed during a run: start one with ctrl+r", severity="warning")
            return

        def arm(kind: str | None) -> None:
            if kind is None:
                return
            if self.faults is None or not self.running:
                self.notify("the run ended before the fault was armed", severity="warning")
                return
            self.faults.arm(kind)
            self.notify(f"{kind} armed: the next tool output is corrupted", timeout=4)

        self.app.push_screen(FaultMenuScreen(), arm)

    def action_compare_parent(self) -> None:
        if self.parent_path is not None and self.run_path is not None:
            self.post_message(OpenCompare([self.parent_path, self.run_path]))

    def on_guard_panel_preset_wanted(self, message: GuardPanel.PresetWanted) -> None:
        if message.number is None:
            self.choose_preset(self.apply_preset)
            return
        presets = self.presets()
        if presets is None:
            return
        if message.number >= len(presets):
            self.notify(f"no preset {message.number}: p lists them", severity="warning")
            return
        self.apply_preset(presets[message.number])

    def action_all_guards(self) -> None:
        """Every guard off if any is on, else every guard on; their settings stay as they are."""
        states = self.query_one(GuardPanel).states
        on = not any(s.enabled for s in states.values())
        for name in [name for name, s in states.items() if s.enabled != on]:
            self.on_guard_panel_changed(GuardPanel.Changed(name, enabled=on))
        self.notify(f"guards: all {'on' if on else 'off'}", timeout=3)

    def apply_preset(self, preset: Preset | None) -> None:
        """The guards and settings of ``preset``: every other guard off, every setting it does not
        name back to its default (a change during a run applies at the next decision point)."""
        if preset is None:
            return
        panel = self.query_one(GuardPanel)
        named = set(preset.spec.guards or ())
        on = set(panel.states) if "all" in named else named
        for name, state in list(panel.states.items()):
            wanted = {**asdict(guard_class(name).Settings()), **preset.spec.guard_settings.get(name, {})}
            for key in state.settings:
                if key in wanted and state.settings[key] != wanted[key]:
                    self.on_guard_panel_changed(GuardPanel.Changed(name, setting=(key, wanted[key])))
            if state.enabled != (name in on):
                self.on_guard_panel_changed(GuardPanel.Changed(name, enabled=name in on))
        self.app.controller.use_run_settings(preset.spec)
        self.notify(f"preset {preset.name}: its guards now, its budgets and sampling from the next run", timeout=3)

    def on_guard_panel_changed(self, message: GuardPanel.Changed) -> None:
        panel = self.query_one(GuardPanel)
        state = panel.states.get(message.guard)
        if state is None:
            return
        if message.edit:
            from tuiagent.ui.screens.edit_value import EditValueScreen

            assert message.setting is not None, "an edit names its setting"
            key = message.setting[0]

            def done(value: str | None) -> None:
                if value is not None:
                    self.on_guard_panel_changed(GuardPanel.Changed(message.guard, setting=(key, value)))

            self.app.push_screen(EditValueScreen(f"{message.guard}.{key}", state.settings.get(key)), done)
            return
        change: dict[str, Any] = {}
        if message.setting is not None:
            key, value = message.setting
            try:
                clean = validate(message.guard, {**state.settings, key: value})
            except SettingsError as e:
                self.notify(str(e), severity="error")
                return
            change = {key: clean[key]}
            state.settings[key] = clean[key]
        if message.enabled is not None:
            state.enabled = message.enabled
            state.reason = ""
        self.app.session.remember(message.guard, enabled=message.enabled, settings=change or None)
        if self.chain is not None:
            try:
                self.chain.request(Change(message.guard, enabled=message.enabled, settings=change or None))
                state.pending = True
            except SettingsError as e:
                self.notify(str(e), severity="error")
        panel.show(panel.states)
        self._show_guards_on()
