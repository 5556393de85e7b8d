"""Where the replay is: event i of n, the step, and what the current event is."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget


class ReplayBar(Widget):
    DEFAULT_CSS = """
    ReplayBar { height: 1; background: $panel; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.position, self.total, self.turn, self.text = 0, 0, 0, "no run open · ctrl+o opens one"

    def show(self, position: int, total: int, turn: int, text: str) -> None:
        self.position, self.total, self.turn, self.text = position, total, turn, text
        self.refresh()

    def render(self) -> Content:
        if not self.total:
            return Content.styled(self.text, "$text-muted")
        return Content.assemble(
            (f"event {self.position}/{self.total}", "bold"),
            ("  step ", "$text-muted"),
            (str(self.turn), "bold"),
            ("  ", ""),
            Content(self.text),
        )
