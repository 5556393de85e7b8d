"""The final answer, standing out (its LaTeX rendered while :attr:`FinalAnswer.math` is on); right or
wrong when a gold answer was given. ``y`` copies it as written."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from tuiagent.core import events as ev
from tuiagent.mathtext import render_latex
from tuiagent.safetext import for_terminal

_REASONS = {
    "answer": "answered",
    "no_answer": "the model stopped without an answer",
    "tool_budget": "the tool-call budget ran out",
    "token_budget": "the token budget ran out",
    "turn_length": "one turn reached the model's max_tokens",
    "time_budget": "the time budget ran out",
    "cancelled": "stopped",
    "error": "the run failed",
    "backend_crashed": "the model process crashed",
    "kernel_failed": "the kernel could not start",
}


class FinalAnswer(Widget):
    DEFAULT_CSS = """
    FinalAnswer {
        height: auto; margin: 1 1; padding: 0 2;
        border: heavy $primary; background: $boost;
    }
    FinalAnswer.-right { border: heavy $success; }
    FinalAnswer.-wrong { border: heavy $error; }
    FinalAnswer.-none { border: heavy $warning; }
    FinalAnswer.-current { background: $primary-muted; }
    """

    def __init__(self, finished: ev.RunFinished, gold: str | None = None, *, classes: str | None = None):
        super().__init__(classes=classes)
        self.turn = 10**9
        self.finished, self.gold = finished, gold
        f = finished
        self.set_class(f.correct is True, "-right")
        self.set_class(f.correct is False, "-wrong")
        self.set_class(f.answer is None, "-none")
        self.border_title = "final answer"
        self.math = True

    def set_math(self, on: bool) -> None:
        if on != self.math:
            self.math = on
            self.refresh(layout=True)

    def render(self) -> Content:
        f = self.finished
        if f.answer is None:
            head = Content.assemble(
                ("no answer", "bold $text-warning"), (f"  · {_REASONS.get(f.reason, f.reason)}", "$text-muted")
            )
        else:
            verdict: tuple[str, str] = ("", "")
            if f.correct is True:
                verdict = ("  ✓ right", "bold $text-success")
            elif f.correct is False:
                verdict = (f"  ✗ wrong (gold {self.gold})" if self.gold else "  ✗ wrong", "bold $text-error")
            head = Content.assemble(
                ("ANSWER  ", "bold $text-muted"),
                (for_terminal(render_latex(f.answer) if self.math else f.answer), "bold reverse"),
                verdict,
            )
        tail = Content.styled(
            f"{_REASONS.get(f.reason, f.reason)} · {f.tool_calls} tool call{'s' * (f.tool_calls != 1)} ({f.erroneous_calls} erroneous) · "
            f"{f.generated_tokens} tokens · {f.context_tokens} context tokens · {f.wall_s:.1f} s",
            "$text-muted",
        )
        return Content("\n").join([head, tail])
