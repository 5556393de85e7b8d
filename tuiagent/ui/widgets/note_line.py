"""One line (or a few) in the trajectory: text a guard added to the model's turn, a guard's verdict,
a guard switched during the run, a notice from the loop, the problem header (its math rendered
while :attr:`NoteLine.math` is on)."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from tuiagent.mathtext import render_math
from tuiagent.safetext import for_terminal

_KIND_STYLE = {
    "note": "italic $text-secondary",
    "verdict": "$text-muted",
    "toggle": "$text-accent",
    "info": "$text-primary",
    "warning": "bold $text-warning",
    "error": "bold $text-error",
    "problem": "",
}


class NoteLine(Widget):
    """``kind`` is one of note, verdict, toggle, info, warning, error, problem."""

    DEFAULT_CSS = """
    NoteLine { height: auto; padding: 0 1 0 2; }
    NoteLine.-problem { padding: 0 1; background: $boost; border-left: outer $secondary; }
    NoteLine.-error { background: $error-muted 40%; }
    NoteLine.-warning { background: $warning-muted 30%; }
    NoteLine.-current { background: $primary-muted; }
    """

    sticky = False  # a guard's verdict marked sticky: a prune does not fold it away (TrajectoryView)

    def __init__(self, turn: int, kind: str, label: str, text: str, *, classes: str | None = None):
        super().__init__(classes=classes)
        self.turn, self.kind = turn, kind
        self.label, self.text = label, for_terminal(text)
        self.math = True
        self.add_class(f"-{kind}")

    def set_math(self, on: bool) -> None:
        if on != self.math:
            self.math = on
            self.refresh(layout=True)

    def render(self) -> Content:
        style = _KIND_STYLE.get(self.kind, "")
        if self.kind == "problem":
            return Content.assemble(
                ("problem ", "bold $text-secondary"), Content(render_math(self.text) if self.math else self.text)
            )
        return Content.assemble((f"{self.label} ", f"bold {style}"), (self.text.rstrip(), style))
