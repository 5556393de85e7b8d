"""A list to choose one thing from, over the current screen: enter returns its value, esc None."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


class ChooserScreen(ModalScreen[Any]):
    """Subclasses give the title and, through :meth:`choices` (called in compose, when the app is
    there), the rows with the value each one returns; a digit chooses the row of that number (from 0)."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        *(Binding(str(n), f"choose({n})", f"Choose row {n}", show=False) for n in range(10)),
    ]

    DEFAULT_CSS = """
    ChooserScreen { align: center middle; }
    ChooserScreen > Vertical { width: 90%; max-width: 110; height: auto; max-height: 80%;
                               border: round $accent; background: $surface; padding: 0 1; }
    ChooserScreen OptionList { height: auto; max-height: 20; border: none; }
    """

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title
        self.values: list[Any] = []

    def choices(self) -> list[tuple[Content, Any]]:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        rows = self.choices()
        self.values = [value for _, value in rows]
        with Vertical():
            yield Label(self.title_text)
            numbered = len(rows) <= 10
            yield OptionList(
                *(
                    Option(Content.assemble((f"{i} ", "$text-muted"), content) if numbered else content)
                    for i, (content, _) in enumerate(rows)
                )
            )

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.values[event.option_index])

    def action_choose(self, number: int) -> None:
        if number < len(self.values) <= 10:  # rows are numbered only when there are ten or fewer
            self.dismiss(self.values[number])

    def action_close(self) -> None:
        self.dismiss(None)
