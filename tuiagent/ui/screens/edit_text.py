"""Edit a piece of a recorded run (a tool output, a code block, the text a turn goes on with) in a
text area: ctrl+s continues with it, escape cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static, TextArea


class EditTextScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("ctrl+s", "save", "Continue with this", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]

    DEFAULT_CSS = """
    EditTextScreen { align: center middle; }
    EditTextScreen > Vertical { width: 90%; max-width: 120; height: auto; max-height: 90%;
                                border: round $accent; background: $surface; padding: 0 1; }
    EditTextScreen TextArea { height: 14; }
    EditTextScreen .edit-context { color: $text-muted; max-height: 4; }
    """

    def __init__(
        self, title: str, text: str, *, context: str = "", language: str | None = None, selected: bool = False
    ) -> None:
        """``selected``: the text starts selected, so typing replaces it (an output, a code block)."""
        super().__init__()
        self.title_text, self.text, self.context, self.language = title, text, context, language
        self.selected = selected

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"{self.title_text} (ctrl+s continues as a fork, esc cancels)")
            if self.context:
                yield Static(self.context, classes="edit-context", markup=False)
            yield TextArea(self.text, language=self.language, soft_wrap=True, id="edit-text")

    def on_mount(self) -> None:
        area = self.query_one(TextArea)
        area.focus()
        if self.selected:
            area.select_all()
        else:
            area.move_cursor(area.document.end)

    def action_save(self) -> None:
        self.dismiss(self.query_one(TextArea).text)

    def action_cancel(self) -> None:
        self.dismiss(None)
