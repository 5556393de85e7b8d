"""Replay: step through a saved run, event by event or step by step, jump to the next guard decision;
what happened (the trajectory as it stood at the current event, which is marked) beside what the model saw at that point
(``context.working_context(events[:i])``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.fork import edit_target
from tuiagent.core.trajectory import TrajectoryError, load
from tuiagent.ui.describe import describe_event, is_guard_decision
from tuiagent.ui.messages import AskEdit, AskFork
from tuiagent.ui.search import RunSearch
from tuiagent.ui.widgets.context_view import ContextView
from tuiagent.ui.widgets.replay_bar import ReplayBar
from tuiagent.ui.widgets.status_line import StatusLine
from tuiagent.ui.widgets.top_bar import TopBar
from tuiagent.ui.widgets.trajectory import TrajectoryView

if TYPE_CHECKING:
    from textual import getters

    from tuiagent.ui.host import HostApp

EVENT = Binding.Group("event", compact=True)
STEP = Binding.Group("step", compact=True)
GUARD = Binding.Group("guard", compact=True)
ENDS = Binding.Group("start/end")


class ReplayScreen(Screen[None]):
    if TYPE_CHECKING:  # the app this runs in, typed the way textual types its own (textual.getters.app)
        app = getters.app(HostApp)

    COMMANDS = {RunSearch}  # ctrl+p searches this run too

    BINDINGS = [
        Binding("left", "step(-1)", "Previous event", priority=True, group=EVENT),
        Binding("right", "step(1)", "Next event", priority=True, group=EVENT),
        Binding("p", "step_turn(-1)", "Previous step", priority=True, group=STEP),
        Binding("n", "step_turn(1)", "Next step", priority=True, group=STEP),
        Binding("G", "guard(-1)", "Previous guard decision", priority=True, group=GUARD),
        Binding("g", "guard(1)", "Next guard decision", priority=True, group=GUARD),
        Binding("home", "jump(0)", "Jump to start", priority=True, group=ENDS),
        Binding("end", "jump(-1)", "Jump to end", priority=True, group=ENDS),
        Binding("h", "step(-1)", "Previous event", priority=True, show=False),
        Binding("l", "step(1)", "Next event", priority=True, show=False),
        Binding("left_square_bracket", "step_turn(-1)", "Previous step", priority=True, show=False),
        Binding("right_square_bracket", "step_turn(1)", "Next step", priority=True, show=False),
        Binding("tab", "switch_pane", "Switch pane", show=False),
        Binding("y", "copy_answer", "Copy answer"),
        Binding("f", "fork", "Fork from this step…"),
        Binding("e", "edit", "Edit here and continue…"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.path: Path | None = None
        self.asked = False  # this empty screen put the open-run dialog up, and is shown again as it closes
        self.events: list[ev.Event] = []  # what replay steps through: the run without its tokens
        self.recorded: list[ev.Event] = []  # the whole run
        self.widgets: list[Widget | None] = []
        self.position = 0  # events played: the current event is events[position - 1]

    def compose(self) -> ComposeResult:
        yield TopBar("· replay", id="top")
        with Horizontal(id="replay-panes"):
            yield TrajectoryView(id="trajectory")
            yield ContextView(id="context")
        yield ReplayBar(id="replay-bar")
        yield StatusLine(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "model_state", self._model_state)
        self.query_one(TrajectoryView).border_title = "what happened"
        path = self.app.config.replay
        if path is not None and self.path is None:
            self.open(path)

    def _model_state(self, state: tuple[str, str, str]) -> None:
        if self.path is None:  # a saved run shows the model that made it
            self.query_one(TopBar).set_model(*state)

    def on_screen_resume(self) -> None:
        self.call_after_refresh(self.take_pending)

    def take_pending(self) -> None:
        """Open the run picked elsewhere; an empty screen, shown, asks for one. Resumed because that
        dialog was closed without a pick (escape), it stays empty rather than asking again."""
        from tuiagent.ui.screens.open_run import OpenRunScreen

        path = self.app.pending.pop("replay", None)
        if path is not None:
            self.open(path)
            return
        if any(isinstance(s, OpenRunScreen) for s in self.app.screen_stack):
            return  # asking already (a screen may be resumed twice as it is first shown)
        asked, self.asked = self.asked, False
        if self.path is None and not asked:
            self.asked = True
            self.app.action_open_run()

    # -- calls down -----------------------------------------------------------------------------

    def open(self, path: Path) -> None:
        try:
            loaded = load(path)
        except TrajectoryError as e:
            self.app.report(e, title="replay")
            return
        if loaded.warnings:
            self.notify("\n".join(loaded.warnings), title="replay: lines skipped", severity="warning", timeout=12)
        self.path = Path(path)
        self.recorded = loaded.events
        self.events = [e for e in loaded.events if not isinstance(e, ev.TokenDelta)]
        trajectory = self.query_one(TrajectoryView)
        trajectory.reset()
        trajectory.follow = False
        self.widgets = trajectory.load(loaded.events, shown_until=1)
        self.query_one(TopBar).title = f"· replay · {self.path.name}"
        self.query_one(TopBar).show_recorded(self.events)
        self.query_one(StatusLine).show_run(self.events)
        self.go(1 if self.events else 0)

    def go(self, position: int) -> None:
        """Show the run after ``position`` events."""
        n = len(self.events)
        self.position = max(min(position, n), 1 if n else 0)
        i = self.position
        if not i:
            return
        current = self.events[i - 1]
        turn = next((e.turn for e in reversed(self.events[:i]) if isinstance(e, ev.TurnStarted)), 0)
        self.query_one(ReplayBar).show(i, n, turn, f"{current.type} · {describe_event(current)}")
        self.query_one(ContextView).show(
            working_context(self.events[:i]), working_context(self.events[: i - 1]) if i > 1 else None
        )
        widget = next((w for w in reversed(self.widgets[:i]) if w is not None), None)
        trajectory = self.query_one(TrajectoryView)
        trajectory.show_until(i)
        trajectory.highlight(widget)

    def saved_runs(self) -> list[Path]:
        """The run shown (what f9 exports)."""
        return [self.path] if self.path is not None else []

    # -- actions --------------------------------------------------------------------------------

    def action_step(self, delta: int) -> None:
        self.go(self.position + delta)

    def action_step_turn(self, direction: int) -> None:
        starts = [i + 1 for i, e in enumerate(self.events) if isinstance(e, ev.TurnStarted)]
        self._to_next(starts, direction)

    def action_guard(self, direction: int) -> None:
        stops = [i + 1 for i, e in enumerate(self.events) if is_guard_decision(e)]
        if not stops:
            self.notify("no guard decision in this run", severity="warning")
            return
        self._to_next(stops, direction)

    def _to_next(self, positions: list[int], direction: int) -> None:
        if direction > 0:
            target = next((p for p in positions if p > self.position), None)
        else:
            target = next((p for p in reversed(positions) if p < self.position), None)
        if target is None:
            self.notify("no further one that way", timeout=2)
            return
        self.go(target)

    def action_jump(self, where: int) -> None:
        self.go(len(self.events) if where < 0 else 1)

    def action_switch_pane(self) -> None:
        trajectory, context = self.query_one(TrajectoryView), self.query_one(ContextView)
        (context if trajectory.has_focus else trajectory).focus()

    def action_fork(self) -> None:
        """Fork the run so that the step in view is generated again (under the settings chosen next)."""
        if self.path is None:
            return
        turn = next((e.turn for e in reversed(self.events[: self.position]) if isinstance(e, ev.TurnStarted)), 1)
        self.post_message(AskFork(self.path, max(turn - 1, 0)))

    def action_edit(self) -> None:
        """Edit the item in view (its tool output, its code, or its text from the token in view on) and
        continue from there as a fork; it opens beside this run in compare when it ends."""
        if self.path is None:
            return
        current = self.events[self.position - 1] if self.position else None
        at = next((i + 1 for i, e in enumerate(self.recorded) if e is current), 0)  # among the tokens too
        target = edit_target(self.recorded, at)
        if target is None:
            self.notify("step into a turn first (→ or n): e edits its text, code or output", severity="warning")
            return
        self.post_message(AskEdit(self.path, target))

    def action_copy_answer(self) -> None:
        fin = next((e for e in reversed(self.events) if isinstance(e, ev.RunFinished)), None)
        if fin is None or fin.answer is None:
            self.notify("this run has no answer", severity="warning")
            return
        self.app.copy_to_clipboard(fin.answer)
        self.notify(f"answer copied: {fin.answer}", timeout=3)
