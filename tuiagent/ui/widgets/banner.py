"""A full-width banner on a step: RTTS suspended the tool here."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget


class Banner(Widget):
    DEFAULT_CSS = """
    Banner {
        height: auto; margin: 0 1; padding: 0 1;
        background: $warning-muted; color: $text-warning; text-style: bold;
        border: tall $warning;
    }
    Banner.-current { background: $primary-muted; }
    """

    sticky = False  # a guard's verdict marked sticky: a prune does not fold it away (TrajectoryView)

    def __init__(self, turn: int, title: str, text: str = "", *, classes: str | None = None):
        super().__init__(classes=classes)
        self.turn, self.title, self.text = turn, title, text

    def render(self) -> Content:
        lines = [Content.styled(self.title, "bold")]
        if self.text:
            lines.append(Content.styled(self.text, "not bold"))
        return Content("\n").join(lines)
