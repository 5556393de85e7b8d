"""The line that opens a step (turn); for a pruned step, the toggle that shows or hides the pruned part."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from tuiagent.core.compare import PruneMark


class StepHeader(Widget):
    """``── turn 3 · 845 context tokens · 87 tokens``, or ``✂ STP pruned … ▸ show``."""

    BINDINGS = [
        Binding("enter,space", "toggle_pruned", "Show/hide pruned", show=True),
    ]

    DEFAULT_CSS = """
    StepHeader { height: auto; padding: 0 1; color: $text-muted; margin-top: 1; }
    StepHeader.-pruned { color: $text-warning; background: $warning-muted 40%; }
    StepHeader:focus { background: $accent-muted; color: $text; }
    StepHeader.-current { background: $primary-muted; color: $text; }
    """

    collapsed: reactive[bool] = reactive(True)
    tokens: reactive[int] = reactive(0)
    context_tokens: reactive[int] = reactive(0)

    class Toggled(Message):
        """The user asked to show or hide the pruned part of a step."""

        def __init__(self, header: StepHeader) -> None:
            super().__init__()
            self.header = header

    def __init__(self, turn: int, context_tokens: int = 0, *, classes: str | None = None):
        super().__init__(classes=classes)
        self.turn = turn
        self.mark: PruneMark | None = None
        self.set_reactive(StepHeader.context_tokens, context_tokens)

    def set_mark(self, mark: PruneMark) -> None:
        self.mark = mark
        self.can_focus = True
        self.add_class("-pruned")
        self.tooltip = (
            "Pruned from the working context by a guard; the trajectory keeps it. Enter or click to show or hide."
        )
        self.refresh()

    def render(self) -> Content:
        if self.mark is not None:
            m = self.mark
            if not m.whole:
                what = "reasoning pruned (code kept)"
            elif "model" in m.parts:
                what = "step pruned"
            else:
                what = "code and output pruned"
            arrow = "▸ show" if self.collapsed else "▾ hide"
            detail = f" · {m.detail}" if m.detail else ""
            return Content.assemble(
                ("✂ ", "bold"), (m.label, "bold reverse"), f" {what}{detail} · turn {self.turn}  ", (arrow, "underline")
            )
        bits = [f"turn {self.turn}"]
        if self.context_tokens:
            bits.append(f"{self.context_tokens} context tokens")
        if self.tokens:
            bits.append(f"{self.tokens} generated")
        return Content("── " + " · ".join(bits) + " ──")

    def action_toggle_pruned(self) -> None:
        if self.mark is not None:
            self.post_message(self.Toggled(self))

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.action_toggle_pruned()
