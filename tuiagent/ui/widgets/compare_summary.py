"""The summary row of a comparison: per run, the answer, right or wrong, tool calls, context tokens, time."""

from __future__ import annotations

from collections.abc import Sequence

from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Static

from tuiagent.core.compare import RunSummary
from tuiagent.mathtext import render_latex


def summary_content(label: str, s: RunSummary | None, error: str = "", *, math: bool = True) -> Content:
    title = Content.styled(label, "bold $text-accent")
    if error:
        return Content("\n").join([title, Content.styled(error, "$text-error")])
    if s is None:
        return Content("\n").join([title, Content.styled("not started", "$text-muted")])
    if s.correct is True:
        verdict = ("✓ right", "bold $text-success")
    elif s.correct is False:
        verdict = ("✗ wrong", "bold $text-error")
    else:
        verdict = ("", "")
    answer = Content.assemble(
        ("answer ", "$text-muted"),
        (("—" if s.answer is None else render_latex(s.answer) if math else s.answer), "bold"),
        " ",
        verdict,
    )
    numbers = Content.styled(
        f"{s.tool_calls} calls ({s.erroneous_calls} err) · {s.context_tokens} ctx tok · {s.wall_s:.1f} s · {s.reason}",
        "$text-muted",
    )
    return Content("\n").join([title, answer, numbers])


class CompareSummary(Horizontal):
    DEFAULT_CSS = """
    CompareSummary { height: auto; max-height: 6; border-top: heavy $secondary; padding-right: 1; }
    CompareSummary > Static { width: 1fr; height: auto; padding: 0 1; }
    """

    def show(
        self,
        labels: Sequence[str],
        summaries: Sequence[RunSummary | None],
        errors: Sequence[str] = (),
        *,
        math: bool = True,
    ) -> None:
        errors = list(errors) + [""] * (len(labels) - len(errors))
        cells = [summary_content(label, s, err, math=math) for label, s, err in zip(labels, summaries, errors)]
        existing = [w for w in self.children if isinstance(w, Static)]  # all of them: only cells are mounted
        for w in existing[len(cells) :]:
            w.remove()
        for i, content in enumerate(cells):
            if i < len(existing):
                existing[i].update(content)
            else:
                self.mount(Static(content))
