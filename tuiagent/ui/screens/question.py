"""A yes-or-no question over the current screen: a title line, a body that scrolls, two buttons.
Subclasses bind their own keys to ``answer(True)`` and ``answer(False)``."""

from __future__ import annotations

from rich.console import RenderableType
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class QuestionScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    QuestionScreen { align: center middle; }
    QuestionScreen > Vertical { width: 90%; max-width: 100; height: auto; max-height: 80%;
                                border: round $warning; background: $surface; padding: 0 1; }
    QuestionScreen.-error > Vertical { border: round $error; }
    QuestionScreen VerticalScroll { height: auto; max-height: 20; }
    QuestionScreen Horizontal { height: auto; align-horizontal: right; }
    QuestionScreen Button { margin-left: 1; }
    """

    def __init__(self, title: str, body: RenderableType, yes: str, no: str, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.title_text, self.body, self.yes, self.no = title, body, yes, no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text)
            with VerticalScroll():
                yield Static(self.body, markup=False)
            with Horizontal():
                yield Button(self.yes, id="yes", variant="warning", compact=True)
                yield Button(self.no, id="no", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
