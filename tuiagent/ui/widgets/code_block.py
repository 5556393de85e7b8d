"""One code block the model wrote: highlighted code, its tool call's status and duration, and what the
guards said about it, drawn from each guard's own description (ATTC's confidence bar, the necessity flag)."""

from __future__ import annotations

import time

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.highlight import highlight
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from tuiagent.export.confidence import TokenSpans
from tuiagent.protocol import Display, Line
from tuiagent.safetext import for_terminal
from tuiagent.ui.token_shade import hovered, shade
from tuiagent.ui.widgets.guard_display import line_content

_STATUS = {
    "pending": ("… waiting", "$text-muted"),
    "running": ("… running", "$text-accent"),
    "ok": ("✓ ok", "$text-success"),
    "error": ("✗ error", "$text-error"),
    "timeout": ("⏱ timed out", "$text-error"),
    "died": ("✗ kernel died", "$text-error"),
    "skipped": ("⊘ not run", "$text-warning"),
}


class CodeBlockView(Widget, can_focus=True):
    """The block, a status line above it and the guards' numbers; ``c`` copies the code."""

    BINDINGS = [
        Binding("c", "copy", "Copy code"),
    ]

    DEFAULT_CSS = """
    CodeBlockView {
        height: auto; margin: 0 1 0 1; padding: 0 1;
        background: $boost; border-left: outer $primary;
    }
    CodeBlockView.-error { border-left: outer $error; }
    CodeBlockView.-skipped { border-left: outer $warning; }
    CodeBlockView:focus { border-left: outer $accent; background: $accent-muted 30%; }
    CodeBlockView.-current { background: $primary-muted; }
    """

    status: reactive[str] = reactive("pending")

    class Copied(Message):
        """Code was copied (the screen says so)."""

        def __init__(self, what: str) -> None:
            super().__init__()
            self.what = what

    def __init__(
        self, turn: int, call: int, code: str, *, tokens: TokenSpans | None = None, classes: str | None = None
    ):
        super().__init__(classes=classes)
        self.turn, self.call, self.code = turn, call, code
        self.tokens = tokens or TokenSpans()  # the code's tokens and their probabilities
        self.shaded = False
        self.duration_s: float | None = None
        self.error_name: str | None = None
        self.guard_lines: dict[str, tuple[Line, ...]] = {}  # per guard: lines under the status
        self.guard_status: dict[str, tuple[Line, ...]] = {}  # per guard: spans at the end of the status
        self.skip_reason = ""
        self.started = time.monotonic()
        self._code = highlight(for_terminal(code), language="python")
        self.tooltip = self._tip = "c copies the code"

    # -- calls down from the trajectory ---------------------------------------------------------

    def set_running(self) -> None:
        self.started = time.monotonic()
        self.status = "running"

    def set_result(
        self,
        *,
        executed: bool,
        error: bool,
        timed_out: bool,
        died: bool,
        duration_s: float,
        error_name: str | None,
        shown: str = "",
    ) -> None:
        self.duration_s = duration_s if executed else None
        self.error_name = error_name
        if not executed:
            if not self.skip_reason and shown.strip():
                self.skip_reason = shown.strip().splitlines()[0][:80]
            self.status = "skipped"
        elif died:
            self.status = "died"
        elif timed_out:
            self.status = "timeout"
        else:
            self.status = "error" if error else "ok"
        self.set_class(self.status in ("error", "timeout", "died"), "-error")
        self.set_class(self.status == "skipped", "-skipped")
        self.refresh(layout=True)

    def set_guard(self, guard: str, display: Display) -> None:
        """What ``guard`` says about this block: lines under its status ("code"), spans on the status
        line ("code-status"), or the reason it was not run ("code-skip")."""
        if display.place == "code-skip":
            self.skip_reason = display.text
        elif display.place == "code-status":
            self.guard_status[guard] = display.lines
        else:
            self.guard_lines[guard] = display.lines
        if display.tooltip:
            self.tooltip = self._tip = f"{display.tooltip}; c copies the code"
        self.refresh(layout=True)

    # -- drawing --------------------------------------------------------------------------------

    def watch_status(self) -> None:
        self.refresh(layout=True)

    def status_line(self) -> Content:
        label, style = _STATUS.get(self.status, (self.status, ""))
        if self.status in ("error", "died") and self.error_name:
            label = f"✗ {self.error_name}"
        parts: list[Content | tuple[str, str] | str] = [(f"call {self.call} ", "bold"), (label, f"bold {style}")]
        if self.duration_s is not None:
            parts.append((f" {_ms(self.duration_s)}", style))
        elif self.status == "running":
            parts.append((f" {time.monotonic() - self.started:.1f} s", "$text-muted"))
        if self.skip_reason and self.status == "skipped":
            parts.append((f" ({self.skip_reason})", "$text-warning"))
        for spans in self.guard_status.values():
            parts += [line_content(line) for line in spans]
        lowest = self.tokens.lowest(self.code) if self.shaded else None
        if lowest is not None:
            parts.append((f"  least sure: {lowest[0].strip()!r} p {lowest[1]:.3f}", "$text-muted"))
        return Content.assemble(*parts)

    def set_shaded(self, on: bool) -> None:
        if on != self.shaded:
            self.shaded = on
            self.refresh(layout=True)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if self.shaded:
            self.tooltip = hovered(event, self._tip)

    def render(self) -> Content:
        lines = [self.status_line()]
        for guard_lines in self.guard_lines.values():
            lines += [line_content(line) for line in guard_lines]
        lines.append(shade(self._code, self.tokens) if self.shaded else self._code)
        return Content("\n").join(lines)

    # -- actions --------------------------------------------------------------------------------

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.code)
        self.post_message(self.Copied(f"code of call {self.call}"))

    def on_click(self, event: events.Click) -> None:
        self.focus()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
