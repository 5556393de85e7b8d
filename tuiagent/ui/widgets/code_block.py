"""One code block the model wrote: highlighted code, its tool call's status and duration, and what the
guards said about it (ATTC confidence on a scale with its threshold and decision; the necessity flag)."""

from __future__ import annotations

import time
from typing import Any

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.highlight import highlight
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from tuiagent.ui.widgets.confidence_bar import bar_content

ATTC_SCALE = (0.8, 1.0)  # confidences below 0.8 sit at the left end (marked ◂)

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

    def __init__(self, turn: int, call: int, code: str, *, classes: str | None = None):
        super().__init__(classes=classes)
        self.turn, self.call, self.code = turn, call, code
        self.duration_s: float | None = None
        self.error_name: str | None = None
        self.attc: dict[str, Any] | None = None
        self.necessity: dict[str, Any] | None = None
        self.skip_reason = ""
        self.started = time.monotonic()
        self._code = highlight(code, language="python")
        self.tooltip = "ATTC confidence = exp(mean log-prob of the block's tokens), scale 0.80–1.00; c copies the code"

    # -- calls down from the trajectory ---------------------------------------------------------

    def set_running(self) -> None:
        self.started = time.monotonic()
        self.status = "running"

    def set_result(self, *, executed: bool, error: bool, timed_out: bool, died: bool, duration_s: float,
                   error_name: str | None, shown: str = "") -> None:
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

    def set_attc(self, data: dict[str, Any]) -> None:
        self.attc = data
        self.refresh(layout=True)

    def set_necessity(self, data: dict[str, Any]) -> None:
        self.necessity = data
        self.refresh(layout=True)

    def set_skip(self, reason: str) -> None:
        self.skip_reason = reason
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
        n = self.necessity
        if n is not None:
            necessary = bool(n.get("necessary", True))
            p = n.get("p_unnecessary")
            ptxt = "" if p is None else f" P(unnecessary) {p:.2f}"
            parts.append(("  · ", "$text-muted"))
            parts.append(("necessary" if necessary else "⚑ unnecessary",
                          "$text-muted" if necessary else "bold $text-warning"))
            parts.append((f"{ptxt} ({n.get('judge', '?')})", "$text-muted"))
        return Content.assemble(*parts)

    def attc_line(self) -> Content | None:
        a = self.attc
        if a is None:
            return None
        conf, tau, decision = a.get("confidence"), a.get("threshold"), a.get("decision", "")
        lo, hi = ATTC_SCALE
        number = "n/a" if conf is None else f"{conf:.3f}"
        style = {"trust": "bold $text-success", "rethink": "bold $text-warning",
                 "timeout": "bold $text-error"}.get(decision, "$text-muted")
        return Content.assemble(
            ("ATTC ", "bold"), bar_content(conf, tau, width=16, lo=lo, hi=hi),
            (f" {number}", "bold"), (f"  τ {tau:.3f}" if tau is not None else "", "$text-muted"),
            ("  → ", "$text-muted"), (decision or "n/a", style),
        )

    def render(self) -> Content:
        lines = [self.status_line()]
        attc = self.attc_line()
        if attc is not None:
            lines.append(attc)
        lines.append(self._code)
        return Content("\n").join(lines)

    # -- actions --------------------------------------------------------------------------------

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.code)
        self.post_message(self.Copied(f"code of call {self.call}"))

    def on_click(self, event: events.Click) -> None:
        self.focus()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
