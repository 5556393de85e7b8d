"""A small dialog to type one setting's value (enter saves, escape cancels)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class EditValueScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    EditValueScreen { align: center middle; }
    EditValueScreen > Vertical { width: 50; height: auto; border: round $accent; background: $surface; padding: 0 1; }
    """

    def __init__(self, name: str, value: Any):
        super().__init__()
        self.setting_name, self.value = name, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"{self.setting_name} (enter saves, esc cancels)")
            yield Input("" if self.value is None else str(self.value), id="value")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
