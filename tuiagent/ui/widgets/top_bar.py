"""The top line: where you are, and the model in use with its state (loading shows the time so far)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from textual.content import Content
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget

from tuiagent.core.events import Event, RunStarted

_STATE = {
    "idle": ("○", "$text-muted"),
    "loading": ("◌", "$text-accent"),
    "ready": ("●", "$text-success"),
    "failed": ("✗", "$text-error"),
    "crashed": ("✗", "$text-error"),
    "recorded": ("▪", "$text-muted"),  # a saved run's model, not the one loaded here
}


class TopBar(Widget):
    DEFAULT_CSS = """
    TopBar { height: 1; background: $primary-muted; color: $text; padding: 0 1; }
    """

    title: reactive[str] = reactive("")
    model: reactive[str] = reactive("")
    state: reactive[str] = reactive("idle")
    detail: reactive[str] = reactive("")

    def __init__(self, title: str = "", *, id: str | None = None):
        super().__init__(id=id)
        self.set_reactive(TopBar.title, title)
        self.since = time.monotonic()
        self._timer: Timer | None = None  # the loading clock's repaints, from on_mount

    def on_mount(self) -> None:
        self._timer = self.set_interval(0.5, self.refresh, pause=self.state != "loading")

    def show_recorded(self, events: Sequence[Event]) -> None:
        """The model(s) that made these saved runs' events (from their RunStarted)."""
        models = sorted({e.model_id for e in events if isinstance(e, RunStarted)})
        self.set_model(models[0] if len(models) == 1 else " / ".join(models) or "?", "recorded")

    def set_model(self, model: str, state: str, detail: str = "") -> None:
        if state == "loading" and self.state != "loading":
            self.since = time.monotonic()
        self.model, self.state, self.detail = model, state, detail
        if self._timer is not None:
            (self._timer.resume if state == "loading" else self._timer.pause)()

    def render(self) -> Content:
        dot, style = _STATE.get(self.state, ("?", ""))
        state = self.state
        if self.state == "loading":
            state = f"loading {time.monotonic() - self.since:.0f} s"
        right = Content.assemble(
            ("model ", "$text-muted"),
            (self.model or "—", "bold"),
            " ",
            (f"{dot} {state}", style),
            (f" · {self.detail}" if self.detail else "", "$text-muted"),
        )
        left = Content.assemble(("tuiagent ", "bold $text-accent"), (self.title, "bold"))
        gap = max(1, self.size.width - left.cell_length - right.cell_length)
        if left.cell_length + right.cell_length + 1 > self.size.width:
            right = right.truncate(max(0, self.size.width - left.cell_length - 1), ellipsis=True)
            gap = 1
        return Content.assemble(left, " " * gap, right)
