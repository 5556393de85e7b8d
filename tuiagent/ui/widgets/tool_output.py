"""What the kernel answered to one call: long output truncated (e or click expands), errors marked."""

from __future__ import annotations

import re

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tuiagent.core import events as ev
from tuiagent.safetext import for_terminal

COLLAPSED_LINES = 8
_DASHES = re.compile(r"^-{20,}\s*$")  # the kernel's traceback rule, 75 dashes that wrap on a narrow screen
_RULE = "─" * 12
HEAD = 2  # lines kept from the start of a long output; the rest from its end (where errors say what went wrong)


def output_text(result: ev.ToolResult) -> str:
    """Everything the cell printed (saved images by name); for a call that was not run, what the model was told."""
    if not result.executed:
        return for_terminal(result.shown)
    parts = []
    for o in result.outputs:
        path = o.get("path")
        parts.append(f"[image saved: {path.rsplit('/', 1)[-1]}]" if path else str(o.get("text", "")))
    text = "\n".join(p.rstrip("\n") for p in parts if p)
    return for_terminal(text or result.shown)


def injected_what(e: ev.Intervention) -> str:
    """The fault in a few words, and what the kernel really printed (its first line)."""
    real = e.replaced.strip().splitlines()
    said = f"{e.fault} by {e.by}" if e.fault else f"edited by {e.by}"
    if e.detail.get("repeat"):
        said += " (the same code again)"
    kernel = for_terminal(real[0][:40] + ("…" if len(real[0]) > 40 or len(real) > 1 else "")) if real else "nothing"
    return f"{said}; the kernel printed: {kernel}"


class ToolOutput(Widget, can_focus=True):
    """The output block of one call."""

    BINDINGS = [
        Binding("e", "toggle_output", "Expand output"),
        Binding("c", "copy", "Copy output"),
    ]

    DEFAULT_CSS = """
    ToolOutput {
        height: auto; margin: 0 1 0 1; padding: 0 1;
        border-left: outer $success; color: $text;
    }
    ToolOutput.-error { border-left: outer $error; color: $text-error; }
    ToolOutput.-skipped { border-left: outer $warning; color: $text-warning; }
    ToolOutput.-injected { border-left: thick $warning; }
    ToolOutput:focus { background: $accent-muted 30%; }
    ToolOutput.-current { background: $primary-muted; }
    """

    expanded: reactive[bool] = reactive(False, layout=True)

    def __init__(
        self, turn: int, result: ev.ToolResult, *, injected: ev.Intervention | None = None, classes: str | None = None
    ):
        """``injected``: the fault that replaced this output (an Intervention), drawn as such."""
        super().__init__(classes=classes)
        self.turn, self.call = turn, result.call
        self.result = result
        self.injected = injected
        self.set_class(injected is not None, "-injected")
        self.text = output_text(result)
        self.lines = [_RULE if _DASHES.match(line) else line for line in self.text.splitlines()] or [""]
        self.set_class(result.error or result.timed_out or result.died, "-error")
        self.set_class(not result.executed, "-skipped")

    @property
    def truncated(self) -> bool:
        return len(self.lines) > COLLAPSED_LINES

    def render(self) -> Content:
        r = self.result
        if not r.executed:
            head = "not run"
        elif r.died:
            head = "kernel died" + (" and was restarted" if r.restarted else "")
        elif r.timed_out:
            head = "timed out"
        elif r.error:
            head = f"error: {r.error_name or 'exception'}"
        else:
            head = "output"
        lines = self.lines
        hidden = 0
        if self.truncated and not self.expanded:
            keep = COLLAPSED_LINES - 2
            hidden = len(lines) - keep
            lines = lines[:HEAD] + lines[-(keep - HEAD) :]
        parts = [Content.styled(f"{head} · call {self.call}", "bold")]
        if self.injected is not None:
            parts[0] = Content.assemble(
                parts[0], ("  ⚠ injected: ", "bold $text-warning"), (injected_what(self.injected), "$text-warning")
            )
        if not self.text:
            parts.append(Content.styled("(nothing printed)", "$text-muted"))
        elif hidden:
            parts.append(Content("\n".join(lines[:HEAD])))
            parts.append(Content.styled(f"… {hidden} more lines · e or click to expand", "italic $text-muted"))
            parts.append(Content("\n".join(lines[HEAD:])))
        else:
            parts.append(Content("\n".join(lines)))
            if self.truncated:
                parts.append(Content.styled("e or click to collapse", "italic $text-muted"))
        return Content("\n").join(parts)

    def action_toggle_output(self) -> None:
        if self.truncated:
            self.expanded = not self.expanded

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.text)
        self.notify(f"output of call {self.call} copied", timeout=2)

    def on_click(self, event: events.Click) -> None:
        self.focus()
        self.action_toggle_output()
