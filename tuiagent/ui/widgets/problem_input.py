"""The problem, typed or pasted (several lines); ``ctrl+r`` runs it from anywhere on the screen."""

from __future__ import annotations

from textual import events
from textual.widgets import TextArea


class ProblemInput(TextArea):
    DEFAULT_CSS = """
    ProblemInput { height: 5; border: round $secondary; padding: 0 1; }
    ProblemInput:focus { border: round $accent; }
    """

    def __init__(self, text: str = "", *, id: str | None = None):
        super().__init__(
            text,
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            placeholder="Type or paste a math problem · ctrl+r runs it · esc leaves the box",
        )
        self.border_title = "problem"

    def on_mount(self) -> None:
        if self.app.is_headless:
            self.cursor_blink = False  # steady screenshots in tests

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.screen.focus_next()
