"""Asks before a code block runs (the "ask before running code" setting): y runs it, n or esc skips it."""

from __future__ import annotations

from rich.syntax import Syntax
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class ConfirmCodeScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Run it"),
        Binding("n,escape", "answer(False)", "Skip it"),
    ]

    DEFAULT_CSS = """
    ConfirmCodeScreen { align: center middle; }
    ConfirmCodeScreen > Vertical { width: 90%; max-width: 100; height: auto; max-height: 80%;
                                   border: round $warning; background: $surface; padding: 0 1; }
    ConfirmCodeScreen VerticalScroll { height: auto; max-height: 20; }
    ConfirmCodeScreen Horizontal { height: auto; align-horizontal: right; }
    ConfirmCodeScreen Button { margin-left: 1; }
    """

    def __init__(self, code: str) -> None:
        super().__init__()
        self.code = code

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Run this code block in the kernel?  y runs it, n skips it")
            with VerticalScroll():
                yield Static(Syntax(self.code, "python", theme="ansi_dark", word_wrap=True))
            with Horizontal():
                yield Button("Run (y)", id="yes", variant="warning", compact=True)
                yield Button("Skip (n)", id="no", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, run: bool) -> None:
        self.dismiss(run)
