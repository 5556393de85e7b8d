"""A guard's card in the trajectory, drawn from the guard's own description of its verdict: at an
answer attempt (the attempted answer, then whether it was final), or at the end of the run."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from tuiagent.mathtext import render_latex
from tuiagent.protocol import Display
from tuiagent.ui.widgets.guard_display import line_content


class GuardCard(Widget):
    DEFAULT_CSS = """
    GuardCard { height: auto; margin: 1 1 0 1; padding: 0 1; border-left: outer $secondary; }
    GuardCard.-attempt { margin: 0 1; background: $boost; }
    GuardCard.-flagged { border-left: outer $warning; background: $warning-muted 30%; }
    GuardCard.-current { background: $primary-muted; }
    """

    def __init__(
        self, turn: int, guard: str, display: Display, *, answer: str | None = None, classes: str | None = None
    ):
        super().__init__(classes=classes)
        self.turn, self.guard, self.shown, self.answer = turn, guard, display, answer
        self.final: bool | None = None
        self.math = True  # the attempted answer's LaTeX rendered
        self.set_class(display.attempt, "-attempt")
        self.set_class(display.flagged, "-flagged")
        self.add_class(f"-{guard}")
        if display.tooltip:
            self.tooltip = display.tooltip

    def set_math(self, on: bool) -> None:
        if on != self.math:
            self.math = on
            self.refresh(layout=True)

    def set_final(self, final: bool) -> None:
        self.final = final
        self.refresh(layout=True)

    def render(self) -> Content:
        lines = [line_content(line) for line in self.shown.lines]
        if self.shown.attempt:
            marker = "" if self.final is None else ("  (final)" if self.final else "  (not final: keep going)")
            what = (
                (("answer attempt ", "$text-muted"), (render_latex(self.answer) if self.math else self.answer, "bold"))
                if self.answer
                else (("final submission ", "$text-muted"), ("without \\boxed{}", "bold"))
            )  # G-STEP is asked at either
            lines.insert(0, Content.assemble((f"{self.shown.title} ", "bold"), *what, (marker, "$text-muted")))
        return Content("\n").join(lines)
