"""A list to choose one thing from, over the current screen: enter returns its value, esc None."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option


class ChooserScreen(ModalScreen[Any]):
    """Subclasses give the title and, through :meth:`choices` (called in compose, when the app is
    there), the rows with the value each one returns; a digit chooses the row of that number (from 0).
    :meth:`details` may say more of the highlighted row, under the list (rows stay one line each)."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        *(Binding(str(n), f"choose({n})", f"Choose row {n}", show=False) for n in range(10)),
    ]

    DEFAULT_CSS = """
    ChooserScreen { align: center middle; }
    ChooserScreen > Vertical { width: 90%; max-width: 110; height: auto; max-height: 80%;
                               border: round $accent; background: $surface; padding: 0 1; }
    ChooserScreen OptionList { height: auto; max-height: 20; border: none; }
    ChooserScreen > Vertical > Label { width: 100%; }
    ChooserScreen #chooser-details { height: auto; max-height: 6; color: $text-muted; padding: 0 0 0 2; }
    ChooserScreen #chooser-details.-empty { display: none; }
    """

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title
        self.values: list[Any] = []

    def choices(self) -> list[tuple[Content, Any]]:
        raise NotImplementedError

    def details(self, value: Any) -> Content:
        """More about one row's value, shown while it is highlighted (none by default)."""
        return Content("")

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
            yield Static(id="chooser-details", classes="-empty")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        text = self.details(self.values[event.option_index])
        shown = self.query_one("#chooser-details", Static)
        shown.update(text)
        shown.set_class(not text.plain, "-empty")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.values[event.option_index])

    def action_choose(self, number: int) -> None:
        if number < len(self.values) <= 10:  # rows are numbered only when there are ten or fewer
            self.dismiss(self.values[number])

    def action_close(self) -> None:
        self.dismiss(None)
